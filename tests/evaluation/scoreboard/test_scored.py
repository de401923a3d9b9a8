"""A run as the scoreboard scores it (``bnn_zoo.evaluation.scoreboard.scored``), on an evaluation made by
hand: its means over the near sets, its figures under shift, the ladder's rows, its JSON."""
import json

import pytest

from bnn_zoo.abstain.rule import Rule
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.evaluation.results import (AlarmResult, BeforeAfter, Cost, Detection, Evaluation, InDistribution,
                                        OODResult, PosteriorResult, SetFigures, ShiftResult)
from bnn_zoo.evaluation.scoreboard.scored import ScoredRun, all_sets, ladder_rows, shift_summary, training_seconds


def _ood(refused, auroc, mi=None, density=None, handled=None, in_stream=None) -> OODResult:
    return OODResult(refused, refused / 2, 1.0, Detection(auroc, auroc - 0.01, 1 - auroc),
                     mi and Detection(mi, mi - 0.01, 1 - mi), density and Detection(density, density, 1 - density),
                     handled=handled, refused_in_stream=in_stream)


def _shift(refused, wrong, alarm_at) -> ShiftResult:
    before = 20 if alarm_at is None else alarm_at - 1
    split = BeforeAfter(True, before, 1, 20 - before, 2, 3, 4, 5, refused / 2, wrong * 2)
    return ShiftResult(refused, 0.9, wrong, 0.8, AlarmResult(20, alarm_at, 0.01), split, 20)


def _test(accuracy) -> InDistribution:
    sets = [SetFigures(0.9, 0.91, 1.0), SetFigures(0.95, 0.96, 1.2), SetFigures(0.99, 0.995, 2.5)]
    return InDistribution(accuracy, 0.05, 0.01, 0.02, 0.0, 0.99, 0.0, 0.003, 0.004, 0.008, 0.99, 1.1, 0.002, sets,
                          AlarmResult(20, None, 0.01))


def board() -> dict[str, ScoredRun]:
    """One run of two posteriors on a far set and two near ones (overlaid digits among them), under two
    corruptions, one of them seen in training."""
    bayes = PosteriorResult("mean-field VI", Rule(signal="mutual_information", cut=0.5), Cost(2.5, 120.0, 2000),
                            _test(0.98), {"notmnist": _ood(0.9, 0.95, mi=0.97, density=0.9),
                                          "letters": _ood(0.6, 0.8, mi=0.85, density=0.7, in_stream=0.7),
                                          "overlaid": _ood(0.3, 0.6, mi=0.65, handled=0.5, in_stream=0.9)},
                            {"fog": _shift(0.4, 0.02, 5), "blur": _shift(0.1, 0.001, None),
                             "spatter": _shift(0.2, 0.008, 30)})
    twin = PosteriorResult("MAP (the twin)", Rule(), Cost(0.1, None, 1000), _test(0.97),
                           {"notmnist": _ood(0.5, 0.7, density=0.8), "letters": _ood(0.2, 0.6, density=0.75),
                            "overlaid": _ood(0.1, 0.55)})
    evaluation = Evaluation("runs/a", 10, 0, "calibrated", 2000, {"constant": "no fonts"},
                            {"bayes": bayes, "twin": twin}, seen_in_training=("blur",))
    return {"runs/a": ScoredRun(evaluation, ["notmnist"], ["letters", "overlaid"], {"bayes": 120.0}, ["a.ttf"])}


def test_the_near_means_count_an_overlaid_digit_handled_as_refused():
    run = board()["runs/a"]
    bayes, twin = run.evaluation.posteriors["bayes"], run.evaluation.posteriors["twin"]
    assert run.sets == ["notmnist", "letters", "overlaid"]
    assert run.near_refused(bayes) == pytest.approx((0.6 + 0.5) / 2)  # overlaid: handled, not refused
    assert run.near_refused_in_stream(bayes) == pytest.approx((0.7 + 0.9) / 2)
    assert run.near_refused_in_stream(twin) is None  # not measured
    assert run.near_auroc(bayes) == pytest.approx((0.85 + 0.65) / 2)  # by mutual information where sampled
    assert run.near_auroc(twin) == pytest.approx((0.6 + 0.55) / 2)  # else by entropy
    assert run.near_density_auroc(bayes) == pytest.approx(0.7)  # the sets that have one
    run.evaluation.ood_seen_in_training = ("letters",)  # an outlier kind covers it: out of the means
    assert (run.unseen_near, run.near_refused(bayes), run.near_auroc(bayes)) == (["overlaid"], 0.5, 0.65)
    assert run.near_density_auroc(bayes) is None and run.to_dict()["near_unseen"] == ["overlaid"]


def test_the_shift_summary_keeps_the_corruptions_seen_in_training_apart():
    bayes = board()["runs/a"].evaluation.posteriors["bayes"]
    found = shift_summary(bayes, ("blur",))
    assert found["corruptions"] == 2 and found["refused"] == pytest.approx(0.3) and found["wrong"] == pytest.approx(0.014)
    assert (found["worst"], found["worst_wrong"]) == ("fog", 0.02) and found["at_most_1pct_wrong"] == 1
    assert found["alarm_within"] == 2 and found["clean_alarm_at"] is None  # at 5 and 30, both within 50
    assert found["refused_alone"] == pytest.approx(0.15) and found["wrong_alone"] == pytest.approx(0.028)
    assert found["seen_in_training"] == {"corruptions": ["blur"], "refused": 0.1, "wrong": 0.001}
    assert shift_summary(bayes)["corruptions"] == 3


def test_the_ladder_has_a_row_per_run_and_posterior_and_the_json_its_means():
    runs = board()
    assert list(ladder_rows(runs)) == ["a: mean-field VI", "a: MAP (the twin)"]
    assert all_sets(runs) == ["notmnist", "letters", "overlaid"]
    found = json.loads(json.dumps(runs["runs/a"].to_dict()))
    assert found["near_means"]["bayes"]["refused"] == pytest.approx(0.55) and found["letter_fonts"] == ["a.ttf"]
    assert list(found["shift_means"]) == ["bayes"] and found["shift_means"]["bayes"]["corruptions"] == 2
    assert (found["far"], found["near"], found["train_seconds"]) == (["notmnist"], ["letters", "overlaid"], {"bayes": 120.0})
    assert found["posteriors"]["bayes"] == runs["runs/a"].evaluation.posteriors["bayes"].to_dict()  # eval.json's


def test_training_seconds_refuse_a_metrics_file_without_them(tmp_path):
    (tmp_path / "metrics.json").write_text('{"bayes": {}}')
    with pytest.raises(ConfigError, match="lacks the training times the scoreboard reads"):
        training_seconds(str(tmp_path))
    (tmp_path / "metrics.json").write_text(json.dumps({"bayes": {"seconds_per_epoch": 2.0, "history": [{}] * 3}}))
    assert training_seconds(str(tmp_path)) == {"bayes": 6.0}
