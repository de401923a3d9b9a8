"""An alarm that sounds on harm, not on handwriting: it watches what the guarantee needs, the refusals
of the certified rule, and says when the inputs are refused more than the certifying inputs were.

The certified rule promises at most ``risk`` errors among the inputs it answers, for inputs drawn like
the validation inputs it was certified on, of which it refused a share r (calibration.json's
``validation.refused``). A stream the rule refuses at about that rate is one it treats as it treated
those inputs, whatever its writers; a stream refused far more often is one the certificate did not
see (letters, noise, a corruption that blurs the digits), where the answers it still gives have no
guarantee. ``ShiftAlarm`` tests, online, whether the stream's refusal rate has risen past r by more
than a ``tolerance`` (Podkopaev & Ramdas 2022, "Tracking the risk of a deployed model and detecting
harmful distribution shifts": a sequential test of a rise in a label-free loss past a tolerance). Its
martingale bets that the next input is refused: M_n = the mean over bets lambda in (0, 1 / (r + tolerance))
of prod_i (1 + lambda (z_i - r - tolerance)), z_i = 1 where the rule refuses input i (Waudby-Smith &
Ramdas 2024, "Estimating means of bounded random variables by betting"). Wherever each input is
refused, given those before it, with probability at most r + tolerance, M is a nonnegative
supermartingale of mean at most 1, and by Ville's inequality it ever reaches 1 / (share * alpha) with
probability at most share * alpha, however long the stream.

That is what it bounds: a false alarm on any stream refused at most ``tolerance`` above the
certifying rate (MNIST's own test digits in any stored-order window, other writers' digits) happens
at most alpha of the time. It does not bound the errors among the answers (no alarm without labels
can); it says when the refusals show that the inputs are no longer ones the guarantee covers.

Three martingales run side by side (``MARTINGALES``), each with its share of alpha, each a bet of the
same kind on a yes-or-no outcome per input: the certified rule refused it; the after-alarm rule (a
stricter rule nested in it, ``bnn_zoo.abstain.after_alarm``) refused it, as inputs that come near
refusal do first under a mild shift; and it repeats an earlier input of the stream exactly (the
input itself the same to the byte, given the inputs; else its mean prediction the same to the bit,
which misses a repeat in one batch, whose rows' predictions may differ in their last bits), whose
null rate is 0: a stream that repeats itself (the same digit over and over, each refused no more
than any) breaks the exchangeability every guarantee assumes. Their rates under the
null: the certified rule's and the after-alarm rule's validation refusals, and none, each plus the
tolerance. The alarm sounds when any reaches its bound, so its false-alarm rate over the whole stream
is at most the shares' sum, alpha. It keeps the last ``REMEMBERED`` inputs' digests to find repeats
(a repeat of an input further back goes unseen), and nothing else of the stream.

Usage::

    alarm = trained.alarm("bayes")       # ShiftAlarm.of(calibration["bayes"]), or ShiftAlarm({"refused": Watched(rule, 0.02)})
    alarm.observe(sampled_probs)         # [S, N, C]: the stream's next N inputs, in the order they came
    alarm.observe(sampled_probs, inputs=x)   # and the inputs themselves [N, ...]: their repeats counted exactly
    alarm.alarmed, alarm.alarm_at, alarm.describe()
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch

from .rule import Rule

ALPHA = 0.01  # the false-alarm rate the commands use
# The martingales, each with its share of alpha: the rule refuses more than it did, the stricter
# after-alarm rule does, or the inputs repeat earlier ones.
MARTINGALES = {"refused": 0.45, "held": 0.45, "repeated": 0.1}
DIRECTIONS = tuple(MARTINGALES)
WATCHED = DIRECTIONS[:2]  # the martingales on a rule's refusals
# How far above its null rate each outcome's rate may run and the alarm stay silent: a stream of the
# certifying kind of inputs from other writers (MNIST's test set, 1,000 digits at a time in its
# stored order, was refused 0.8% to 3.9% by the shipped lenet of 2026-11, whose validation digits it
# refused 2.5%, its after-alarm rule 9.8%)
TOLERANCE = 0.05
LAMBDAS = 200  # bets of each mixture, evenly over (0, the largest that keeps every factor >= 0)
CHUNK = 512  # inputs whose bets are held at once ([CHUNK, 3, bets] numbers)
REMEMBERED = 100_000  # the last inputs whose digests the repeat martingale compares a new one with


@dataclass(frozen=True)
class Watched:
    """A rule whose refusals the alarm watches, and the share of the certifying inputs it refused."""

    rule: Rule
    rate: float

    @classmethod
    def of(cls, entry: dict | None) -> "Watched | None":
        """From a calibration entry holding ``rule`` and ``validation.refused`` (None: no such rule)."""
        if not isinstance(entry, dict) or "rule" not in entry:
            return None
        return cls(Rule.from_dict(entry["rule"]), float(entry["validation"]["refused"]))


class ShiftAlarm:
    """The martingales of ``MARTINGALES`` over a stream: ``watched`` rules' refusals ("refused": the
    certified rule's; "held": the after-alarm rule's, where there is one) against their rates on the
    certifying inputs, and the inputs repeating earlier ones against none, each plus ``tolerance``;
    alarms once any reaches its bound."""

    def __init__(self, watched: dict[str, Watched], alpha: float = ALPHA, tolerance: float = TOLERANCE):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha is a false-alarm rate in (0, 1), got {alpha}")
        if not 0 < tolerance < 0.5:
            raise ValueError(f"the tolerance is a rise in a rate, in (0, 0.5), got {tolerance}")
        if set(watched) - set(WATCHED) or "refused" not in watched:
            raise ValueError(f"the alarm watches the certified rule (refused) and may watch the after-alarm rule "
                             f"(held), got {sorted(watched)}")
        self.alpha, self.tolerance, self.watched = alpha, tolerance, dict(watched)
        # each outcome's null rate plus the tolerance: what each martingale bets the stream exceeds
        rates = [self.watched[name].rate if name in self.watched else math.inf for name in WATCHED] + [0.0]
        self.levels = torch.tensor([min(rate + tolerance, 1.0) for rate in rates], dtype=torch.float64)
        # the largest bet keeping every factor 1 + bet (z - level) >= 0 is 1 / level
        self.bets = torch.arange(1, LAMBDAS + 1, dtype=torch.float64) / LAMBDAS / self.levels[:, None] * (1 - 1e-3)
        self.log_bets = torch.zeros(len(MARTINGALES), LAMBDAS, dtype=torch.float64)
        shares = torch.tensor(list(MARTINGALES.values()), dtype=torch.float64)
        self.log_bounds = -torch.log(shares * alpha)  # each martingale sounds at 1 / (its share * alpha)
        self.seen = 0
        self.counted = torch.zeros(len(MARTINGALES), dtype=torch.long)  # each outcome's inputs so far
        self.digests: set[int] = set()
        self.order: deque[int] = deque()  # the remembered digests, oldest first
        self.alarm_at: int | None = None  # the stream's input (1, 2, ...) at which it first alarmed
        self.direction: str | None = None  # which martingale sounded it (MARTINGALES)
        self.counted_at_alarm: list[int] = []  # each outcome's inputs up to that one
        self.peaks = torch.zeros(len(MARTINGALES), dtype=torch.float64)  # the largest log M each reached

    @classmethod
    def of(cls, entry: dict, alpha: float = ALPHA) -> "ShiftAlarm":
        """A fresh alarm for a posterior's calibration entry (calibration.json's ``bayes``, say): its
        rule and after-alarm rule, at their validation refusal rates."""
        watched = {"refused": Watched.of(entry), "held": Watched.of(entry.get("after_alarm"))}
        return cls({name: w for name, w in watched.items() if w is not None}, alpha)

    def observe(self, probs: torch.Tensor, density: torch.Tensor | None = None,
                inputs: torch.Tensor | None = None) -> "ShiftAlarm":
        """Take the next inputs of the stream by their sampled predictions [S, N, C], in order
        (``density``: their feature density scores, where a watched rule gates on them; ``inputs``:
        the inputs themselves [N, ...], whose exact repeats the alarm counts; without them it counts
        repeats of their mean predictions, which miss an input repeated within one batch)."""
        if inputs is not None and len(inputs) != probs.shape[1]:
            raise ValueError(f"{len(inputs)} inputs for the predictions of {probs.shape[1]}")
        refused = [self.watched[name].rule(probs, density).refused.cpu() if name in self.watched
                   else torch.zeros(probs.shape[1], dtype=torch.bool) for name in WATCHED]
        return self.update(torch.stack([*refused, self._repeats(probs.mean(0) if inputs is None else inputs)], 1))

    def restarted(self) -> "ShiftAlarm":
        """A fresh alarm on the same rules (the stream left out), for a new stream."""
        return ShiftAlarm(self.watched, self.alpha, self.tolerance)

    def _repeats(self, rows: torch.Tensor) -> torch.Tensor:
        """[N] bool: each row of ``rows`` [N, ...] (the inputs, or their mean predictions) is, to the
        byte, one of the remembered inputs' (or an earlier one of these); then it is remembered, the
        oldest forgotten past ``REMEMBERED``."""
        found = []
        for digest in digests(rows).tolist():
            found.append(digest in self.digests)
            if not found[-1]:
                self.digests.add(digest)
                self.order.append(digest)
                if len(self.order) > REMEMBERED:
                    self.digests.discard(self.order.popleft())
        return torch.tensor(found, dtype=torch.bool)

    def update(self, outcomes: torch.Tensor) -> "ShiftAlarm":
        """Take the next inputs of the stream, in order, by their outcomes [N, 3] bool: refused by the
        certified rule, by the after-alarm rule, a repeat of an earlier input."""
        outcomes = torch.as_tensor(outcomes, dtype=torch.bool).reshape(-1, len(MARTINGALES))
        for start in range(0, len(outcomes), CHUNK):
            self._bet(outcomes[start:start + CHUNK].double())
        return self

    def _bet(self, z: torch.Tensor) -> None:
        """The martingales after the next inputs' outcomes ``z`` [n, martingales] (1 or 0)."""
        excess = z - self.levels  # no bet where there is no rule to watch: its level is 1, its outcome 0
        excess[:, self.levels >= 1] = 0
        steps = torch.log1p(self.bets * excess[..., None]).cumsum(0) + self.log_bets  # [n, martingales, bets]
        path = torch.logsumexp(steps, 2) - math.log(LAMBDAS)  # [n, martingales]: log M after each input
        over = (path >= self.log_bounds).nonzero()
        if self.alarm_at is None and len(over):
            at = int(over[0, 0])
            self.alarm_at, self.direction = self.seen + at + 1, DIRECTIONS[int(over[0, 1])]
            self.counted_at_alarm = (self.counted + z[:at + 1].sum(0).long()).tolist()
        self.counted += z.sum(0).long()
        self.log_bets, self.seen = steps[-1], self.seen + len(z)
        self.peaks = torch.maximum(self.peaks, path.max(0).values)

    @property
    def log_martingales(self) -> torch.Tensor:
        """log M_n of each martingale now: the log of its bets' mean (the mixture's integral)."""
        return torch.logsumexp(self.log_bets, 1) - math.log(LAMBDAS)

    @property
    def alarmed(self) -> bool:
        return self.alarm_at is not None

    def describe(self) -> str:
        """One line in plain words: whether the inputs are refused more than the certifying inputs were,
        with the figures that say so (``to_dict`` holds them all)."""
        rate, bound = self.watched["refused"].rate, f"a stream within it sounds the alarm at most {self.alpha:.0%} of the time"
        if self.alarmed:
            at, name = self.alarm_at, self.direction
            k = self.counted_at_alarm[DIRECTIONS.index(name)]
            if name == "repeated":
                found = (f"{k} of them repeat an earlier one exactly, where inputs drawn like the certifying ones "
                         f"do not, more than the tolerance of {self.tolerance:.0%}")
            else:
                rule = "the certified rule" if name == "refused" else "the stricter after-alarm rule"
                found = (f"{rule} refused {k} of them ({k / at:.0%}) where it refused {self.watched[name].rate:.1%} of "
                         f"the inputs it was certified on, more than the tolerance of {self.tolerance:.0%} above that")
            return (f"shift alarm: by input {at} of {self.seen}, these inputs are no longer like the ones the guarantee "
                    f"was certified on: {found} ({bound})")
        k, n = int(self.counted[0]), self.seen
        share = "" if not n else f" ({k / n:.0%})"
        verdict = ("within the tolerance" if not n or k / n <= rate + self.tolerance else
                   "too few inputs yet to tell that from chance")
        return (f"no shift alarm: the certified rule refused {k} of {n} input{'s' * (n != 1)}{share}, where it "
                f"refused {rate:.1%} of the inputs it was certified on, plus a tolerance of {self.tolerance:.0%}: "
                f"{verdict} ({bound})")

    def to_dict(self) -> dict:
        """The alarm's state and figures: each martingale now, the largest it reached and its bound,
        each outcome's inputs so far, and the watched rules' rates on the certifying inputs."""
        figures = lambda logs: {name: math.exp(min(float(v), 700)) for name, v in zip(MARTINGALES, logs)}  # noqa: E731
        return {"signal": "refusals", "alpha": self.alpha, "tolerance": self.tolerance, "inputs": self.seen,
                "alarm_at": self.alarm_at, "direction": self.direction,
                "counted": {name: int(k) for name, k in zip(MARTINGALES, self.counted)},
                "certified_rates": {name: w.rate for name, w in self.watched.items()},
                "martingales": figures(self.log_martingales), "peaks": figures(self.peaks),
                "bounds": figures(self.log_bounds)}


