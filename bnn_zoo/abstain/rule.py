"""Saying "I don't know": the quantile rule (a threshold on a quantile of the sampled probabilities) and an epistemic gate on sampled
class probabilities.

Works on any tensor of sampled probabilities ``[S, N, C]`` (``bnn_zoo.predict``'s output, a
Pyro ``Predictive`` turned into probabilities, or a deterministic softmax with S = 1). A class is
accepted when the ``quantile`` (over the S samples) of its probability reaches ``threshold``; with
a ``signal`` (mutual information or predictive entropy, in bits) the input is also refused when
that signal exceeds ``cut``. ``bnn_zoo.abstain.certify`` chooses the threshold and the cut on
validation data with a guarantee on the error rate among accepted inputs.

Usage::

    decision = abstain(probs)                  # the quantile rule: median of the samples >= 0.2
    decision.refused.float().mean()            # fraction answered "I don't know"
    rule = Rule(threshold=0.3, signal="mutual_information", cut=0.05)
    decision = rule(probs)
    decision.refused_by_gate, decision.refused_by_quantile
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

LOG2 = math.log(2.0)
SIGNALS = ("mutual_information", "entropy")  # the signals the sampled probabilities give
# A third gate, given beside the probabilities: minus the log density of an input's features under
# the training data's (nats, bnn_zoo.abstain.density.FeatureDensity.score), cut in those nats.
DENSITY = "feature_density"


@dataclass
class Decision:
    """The rule's answer for N inputs over C classes."""

    quantile_probs: torch.Tensor  # [N, C]: the chosen quantile of each class's sampled probability
    accepted: torch.Tensor  # [N, C] bool: classes whose quantile probability reaches the threshold
    mean_probs: torch.Tensor  # [N, C]
    refused_by_gate: torch.Tensor  # [N] bool: the epistemic signal exceeded its cut
    signal: str | None = None  # what the gate reads (mutual_information, entropy, feature_density)

    def __repr__(self) -> str:
        n, c = self.accepted.shape
        return (f"Decision({n} inputs, {c} classes: {int(self.refused.sum())} refused "
                f"({int(self.refused_by_quantile.sum())} by the quantile, {int(self.refused_by_gate.sum())} by "
                f"{self.signal or 'no gate'}), {int(self.multiple.sum())} answered with a set of classes)")

    @property
    def refused_by_quantile(self) -> torch.Tensor:
        """[N] bool: no class's quantile probability reached the threshold."""
        return ~self.accepted.any(1)

    @property
    def refused(self) -> torch.Tensor:
        """[N] bool: "I don't know", from either signal."""
        return self.refused_by_quantile | self.refused_by_gate

    @property
    def multiple(self) -> torch.Tensor:
        """[N] bool: a set-valued answer (more than one class accepted, not refused)."""
        return (self.accepted.sum(1) > 1) & ~self.refused

    @property
    def prediction(self) -> torch.Tensor:
        """[N]: the accepted class with the highest quantile probability, -1 where refused."""
        best = self.quantile_probs.masked_fill(~self.accepted, -1.0).argmax(1)
        return best.masked_fill(self.refused, -1)

    @property
    def forced(self) -> torch.Tensor:
        """[N]: argmax of the mean probability, an answer for every input (for comparison)."""
        return self.mean_probs.argmax(1)

    def reasons(self, i: int) -> list[str]:
        """Which signals refused input ``i`` (``quantile``, the gate's signal): ``[]`` when answered."""
        return [name for name, hit in (("quantile", self.refused_by_quantile[i]),
                                       (self.signal or "gate", self.refused_by_gate[i])) if hit]

    def describe(self, i: int) -> dict:
        """Input ``i``'s answer as plain values: ``accepted`` {class: quantile probability}, best
        first (empty where refused); ``answer``, None where refused; ``refused_by``, the signals
        that refused it."""
        q, refused = self.quantile_probs[i], bool(self.refused[i])
        classes = [] if refused else sorted(self.accepted[i].nonzero()[:, 0].tolist(), key=lambda c: -float(q[c]))
        return {"accepted": {int(c): round(float(q[c]), 4) for c in classes},
                "answer": None if refused else int(self.prediction[i]), "refused_by": self.reasons(i)}


def check_probs(probs: torch.Tensor) -> None:
    """Refuse anything but sampled probabilities [S, N, C] of at least one sample, input and class."""
    if not isinstance(probs, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor of sampled probabilities [S, N, C], got a "
                        f"{type(probs).__name__}; pass torch.as_tensor(probs)")
    if not probs.is_floating_point():
        raise TypeError(f"expected floating-point probabilities, got {probs.dtype}; pass probs.float()")
    if probs.dim() != 3:
        raise ValueError(f"expected sampled probabilities [S, N, C], got shape {tuple(probs.shape)}; "
                         "for one deterministic softmax [N, C] pass probs.unsqueeze(0)")
    for size, what in zip(probs.shape, ("samples (S)", "inputs (N)", "classes (C)")):
        if not size:
            raise ValueError(f"no {what}: the probabilities have shape {tuple(probs.shape)}")
    if not (torch.isfinite(probs).all() and (probs >= 0).all()
            and torch.allclose(probs.sum(-1), probs.new_ones(()), atol=1e-3)):
        raise ValueError("expected probabilities (finite, non-negative, each row summing to 1); "
                         "for logits pass logits.softmax(-1)")


