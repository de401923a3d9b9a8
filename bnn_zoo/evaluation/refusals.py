"""Why an input was refused, in words and figures: the quantile that fell short of its threshold, the
signal over its cut, the conformal set of every class, the after-alarm rule. The page's answer and
predict's line say it alike ("no class's median probability reaches 0.85; mutual information 1.2
bits > 0.464").

Usage: ``"; ".join(why_refused(answer["refused_by"], rule, {"entropy": 1.04, ...}))``
"""
from __future__ import annotations

from ..abstain.after_alarm import AFTER_ALARM_RULE
from ..abstain.conformal import percent
from ..abstain.rule import DENSITY, Rule
from .set_answers import SET_ANSWER


def why_refused(refused_by: list[str], rule: Rule, bits: dict[str, float], density: float | None = None,
                coverage: float | None = None, after_alarm: Rule | None = None) -> list[str]:
    """Each reason of ``refused_by`` (an answer's, ``Decision.describe``'s) in words and figures:
    ``rule``'s quantile and threshold, its signal's value (``bits``: the input's uncertainties;
    ``density``: its feature density score, in nats) against its cut, its conformal set's
    ``coverage``, the ``after_alarm`` rule it is held to."""
    reasons = []
    if "quantile" in refused_by:
        reasons.append(f"no class's {quantile_name(rule.quantile)} probability reaches {rule.threshold:g}")
    if rule.signal is not None and rule.signal in refused_by:
        value, unit = (density, "nats") if rule.signal == DENSITY else (bits[rule.signal], "bits")
        reasons.append(f"{rule.signal.replace('_', ' ')} {value:.3g} {unit} > {rule.cut:.3g}")
    if SET_ANSWER in refused_by:
        reasons.append(f"its {percent(coverage)} conformal set holds every class")
    if AFTER_ALARM_RULE in refused_by:
        gated = f", {after_alarm.signal.replace('_', ' ')} <= {after_alarm.cut:.3g}" if after_alarm.signal else ""
        reasons.append(f"since the shift alarm sounded, answers are held to the after-alarm rule (its "
                       f"{quantile_name(after_alarm.quantile)} probability >= {after_alarm.threshold:g}{gated})")
    return reasons


def quantile_name(q: float) -> str:
    return "median" if q == 0.5 else f"{q:g} quantile of its sampled"