def _mixed(x: torch.Tensor) -> torch.Tensor:
    """64-bit integers scrambled bit by bit, after SplitMix64's finalizer (torch's int64 is signed: its shifts
    carry the sign, its products wrap)."""
    x = (x ^ (x >> 30)) * -4658895280553007687  # 0xbf58476d1ce4e5b9 as a signed 64-bit integer
    x = (x ^ (x >> 27)) * -7723592293110705685  # 0x94d049bb133111eb
    return x ^ (x >> 31)


def digests(rows: torch.Tensor) -> torch.Tensor:
    """[N] int64: a digest of each row of ``rows`` [N, ...] (inputs, or mean predictions), of any
    dtype, the same exactly where the rows' bytes are the same (and, by chance, for about one pair in
    2^64 of others)."""
    flat = rows.detach().cpu().contiguous().reshape(len(rows), math.prod(rows.shape[1:]))
    raw = flat.view(torch.uint8)  # each row's bytes
    raw = torch.cat([raw, raw.new_zeros(len(rows), -raw.shape[1] % 8)], 1)  # whole 64-bit words
    bits = raw.view(torch.int64)
    places = torch.arange(1, bits.shape[1] + 1, dtype=torch.int64) * -7046029254386353131  # 0x9e3779b97f4a7c15
    return _mixed(_mixed(bits + places).sum(1))
