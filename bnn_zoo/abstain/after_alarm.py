"""Answers that act on the shift alarm: once it has sounded in a stream, every input from the one
that sounded it on is held to a stricter rule, the after-alarm rule.

The after-alarm rule is certified as the rule is (``bnn_zoo.abstain.certify``: Learn then Test, on
the same validation inputs, at the same risk and delta, a family of its own) as a tightening of the
certified rule: its gate and cut kept, its class read at a low quantile of the posterior samples
against thresholds no lower, so each class it accepts the rule accepts and an input that passes it
passes both; the strictest certified within a refusal budget on validation. On inputs
like the certifying ones it is a certified rule like the other; under a shift no rule keeps a
guarantee without labels, but it answers only inputs as sure as those the certifying inputs were
surest of. ``after_alarm_rule`` is the one place that chooses it; ``Stream`` answers a stream with
the rule, the alarm and the after-alarm rule.

Usage::

    after = after_alarm_rule(val_probs, val_labels, certified.rule, risk=0.01, delta=0.05)
    stream = Stream(certified.rule, ShiftAlarm.of(entry), after.rule)   # entry: calibration.json's "bayes", say
    answered = stream.decide(probs, inputs=x)   # [S, N, C], the next inputs [N, ...] in the order they came
    answered.decision.refused, answered.after_alarm, stream.describe()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..core.errors import show
from .certify import THRESHOLDS, Calibration, NotCertified, certified_rules, check_settings, p_values, rule_counts
from .rule import Decision, Rule
from .shift import ShiftAlarm

REFUSAL = 0.075  # the after-alarm rule's refusal budget on validation (abstention.after_alarm_refusal)
QUANTILE = 0.02  # the quantile of the posterior samples it reads (abstention.after_alarm_quantile)
AFTER_ALARM_RULE = "after_alarm_rule"  # what refused an input the rule alone answers (an answer's refused_by)


def after_alarm_rule(probs: torch.Tensor, labels: torch.Tensor, rule: Rule, risk: float, delta: float,
                     refusal: float = REFUSAL, quantile: float = QUANTILE,
                     density: torch.Tensor | None = None) -> Calibration:
    """The after-alarm rule for the certified ``rule`` on its validation inputs (sampled
    probabilities [S, N, C], labels [N]; ``density``: their feature density scores, for a density
    gate): the rule's gate as it is, its class read at the ``quantile`` of the samples (no higher
    than the rule's) against the thresholds of the grid no lower than the rule's, each certified by
    Learn then Test at ``risk`` and ``delta`` (a family of its own: the strictest first, as
    ``certify`` tests a cut's thresholds); the strictest certified one that refuses at most
    ``refusal`` of validation, else the least strict certified one. NotCertified where none is."""
    check_settings(risk, delta, refusal, quantile, rule.signal)
    quantile = min(quantile, rule.quantile)
    thresholds = tuple(t for t in THRESHOLDS if t >= rule.threshold) or (rule.threshold,)
    n, errors, _ = rule_counts(probs, labels, quantile, rule.signal, thresholds, (rule.cut,), density)
    p_value = p_values(n, errors, risk)[:, 0]
    certified = certified_rules(p_value[:, None], n, delta)[:, 0]
    if not certified.any():
        raise NotCertified(f"no rule certified at an error rate of {risk} among accepted inputs on these "
                           f"{len(labels)} validation inputs answers only what the certified rule answers")
    refused = 1.0 - n[:, 0].double() / len(labels)
    within = certified & (refused <= refusal)
    i = int(within.nonzero()[-1]) if within.any() else int(certified.nonzero()[0])
    return Calibration(Rule(quantile, thresholds[i], rule.signal, rule.cut), risk, delta, refusal, {
        "size": len(labels), "refused": float(refused[i]), "errors": int(errors[i, 0]),
        "risk": int(errors[i, 0]) / max(int(n[i, 0]), 1), "p_value": float(p_value[i]), "level": delta,
        "candidates": len(thresholds), "certified": int(certified.sum()), "max_refusal_met": bool(within.any())})


def check_after_alarm(entry: dict) -> None:
    """A posterior's calibration.json entry as bnn-zoo writes it beside its certified rule (its rules
    read as rules): no ``after_alarm``, or one that says why none is certified, or one whose rule
    tightens the certified one as ``after_alarm_rule`` chooses it (its gate and cut kept, its
    quantile no higher, its threshold no lower: it answers no input the rule refuses); else a
    ValueError that says what is wrong."""
    after = entry.get("after_alarm", {"error": ""})
    if "rule" not in after:
        if not isinstance(after.get("error"), str):
            raise ValueError(f"its after-alarm entry holds neither a rule nor why none is certified ({show(after)})")
        return
    if "rule" not in entry:
        raise ValueError("it holds an after-alarm rule but no certified rule for it to tighten")
    rule, strict = Rule.from_dict(entry["rule"]), Rule.from_dict(after["rule"])
    looser = [what for what, loose in (("a lower threshold", strict.threshold < rule.threshold),
                                       ("a higher quantile", strict.quantile > rule.quantile),
                                       ("another gate", strict.signal != rule.signal),
                                       ("another cut", strict.cut != rule.cut)) if loose]
    if looser:
        raise ValueError(f"its after-alarm rule ({strict.in_words()}) does not tighten its rule ({rule.in_words()}): "
                         f"it has {' and '.join(looser)}")


@dataclass
class StreamDecision:
    """What a stream answered for its next inputs."""

    decision: Decision  # as answered: the rule's before the alarm, from it on the after-alarm rule's where it acts
    ordinary: Decision  # the rule's alone, for every input
    after_alarm: torch.Tensor  # [N] bool: the input came at or after the one that sounded the alarm
    first: int  # the stream's number (1, 2, ...) of the first of these inputs

    @property
    def refused_after_alarm(self) -> torch.Tensor:
        """[N] bool: refused by the after-alarm rule where the rule alone answers."""
        return self.decision.refused & ~self.ordinary.refused

    def describe(self, i: int) -> dict:
        """Input ``i``'s answer as plain values (``Decision.describe``) and whether it came after the
        alarm; ``refused_by``: the rule's signals where the rule alone refuses it (the after-alarm
        rule, nested in it, refuses it too), ``after_alarm_rule`` where only that rule does."""
        found = self.decision.describe(i)
        if bool(self.ordinary.refused[i]):
            found["refused_by"] = self.ordinary.reasons(i)
        elif bool(self.decision.refused[i]):
            found["refused_by"] = [AFTER_ALARM_RULE]
        return {**found, "after_alarm": bool(self.after_alarm[i])}


class Stream:
    """A stream of inputs answered in the order they came: ``rule`` (a Rule, or anything called as one,
    ``(probs, density) -> Decision``) answers them, ``alarm`` watches them, and from the input that
    sounds it on ``after_alarm`` (a Rule nested in ``rule``; None: there is none, ``why_not`` says why)
    answers them where ``act``. ``advice``: what a person can do once it sounded."""

    def __init__(self, rule: Rule | Callable[..., Decision], alarm: ShiftAlarm | None, after_alarm: Rule | None = None,
                 act: bool = True, why_not: str | None = None, advice: str | None = None):
        self.rule, self.alarm, self.after_alarm, self.act = rule, alarm, after_alarm, act
        self.why_not, self.advice = why_not, advice
        self.refused_after_alarm = 0  # inputs the after-alarm rule refused that the rule alone answers
        self.asked_rule = False  # the last inputs were answered by a rule the caller gave (decide's rule)

    @property
    def acting(self) -> bool:
        """Whether the after-alarm rule answers the inputs after the alarm (not where the last inputs
        were answered by a rule the caller gave)."""
        return self.act and self.after_alarm is not None and self.alarm is not None and not self.asked_rule

    def decide(self, probs: torch.Tensor, density: torch.Tensor | None = None, again: bool = False,
               rule: Rule | Callable[..., Decision] | None = None,
               inputs: torch.Tensor | None = None) -> StreamDecision:
        """The decisions for the stream's next inputs, by their sampled predictions [S, N, C] in
        order (``density``: the scores a density gate reads; ``inputs``: the inputs themselves [N, ...],
        whose exact repeats the alarm counts, ``ShiftAlarm.observe``). ``again``: they are the last N inputs
        asked again (the alarm does not take them twice); ``rule``: the rule a caller answers with. The
        stream decides, here alone, whether that is its own certified rule (None, or equal to it), which
        the after-alarm rule follows, or another (a rule of other knobs, conformal sets), which it does not."""
        own = rule is None or rule == self.rule
        n, self.asked_rule = probs.shape[1], not own
        seen = self.alarm.seen if self.alarm is not None else 0
        if self.alarm is not None and not again:
            self.alarm.observe(probs, density, inputs)
        first = seen - n + 1 if again else seen + 1
        position = torch.arange(first, first + n, device=probs.device)
        at = self.alarm.alarm_at if self.alarm is not None else None
        after = position >= at if at is not None else torch.zeros(n, dtype=torch.bool, device=probs.device)
        ordinary = (self.rule if own else rule)(probs, density)
        if not (self.acting and bool(after.any())):
            return StreamDecision(ordinary, ordinary, after, first)
        strict = self.after_alarm(probs, density)
        row = after[:, None]
        decision = Decision(torch.where(row, strict.quantile_probs, ordinary.quantile_probs),
                            torch.where(row, strict.accepted, ordinary.accepted), ordinary.mean_probs,
                            torch.where(after, strict.refused_by_gate, ordinary.refused_by_gate), ordinary.signal)
        answered = StreamDecision(decision, ordinary, after, first)
        if not again:
            self.refused_after_alarm += int(answered.refused_after_alarm.sum())
        return answered

    def restarted(self) -> "Stream":
        """A new stream with the same rules and a fresh alarm."""
        alarm = self.alarm.restarted() if self.alarm is not None else None
        return Stream(self.rule, alarm, self.after_alarm, self.act, self.why_not, self.advice)

    def describe(self) -> str | None:
        """In plain words: whether the inputs still look like the certifying ones; once the alarm
        sounded, what it did to the answers and what a person can do (None: no alarm watches)."""
        if self.alarm is None:
            return None
        line = self.alarm.describe()
        if not self.alarm.alarmed:
            return line
        if self.acting:
            refused = "1 input" if self.refused_after_alarm == 1 else f"{self.refused_after_alarm} inputs"
            line += (f"; from input {self.alarm.alarm_at} on, answers are held to the stricter after-alarm rule "
                     f"({refused} refused that the certified rule alone would have answered)")
        else:
            line += f"; answers after it are given as before: {self._why_not_acting()}"
        return line + (f"; {self.advice}" if self.advice else "")

    def _why_not_acting(self) -> str:
        if not self.act:
            return "acting on the alarm is turned off"
        if self.asked_rule:
            return "they are answered by the rule asked for, which the after-alarm rule does not replace"
        return str(self.why_not)

    def to_dict(self) -> dict | None:
        """The alarm's state and figures, whether the after-alarm rule acts, and its line."""
        if self.alarm is None:
            return None
        return {**self.alarm.to_dict(), "acting": self.acting,
                "after_alarm_rule": self.after_alarm.to_dict() if self.after_alarm is not None else None,
                "why_not": None if self.acting or not self.act else self._why_not_acting(),
                "refused_after_alarm": self.refused_after_alarm, "text": self.describe()}
