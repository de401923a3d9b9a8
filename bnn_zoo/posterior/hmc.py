"""NUTS's weight samples of a Bayesian network (``infer=nuts``): ``num_samples`` evenly spaced ones.

Usage: ``probs = SampledPosterior(model, mcmc.get_samples()).predict(x, num_samples=100)``
"""
from __future__ import annotations

import torch

from ..core.networks.bnn import BayesianNet
from ..core.inference.predictive import network_chunks
from .base import Posterior, count, phase_seconds, register


@register
class SampledPosterior(Posterior):
    """Weight samples {site: [S, *shape]} (NUTS): ``num_samples`` evenly spaced ones, None for all."""

    name, title = "hmc", "HMC"

    def __init__(self, model: BayesianNet, samples: dict[str, torch.Tensor]):
        self.model, self.samples, self.networks = model, samples, (model,)
        self.total = len(next(iter(samples.values())))
        self.label = f"HMC (NUTS, {self.total} samples)"

    @classmethod
    def of_run(cls, trained) -> Posterior | None:
        return None if trained.samples is None else cls(trained.model, trained.samples)

    @classmethod
    def training_seconds(cls, metrics):
        bayes, hmc = phase_seconds(metrics, "bayes"), metrics[0].get(cls.name) if metrics else None
        return None if hmc is None else (bayes or 0.0) + hmc["seconds"]  # NUTS starts after SVI

    def chunks(self, x, num_samples, chunk_size):
        return network_chunks(self.model, self.samples, x, self.rows(num_samples), chunk_size)

    def rows(self, num_samples: int) -> int:
        return min(num_samples or self.total, self.total)

    @property
    def parameters_stored(self) -> int:
        return sum(v.numel() for v in self.samples.values()) + count(self.model)
