"""Answers that act on the shift alarm (bnn_zoo.abstain.after_alarm): the after-alarm rule, certified
nested in the rule, and the stream that answers with the rule until its alarm sounds and with both
rules from that input on."""
import pytest
import torch
from test_certify import population

from bnn_zoo.abstain.after_alarm import AFTER_ALARM_RULE, Stream, after_alarm_rule
from bnn_zoo.abstain.certify import THRESHOLDS, NotCertified, binomial_cdf, certify
from bnn_zoo.abstain.rule import Rule
from bnn_zoo.abstain.shift import ShiftAlarm, Watched


def test_the_after_alarm_rule_is_the_strictest_certified_threshold_of_a_low_quantile_within_its_budget():
    """The rule's gate as it is, its class read at a low quantile of the samples: of the grid's
    thresholds no lower than the rule's, each certified by Learn then Test from the strictest down,
    the strictest that refuses at most the budget of validation."""
    probs, labels = population(3000, 0)
    rule = certify(probs, labels, risk=0.3, delta=0.1, max_refusal=0.3).rule
    after = after_alarm_rule(probs, labels, rule, risk=0.3, delta=0.1, refusal=0.5, quantile=0.1)
    assert (after.rule.quantile, after.rule.signal, after.rule.cut) == (0.1, rule.signal, rule.cut)
    assert after.rule.threshold >= rule.threshold and (after.risk, after.delta, after.max_refusal) == (0.3, 0.1, 0.5)
    refused = {t: Rule(0.1, t, rule.signal, rule.cut)(probs).refused.float().mean().item()
               for t in THRESHOLDS if t >= rule.threshold}
    p_value = {t: binomial_cdf(*counts(Rule(0.1, t, rule.signal, rule.cut), probs, labels), 0.3).item()
               for t in refused}
    certified = [t for t in sorted(refused, reverse=True) if p_value[t] <= 0.1][::-1]  # the strictest first ...
    certified = [t for t in certified if all(p_value[u] <= 0.1 for u in refused if u >= t)]  # ... in sequence
    within = [t for t in certified if refused[t] <= 0.5]
    assert after.rule.threshold == max(within) and within != certified  # the budget binds
    v = after.validation
    assert v["refused"] == pytest.approx(refused[after.rule.threshold]) and v["p_value"] <= v["level"] == 0.1
    fresh, _ = population(3000, 1)
    strict, plain = after.rule(fresh), rule(fresh)
    assert not (strict.accepted & ~plain.accepted).any()  # each class it accepts, the rule accepts: both pass it
    assert (strict.refused | ~plain.refused).all() and strict.refused.sum() > plain.refused.sum()


