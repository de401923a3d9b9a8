"""The rejection report behind ``scripts/reject_notmnist.py`` and ``scripts/reject_noise.py``:
a table of refusals (Bayesian vs deterministic), its JSON, and the plots.

Usage: ``rejection_report("runs/lenet", "notmnist", out_dir="runs/lenet/reject_notmnist")``
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pyro
import torch
from tqdm.auto import tqdm

from ...abstain.metrics import reliability_bins
from ...abstain.rule import Rule, abstain, risk_coverage
from ...core.inference.predictive import seeded
from ...data.inputs import pixel_inputs
from ...data.shifted.ood_sets import ood_images
from ...posterior import BAYES, KINDS, TWIN
from ...runs.storage.files import write_atomic
from ...runs.storage.loading import is_shipped
from ...runs.storage.trained import posteriors
from . import plots
from ..evaluate import InDistribution, OODResult, in_distribution, load_for_evaluation, ood_result

OOD_TITLES = {"notmnist": "notMNIST", "noise": "white noise", "fashion_mnist": "FashionMNIST"}


@dataclass
class Refusals:
    """One posterior under its rule: its figures on the test set, and on the OOD set."""

    rule: Rule
    test: InDistribution
    ood: OODResult

    def to_dict(self) -> dict:
        return {"rule": self.rule.to_dict(), "test": asdict(self.test), "ood": self.ood.to_dict()}


@dataclass
class RejectionReport:
    """``rejection_report``'s result: ``Refusals`` per posterior (bnn_zoo.posterior's names); its JSON
    is ``to_dict()``."""

    run_dir: str
    ood: str  # the OOD set's name
    num_samples: int
    rule: str  # which rules: "calibrated" or "quantile"
    test_size: int
    ood_size: int
    posteriors: dict[str, Refusals]

    def to_dict(self) -> dict:
        return {**asdict(self), "posteriors": {part: r.to_dict() for part, r in self.posteriors.items()}}


def refusal_curve(probs: torch.Tensor, quantile: float, thresholds: torch.Tensor) -> torch.Tensor:
    """Fraction refused at each threshold: inputs whose top quantile probability is below it."""
    top = abstain(probs, quantile, threshold=0.0).quantile_probs.max(1).values
    return (top[None, :] < thresholds.to(top.device)[:, None]).float().mean(1)


def report_folder(run_dir: str | Path, ood: str, out_dir: str | Path | None = None) -> Path:
    """Where a report writes its JSON and plots: ``out_dir``, else RUN_DIR/reject_OOD, and for a
    shipped posterior ./reject_OOD_NAME (a folder named as it, ./lenet, would shadow its name)."""
    if out_dir:
        return Path(out_dir)
    return Path(f"reject_{ood}_{run_dir}") if is_shipped(run_dir) else Path(run_dir) / f"reject_{ood}"


@pyro.settings.context(module_local_params=True)
def rejection_report(run_dir: str | Path, ood: str, out_dir: str | Path | None = None,
                     num_samples: int = 100, rule: str = "calibrated", quantile: float = 0.5, threshold: float = 0.2,
                     test_size: int | None = None, ood_size: int = 10000, grid: int = 6,
                     data_root: str | None = None, device: str = "auto", seed: int = 0) -> RejectionReport:
    """Refusals on MNIST test and an OOD set for a trained run, each model under its rule (see
    ``Trained.rules_for``); writes JSON and plots to out_dir. A progress bar on stderr counts each
    posterior's predictions on each set, then the plots."""
    trained, root, x, labels = load_for_evaluation(run_dir, device, data_root, test_size)
    rules = trained.rules_for(rule, quantile, threshold)
    device = trained.device
    labels = labels.to(device)
    out_dir = report_folder(run_dir, ood, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ood_x = pixel_inputs(trained.data, ood_images(ood, root, ood_size, seed)).to(device)
    rungs = posteriors(trained)
    in_probs, ood_probs = {}, {}
    title = OOD_TITLES.get(ood, ood)  # the set as the table's rows name it
    # it says it works; the bar goes with the work, a failure's line not written after it
    with tqdm(total=2 * len(rungs) + 1, desc=f"rejection report on {title}", unit="step", leave=False) as progress:
        with seeded(seed, device):  # each posterior on the test set, then each on the OOD set
            for probs, inputs, where in ((in_probs, x.to(device), "test set"), (ood_probs, ood_x, title)):
                for part, posterior in rungs.items():
                    progress.set_postfix_str(f"{part}: {where}")
                    probs[part] = posterior.predict(inputs, num_samples)
                    progress.update()
        refusals = {part: Refusals(rules[part], in_distribution(probs, labels, rules[part]),
                                   ood_result(probs, ood_probs[part], rules[part])) for part, probs in in_probs.items()}
        report = RejectionReport(str(run_dir), ood, num_samples, rule, len(labels), len(ood_x), refusals)
        write_atomic(out_dir / f"reject_{ood}.json", json.dumps(report.to_dict(), indent=2))
        progress.set_postfix_str("plots")
        _draw(out_dir, ood, x[:, 0].cpu(), labels, ood_x[:, 0].cpu(), in_probs, ood_probs, rules[BAYES], grid)
    return report


def _draw(out_dir, ood, images, labels, ood_x, in_probs, ood_probs, rule, grid):
    bayes = in_probs[BAYES]
    quantile, threshold = rule.quantile, rule.threshold
    decision = rule(bayes)
    # A grid with refused, wrong and correct MNIST inputs, then OOD inputs.
    picks = [*decision.refused.nonzero()[:2, 0].tolist(),
             *((decision.prediction != labels) & ~decision.refused).nonzero()[:2, 0].tolist()]
    picks += [i for i in range(len(labels)) if i not in picks][:max(0, grid // 2 - len(picks))]
    titles = ["Refused" if decision.refused[i] else
              ("Correct" if decision.prediction[i] == labels[i] else "Wrong") + f" (label {labels[i]})"
              for i in picks]
    n_ood = max(1, grid - len(picks))
    ood_decision = rule(ood_probs[BAYES][:, :n_ood])
    titles += [f"{OOD_TITLES.get(ood, ood)}: " + ("Refused" if r else f"said {p}")
               for r, p in zip(ood_decision.refused.tolist(), ood_decision.prediction.tolist())]
    plots.sample_histograms(torch.cat([images[picks], ood_x[:n_ood]]),
                            torch.cat([bayes[:, picks], ood_probs[BAYES][:, :n_ood]], 1),
                            quantile, threshold, titles, out_dir / "histograms.png")
    twin = ood_probs[TWIN][0, :n_ood] if TWIN in ood_probs else None
    plots.mean_prob_bars(ood_x[:n_ood], ood_probs[BAYES][:, :n_ood].mean(0), twin, threshold,
                         out_dir / "mean_probabilities.png")
    thresholds = torch.linspace(0, 1, 101)
    curves, risks, reliab = {}, {}, {}
    for part in in_probs:
        for name, probs in (("MNIST", in_probs), (OOD_TITLES.get(ood, ood), ood_probs)):
            curves[f"{name}, {KINDS[part].title}"] = (thresholds, refusal_curve(probs[part], quantile, thresholds))
        _, coverage, risk = risk_coverage(in_probs[part], labels, quantile)
        risks[KINDS[part].title] = (coverage, risk)
        reliab[KINDS[part].title] = reliability_bins(in_probs[part], labels)
    plots.refusal_curves(curves, out_dir / "refusal_vs_threshold.png", threshold)
    plots.risk_coverage(risks, out_dir / "risk_coverage.png")
    plots.reliability(reliab, out_dir / "reliability.png")


def table(report: RejectionReport) -> str:
    """The refusals and accuracies in percent, a column per posterior, each as wide as its title
    (two spaces apart: "deterministic, temperature-scaled" is wider than a figure)."""
    rows = {"refused on MNIST": lambda r: r.test.refused, "accuracy on accepted MNIST": lambda r: r.test.accuracy_accepted,
            "forced accuracy (MNIST)": lambda r: r.test.accuracy,
            f"refused on {OOD_TITLES.get(report.ood, report.ood)}": lambda r: r.ood.refused}
    widths = {p: max(len(KINDS[p].title), len("100.00%")) for p in report.posteriors}
    lines = [f"{'':<28}" + "".join(f"  {KINDS[p].title:>{w}}" for p, w in widths.items())]
    lines += [f"{label:<28}" + "".join(f"  {f'{100 * figure(r):.2f}%':>{widths[p]}}" for p, r in report.posteriors.items())
              for label, figure in rows.items()]
    return "\n".join(lines)
