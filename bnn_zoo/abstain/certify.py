"""Choosing the abstention rule on validation data with a guarantee: with probability at least
1 - delta over the draw of the validation set, the error rate among the inputs the chosen rule
accepts is at most ``risk`` (Learn then Test, Angelopoulos et al. 2021, for selective risk as in
Geifman & El-Yaniv 2017).

Every rule on a grid fixed before the data is seen (quantile thresholds x epistemic cuts) is a
test of "its error rate among accepted inputs exceeds risk". Given the n validation inputs a rule
accepts, its errors are Binomial(n, its true error rate), so its p-value is
P(Binomial(n, risk) <= errors). Each cut's thresholds, from the strictest (0.9) down, are a fixed
sequence tested at level delta / (number of cuts): a threshold is certified only when it and every
stricter one pass (Learn then Test's fixed-sequence testing within a cut, Bonferroni across cuts).
That keeps the chance of certifying any bad rule below delta, so every certified rule holds the
bound at once and any of them may be chosen by any criterion: this one takes the strictest
epistemic cut that refuses at most ``max_refusal`` of validation (the gate is what refuses
unfamiliar inputs), then the lowest certified threshold (the most answers).

Usage::

    calibration = certify(val_probs, val_labels, risk=0.005, delta=0.05)
    calibration.rule(test_probs).refused         # the certified two-signal rule
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .rule import DENSITY, Rule, abstain, check_probs, gate_score

THRESHOLDS = tuple(round(0.2 + 0.05 * i, 2) for i in range(15))  # 0.2 ... 0.9
# bits, 12 a decade (steps of 21%): entropy and mutual information of 10 classes stay below 3.33
CUTS = tuple(float(c) for c in torch.logspace(-4, 1, 61, dtype=torch.float64)) + (math.inf,)


@dataclass
class Calibration:
    """A certified rule and what the validation data said about it."""

    rule: Rule
    risk: float
    delta: float
    max_refusal: float
    validation: dict = field(default_factory=dict)  # size, refused, errors, risk, p_value, level, candidates, certified

    def to_dict(self) -> dict:
        return {"rule": self.rule.to_dict(), "risk": self.risk, "delta": self.delta,
                "max_refusal": self.max_refusal, "validation": self.validation}

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        return cls(Rule.from_dict(d["rule"]), d["risk"], d["delta"], d["max_refusal"], d["validation"])


def binomial_cdf(k: torch.Tensor, n: torch.Tensor, p: float) -> torch.Tensor:
    """P(Binomial(n, p) <= k), elementwise over integer tensors k and n (float64)."""
    k, n = k.double(), n.double()
    top = int(k.max()) if k.numel() else 0
    i = torch.arange(top + 1, dtype=torch.float64)
    n_, i_ = n.unsqueeze(-1), i
    log_pmf = (torch.lgamma(n_ + 1) - torch.lgamma(i_ + 1) - torch.lgamma((n_ - i_).clamp_min(0) + 1)
               + i_ * math.log(p) + (n_ - i_) * math.log1p(-p))
    log_pmf = log_pmf.masked_fill((i_ > k.unsqueeze(-1)) | (i_ > n_), -math.inf)
    return log_pmf.logsumexp(-1).exp().clamp(max=1.0)


class NotCertified(ValueError):
    """No rule on the grid can be certified at the asked risk and delta on these inputs."""


def density_cuts(train_scores: torch.Tensor, levels: int = 60) -> tuple[float, ...]:
    """The cuts of a density gate, fixed before validation is seen: quantiles of the density scores
    of training inputs (``FeatureDensity.score``), from the median to 1 in 10,000 in the tail,
    spaced evenly in the log of the share refused, then no gate."""
    shares = torch.logspace(math.log10(0.5), -4, levels, dtype=torch.float64)
    return tuple(float(c) for c in torch.quantile(train_scores.double(), 1 - shares)) + (math.inf,)


def check_settings(risk: float, delta: float, max_refusal: float, quantile: float = 0.5,
                   signal: str | None = None, after_alarm_refusal: float = 0.0,
                   after_alarm_quantile: float = 0.0) -> None:
    """The one check of the abstention settings (the config's and the certify command's):
    ValueError naming the first setting out of range."""
    for name, value in (("risk", risk), ("delta", delta)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie strictly between 0 and 1, got {value}")
    for name, value in (("max_refusal", max_refusal), ("after_alarm_refusal", after_alarm_refusal)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value}")
    Rule(quantile, signal=signal)  # the quantile and the signal's name
    if not 0.0 <= after_alarm_quantile <= quantile:
        raise ValueError(f"after_alarm_quantile must lie in [0, quantile] (the after-alarm rule is the stricter: "
                         f"quantile is {quantile}), got {after_alarm_quantile}")


def certify(probs: torch.Tensor, labels: torch.Tensor, risk: float, delta: float = 0.05,
            max_refusal: float = 0.02, quantile: float = 0.5, signal: str | None = "mutual_information",
            thresholds: tuple[float, ...] = THRESHOLDS, cuts: tuple[float, ...] = CUTS,
            density: torch.Tensor | None = None) -> Calibration:
    """The rule for sampled validation probabilities [S, N, C] and their labels [N]: see the
    module's docstring. ``signal=None`` calibrates the threshold alone (the quantile rule);
    ``signal=DENSITY`` gates on the validation inputs' feature ``density`` scores [N] at ``cuts``
    from ``density_cuts`` of training inputs' scores (a grid fixed before validation is seen).

    Raises NotCertified when no rule on the grid can be certified (ask for a higher risk or delta,
    or certify on more inputs: ``smallest_risk`` says which risk these inputs certify)."""
    check_settings(risk, delta, max_refusal, quantile, signal)
    n, errors, cuts = rule_counts(probs, labels, quantile, signal, thresholds, cuts, density)
    p_value, level = p_values(n, errors, risk), delta / len(cuts)
    certified = certified_rules(p_value, n, level)
    refused = 1.0 - n.double() / len(labels)
    if not certified.any():
        raise NotCertified(f"no rule reaches an error rate of {risk} among accepted inputs with confidence "
                         f"1 - {delta} on these {len(labels)} validation inputs: ask for a higher risk or "
                         "delta, or certify on more inputs")
    feasible = certified & (refused <= max_refusal)
    pool = feasible if feasible.any() else certified
    j = int(pool.any(0).nonzero()[0]) if feasible.any() else None
    if j is None:  # max_refusal cannot be met: the certified rule that answers the most
        i, j = divmod(int(torch.where(pool, -refused, -math.inf).argmax()), len(cuts))
    else:
        i = int(pool[:, j].nonzero()[0])
    rule = Rule(quantile, thresholds[i], signal if math.isfinite(cuts[j]) else None, cuts[j])
    kept = int(n[i, j])
    return Calibration(rule, risk, delta, max_refusal, {
        "size": len(labels), "refused": float(refused[i, j]), "errors": int(errors[i, j]),
        "risk": int(errors[i, j]) / kept, "p_value": float(p_value[i, j]), "level": level, "candidates": n.numel(),
        "certified": int(certified.sum()), "max_refusal_met": bool(feasible.any())})


def rule_counts(probs: torch.Tensor, labels: torch.Tensor, quantile: float = 0.5,
                signal: str | None = "mutual_information", thresholds: tuple[float, ...] = THRESHOLDS,
                cuts: tuple[float, ...] = CUTS, density: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, tuple[float, ...]]:
    """For every rule on the grid (threshold i, cut j), how many validation inputs it accepts and how
    many of those it gets wrong (int64 [thresholds, cuts] on the CPU), and the cuts tested (none but
    no gate where ``signal`` is None)."""
    check_probs(probs)
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"expected the labels as a torch.Tensor [N], got a {type(labels).__name__}; "
                        "pass torch.as_tensor(labels)")
    labels = labels.to(probs.device)
    if labels.shape != probs.shape[1:2]:
        raise ValueError(f"expected one label per input ({probs.shape[1]}), got shape {tuple(labels.shape)}")
    if signal is None:
        cuts = (math.inf,)
    if signal == DENSITY and cuts is CUTS:
        raise ValueError("a density gate's cuts are nats of its own scores, not CUTS' bits: pass "
                         "cuts=density_cuts(scores of training inputs)")
    base = abstain(probs, quantile, threshold=0.0)
    score = gate_score(probs, quantile, signal, density) if signal else torch.zeros(len(labels), device=probs.device)
    top, predicted = base.quantile_probs.max(1)
    wrong = predicted != labels
    t = torch.tensor(thresholds, dtype=top.dtype, device=top.device)
    c = torch.tensor(cuts, dtype=score.dtype, device=score.device)
    # accepted[i, j, n]: threshold i and cut j answer input n (the top class reaches the threshold)
    accepted = (top >= t[:, None, None]) & (score <= c[None, :, None])
    return accepted.sum(-1).cpu(), (accepted & wrong).sum(-1).cpu(), cuts


def p_values(n: torch.Tensor, errors: torch.Tensor, risk: float) -> torch.Tensor:
    """Each rule's p-value of "its error rate among accepted inputs exceeds ``risk``", from the
    inputs it accepts (``n``) and gets wrong: P(Binomial(n, risk) <= errors)."""
    return binomial_cdf(errors.flatten(), n.flatten(), risk).view(n.shape)


def certified_rules(p_value: torch.Tensor, n: torch.Tensor, level: float) -> torch.Tensor:
    """bool [thresholds, cuts]: the rules certified by their ``p_value``, each cut's thresholds tested
    from the strictest down at ``level`` (a threshold passes when it and every stricter one pass)."""
    passed = (p_value <= level) & (n > 0)
    return passed.flip(0).cumprod(0).flip(0).bool()


def smallest_risk(probs: torch.Tensor, labels: torch.Tensor, delta: float = 0.05, quantile: float = 0.5,
                  signal: str | None = "mutual_information", thresholds: tuple[float, ...] = THRESHOLDS,
                  cuts: tuple[float, ...] = CUTS, density: torch.Tensor | None = None) -> float | None:
    """The smallest risk ``certify`` certifies on these validation inputs at ``delta`` (its other
    arguments as certify's), rounded up to two significant digits; None where no risk below 1 is.
    Every risk above a certified one is certified too (a rule's p-value falls as the risk rises),
    so a bisection finds it."""
    n, errors, cuts = rule_counts(probs, labels, quantile, signal, thresholds, cuts, density)
    certifies = lambda risk: bool(certified_rules(p_values(n, errors, risk), n, delta / len(cuts)).any())  # noqa: E731
    low, high = 0.0, 1.0 - 1e-9
    if not certifies(high):
        return None
    while high - low > 1e-4 * high:
        middle = (low + high) / 2
        low, high = (low, middle) if certifies(middle) else (middle, high)
    step = 10.0 ** (math.floor(math.log10(high)) - 1)  # two significant digits, rounded up: still certified
    rounded = float(f"{math.ceil(high / step) * step:.2g}")
    return rounded if rounded < 1 and certifies(rounded) else high


def inputs_needed(risk: float, delta: float = 0.05, tests: int = len(CUTS)) -> int:
    """How many validation inputs a rule must accept, none of them wrong, to certify ``risk`` at
    ``delta`` when ``tests`` cuts share it (Bonferroni): the fewest n with (1 - risk)^n <= delta / tests,
    the p-value of zero errors among n."""
    return math.ceil(math.log(delta / tests) / math.log1p(-risk) - 1e-9)
