"""The networks a run's plan describes (``bnn_zoo.runs.plans.plan.Networks``): its (model, guide) pair and
its deterministic twin, the one place a plan becomes networks.

Usage: ``model, guide = build_networks(plan.networks, num_data=55000, device="cuda")``
"""
from __future__ import annotations

from typing import Optional

import pyro
import torch

from ...core.networks.architectures import build, make_twin
from ...core.networks.priors import make_prior
from ...core.networks.twin import Twin
from .plan import Networks


def build_networks(networks: Networks, num_data: Optional[int] = None, device: str | torch.device = "cpu"):
    """The (model, guide) pair ``networks`` describes, on ``device``, guide parameters created.

    Built with module-local parameters, so the pair also runs with Pyro's global parameter store
    (built with the global store, a PyroModule cannot run with module-local parameters).
    """
    m, spec = networks.model, networks.recipe
    with pyro.settings.context(module_local_params=True):
        prior = make_prior(m.prior, m.prior_scale, m.mixture_pi, m.mixture_scale1, m.mixture_scale2,
                           m.learn_prior)
        model, guide = build(spec, num_data=num_data, hidden=networks.hidden, prior=prior,
                             init_scale=m.init_scale, noise=m.noise, noise_scale=m.noise_scale,
                             guide=m.guide, rank=m.guide_rank, target=networks.target_stats)
        model.to(device)
        guide(torch.zeros(1, *spec.input_shape, device=device))  # creates its parameters
    return model, guide


def build_twin(networks: Networks, device: str | torch.device = "cpu") -> Twin:
    """The deterministic twin ``networks`` describes (with dropout where its rate is above 0)."""
    m = networks.model
    return make_twin(networks.recipe, networks.hidden, m.noise, m.noise_scale, networks.dropout,
                     networks.target_stats).to(device)
