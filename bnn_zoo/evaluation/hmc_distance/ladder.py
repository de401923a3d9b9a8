"""The ladder scored against HMC: for each problem (the toy curves, the reduced MNIST MLP), the runs
that train every rung on the same network and data as its HMC reference, and each rung's distance
to the reference on each of its sets (agreement and total variation, or W1), with accuracy and NLL
(or RMSE and NLL) on the test set beside it, as rows and a markdown table.

Usage::

    overrides = run_overrides(PROBLEMS["toy_mlp"], "ladder", "runs/distance")   # each of its runs, trained there
    rows = score_runs(["runs/distance/toy_mlp_ladder", ...], Reference.read("toy_mlp_hmc"))
    print(markdown(rows, reference))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ...core.inference.predictive import seeded
from ...runs.plans.plan import Plan
from ...runs.storage.loading import load
from ...runs.storage.trained import posteriors
from .inputs import InputSet, image_sets, toy_sets
from .metrics import floor_prefix
from .reference import Reference
from .score import set_distance

# The runs that hold every rung: mean-field VI, MAP (the twin), last-layer and K-FAC Laplace, SWAG,
# cyclical SG-MCMC; the ensemble of 5 guides, the deep ensemble of 5 twins and MultiSWAG; low-rank VI
# and MC dropout. A regression's: SWAG alone is fitted (Laplace fits classifiers, SG-MCMC's cycles
# need more data than a toy curve's)
RUNS = {"ladder": ("train.posteriors=[laplace_last_layer,laplace_kfac,swag,sgmcmc]",),
        "ensemble": ("train.members=5", "train.posteriors=[swag]"),
        "lowrank": ("model.guide=lowrank", "model.guide_rank=10", "train.twin_dropout=0.5")}
REGRESSION_RUNS = {**RUNS, "ladder": ("train.posteriors=[swag]",)}


@dataclass(frozen=True)
class Problem:
    """A network and its data (``config``), the reference drawn for it, whether it regresses, the
    overrides every rung's run adds (``common``), and the sets of a classifier's reference: test
    images, an OOD set and a corruption."""

    config: str
    reference: str
    regression: bool = False
    common: tuple[str, ...] = ()
    test_size: int = 10000
    ood: Optional[str] = "notmnist"
    ood_size: int = 2000
    corruption: Optional[str] = "fog"
    shift_size: int = 2000

    def sets(self, plan: Plan, root: Optional[str], test_size: Optional[int] = None, ood_size: Optional[int] = None,
             shift_size: Optional[int] = None) -> list[InputSet]:
        """The inputs its reference is drawn on (smaller where a size is given)."""
        if not plan.categorical:
            return toy_sets(plan.data.name)
        return image_sets(plan.data.name, root, test_size or self.test_size, self.ood, ood_size or self.ood_size,
                          self.corruption, shift_size or self.shift_size)

    @property
    def runs(self) -> dict[str, tuple[str, ...]]:
        """The runs that hold its rungs, by name: the overrides each adds."""
        return REGRESSION_RUNS if self.regression else RUNS


PROBLEMS = {"toy_mlp": Problem("toy_mlp", "toy_mlp_hmc", regression=True),
            "toy_sinusoid": Problem("toy_sinusoid", "toy_sinusoid_hmc", regression=True),
            "mnist_mlp_hmc": Problem("mnist_mlp_hmc", "mnist_mlp_hmc", common=("infer=svi",))}


def run_dir(problem: Problem, run: str, folder: str) -> str:
    """Where ``problem``'s run ``run`` (one of ``problem.runs``) trains: FOLDER/CONFIG_RUN."""
    return f"{folder}/{problem.config}_{run}"


