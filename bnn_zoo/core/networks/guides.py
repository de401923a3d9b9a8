"""Guides (posterior approximations) for a Bayesian network, chosen by name.

``meanfield`` (the default): ``DirectAutoNormal``, an independent Normal per weight;
``lowrank``: Pyro's ``AutoLowRankMultivariateNormal`` (correlations through ``rank`` factors);
``delta``: Pyro's ``AutoDelta``, a point estimate, so training finds the MAP weights.
All start the weights' means at the plain network's initialization and never see ``obs``.

Usage: ``guide = make_guide(model, "lowrank", init_scale=0.01, rank=10)``
"""
from __future__ import annotations

import math
from operator import attrgetter

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoLowRankMultivariateNormal, AutoNormal
from pyro.infer.autoguide.initialization import init_to_feasible
from pyro.nn import PyroModule, PyroParam
from pyro.poutine.util import prune_subsample_sites

GUIDES = ("meanfield", "lowrank", "delta")


def _is_real(support) -> bool:
    while hasattr(support, "base_constraint"):
        support = support.base_constraint
    return support is constraints.real


def _set_nested(module: PyroModule, name: str, value: PyroParam) -> None:
    """``module.<name> = value`` for a dotted name, making the PyroModules on the way."""
    *path, leaf = name.split(".")
    for part in path:
        if not hasattr(module, part):
            setattr(module, part, PyroModule())
        module = getattr(module, part)
    setattr(module, leaf, value)


class DirectAutoNormal(AutoNormal):
    """AutoNormal's posterior, an independent Normal per weight, sampled straight from that Normal.

    An ``AutoNormal`` with its parameters (``locs.<site>`` and ``scales.<site>``, ``PyroParam``s,
    the scales under AutoNormal's softplus constraint), so AutoNormal's checkpoints load unchanged,
    and its ``median()`` and ``quantiles()``; but one sample site per weight,
    ``Normal(loc, scale).to_event(k)``, whose KL an ELBO can take in closed form, without the
    auxiliary ``*_unconstrained`` site and Delta that AutoNormal adds. Built on Pyro's public API
    only: AutoNormal's constructor, ``prototype_trace``, ``PyroModule``, ``PyroParam``, ``poutine``.
    Its latents must be real-valued and global (a network's weights, outside any plate).

    Usage: ``guide = DirectAutoNormal(poutine.block(model, hide=["obs"]), init_loc_fn=model.init_loc)``
    """

    def __init__(self, model, *, init_loc_fn=init_to_feasible, init_scale: float = 0.1):
        super().__init__(model, init_loc_fn=init_loc_fn, init_scale=init_scale)
        self.init_loc_fn, self.init_scale = init_loc_fn, init_scale

    def _create_params(self, *args, **kwargs) -> None:
        """Trace the model once (out of sight of any handler) and give each latent site a loc and scale."""
        trace = poutine.block(poutine.trace(self.model).get_trace)(*args, **kwargs)
        self.prototype_trace = prune_subsample_sites(trace)
        self.locs, self.scales = PyroModule(), PyroModule()
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if not _is_real(site["fn"].support):
                raise ValueError(f"DirectAutoNormal needs real-valued latents; {name} has support "
                                 f"{site['fn'].support}: use pyro's AutoNormal")
            if site["cond_indep_stack"]:
                raise ValueError(f"DirectAutoNormal needs global latents; {name} lies in plate "
                                 f"{site['cond_indep_stack'][0].name!r}: use pyro's AutoNormal")
            loc, event_dim = self.init_loc_fn(site).detach(), site["fn"].event_dim
            _set_nested(self.locs, name, PyroParam(loc, constraints.real, event_dim))
            _set_nested(self.scales, name, PyroParam(torch.full_like(loc, self.init_scale), self.scale_constraint,
                                                     event_dim))

    def _normals(self):
        """(site name, its posterior Normal, the site's event dim) for each latent site."""
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            yield name, dist.Normal(attrgetter(name)(self.locs), attrgetter(name)(self.scales)), site["fn"].event_dim

    def forward(self, *args, **kwargs) -> dict:
        if self.prototype_trace is None:
            self._create_params(*args, **kwargs)
        return {name: pyro.sample(name, normal.to_event(event_dim)) for name, normal, event_dim in self._normals()}

    @torch.no_grad()
    def median(self, *args, **kwargs) -> dict:
        """{site name: posterior median}, the locs."""
        return {name: normal.loc.clone() for name, normal, _ in self._normals()}

    @torch.no_grad()
    def quantiles(self, quantiles, *args, **kwargs) -> dict:
        """{site name: the posterior ``quantiles`` [Q, *shape]}, e.g. ``guide.quantiles([0.05, 0.5, 0.95])``."""
        return {name: normal.icdf(torch.as_tensor(quantiles, dtype=normal.loc.dtype, device=normal.loc.device)
                                  .reshape(-1, *(1,) * normal.loc.dim()))
                for name, normal, _ in self._normals()}


def make_guide(model, kind: str = "meanfield", init_scale: float = 0.01, rank: int = 10) -> AutoGuide:
    """The guide ``kind`` names for a ``BayesianNet`` (anything with an ``init_loc`` method).

    ``init_scale`` is the initial posterior sd (meanfield, lowrank): small, so the first steps see
    nearly the plain network. ``rank`` is lowrank's number of factors.
    """
    if not (isinstance(init_scale, (int, float)) and math.isfinite(init_scale) and init_scale > 0):
        raise ValueError(f"init_scale must be a positive number, got {init_scale!r}")
    blocked = poutine.block(model, hide=["obs"])  # a guide called without labels never sees obs
    if kind == "meanfield":
        return DirectAutoNormal(blocked, init_loc_fn=model.init_loc, init_scale=float(init_scale))
    if kind == "lowrank":
        if not (isinstance(rank, int) and rank >= 1):
            raise ValueError(f"rank must be a positive integer, got {rank!r}")
        return AutoLowRankMultivariateNormal(blocked, init_loc_fn=model.init_loc,
                                             init_scale=float(init_scale), rank=rank)
    if kind == "delta":
        return AutoDelta(blocked, init_loc_fn=model.init_loc)
    raise ValueError(f"unknown guide {kind!r}; choose one of {', '.join(GUIDES)}")
