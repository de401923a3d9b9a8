"""Figures of merit for sampled predictions: accuracy and NLL (classification), RMSE and NLL (regression).

Usage: ``predictive_metrics(probs, y, "categorical")  # probs [S, N, C] -> {"accuracy", "nll"}``
"""
from __future__ import annotations

import math

import torch


def predictive_metrics(samples: torch.Tensor, y: torch.Tensor, likelihood: str,
                       noise_scale: float = 1.0) -> dict:
    """Figures of the posterior predictive, the mean over the S samples (S = 1 for a twin).

    Classification: ``samples`` are probabilities [S, N, C]; NLL of the mean probability, nats
    per example. Regression: ``samples`` are means [S, N]; the predictive is the mixture of
    N(mean_s, noise_scale^2) over samples.
    """
    if likelihood == "categorical":
        mean = samples.mean(0)
        picked = mean.gather(1, y.unsqueeze(1)).squeeze(1).clamp_min(1e-12)
        return {"accuracy": (mean.argmax(1) == y).float().mean().item(),
                "nll": -picked.log().mean().item()}
    normal = torch.distributions.Normal(samples, noise_scale)
    log_mix = normal.log_prob(y).logsumexp(0) - math.log(samples.shape[0])
    return {"rmse": (samples.mean(0) - y).pow(2).mean().sqrt().item(),
            "nll": -log_mix.mean().item()}
