"""Guides (posterior approximations) for a Bayesian network, chosen by name.

``meanfield`` (the default): ``DirectAutoNormal``, an independent Normal per weight;
``lowrank``: Pyro's ``AutoLowRankMultivariateNormal`` (correlations through ``rank`` factors);
``delta``: Pyro's ``AutoDelta``, a point estimate, so training finds the MAP weights.
All start the weights' means at the plain network's initialization and never see ``obs``.

Usage: ``guide = make_guide(model, "lowrank", init_scale=0.01, rank=10)``
"""
from __future__ import annotations

import math
from contextlib import ExitStack

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoLowRankMultivariateNormal, AutoNormal

GUIDES = ("meanfield", "lowrank", "delta")


def _is_real(support) -> bool:
    while hasattr(support, "base_constraint"):
        support = support.base_constraint
    return support is constraints.real


class DirectAutoNormal(AutoNormal):
    """AutoNormal for real-valued latents that samples each weight straight from its Normal.

    Same parameters, posterior, ``median()`` and ``quantiles()`` as AutoNormal, but without the
    auxiliary ``*_unconstrained`` site and Delta per weight that AutoNormal adds: one sample site per
    weight, whose distribution an ELBO can hand to an analytic KL. It builds on AutoNormal's
    ``_setup_prototype``, ``_create_plates``, ``_get_loc_and_scale`` and ``_event_dims``
    (pyro-ppl 1.9; tests/test_guides.py fails if they change).
    """

    def forward(self, *args, **kwargs) -> dict:
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        plates = self._create_plates(*args, **kwargs)
        result = {}
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if not _is_real(site["fn"].support):
                raise ValueError(f"DirectAutoNormal needs real-valued latents; {name} has support "
                                 f"{site['fn'].support}: use pyro's AutoNormal")
            with ExitStack() as stack:
                for frame in site["cond_indep_stack"]:
                    if frame.vectorized:
                        stack.enter_context(plates[frame.name])
                loc, scale = self._get_loc_and_scale(name)
                result[name] = pyro.sample(name, dist.Normal(loc, scale).to_event(self._event_dims[name]))
        return result


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
