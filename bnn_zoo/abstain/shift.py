"""An alarm for when the inputs stop looking like the ones a guarantee was certified on.

The certified rule and the conformal sets promise what they promise for inputs drawn like the
validation inputs they were certified on. ``ShiftAlarm`` tests that, online, with conformal test
martingales (Vovk, Nouretdinov & Gammerman 2003; Vovk 2021, "Testing randomness online"): each new
input's score gets a conformal p-value among the scores seen so far (the validation inputs', then
the stream's), ties broken at random. Where the inputs are exchangeable with the validation inputs
these p-values are independent and uniform, so the mixture of power martingales M_n = integral
over e in (0, 1] of prod_i e p_i^(e - 1) is a nonnegative martingale of mean 1, and by Ville's
inequality it ever reaches 2 / alpha with probability at most alpha / 2, however long the stream.

Two run side by side: one whose p-value is the share of scores at least as high (the inputs grow
more uncertain: rotated, blurred, noisy digits), one the share at most as high (they grow more
certain than the certifying inputs were: a network that is sure of noise). The alarm sounds when
either reaches 2 / alpha, so its false-alarm rate over the whole stream is at most alpha.

Its score is the entropy of the mean prediction in bits, rounded to ``DECIMALS`` places, the
reference's and the stream's alike (so rounding keeps them exchangeable). Certification stores the
certifying validation inputs' scores (``reference``) beside each rule.

Usage::

    alarm = ShiftAlarm.of(calibration_entry["alarm"], alpha=0.01)   # or ShiftAlarm(validation_scores)
    alarm.observe(sampled_probs)          # [S, N, C]: the stream's next N inputs, in the order they came
    alarm.alarmed, alarm.alarm_at, alarm.describe()
"""
from __future__ import annotations

import bisect
import math

import torch

from .rule import uncertainty

ALPHA = 0.01  # the false-alarm rate the commands use
DECIMALS = 4  # of a score: 1e-4 bits
SIGNAL = "entropy"
DIRECTIONS = ("higher", "lower")  # the two martingales: the scores run higher, or lower, than the reference's
# The bets e of the mixture, evenly over (0, 1]: the mixture's integral as their mean (a grid this
# fine moves log M by well under 1% where it matters).
BETS = torch.linspace(0.001, 1.0, 1000, dtype=torch.float64)


