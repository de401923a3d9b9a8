"""An alarm for when the inputs stop looking like the ones a guarantee was certified on.

The certified rule and the conformal sets promise what they promise for inputs drawn like the
validation inputs they were certified on. ``ShiftAlarm`` tests that, online, with conformal test
martingales (Vovk, Nouretdinov & Gammerman 2003; Vovk 2021, "Testing randomness online"): each new
input gets conformal p-values among the inputs seen so far (the validation inputs', then the
stream's), ties broken at random. Where the inputs are exchangeable with the validation inputs
these p-values are independent and uniform, of mean 1/2. Each martingale bets that they average
less than 1/2 - ``TOLERANCE``: M_n = the mean over bets lambda in (0, 1 / (1/2 + tolerance)) of
prod_i (1 + lambda (1/2 - tolerance - p_i)) (Waudby-Smith & Ramdas 2024, "Estimating means of bounded
random variables by betting"). It is a nonnegative supermartingale of mean at most 1 wherever the
p-values average at least 1/2 - tolerance given the inputs before them: the inputs exchangeable
with the validation inputs, and also a stream a little unlike them, ranked on average at most the
tolerance off (MNIST's own test digits in their stored order come writer group by writer group,
the first half a little more uncertain than the validation digits, the second a little surer: a
bet on any departure from uniform p-values sounded on them). By Ville's inequality it
ever reaches 1 / (share * alpha) with probability at most share * alpha, however long the stream.

Three run side by side (``MARTINGALES``), each with its share of alpha: one whose p-value is the
share of scores at least as high (the inputs grow more uncertain: rotated, blurred, noisy digits),
one the share at most as high (they grow surer than the certifying inputs were: a network that is
sure of noise), and one the share of inputs whose score is at least as common as this one's
among all so far (the stream repeats itself: the same input over and over, whose score the two
others rank as ordinary). The alarm sounds when any reaches its bound, so its false-alarm rate
over the whole stream is at most the shares' sum, alpha.

Its score is the entropy of the mean prediction in bits, rounded to ``DECIMALS`` places, the
reference's and the stream's alike (so rounding keeps them exchangeable). Certification stores the
certifying validation inputs' scores (``reference``) beside each rule. The alarm keeps counts per
rounded score, not the scores: its memory does not grow with the stream's length.

Usage::

    alarm = ShiftAlarm.of(calibration_entry["alarm"], alpha=0.01)   # or ShiftAlarm(validation_scores)
    alarm.observe(sampled_probs)          # [S, N, C]: the stream's next N inputs, in the order they came
    alarm.alarmed, alarm.alarm_at, alarm.describe()
"""
from __future__ import annotations

import math

import torch

from ..core.errors import show
from .rule import uncertainty

ALPHA = 0.01  # the false-alarm rate the commands use
DECIMALS = 4  # of a score: 1e-4 bits
SIGNAL = "entropy"
MAX_BITS = 32  # the largest score taken: the entropy of 2^32 equally likely classes
# The martingales, each with its share of alpha: the scores run higher, or lower, than the
# reference's, or one score keeps coming back.
MARTINGALES = {"higher": 0.45, "lower": 0.45, "repeated": 0.1}
DIRECTIONS = tuple(MARTINGALES)
# What each martingale found, in plain words (the alarm's line)
FOUND = {"higher": "they are more uncertain than those were",
         "lower": "they are surer than those were, as a network can be of what it never saw",
         "repeated": "they repeat one another far more than inputs drawn like those would"}
# How far below 1/2 the p-values may average before the alarm bets against them: the drift a stream of
# the certifying kind of inputs may show and stay silent (MNIST's test set in its stored order)
TOLERANCE = 0.05
LAMBDAS = 200  # bets of the mixture, evenly over (0, 1 / (1/2 + tolerance)), the largest that stays >= 0
CHUNK = 512  # inputs whose bets are held at once ([CHUNK, 3, bets] numbers)


class _Counts:
    """Counts at whole-number keys 0, 1, ... (a Fenwick tree that doubles as keys grow): add and
    prefix sums in O(log size)."""

    def __init__(self, size: int = 1024):
        self.tree = [0] * (1 << max(size - 1, 1).bit_length()) + [0]  # 1-based; a power of two of nodes
        self.total = 0

    def add(self, key: int, count: int) -> None:
        i = key + 1
        while i >= len(self.tree):  # double: the new top node covers every key so far
            size = len(self.tree) - 1
            self.tree += [0] * size
            self.tree[2 * size] = self.total
        self.total += count
        while i < len(self.tree):
            self.tree[i] += count
            i += i & -i

    def below(self, key: int) -> int:
        """The count at keys < ``key``."""
        i, found = min(key, len(self.tree) - 1), 0
        while i > 0:
            found += self.tree[i]
            i -= i & -i
        return found


