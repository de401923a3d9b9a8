"""Temperature scaling (Guo et al. 2017): one scalar T, fitted on held-out data by the negative
log-likelihood, that divides a network's logits; softmax(logits / T) keeps every argmax, so the
accuracy, and only the confidence moves. The baseline calibration every peer library offers.

Usage::

    t = fit_temperature(twin_val_logits, val_labels)       # T > 1: the network was overconfident
    probs = (test_logits / t).softmax(-1)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

BOUNDS = (0.05, 20.0)  # the temperatures searched


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, steps: int = 100) -> float:
    """The T in ``BOUNDS`` minimizing the mean NLL of softmax(logits / T) on ``labels`` (logits
    [N, C], never the training data's). The NLL is convex in 1/T (a log-sum-exp of functions linear
    in it), so a ternary search over 1/T finds its minimum. Refused where no temperature is best: a
    validation set the network gets all right (the NLL falls forever as T -> 0), or an optimum
    outside ``BOUNDS``."""
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"need logits [N, C] and one label per row; got {tuple(logits.shape)} and "
                         f"{tuple(labels.shape)}")
    if not logits.isfinite().all():
        raise ValueError("the logits hold NaN or inf: a network that diverged cannot be recalibrated")
    logits, labels = logits.detach().double(), labels.detach()
    if bool((logits.argmax(-1) == labels).all()):
        raise ValueError(f"the network classifies all {len(labels)} inputs right: their NLL falls without end as "
                         "T -> 0, so no temperature is best; calibrate on a larger held-out set")

    def nll(beta: float) -> float:
        return F.cross_entropy(logits * beta, labels).item()

    low, high = 1 / BOUNDS[1], 1 / BOUNDS[0]
    for _ in range(steps):
        a, b = low + (high - low) / 3, high - (high - low) / 3
        if nll(a) < nll(b):
            high = b
        else:
            low = a
    beta = (low + high) / 2
    if beta <= 1 / BOUNDS[1] * 1.001 or beta >= 1 / BOUNDS[0] * 0.999:
        raise ValueError(f"the best temperature lies outside {BOUNDS[0]}..{BOUNDS[1]}: check that the labels "
                         "belong to the logits")
    return 1 / beta
