"""A trained run as one object (bnn_zoo.runs.trained): the stream of a posterior's inputs, with its
shift alarm and its after-alarm rule, or why it has none."""
import json
import shutil

import torch

from bnn_zoo.abstain.rule import Rule
from bnn_zoo.runs.checkpoint import CALIBRATION
from bnn_zoo.runs.loading import load


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
    quantile = trained.stream("bayes", answer=Rule(0.5, 0.3))  # a rule of the caller's: not replaced after the alarm
    assert quantile.rule == Rule(0.5, 0.3) and quantile.after_alarm is None
    assert quantile.why_not == "the after-alarm rule is certified beside the certified rule alone"


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