class ShiftAlarm:
    """Three conformal test martingales over a stream of scores against ``reference`` (the
    validation inputs' scores, the same signal; ``MARTINGALES``); alarms once any reaches its bound."""

    def __init__(self, reference: torch.Tensor, alpha: float = ALPHA, seed: int = 0, signal: str = SIGNAL,
                 tolerance: float = TOLERANCE):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha is a false-alarm rate in (0, 1), got {alpha}")
        if not 0 <= tolerance < 0.5:
            raise ValueError(f"the tolerance is how far below 1/2 the p-values may average, in [0, 0.5), got {tolerance}")
        reference = torch.as_tensor(reference, dtype=torch.float64).flatten()
        if len(reference) < 1:
            raise ValueError("the alarm needs the validation inputs' scores, finite and at least one")
        self.alpha, self.signal, self.seed, self.tolerance = alpha, signal, seed, tolerance
        self.level = 0.5 - tolerance  # the least mean of the p-values the martingales do not bet against
        self.bets = torch.arange(1, LAMBDAS + 1, dtype=torch.float64) / LAMBDAS / (1 - self.level) * (1 - 1e-3)
        self.reference = reference = _checked(reference, "the reference")
        self.counts = _Counts(_key(reference.max()) + 1)  # the inputs so far, per rounded score
        self.commonness = _Counts()  # at key m: the inputs so far whose score came m times
        for key, times in zip(*[t.tolist() for t in torch.unique(_keys(reference), return_counts=True)]):
            self.counts.add(key, times)
            self.commonness.add(times, times)
        self.generator = torch.Generator().manual_seed(seed)
        self.log_bets = torch.zeros(len(MARTINGALES), LAMBDAS, dtype=torch.float64)  # log prod_i (1 + bet (level - p_i))
        shares = torch.tensor(list(MARTINGALES.values()), dtype=torch.float64)
        self.log_bounds = -torch.log(shares * alpha)  # each martingale sounds at 1 / (its share * alpha)
        self.seen = 0
        self.alarm_at: int | None = None  # the stream's input (1, 2, ...) at which it first alarmed
        self.direction: str | None = None  # which martingale sounded it (MARTINGALES)
        self.peaks = torch.zeros(len(MARTINGALES), dtype=torch.float64)  # the largest log M each reached

    @classmethod
    def of(cls, entry: dict, alpha: float = ALPHA, seed: int = 0, classes: int | None = None) -> "ShiftAlarm":
        """A fresh alarm against a stored ``reference(probs)`` (calibration.json's ``alarm`` entry),
        each score checked: a number of bits from 0 to log2(``classes``)."""
        return cls(torch.tensor(checked_reference(entry, classes), dtype=torch.float64), alpha, seed, SIGNAL)

    def observe(self, probs: torch.Tensor) -> "ShiftAlarm":
        """Take the next inputs of the stream by their sampled predictions [S, N, C], in order."""
        return self.update(scores(probs))

    def restarted(self) -> "ShiftAlarm":
        """A fresh alarm on the same reference (the stream's scores left out), for a new stream."""
        return ShiftAlarm(self.reference, self.alpha, self.seed + 1, self.signal, self.tolerance)

    def p_values(self, score: float, u: float) -> tuple[float, float, float]:
        """The conformal p-values of ``score`` among the inputs so far (itself included), ties
        broken by the uniform ``u``: the share of scores at least as high, at most as high, and of
        inputs whose score is at least as common; then it joins them."""
        key = _key(score)
        low, high = self.counts.below(key), self.counts.below(key + 1)
        ties = high - low + 1  # itself too
        self.counts.add(key, 1)
        n = self.counts.total
        times = ties  # how often its score has come, itself included
        if times > 1:
            self.commonness.add(times - 1, -(times - 1))
        self.commonness.add(times, times)
        as_common = self.commonness.below(times + 1) - self.commonness.below(times)  # inputs whose score came as often
        more_common = n - self.commonness.below(times + 1)
        return (((n - 1 - high) + u * ties) / n, (low + u * ties) / n, (more_common + u * as_common) / n)

    def update(self, scores: torch.Tensor) -> "ShiftAlarm":
        """Take the next scores of the stream, in order."""
        scores = _checked(torch.as_tensor(scores, dtype=torch.float64).flatten(), "the stream")
        for start in range(0, len(scores), CHUNK):
            chunk = scores[start:start + CHUNK]
            u = torch.rand(len(chunk), generator=self.generator, dtype=torch.float64).tolist()
            p = torch.tensor([self.p_values(s, v) for s, v in zip(chunk.tolist(), u)], dtype=torch.float64)
            self._bet(p)
        return self

    def _bet(self, p: torch.Tensor) -> None:
        """The martingales after the next inputs' p-values ``p`` [n, martingales]."""
        terms = torch.log1p(self.bets * (self.level - p[..., None]))  # [n, martingales, bets]
        steps = terms.cumsum(0) + self.log_bets
        path = torch.logsumexp(steps, 2) - math.log(LAMBDAS)  # [n, martingales]: log M after each input
        over = (path >= self.log_bounds).nonzero()
        if self.alarm_at is None and len(over):
            self.alarm_at, self.direction = self.seen + int(over[0, 0]) + 1, DIRECTIONS[int(over[0, 1])]
        self.log_bets, self.seen = steps[-1], self.seen + len(p)
        self.peaks = torch.maximum(self.peaks, path.max(0).values)

    @property
    def log_martingales(self) -> torch.Tensor:
        """log M_n of each martingale now: the log of its bets' mean (the mixture's integral)."""
        return torch.logsumexp(self.log_bets, 1) - math.log(LAMBDAS)

    @property
    def alarmed(self) -> bool:
        return self.alarm_at is not None

    def describe(self) -> str:
        """One line in plain words: whether the inputs still look like the validation inputs, and
        since which input they do not (the figures are ``to_dict``'s)."""
        bound = f"a stream like those sounds it at most {self.alpha:.0%} of the time"
        if self.alarmed:
            return (f"shift alarm: by input {self.alarm_at} of {self.seen}, these inputs no longer look like the ones "
                    f"the guarantee was certified on: {FOUND[self.direction]} ({bound})")
        inputs = "1 input looks" if self.seen == 1 else f"{self.seen} inputs look"
        return f"no shift alarm: {inputs} like the ones the guarantee was certified on ({bound})"

    def to_dict(self) -> dict:
        """The alarm's state and figures: each martingale now, the largest it reached and its bound."""
        figures = lambda logs: {name: math.exp(min(float(v), 700)) for name, v in zip(MARTINGALES, logs)}  # noqa: E731
        return {"signal": self.signal, "alpha": self.alpha, "tolerance": self.tolerance, "inputs": self.seen,
                "alarm_at": self.alarm_at, "direction": self.direction, "martingales": figures(self.log_martingales),
                "peaks": figures(self.peaks), "bounds": figures(self.log_bounds)}


