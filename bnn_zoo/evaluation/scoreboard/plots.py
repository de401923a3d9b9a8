"""The scoreboard's pictures (``bnn_zoo.evaluation.figures.plots`` draws them): per run, each OOD
set's refusals and AUROC for the Bayesian network under its certified and the quantile rule and
for its twin (scoreboard_RUN.png), and the ladder over every run's posteriors (ladder.png).

Usage: ``draw_runs(runs, out); draw_ladder(runs, out)``  # runs: {name: ScoredRun}
"""
from __future__ import annotations

from pathlib import Path

from ...posterior import BAYES, TWIN
from ..figures import plots
from .scored import ScoredRun, all_sets, ladder_rows


def draw_ladder(runs: dict[str, ScoredRun], out: Path) -> None:
    """ladder.png in ``out``: each posterior's AUROC per OOD set, its risk on the inputs it accepts
    and its mean share refused over the sets."""
    sets, rows = all_sets(runs), {}
    for label, (_, _, r) in ladder_rows(runs).items():
        shown = [n for n in sets if n in r.ood]
        rows[label] = {"auroc": {n: r.auroc(n) for n in shown}, "risk": 1 - r.test.accuracy_accepted,
                       "refused": sum(r.ood[n].refused for n in shown) / max(1, len(shown))}
    plots.ladder(rows, sets, out / "ladder.png")


def draw_runs(runs: dict[str, ScoredRun], out: Path) -> None:
    """scoreboard_RUN.png in ``out`` for each run: per OOD set, refused and AUROC."""
    for name, run in runs.items():
        results = run.evaluation.posteriors
        rows = {"Bayesian, certified rule": {}, "Bayesian, quantile rule": {}, "twin, certified rule": {}}
        for ood in run.sets:
            bayes = results[BAYES].ood[ood]
            rows["Bayesian, certified rule"][ood] = {"refused": bayes.refused, "auroc": max(
                d.auroc for d in (bayes.by_entropy, bayes.by_mutual_information) if d)}
            rows["Bayesian, quantile rule"][ood] = {"refused": bayes.refused_by_quantile_rule}
            if TWIN in results:
                twin = results[TWIN].ood[ood]
                rows["twin, certified rule"][ood] = {"refused": twin.refused, "auroc": twin.by_entropy.auroc}
        plots.scoreboard(rows, run.sets, out / f"scoreboard_{Path(name).name}.png")
