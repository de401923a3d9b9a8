"""A trained run as one object (bnn_zoo.runs.storage.trained): the stream of a posterior's inputs, with its
shift alarm and its after-alarm rule, or why it has none."""
import json
import shutil

import torch

from bnn_zoo.abstain.rule import Rule
from bnn_zoo.runs.storage.checkpoint import CALIBRATION
from bnn_zoo.runs.storage.loading import load


def test_a_run_s_stream_holds_its_rule_alarm_and_after_alarm_rule(certified_run):
    trained = load(certified_run)
    stream = trained.stream("bayes", alpha=0.05)
    after = Rule.from_dict(trained.calibration["bayes"]["after_alarm"]["rule"])
    assert stream.rule == trained.rules["bayes"] and stream.after_alarm == after and stream.acting
    assert stream.alarm.alpha == 0.05 and stream.alarm.seen == 0
    entry = trained.calibration["bayes"]
    assert stream.alarm.watched["refused"].rate == entry["validation"]["refused"]  # what the alarm watches
    assert stream.alarm.watched["held"].rule == after
    assert stream.alarm.watched["held"].rate == entry["after_alarm"]["validation"]["refused"]
    assert stream.advice == ("to answer inputs like these under a guarantee, train and certify a run on labelled ones "
                             "like them (python -m bnn_zoo.train mnist_mlp data.name=folder data.path=DIR, a folder "
                             "per class: its validation split certifies it)")
    assert not trained.stream("bayes", act=False).acting


def test_the_stream_alone_tells_its_certified_rule_from_a_caller_s(certified_run):
    """Issue 48: whether the certified rule answers is the stream's to decide. A caller answering with
    a rule equal to the certified one gets the after-alarm rule after the alarm; with another rule, or
    with a rule that refuses everything, it gets exactly that rule's decisions, whatever it thinks."""
    trained = load(certified_run)
    probs = torch.full((4, 30, 10), 0.1)  # as unsure as can be: the alarm sounds
    own = trained.stream("bayes")
    answered = own.decide(probs, rule=Rule.from_dict(trained.calibration["bayes"]["rule"]))  # equal, not the same object
    assert own.alarm.alarmed and own.acting and bool(answered.after_alarm.any())
    other = trained.stream("bayes")
    refuses_all = Rule(0.5, 1.0)  # no class's median probability reaches 1 here
    answered = other.decide(probs, rule=refuses_all)
    assert other.alarm.alarmed and not other.acting and bool(answered.decision.refused.all())
    assert torch.equal(answered.decision.accepted, refuses_all(probs).accepted)
    assert "answered by the rule asked for, which the after-alarm rule does not replace" in other.describe()


def test_a_run_certified_before_the_after_alarm_rule_existed_says_so_and_answers_as_before(certified_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(certified_run, run)
    found = json.loads((run / CALIBRATION).read_text())
    del found["bayes"]["after_alarm"]
    found["twin"]["after_alarm"] = {"error": "no rule certified at ..."}
    (run / CALIBRATION).write_text(json.dumps(found))
    trained = load(run)
    assert trained.after_alarm("bayes") == (None, "its calibration predates the after-alarm rule (python -m "
                                                  f"bnn_zoo.certify {run} adds one)")
    assert trained.after_alarm("twin") == (None, "no after-alarm rule is certified for twin (no rule certified at ...)")
    assert load("lenet").after_alarm("bayes")[0] is not None  # the shipped files hold theirs
    stream = trained.stream("bayes")
    probs = torch.full((4, 30, 10), 0.1)  # as unsure as can be: the alarm sounds
    answered = stream.decide(probs)
    assert stream.alarm.alarmed and torch.equal(answered.decision.refused, trained.rules["bayes"](probs).refused)
    assert (f"; answers after it are given as before: its calibration predates the after-alarm rule (python -m "
            f"bnn_zoo.certify {run} adds one); to answer") in stream.describe()