def _key(score: float) -> int:
    """A rounded score's place among the counts: its whole number of 1e-4 bits."""
    return int(round(float(score) * 10 ** DECIMALS))


def _keys(scores: torch.Tensor) -> torch.Tensor:
    return torch.round(scores * 10 ** DECIMALS).long()


def _checked(scores: torch.Tensor, what: str) -> torch.Tensor:
    """``scores`` rounded to DECIMALS places, or a ValueError naming the first that is no entropy."""
    bad = ~(scores.isfinite() & (scores >= 0) & (scores <= MAX_BITS))
    if bool(bad.any()):
        raise ValueError(f"a score of {what} is {scores[bad][0].item()}: the alarm's scores are entropies in bits, "
                         f"finite, from 0 to {MAX_BITS}")
    return torch.round(scores, decimals=DECIMALS)


def checked_reference(entry, classes: int | None = None) -> list[float]:
    """The scores of a stored alarm reference (calibration.json's ``alarm`` entry), or a ValueError
    that names what is wrong: not a mapping of the signal and a list of scores, or a score that is
    not a number of bits from 0 to log2(``classes``) (to MAX_BITS where ``classes`` is None)."""
    if not isinstance(entry, dict) or entry.get("signal") != SIGNAL or not isinstance(entry.get("scores"), list):
        raise ValueError(f"an alarm reference holds the signal {SIGNAL!r} and a list of scores, got {show(entry)}")
    if entry.get("decimals", DECIMALS) != DECIMALS or not entry["scores"]:
        raise ValueError(f"an alarm reference holds at least one score rounded to {DECIMALS} decimals, got "
                         f"{len(entry['scores'])} scores at {show(entry.get('decimals'))} decimals")
    most = MAX_BITS if classes is None else math.log2(classes) + 0.5 * 10 ** -DECIMALS
    for i, score in enumerate(entry["scores"]):
        # compared as Python numbers first: a 400-digit integer is out of range, not an OverflowError
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= most:
            bound = f"log2({classes}) = {math.log2(classes):.4f}" if classes is not None else MAX_BITS
            raise ValueError(f"its alarm reference's score {i + 1} is {show(score)}: an entropy is a number of bits "
                             f"from 0 to {bound}")
    return [float(score) for score in entry["scores"]]


def scores(probs: torch.Tensor) -> torch.Tensor:
    """[N]: each input's alarm score from its sampled predictions [S, N, C]: the entropy of the mean
    prediction in bits, rounded to ``DECIMALS`` places."""
    return torch.round(uncertainty(probs)["entropy"].double().cpu(), decimals=DECIMALS)


def reference(probs: torch.Tensor) -> dict:
    """calibration.json's ``alarm`` entry: the certifying inputs' scores, from their sampled
    predictions [S, N, C]."""
    return {"signal": SIGNAL, "decimals": DECIMALS, "scores": scores(probs).tolist()}
