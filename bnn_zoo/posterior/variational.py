"""The posterior of a Bayesian network's guide (``VariationalPosterior``: mean-field, low-rank, or a
delta guide's MAP), and an ensemble's guides mixed.

Usage: ``probs = VariationalPosterior(model, guide).predict(x, num_samples=100)  # [100, N, C]``
"""
from __future__ import annotations

import torch
from pyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal
from torch import nn

from ..abstain.density import features
from ..core.networks.bnn import BayesianNet
from ..core.inference.inputs import evaluating
from ..core.inference.predictive import network_chunks, own_parameters
from .base import Posterior, count, mixed, phase_seconds, register


@register
class VariationalPosterior(Posterior):
    """A guide of a Bayesian network (``bnn_zoo.core.networks.guides``): weights drawn from it; a run's, the
    mixture of an ensemble's guides."""

    name, title = "bayes", "Bayesian"

    def __init__(self, model: BayesianNet, guide: nn.Module):
        self.model, self.guide, self.networks = model, guide, (model,)
        self.stochastic = not isinstance(guide, AutoDelta)
        self.label = ("MAP (delta guide)" if not self.stochastic else
                      f"low-rank VI (rank {guide.rank})" if isinstance(guide, AutoLowRankMultivariateNormal) else
                      "mean-field VI")

    @classmethod
    def of_run(cls, trained) -> Posterior:
        return mixed([cls(t.model, t.guide) for t in (trained, *trained.members)])

    @classmethod
    def training_seconds(cls, metrics):
        return phase_seconds(metrics, "bayes")

    def chunks(self, x, num_samples, chunk_size):
        return network_chunks(self.model, self.guide, x, self.rows(num_samples), chunk_size)

    def features(self, x):
        """At the guide's posterior mean (its median: the mean of a Gaussian guide)."""
        prefix = len("net.")
        with torch.no_grad(), evaluating(self.model), own_parameters(self.guide):
            mean = {name[prefix:]: value for name, value in self.guide.median().items()}
            return features(self.model.skeleton, lambda xb: self.model.forward_with(mean, xb), x)

    @property
    def parameters_stored(self) -> int:
        return count(self.guide, self.model)