def abstain(probs: torch.Tensor, quantile: float = 0.5, threshold: float = 0.2, signal: str | None = None,
            cut: float = math.inf, density: torch.Tensor | None = None) -> Decision:
    """Accept each class whose ``quantile`` (over the S samples) of its probability is at least
    ``threshold``; refuse inputs with no accepted class, and, with a ``signal``, inputs whose
    uncertainty (bits; for ``DENSITY``, the ``density`` scores [N] in nats) exceeds ``cut``."""
    check_probs(probs)
    Rule(quantile, threshold, signal, cut)  # checks the values
    q = torch.quantile(probs.float(), quantile, dim=0)
    gated = (gate_score(probs, quantile, signal, density) > cut if signal is not None
             else torch.zeros(q.shape[0], dtype=torch.bool, device=q.device))
    return Decision(q, q >= threshold, probs.mean(0), gated, signal)


def gate_score(probs: torch.Tensor, quantile: float, signal: str, density: torch.Tensor | None = None) -> torch.Tensor:
    """[N]: what a gate on ``signal`` compares with its cut: an uncertainty of the probabilities, or
    the feature ``density`` scores given beside them."""
    if signal != DENSITY:
        return uncertainty(probs, quantile)[signal]
    if density is None:
        raise ValueError("this rule's gate reads the feature density: pass density=FeatureDensity.score(features) "
                         "of the same inputs")
    if density.shape != probs.shape[1:2]:
        raise ValueError(f"expected one density score per input ({probs.shape[1]}), got shape {tuple(density.shape)}")
    return density.to(probs.device)


@dataclass(frozen=True)
class Rule:
    """An abstention rule's settings; calling it on sampled probabilities gives its Decision.
    ``Rule()`` is the quantile rule (median >= 0.2, no gate)."""

    quantile: float = 0.5
    threshold: float = 0.2
    signal: str | None = None  # "mutual_information", "entropy", or None: no epistemic gate
    cut: float = math.inf  # refuse when the signal exceeds this many bits

    def __post_init__(self):
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile must lie in [0, 1], got {self.quantile}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {self.threshold}")
        if self.signal is not None and self.signal not in (*SIGNALS, DENSITY):
            raise ValueError(f"signal must be one of {', '.join(SIGNALS)} or None, got {self.signal!r}")
        if math.isnan(self.cut) or (self.cut < 0 and self.signal != DENSITY):  # minus a log density: any sign
            raise ValueError(f"cut must be a number of bits >= 0 (inf: no gate), got {self.cut}")

    def __call__(self, probs: torch.Tensor, density: torch.Tensor | None = None) -> Decision:
        return abstain(probs, self.quantile, self.threshold, self.signal, self.cut, density)

    def to_dict(self) -> dict:
        """Plain values for JSON (an infinite cut as None)."""
        return {**asdict(self), "cut": None if math.isinf(self.cut) else self.cut}

    @classmethod
    def from_dict(cls, d: dict) -> "Rule":
        return cls(d["quantile"], d["threshold"], d["signal"], math.inf if d["cut"] is None else d["cut"])

    def in_words(self) -> str:
        """The rule as the command lines say it: "median >= 0.85, refuse when mutual_information > 0.4642 bits"."""
        text = f"median >= {self.threshold}" if self.quantile == 0.5 else f"{self.quantile:g} quantile >= {self.threshold}"
        if self.signal == DENSITY:  # minus the log density of its features, in nats
            return text + f", refuse when minus the log density of its features > {self.cut:.4g} nats"
        return text + (f", refuse when {self.signal} > {self.cut:.4g} bits" if self.signal else "")


def _entropy_bits(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-12).log()).sum(-1) / LOG2


def predictive_entropy(probs: torch.Tensor) -> torch.Tensor:
    """[N]: the entropy of the mean prediction in bits, from sampled predictions [S, N, C]
    (``uncertainty``'s ``entropy``, without its other scores and checks)."""
    return _entropy_bits(probs.mean(0))


def uncertainty(probs: torch.Tensor, quantile: float = 0.5) -> dict[str, torch.Tensor]:
    """Per-input scores [N]: predictive entropy, expected entropy and mutual information (bits),
    the max mean probability, and the quantile probability of the top class."""
    check_probs(probs)
    mean = probs.mean(0)
    total = predictive_entropy(probs)
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
