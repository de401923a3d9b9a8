"""What a toy regression run shows at its end: the predictive of each posterior it holds (its guide
or ensemble, and HMC when it drew one) over ranges well beyond the data, split into epistemic and
aleatoric bands, beside the deterministic twin, in RUN_DIR/predictive.png.

Usage: ``spread = plot_toy(plan, splits, run_dir, device)   # {posterior: largest epistemic sd}``
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...data.sets import TOY_FUNCTIONS, TOY_PLOT_RANGES, Splits
from ...posterior import SampledPosterior
from ...runs.storage.loading import load
from ...runs.plans.plan import Plan
from ...runs.storage.trained import posteriors
from . import plots


@torch.no_grad()
def plot_toy(plan: Plan, splits: Splits, run_dir: Path, device) -> dict[str, float]:
    """Draw the toy run's predictive (HMC: every sample) and return each posterior's largest
    epistemic sd between the smallest and largest training x: the doubt between the data clusters."""
    trained = load(run_dir, device)
    shown = [p for part, p in posteriors(trained).items() if part != "twin"]  # the twin is drawn as a line
    panels = []
    for lo, hi in TOY_PLOT_RANGES[plan.data.name]:
        grid = torch.linspace(lo, hi, 801, device=device).unsqueeze(-1)
        samples = {p.label: p.predict(grid, p.total if isinstance(p, SampledPosterior) else plan.train.test_samples)
                   for p in shown}
        twin = trained.twin(grid) if trained.twin is not None else None
        panels.append((grid[:, 0], samples, twin, TOY_FUNCTIONS[plan.data.name](grid[:, 0])))
    plots.toy_predictive(panels, splits.train.x.squeeze(-1), splits.train.y, run_dir / "predictive.png",
                         f"{plan.arch} on {plan.data.name} ({plan.networks.model.noise} noise)")
    grid, samples = panels[0][:2]
    inside = (grid >= splits.train.x.min()) & (grid <= splits.train.x.max())
    return {label: float(plots.variance_parts(s)["epistemic"][inside].max()) for label, s in samples.items()}
