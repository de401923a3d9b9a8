"""Pruning a trained posterior: drop the weights with the lowest signal-to-noise ratio |mu| / sigma
(Blundell et al. 2015), or the lowest |mu|, by setting them to zero in every posterior sample.

Usage::

    keep = prune_masks(trained.guide, 0.95, by="snr")
    probs = predict(trained.model, trained.guide, x, 100, keep=keep)
"""
from __future__ import annotations

from operator import attrgetter

import torch
from pyro.infer.autoguide import AutoNormal

SCORES = ("snr", "magnitude")


def posterior_loc_scale(guide) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{parameter name: (posterior mean, posterior sd)} of a trained mean-field guide (an AutoNormal),
    e.g. ``layers.1.weight``."""
    if not isinstance(guide, AutoNormal):
        raise ValueError(f"pruning ranks the weights of a mean-field posterior (model.guide=meanfield); "
                         f"this run's guide is {type(guide).__name__}")
    with torch.no_grad():
        return {name[len("net."):]: (attrgetter(name)(guide.locs), attrgetter(name)(guide.scales))
                for name, _ in guide.prototype_trace.iter_stochastic_nodes()}


def weight_scores(guide, by: str = "snr") -> dict[str, torch.Tensor]:
    """Each weight's score: ``snr`` is |mu| / sigma, ``magnitude`` is |mu|."""
    if by not in SCORES:
        raise ValueError(f"unknown pruning score {by!r}; choose one of {', '.join(SCORES)}")
    return {name: loc.abs() / scale if by == "snr" else loc.abs()
            for name, (loc, scale) in posterior_loc_scale(guide).items()}


def prune_masks(guide, fraction: float, by: str = "snr") -> dict[str, torch.Tensor]:
    """Masks that keep all but the ``fraction`` of weights (and biases) with the lowest score,
    ranked across the whole network; exactly round(fraction x count) entries are dropped."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"the pruned fraction must lie in [0, 1], got {fraction}")
    scores = weight_scores(guide, by)
    flat = torch.cat([s.flatten() for s in scores.values()])
    keep = torch.ones_like(flat, dtype=torch.bool)
    keep[flat.argsort()[:round(fraction * len(flat))]] = False
    return {name: part.view_as(s) for (name, s), part in
            zip(scores.items(), keep.split([s.numel() for s in scores.values()]))}
