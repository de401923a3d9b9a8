"""Saying "I don't know": a quantile-threshold rule on sampled class probabilities.

Works on any tensor of sampled probabilities ``[S, N, C]`` (``bnn_zoo.predict``'s output, a
Pyro ``Predictive`` turned into probabilities, or a deterministic softmax with S = 1).

Usage::

    decision = abstain(probs)                  # median of the samples >= 0.2
    decision.refused.float().mean()            # fraction answered "I don't know"
    decision = abstain(probs, quantile=0.1, threshold=0.5)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOG2 = math.log(2.0)


@dataclass
class Decision:
    """The rule's answer for N inputs over C classes."""

    quantile_probs: torch.Tensor  # [N, C]: the chosen quantile of each class's sampled probability
    accepted: torch.Tensor  # [N, C] bool: classes whose quantile probability reaches the threshold
    mean_probs: torch.Tensor  # [N, C]

    @property
    def refused(self) -> torch.Tensor:
        """[N] bool: no class accepted, "I don't know"."""
        return ~self.accepted.any(1)

    @property
    def multiple(self) -> torch.Tensor:
        """[N] bool: a set-valued answer (more than one class accepted)."""
        return self.accepted.sum(1) > 1

    @property
    def prediction(self) -> torch.Tensor:
        """[N]: the accepted class with the highest quantile probability, -1 where refused."""
        best = self.quantile_probs.masked_fill(~self.accepted, -1.0).argmax(1)
        return best.masked_fill(self.refused, -1)

    @property
    def forced(self) -> torch.Tensor:
        """[N]: argmax of the mean probability, an answer for every input (for comparison)."""
        return self.mean_probs.argmax(1)


def _check(probs: torch.Tensor) -> None:
    if probs.dim() != 3:
        raise ValueError(f"expected sampled probabilities [S, N, C], got shape {tuple(probs.shape)}; "
                         "for one deterministic softmax [N, C] pass probs.unsqueeze(0)")


def abstain(probs: torch.Tensor, quantile: float = 0.5, threshold: float = 0.2) -> Decision:
    """Accept each class whose ``quantile`` (over the S samples) of its probability is at least
    ``threshold``; inputs with no accepted class are refused."""
    _check(probs)
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    q = torch.quantile(probs.float(), quantile, dim=0)
    return Decision(q, q >= threshold, probs.mean(0))


def _entropy_bits(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-12).log()).sum(-1) / LOG2


def uncertainty(probs: torch.Tensor, quantile: float = 0.5) -> dict[str, torch.Tensor]:
    """Per-input scores [N]: predictive entropy, expected entropy and mutual information (bits),
    the max mean probability, and the quantile probability of the top class."""
    _check(probs)
    mean = probs.mean(0)
    total = _entropy_bits(mean)
    expected = _entropy_bits(probs).mean(0)
    top = mean.argmax(1)
    top_samples = probs.gather(2, top.expand(probs.shape[0], -1).unsqueeze(2)).squeeze(2)
    return {"entropy": total, "expected_entropy": expected,
            "mutual_information": (total - expected).clamp_min(0.0),
            "max_prob": mean.max(1).values,
            "top_quantile_prob": torch.quantile(top_samples.float(), quantile, dim=0)}


def risk_coverage(probs: torch.Tensor, labels: torch.Tensor, quantile: float = 0.5):
    """Lowering the threshold accepts inputs in order of their top quantile probability.

    Returns (thresholds, coverage, risk), each [N]: accepting every input whose top quantile
    probability is at least ``thresholds[k]`` gives ``coverage[k]`` and ``risk[k]`` (error rate of
    the point prediction among accepted inputs).
    """
    q = abstain(probs, quantile, threshold=0.0).quantile_probs
    score, predicted = q.max(1)
    order = score.argsort(descending=True)
    errors = (predicted != labels.to(q.device))[order].float()
    accepted = torch.arange(1, len(score) + 1, device=q.device)
    return score[order], accepted / len(score), errors.cumsum(0) / accepted


def calibrate_threshold(probs: torch.Tensor, labels: torch.Tensor, quantile: float = 0.5,
                        coverage: float | None = None, risk: float | None = None) -> float:
    """The threshold that reaches a target ``coverage`` (fraction accepted) or a target ``risk``
    (error rate among accepted) on held-out data, the validation split, never the test set.

    For ``risk`` it is the lowest threshold (most inputs accepted) whose risk is within target.
    """
    if (coverage is None) == (risk is None):
        raise ValueError("give exactly one of coverage= or risk=")
    thresholds, covered, running_risk = risk_coverage(probs, labels, quantile)
    if coverage is not None:
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
        return float(thresholds[max(1, math.ceil(coverage * len(thresholds))) - 1])
    # Only cut between distinct scores: equal scores are accepted or refused together.
    last_of_tie = torch.ones_like(thresholds, dtype=torch.bool)
    last_of_tie[:-1] = thresholds[:-1] != thresholds[1:]
    ok = ((running_risk <= risk) & last_of_tie).nonzero()
    if len(ok) == 0:
        return float(thresholds[0]) + 1e-6  # nothing can be accepted at that risk
    return float(thresholds[ok[-1, 0]])