class ShiftAlarm:
    """Two conformal test martingales over a stream of scores against ``reference`` (the validation
    inputs' scores, the same signal), one per direction; alarms once either reaches 2 / ``alpha``."""

    def __init__(self, reference: torch.Tensor, alpha: float = ALPHA, seed: int = 0, signal: str = SIGNAL):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha is a false-alarm rate in (0, 1), got {alpha}")
        reference = torch.as_tensor(reference, dtype=torch.float64).flatten()
        if len(reference) < 1 or not bool(reference.isfinite().all()):
            raise ValueError("the alarm needs the validation inputs' scores, finite and at least one")
        self.alpha, self.signal, self.seed = alpha, signal, seed
        self.reference = reference.tolist()
        self.bag = sorted(self.reference)  # every score so far, sorted
        self.generator = torch.Generator().manual_seed(seed)
        self.log_bets = torch.zeros(2, len(BETS), dtype=torch.float64)  # log prod_i e p_i^(e - 1), per direction and bet
        self.seen = 0
        self.alarm_at: int | None = None  # the stream's input (1, 2, ...) at which it first alarmed
        self.direction: str | None = None  # which martingale sounded it: the scores ran "higher" or "lower"
        self.peak = 0.0  # the largest log M either reached

    @classmethod
    def of(cls, entry: dict, alpha: float = ALPHA, seed: int = 0) -> "ShiftAlarm":
        """A fresh alarm against a stored ``reference(probs)`` (calibration.json's ``alarm`` entry)."""
        if not isinstance(entry, dict) or entry.get("signal") != SIGNAL or not isinstance(entry.get("scores"), list):
            raise ValueError(f"an alarm reference holds the signal {SIGNAL!r} and a list of scores, got "
                             f"{str(entry)[:80]}")
        return cls(torch.tensor(entry["scores"], dtype=torch.float64), alpha, seed, SIGNAL)

    def observe(self, probs: torch.Tensor) -> "ShiftAlarm":
        """Take the next inputs of the stream by their sampled predictions [S, N, C], in order."""
        return self.update(scores(probs))

    def restarted(self) -> "ShiftAlarm":
        """A fresh alarm on the same reference (the stream's scores left out), for a new stream."""
        return ShiftAlarm(torch.tensor(self.reference, dtype=torch.float64), self.alpha, self.seed + 1, self.signal)

    def p_values(self, score: float) -> tuple[float, float]:
        """The conformal p-values of ``score`` among the bag (itself included), the share at least as
        high and the share at most as high, ties broken by one uniform; then it joins the bag."""
        low, high = bisect.bisect_left(self.bag, score), bisect.bisect_right(self.bag, score)
        ties = high - low + 1  # itself too
        u = float(torch.rand((), generator=self.generator, dtype=torch.float64))
        bisect.insort(self.bag, score)
        n = len(self.bag)
        return ((n - 1 - high) + u * ties) / n, (low + u * ties) / n

    def update(self, scores: torch.Tensor) -> "ShiftAlarm":
        """Take the next scores of the stream, in order."""
        scores = torch.as_tensor(scores, dtype=torch.float64).flatten()
        if not bool(scores.isfinite().all()):
            raise ValueError(f"a score of the stream is {scores[~scores.isfinite()][0].item()}: the alarm needs "
                             "finite scores")
        if not len(scores):
            return self
        p = torch.tensor([self.p_values(score) for score in scores.tolist()], dtype=torch.float64).clamp_min(1e-300)
        # log prod_i e p_i^(e - 1) after each input, per direction and bet: [n, 2, bets]
        steps = (torch.log(BETS) + (BETS - 1) * torch.log(p)[..., None]).cumsum(0) + self.log_bets
        path = torch.logsumexp(steps, 2) - math.log(len(BETS))  # [n, 2]: log M after each input
        over = (path >= math.log(2 / self.alpha)).nonzero()
        if self.alarm_at is None and len(over):
            self.alarm_at, self.direction = self.seen + int(over[0, 0]) + 1, DIRECTIONS[int(over[0, 1])]
        self.log_bets, self.seen = steps[-1], self.seen + len(scores)
        self.peak = max(self.peak, float(path.max()))
        return self

    @property
    def log_martingale(self) -> float:
        """log M_n of the martingale now higher: the log of its bets' mean (the mixture's integral)."""
        return float((torch.logsumexp(self.log_bets, 1) - math.log(len(BETS))).max())

    @property
    def alarmed(self) -> bool:
        return self.alarm_at is not None

    def describe(self) -> str:
        """One line: whether the inputs still look like the validation inputs, and on what evidence."""
        bound = f"false alarms at most {self.alpha:.0%} over the whole stream"
        if self.alarmed:
            return (f"shift alarm: these inputs do not look like the ones the guarantee was certified on (their "
                    f"{self.signal} ran {self.direction} than the certifying inputs': its test martingale reached "
                    f"{math.exp(min(self.peak, 700)):.3g} >= {2 / self.alpha:g} after {self.alarm_at} of {self.seen} "
                    f"inputs; {bound})")
        inputs = "1 input looks" if self.seen == 1 else f"{self.seen} inputs look"
        return (f"no shift alarm: {inputs} like the ones the guarantee was certified on (the test "
                f"martingales of their {self.signal} at most {math.exp(min(self.log_martingale, 700)):.3g}, alarm at "
                f"{2 / self.alpha:g}; {bound})")

    def to_dict(self) -> dict:
        return {"signal": self.signal, "alpha": self.alpha, "inputs": self.seen, "alarm_at": self.alarm_at,
                "direction": self.direction, "martingale": math.exp(min(self.log_martingale, 700)),
                "peak": math.exp(min(self.peak, 700))}


def scores(probs: torch.Tensor) -> torch.Tensor:
    """[N]: each input's alarm score from its sampled predictions [S, N, C]: the entropy of the mean
    prediction in bits, rounded to ``DECIMALS`` places."""
    return torch.round(uncertainty(probs)["entropy"].double().cpu(), decimals=DECIMALS)


def reference(probs: torch.Tensor) -> dict:
    """calibration.json's ``alarm`` entry: the certifying inputs' scores, from their sampled
    predictions [S, N, C]."""
    return {"signal": SIGNAL, "decimals": DECIMALS, "scores": scores(probs).tolist()}
