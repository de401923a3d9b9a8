"""Figures of merit for sampled predictions: accuracy and NLL (classification), RMSE and NLL (regression).

Usage: ``predictive_metrics(probs, y, "categorical")  # probs [S, N, C] -> {"accuracy", "nll"}``
"""
from __future__ import annotations

import math

import torch


def predictive_metrics(samples: torch.Tensor, y: torch.Tensor, likelihood: str) -> dict:
    """Figures of the posterior predictive, the mean over the S samples (S = 1 for a twin).

    Classification: ``samples`` are probabilities [S, N, C]; NLL of the mean probability, nats
    per example. Regression: ``samples`` are [S, N, 2] (mean, noise scale); the predictive is the
    mixture of the S Normals, and its NLL is minus the held-out log-likelihood per point.
    """
    if likelihood == "categorical":
        mean = samples.mean(0)
        picked = mean.gather(1, y.unsqueeze(1)).squeeze(1).clamp_min(1e-12)
        return {"accuracy": (mean.argmax(1) == y).float().mean().item(),
                "nll": -picked.log().mean().item()}
    loc, scale = samples.unbind(-1)
    log_mix = torch.distributions.Normal(loc, scale).log_prob(y).logsumexp(0) - math.log(len(loc))
    return {"rmse": (loc.mean(0) - y).pow(2).mean().sqrt().item(),
            "nll": -log_mix.mean().item()}
