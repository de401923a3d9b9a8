"""The model, guide and twin a config describes: the one place a config becomes networks.

Usage: ``model, guide = build_from_config(cfg, num_data=55000, device="cuda")``
"""
from __future__ import annotations

from typing import Optional

import pyro
import torch
from omegaconf import DictConfig

from ..core.priors import make_prior
from ..core.twin import Twin
from .checks import recipe
from ..core.architectures import build, make_twin


def build_from_config(cfg: DictConfig, num_data: Optional[int] = None,
                      device: str | torch.device = "cpu"):
    """The (model, guide) pair a resolved config describes, on ``device``, guide parameters created.

    Built with module-local parameters, so the pair also runs with Pyro's global parameter store
    (built with the global store, a PyroModule cannot run with module-local parameters).
    """
    m = cfg.model
    with pyro.settings.context(module_local_params=True):
        prior = make_prior(m.prior, m.prior_scale, m.mixture_pi, m.mixture_scale1, m.mixture_scale2,
                           m.learn_prior)
        spec = recipe(cfg)
        model, guide = build(spec, num_data=num_data, hidden=_hidden(cfg), prior=prior,
                             init_scale=m.init_scale, noise=m.noise, noise_scale=m.noise_scale,
                             guide=m.guide, rank=m.guide_rank, target=cfg.data.target_stats)
        model.to(device)
        guide(torch.zeros(1, *spec.input_shape, device=device))  # creates its parameters
    return model, guide


def _hidden(cfg: DictConfig) -> Optional[list[int]]:
    return list(cfg.model.hidden) if cfg.model.hidden is not None else None


def twin_from_config(cfg: DictConfig, device: str | torch.device = "cpu") -> Twin:
    return make_twin(recipe(cfg), _hidden(cfg), cfg.model.noise, cfg.model.noise_scale,
                     cfg.train.twin_dropout, cfg.data.target_stats).to(device)
