"""Figures of merit beyond the likelihood's own: how well a score tells out-of-distribution inputs
from in-distribution ones (AUROC, AUPR, FPR at 95% TPR), and calibration (ECE, reliability bins).

Usage: ``detection(entropy_mnist, entropy_notmnist)  # {"auroc", "aupr", "fpr95"}``
"""
from __future__ import annotations

import torch

from ..data.vision import torchvision  # noqa: F401 - first: torchmetrics imports it, a mismatch is said in a line
from torchmetrics.functional.classification import (
    binary_auroc,
    binary_average_precision,
    binary_roc,
    multiclass_calibration_error,
)


def _binary(in_scores: torch.Tensor, ood_scores: torch.Tensor):
    scores = torch.cat([in_scores.cpu(), ood_scores.cpu()]).float()
    target = torch.cat([torch.zeros(len(in_scores)), torch.ones(len(ood_scores))]).long()
    return scores, target


def fpr_at_95_tpr(in_scores: torch.Tensor, ood_scores: torch.Tensor) -> float:
    """Fraction of in-distribution inputs flagged when 95% of the OOD inputs are flagged."""
    fpr, tpr, _ = binary_roc(*_binary(in_scores, ood_scores))
    return float(fpr[torch.searchsorted(tpr, torch.tensor(0.95, dtype=tpr.dtype))])


def detection(in_scores: torch.Tensor, ood_scores: torch.Tensor) -> dict:
    """AUROC, AUPR (OOD as the positive class) and FPR at 95% TPR; higher score = more OOD."""
    scores, target = _binary(in_scores, ood_scores)
    return {"auroc": float(binary_auroc(scores, target)),
            "aupr": float(binary_average_precision(scores, target)),
            "fpr95": fpr_at_95_tpr(in_scores, ood_scores)}


def expected_calibration_error(mean_probs: torch.Tensor, labels: torch.Tensor, bins: int = 15) -> float:
    """ECE of the mean predictive [N, C] (top-label, equal-width confidence bins)."""
    return float(multiclass_calibration_error(mean_probs.cpu(), labels.cpu(), mean_probs.shape[1], n_bins=bins))


def reliability_bins(probs: torch.Tensor, labels: torch.Tensor, bins: int = 15):
    """(mean confidence, accuracy, count) per confidence bin of the mean prediction of [S, N, C]."""
    confidence, predicted = probs.mean(0).max(1)
    correct = (predicted == labels.to(probs.device)).float()
    index = (confidence * bins).long().clamp(max=bins - 1)
    count = torch.bincount(index, minlength=bins).float()
    mean_conf = torch.bincount(index, confidence, minlength=bins) / count.clamp_min(1)
    accuracy = torch.bincount(index, correct, minlength=bins) / count.clamp_min(1)
    return mean_conf, accuracy, count
