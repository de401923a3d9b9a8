"""The deterministic twin: the same plain network and likelihood with point weights, fitted by
maximum likelihood, so every figure of a Bayesian network can be shown beside a plain one.

Usage: ``twin = Twin(LeNet5(), Categorical()); twin.loss(x, y).backward(); probs = twin(x)``;
``twin.loss(x, y, outliers, 0.5)``: with "no class" at the outliers (``bnn_zoo.data.shifted.outliers``)
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .likelihoods import Likelihood


class Twin(nn.Module):
    """``twin(x)`` is the predictive in ``bnn_zoo.predict``'s per-sample format (class
    probabilities, or a regression's (mean, noise sd)); a learned noise scale is the twin's own."""

    input_shape: Optional[tuple[int, ...]] = None  # of one input its network takes (its recipe's), None: unknown

    def __init__(self, net: nn.Module, likelihood: Likelihood):
        super().__init__()
        self.net = net
        self.likelihood = likelihood

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.likelihood.predictive(self.net(x))

    def loss(self, x: torch.Tensor, y: torch.Tensor, outliers: Optional[torch.Tensor] = None,
             outlier_weight: float = 1.0) -> torch.Tensor:
        """Mean negative log-likelihood per example; with ``outliers``, plus ``outlier_weight`` times
        the mean negative log-likelihood of "no class" at them (the Bayesian network's term, per
        example), the network run once on both."""
        if outliers is None:
            return self.likelihood.twin_loss(self.net(x), y)
        out, out_outliers = self.net(torch.cat([x, outliers])).split([len(x), len(outliers)])
        no_class = self.likelihood.no_class_log_prob(out_outliers).mean()
        return self.likelihood.twin_loss(out, y) - outlier_weight * no_class