def run_overrides(problem: Problem, run: str, folder: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The overrides of ``problem``'s config that train its run ``run`` into ``run_dir``, replacing
    what is there; ``extra``: the caller's own, before the folder's."""
    return [*problem.common, *problem.runs[run], *extra, f"run_dir={run_dir(problem, run, folder)}", "overwrite=true",
            "train.progress=false"]


@dataclass(frozen=True)
class Row:
    """One posterior of a run: its label, and by set its distance to HMC (``SetDistance.to_dict``'s
    figures) and, where the set has labels or targets, the likelihood's figures (accuracy, NLL); the
    seconds it took to train, where known."""

    run: str
    kind: str
    label: str
    sets: dict[str, dict]
    seconds: Optional[float] = None


@torch.no_grad()
def score_runs(run_dirs: list[str], reference: Reference, num_samples: int = 100, limit: Optional[int] = None,
               data_root: Optional[str] = None, device: str = "cpu", seed: int = 0,
               seconds: Optional[dict[str, dict[str, float]]] = None) -> list[Row]:
    """Every posterior each run holds, scored on each of the reference's sets (its first ``limit``
    inputs, where given) with ``num_samples`` samples drawn from ``seed``; ``seconds``: by run, each
    posterior's training seconds (``bnn_zoo.evaluation.scoreboard.scored.training_seconds``)."""
    inputs = {name: reference.inputs(name, data_root)[:limit].to(device) for name in reference.sets}
    rows = []
    for run_dir in run_dirs:
        trained = load(run_dir, device)
        for kind, posterior in posteriors(trained).items():
            found = {}
            for name, x in inputs.items():
                with seeded(seed, device):
                    outputs = posterior.predict(x, num_samples)
                distance = set_distance(reference, name, outputs, seed)
                figures = {k: v for k, v in vars(distance).items() if k != "floor" and v is not None}
                found[name] = {**figures, "times_floor": distance.times_floor}
                if name in reference.y:
                    found[name].update(trained.model.likelihood.metrics(outputs.cpu(), reference.y[name][:len(x)]))
            rows.append(Row(str(run_dir), kind, posterior.label, found, (seconds or {}).get(run_dir, {}).get(kind)))
    return rows


def markdown(rows: list[Row], reference: Reference) -> str:
    """The table: a row per posterior, HMC's chains first (chain to chain, and a chain to the pool of the
    others: the floor); by set agreement and total variation (x the floor's) or W1 (x the floor's),
    accuracy or RMSE and NLL on the test set."""
    first = "rmse" if reference.regression else "accuracy"
    head = ["posterior", first.upper() if reference.regression else first, "NLL", "training s"]
    for name in reference.sets:
        head += [f"{name}: W1 (x floor)"] if reference.regression else [f"{name}: agreement", f"{name}: TV (x floor)"]
    hmc = reference.recipe["sets"]["test"].get("hmc", {})
    chains = len(reference.recipe["chains"])
    floors = [(f"HMC, {chains} chains (distances: chain to chain)", "",
               [_figure(first, hmc.get(first)), _figure("nll", hmc.get("nll")),
                f"{reference.recipe['seconds']:.0f} (all chains)"])]
    held_out = floor_prefix(reference.floor("test"))  # "" in a reference kept from before
    if held_out:
        floors.append(("HMC: a chain to the others' pool (the floor)", held_out, ["", "", ""]))
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, prefix, cells in floors:
        for name in reference.sets:
            f = {key.removeprefix(prefix): value for key, value in reference.floor(name).items()
                 if key.startswith(prefix)}
            cells += [f"{f['w1']:.4f}"] if reference.regression else [f"{f['agreement']:.4f}", f"{f['total_variation']:.4f}"]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    for row in rows:
        test = row.sets.get("test", {})
        cells = [f"{row.run.rstrip('/').rpartition('/')[2]}: {row.label}", _figure(first, test.get(first)),
                 _figure("nll", test.get("nll")), "n/a" if row.seconds is None else f"{row.seconds:.0f}"]
        for name in reference.sets:
            s = row.sets[name]
            if reference.regression:
                cells.append(f"{s['w1']:.4f} ({s['times_floor']:.1f}x)")
            else:
                cells += [f"{s['agreement']:.4f}", f"{s['total_variation']:.4f} ({s['times_floor']:.1f}x)"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figure(name: str, value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.2f}%" if name == "accuracy" else f"{value:.4f}"
