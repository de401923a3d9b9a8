"""An alarm for when the inputs stop looking like the ones a guarantee was certified on.

The certified rule and the conformal sets promise what they promise for inputs drawn like the
validation inputs they were certified on. ``ShiftAlarm`` tests that, online, with a conformal test
martingale (Vovk, Nouretdinov & Gammerman 2003; Vovk 2021, "Testing randomness online"): each new
input's score (an uncertainty: higher is stranger) gets a conformal p-value, the share of the
scores seen so far (the validation inputs', then the stream's) at least as high, ties broken at
random. Where the inputs are exchangeable with the validation inputs these p-values are independent
and uniform, so the mixture of power martingales M_n = integral over e in (0, 1] of
prod_i e p_i^(e - 1) is a nonnegative martingale of mean 1, and by Ville's inequality it ever
reaches 1 / alpha with probability at most alpha, however long the stream. The alarm sounds when it
does: its false-alarm rate over the whole stream is at most alpha.

Usage::

    alarm = ShiftAlarm(validation_scores, alpha=0.01)
    alarm.update(uncertainty(probs)["entropy"])   # the stream's scores, in the order they came
    alarm.alarmed, alarm.alarm_at, alarm.describe()
"""
from __future__ import annotations

import bisect
import math

import torch

# The bets e of the mixture, evenly over (0, 1]: the mixture's integral as their mean (a grid this
# fine moves log M by well under 1% where it matters).
BETS = torch.linspace(0.001, 1.0, 1000, dtype=torch.float64)


class ShiftAlarm:
    """A conformal test martingale over a stream of scores against ``reference`` (the validation
    inputs' scores, the same signal); alarms once it reaches 1 / ``alpha``."""

    def __init__(self, reference: torch.Tensor, alpha: float = 0.01, seed: int = 0, signal: str = "entropy"):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha is a false-alarm rate in (0, 1), got {alpha}")
        reference = torch.as_tensor(reference, dtype=torch.float64).flatten()
        if len(reference) < 1 or not bool(reference.isfinite().all()):
            raise ValueError("the alarm needs the validation inputs' scores, finite and at least one")
        self.alpha, self.signal = alpha, signal
        self.bag = sorted(reference.tolist())  # every score so far, sorted
        self.generator = torch.Generator().manual_seed(seed)
        self.log_bets = torch.zeros_like(BETS)  # log prod_i e p_i^(e - 1), for each bet e
        self.seen = 0
        self.alarm_at: int | None = None  # the stream's input (1, 2, ...) at which it first alarmed
        self.peak = 0.0  # the largest log M reached

    def p_value(self, score: float) -> float:
        """The conformal p-value of ``score`` among the bag (itself included), then it joins the bag."""
        above = len(self.bag) - bisect.bisect_right(self.bag, score)
        ties = bisect.bisect_right(self.bag, score) - bisect.bisect_left(self.bag, score) + 1  # itself too
        u = float(torch.rand((), generator=self.generator, dtype=torch.float64))
        bisect.insort(self.bag, score)
        return (above + u * ties) / len(self.bag)

    def update(self, scores: torch.Tensor) -> "ShiftAlarm":
        """Take the next scores of the stream, in order."""
        for score in torch.as_tensor(scores, dtype=torch.float64).flatten().tolist():
            if not math.isfinite(score):
                raise ValueError(f"a score of the stream is {score}: the alarm needs finite scores")
            p = max(self.p_value(score), 1e-300)
            self.log_bets += torch.log(BETS) + (BETS - 1) * math.log(p)
            self.seen += 1
            self.peak = max(self.peak, self.log_martingale)
            if self.alarm_at is None and self.log_martingale >= math.log(1 / self.alpha):
                self.alarm_at = self.seen
        return self

    @property
    def log_martingale(self) -> float:
        """log M_n: the log of the bets' mean (the mixture's integral over e)."""
        return float(torch.logsumexp(self.log_bets, 0) - math.log(len(BETS)))

    @property
    def alarmed(self) -> bool:
        return self.alarm_at is not None

    def describe(self) -> str:
        """One line: whether the inputs still look like the validation inputs, and on what evidence."""
        bound = f"false alarms at most {self.alpha:.0%} over the whole stream"
        if self.alarmed:
            return (f"shift alarm: these inputs do not look like the ones the guarantee was certified on (the test "
                    f"martingale of their {self.signal} reached {math.exp(min(self.peak, 700)):.3g} >= "
                    f"{1 / self.alpha:g} after {self.alarm_at} of {self.seen} inputs; {bound})")
        return (f"no shift alarm: {self.seen} inputs look like the ones the guarantee was certified on (the test "
                f"martingale of their {self.signal} at {math.exp(min(self.log_martingale, 700)):.3g}, alarm at "
                f"{1 / self.alpha:g}; {bound})")

    def to_dict(self) -> dict:
        return {"signal": self.signal, "alpha": self.alpha, "inputs": self.seen, "alarm_at": self.alarm_at,
                "martingale": math.exp(min(self.log_martingale, 700)), "peak": math.exp(min(self.peak, 700))}
