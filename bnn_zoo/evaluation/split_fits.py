"""What evaluation fits on a run's own data before it scores the test set, never on the test set
or an OOD set: each rung's feature density (``bnn_zoo.abstain.density``) on training inputs, and its
conformal sets at 90, 95 and 99% coverage on the validation split (the scoreboard's set columns;
the run's certified sets, at its ``abstention.alpha``, are the ones predict and the page show).

Usage: ``refs = fit_references(trained, rungs, num_samples=100, seed=0)``; ``refs.density[part].score(feats)``
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch

from ..abstain.conformal import ConformalSets, calibrate_sets
from ..abstain.density import DENSITY_INPUTS, FeatureDensity
from ..core.errors import DataError
from ..data.sets import run_split
from ..posterior import Posterior, certifying
from ..runs.storage.trained import Trained

TARGETS = (0.9, 0.95, 0.99)  # the coverages the scoreboard's set columns promise


@dataclass
class References:
    """Per rung's name: its feature density (rungs with a point network), its sets per target."""

    density: dict[str, FeatureDensity] = field(default_factory=dict)
    sets: dict[str, dict[float, ConformalSets]] = field(default_factory=dict)


def fit_references(trained: Trained, rungs: dict[str, Posterior], num_samples: int, seed: int = 0,
                   root: str | None = None, density_inputs: int = DENSITY_INPUTS) -> References:
    """The densities and sets of ``rungs`` (``bnn_zoo.posteriors(trained)``); a run without a
    validation split has no sets, and missing data leaves both out (with a note on stderr)."""
    refs, cfg = References(), trained.config
    try:
        x, y = run_split(cfg.data, "train", root, density_inputs)
        x = x.to(trained.device)
        for part, posterior in rungs.items():
            try:
                feats = posterior.features(x)
                if feats is not None:
                    refs.density[part] = FeatureDensity.fit(feats, y)
            except ValueError as err:  # a network by name without a usable last nn.Linear, say
                print(f"no feature density for {part}: {err}", file=sys.stderr)
        if cfg.data.val_size:
            x, y = run_split(cfg.data, "val", root)
            x, y = x.to(trained.device), y.to(trained.device)
            generator = torch.Generator().manual_seed(seed)
            for part, posterior in rungs.items():
                held = certifying(part, len(y))  # the scaled twin: not the inputs its temperature saw
                probs = posterior.predict(x[held], num_samples)
                refs.sets[part] = {t: calibrate_sets(probs, y[held], round(1 - t, 6), cfg.abstention.set_score,
                                                     generator=generator) for t in TARGETS}
    except DataError as err:
        print(f"no feature densities or sets by coverage: {err}", file=sys.stderr)
    return refs