def counts(rule: Rule, probs, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """(errors, accepted) of ``rule`` on validation, as binomial_cdf takes them."""
    decision = rule(probs)
    kept = ~decision.refused
    return (decision.prediction[kept] != labels[kept]).sum()[None], kept.sum()[None]


def test_where_no_certified_rule_is_nested_in_the_rule_none_is_chosen():
    probs, labels = population(3000, 0)
    strictest = Rule(0.5, 0.9, "mutual_information", 1e-5)  # accepts 35 of 3000, none wrong: too few for 5% risk
    assert certify(probs, labels, risk=0.05, delta=0.1).rule  # other rules are certified
    with pytest.raises(NotCertified, match="answers only what the certified rule answers"):
        after_alarm_rule(probs, labels, strictest, risk=0.05, delta=0.1)


def _stream(act: bool = True, after: Rule | None = Rule(0.5, 0.8)) -> Stream:
    """A stream whose rule is median >= 0.4 and its after-alarm rule median >= 0.8, which refused 2% and
    5% of the certifying inputs."""
    watched = {"refused": Watched(Rule(0.5, 0.4), 0.02), "held": Watched(Rule(0.5, 0.8), 0.05)}
    return Stream(Rule(0.5, 0.4), ShiftAlarm(watched), after, act,
                  why_not=None if after else "no after-alarm rule here", advice="certify on inputs like these")


def _inputs(*tops: float) -> torch.Tensor:
    """Probabilities [1, N, 3] of one sample whose top class (the first) has these probabilities,
    each a score of its own (a stream that repeats one score is one the alarm catches too)."""
    return torch.tensor([[t, (1 - t) * 0.75, (1 - t) * 0.25] for t in tops])[None]


SURE = (0.976, 0.978, 0.98, 0.982, 0.984)  # answered by both rules
UNSURE = (0.6, 0.7, 0.98, 0.62, 0.72, 0.64, 0.981, 0.74) * 3  # mostly less sure than the rule after the alarm asks


def test_a_stream_answers_with_the_rule_until_its_alarm_and_with_both_rules_from_the_input_that_sounds_it():
    stream = _stream()
    clean = stream.decide(_inputs(*SURE))
    assert not clean.after_alarm.any() and clean.decision is clean.ordinary and clean.first == 1
    shifted = _inputs(*UNSURE)
    answered = stream.decide(shifted)
    at = stream.alarm.alarm_at
    n = len(UNSURE)
    assert answered.first == 6 and 6 < at <= 5 + n  # the alarm sounded inside this batch, not at its start
    after = torch.arange(6, 6 + n) >= at
    assert torch.equal(answered.after_alarm, after)
    rule, strict = Rule(0.5, 0.4)(shifted), Rule(0.5, 0.8)(shifted)
    assert torch.equal(answered.ordinary.refused, rule.refused) and not rule.refused.any()  # the rule answers all
    assert torch.equal(answered.decision.refused, after & strict.refused)  # both rules from the alarm on
    expected = [i for i in range(n) if after[i] and shifted[0, i].max() < 0.8]  # unsure and half-sure ones after it
    assert torch.nonzero(answered.refused_after_alarm).flatten().tolist() == expected and expected
    assert [answered.describe(i)["refused_by"] for i in expected] == [[AFTER_ALARM_RULE]] * len(expected)
    assert [answered.describe(i)["after_alarm"] for i in range(n)] == after.tolist()
    assert stream.refused_after_alarm == len(expected)
    line = stream.describe()
    assert line.startswith(f"shift alarm: by input {at} of {5 + n}, these inputs are no longer like the ones the "
                           "guarantee was certified on: the stricter after-alarm rule refused")
    assert line.endswith(f"; from input {at} on, answers are held to the stricter after-alarm rule ({len(expected)} "
                         "inputs refused that the certified rule alone would have answered); certify on inputs like "
                         "these")
    figures = stream.to_dict()
    assert figures["alarm_at"] == at and figures["direction"] == "held" and figures["acting"] is True
    assert figures["after_alarm_rule"] == Rule(0.5, 0.8).to_dict() and figures["text"] == line
    assert set(figures["martingales"]) == {"refused", "held", "repeated"}


def test_asked_again_the_last_input_keeps_its_place_and_a_rule_of_the_caller_s_is_not_replaced():
    stream = _stream()
    tops = [0.6 + 0.005 * k for k in range(20)]
    stream.decide(_inputs(*tops))
    assert stream.alarm.alarmed
    again = stream.decide(_inputs(tops[-1]), again=True)
    assert stream.alarm.seen == 20 and again.first == 20 and bool(again.after_alarm[0])
    assert bool(again.decision.refused[0]) and stream.refused_after_alarm == 20 - stream.alarm.alarm_at + 1
    knobs = stream.decide(_inputs(0.75), rule=Rule(0.5, 0.3))  # the page's knobs: that rule answers
    assert bool(knobs.after_alarm[0]) and not knobs.decision.refused[0] and knobs.first == 21
    assert stream.to_dict()["acting"] is False and stream.describe().endswith(  # and the stream says so
        "; answers after it are given as before: they are answered by the rule asked for, which the after-alarm "
        "rule does not replace; certify on inputs like these")
    assert stream.decide(_inputs(0.75)).decision.refused[0] and stream.to_dict()["acting"] is True  # its own again


@pytest.mark.parametrize("act, after", [(False, Rule(0.5, 0.8)), (True, None)])
def test_a_stream_not_acting_on_its_alarm_answers_as_the_rule_alone_and_says_why(act, after):
    stream, plain = _stream(act, after), _stream()
    probs = _inputs(*(0.6 + 0.005 * k for k in range(24)))
    answered, held = stream.decide(probs), plain.decide(probs)
    assert stream.alarm.alarm_at == plain.alarm.alarm_at and answered.after_alarm.any()
    assert torch.equal(answered.decision.refused, Rule(0.5, 0.4)(probs).refused)
    assert held.decision.refused.any() and not answered.decision.refused.any()
    why = "acting on the alarm is turned off" if not act else "no after-alarm rule here"
    assert stream.describe().endswith(f"; answers after it are given as before: {why}; certify on inputs like these")
    assert stream.to_dict()["acting"] is False


def test_a_stream_without_an_alarm_answers_with_the_rule():
    stream = Stream(Rule(0.5, 0.4), None, Rule(0.5, 0.8))
    answered = stream.decide(_inputs(0.6, 0.7, 0.8))
    assert not answered.after_alarm.any() and stream.describe() is None and stream.to_dict() is None
    restarted = _stream().restarted()
    assert restarted.alarm.seen == 0 and restarted.after_alarm == Rule(0.5, 0.8)
