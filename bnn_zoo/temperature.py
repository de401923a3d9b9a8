"""Temperature scaling (Guo et al. 2017): one scalar T, fitted on held-out data by the negative
log-likelihood, that divides a network's logits; softmax(logits / T) keeps every argmax, so the
accuracy, and only the confidence moves. The baseline calibration every peer library offers.

Usage::

    t = fit_temperature(twin_val_logits, val_labels)       # T > 1: the network was overconfident
    probs = (test_logits / t).softmax(-1)
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, steps: int = 50) -> float:
    """The T > 0 minimizing the mean NLL of softmax(logits / T) on ``labels`` (logits [N, C], never
    the training data's), by L-BFGS on log T, from T = 1."""
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"need logits [N, C] and one label per row; got {tuple(logits.shape)} and "
                         f"{tuple(labels.shape)}")
    if not logits.isfinite().all():
        raise ValueError("the logits hold NaN or inf: a network that diverged cannot be recalibrated")
    logits, labels = logits.detach().double(), labels.detach()
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=0.5, max_iter=steps, line_search_fn="strong_wolfe")

    def nll():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(nll)
    t = log_t.exp().item()
    if not math.isfinite(t):
        raise ValueError("temperature scaling did not converge: check that the labels match the logits")
    return t
