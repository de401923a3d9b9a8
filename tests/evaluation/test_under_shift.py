"""The scoreboard's shift figures (bnn_zoo.evaluation.under_shift): what each posterior answers under
MNIST-C's corruptions, and where the shift alarm sounds on each set's stream, in evaluate and eval.json."""
import json
import math

import pyro
import pytest
import torch

from bnn_zoo.abstain.after_alarm import Stream
from bnn_zoo.abstain.rule import Rule
from bnn_zoo.abstain.shift import ShiftAlarm, Watched
from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.data.shifted.corruptions import CORRUPTIONS, corrupt
from bnn_zoo.data.inputs import pixel_inputs
from bnn_zoo.data.sets import load_torchvision
from bnn_zoo.evaluation.evaluate import evaluate_run
from bnn_zoo.evaluation.results import AlarmResult, BeforeAfter, Evaluation
from bnn_zoo.evaluation.under_shift import alarm_result, corrupted_sets, default_shift, shifted, streamed
from bnn_zoo.runs.storage.loading import load
from bnn_zoo.runs.storage.trained import posteriors


def test_the_shift_figures_count_the_inputs_answered_wrong_among_all():
    """Four inputs: right, wrong, refused (no class reaches the threshold), right; the rule answers
    3 of 4, 2 of them right, so 1 in 4 is answered wrong and the forced accuracy is 2 of 4."""
    probs = torch.tensor([[0.9, 0.1, 0.0], [0.05, 0.9, 0.05], [0.4, 0.3, 0.3], [0.1, 0.1, 0.8]]).expand(5, 4, 3)
    labels = torch.tensor([0, 0, 0, 2])
    r = shifted(probs, labels, Rule(0.5, 0.6))
    assert (r.refused, r.wrong, r.accuracy) == (0.25, 0.25, 0.75)
    assert r.accuracy_accepted == pytest.approx(2 / 3)
    assert math.isnan(shifted(probs, labels, Rule(0.5, 0.95)).accuracy_accepted)  # everything refused


def test_a_corrupted_set_is_one_stream_whose_wrong_answers_are_counted_before_and_after_its_alarm():
    """Six inputs in the order seed 3 gives (4, 0, 3, 2, 1, 5); the alarm sounds at the fourth, the
    after-alarm rule having refused the third and fourth. Before it the rule answers (input 4 wrong); from it on the
    after-alarm rule (a higher threshold) answers sure input 1, wrong, and refuses unsure inputs
    2 and 5, which the rule answers (5 wrong)."""
    sure, unsure = torch.tensor([0.98, 0.01, 0.01]), torch.tensor([0.5, 0.45, 0.05])
    probs = torch.stack([sure, sure, unsure, unsure, torch.tensor([0.05, 0.55, 0.4]), unsure])[None]  # [1, 6, 3]
    labels = torch.tensor([0, 1, 0, 0, 2, 1])  # the rule answers 1, 4 and 5 wrong
    # an alarm quick to sound (alpha 0.6), to sound within six: the after-alarm rule refuses inputs 3 and 2
    # where it refused 5% of the certifying inputs
    watched = {"refused": Watched(Rule(0.5, 0.4), 0.05), "held": Watched(Rule(0.5, 0.52), 0.05)}
    alarm = ShiftAlarm(watched, alpha=0.6)
    got = streamed(Stream(Rule(0.5, 0.4), alarm, Rule(0.5, 0.52)), probs, labels, seed=3)
    assert got.alarm == AlarmResult(6, 4, 0.6)
    assert got.by_alarm == BeforeAfter(acting=True, before=3, wrong_before=1, after=3, wrong_after=1, refused_after=2,
                                       wrong_after_alone=2, refused_after_alone=0, refused_alone=0.0, wrong_alone=0.5)
    assert (got.refused, got.wrong) == pytest.approx((2 / 6, 2 / 6))
    assert (got.by_alarm.wrong_before_rate, got.by_alarm.wrong_after_rate) == (1 / 3, 1 / 3)
    assert BeforeAfter.read(json.loads(json.dumps(got.by_alarm.to_dict()))) == got.by_alarm
    off = streamed(Stream(Rule(0.5, 0.4), alarm.restarted(), Rule(0.5, 0.52), act=False), probs, labels, seed=3)
    assert (off.refused, off.wrong) == (0.0, 0.5) and off.by_alarm.wrong_after == off.by_alarm.wrong_after_alone == 2


def test_corrupted_sets_are_one_seeded_sample_of_the_test_set_under_each_corruption(certified_run, shared_data):
    cfg = load(certified_run).config
    found = list(corrupted_sets(cfg.data, ("rotate", "fog"), str(shared_data), 20, seed=3, limit=100))
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    chosen = torch.randperm(100, generator=torch.Generator().manual_seed(3))[:20]
    for (name, x, y), expected in zip(found, ("rotate", "fog")):
        assert name == expected and torch.equal(y, labels[chosen])
        assert torch.equal(x, pixel_inputs(cfg.data, corrupt(images[chosen], name, 3)))
    assert default_shift(cfg.data) == CORRUPTIONS


def test_an_alarm_result_is_the_alarm_over_a_seeded_order_of_the_inputs(certified_run):
    trained = load(certified_run)
    probs = torch.softmax(torch.randn(4, 60, 10, generator=torch.Generator().manual_seed(0)) * 3, -1)
    found = alarm_result(trained, "bayes", probs, stream=40, seed=5)
    order = torch.randperm(60, generator=torch.Generator().manual_seed(5))[:40]
    expected = ShiftAlarm.of(trained.calibration["bayes"]).observe(probs[:, order])
    assert (found.stream, found.alarm_at, found.alpha) == (40, expected.alarm_at, 0.01)
    trained.calibration["bayes"].pop("rule")  # no rule certified: no alarm
    assert alarm_result(trained, "bayes", probs) is None and trained.alarm("bayes") is None


@pytest.fixture(scope="module")
def under_shift(certified_run):
    """The certified run evaluated under two corruptions, through eval.json's JSON."""
    from conftest import SHARED_DATA

    evaluation = evaluate_run(certified_run, num_samples=4, ood=("noise",), ood_size=60, test_size=100,
                              data_root=str(SHARED_DATA), shift=("rotate", "brightness"), shift_size=50)
    return Evaluation.from_dict(json.loads(json.dumps(evaluation.to_dict())))  # eval.json keeps them


@pytest.mark.parametrize("part", ["bayes", "twin"])
def test_evaluate_scores_every_posterior_under_the_corruptions_and_says_where_its_alarm_sounds(
        certified_run, shared_data, under_shift, part):
    evaluation = under_shift
    result = evaluation.posteriors[part]
    assert list(result.shift) == ["rotate", "brightness"]
    trained = load(certified_run)
    rung, rule = posteriors(trained)[part], trained.rules[part]
    with pyro.settings.context(module_local_params=True):
        for name, x, y in corrupted_sets(trained.config.data, ("rotate", "brightness"), str(shared_data), 50, 0, 100):
            with seeded(0):
                probs = rung.predict(x, 4)
            got = result.shift[name]
            if part == "twin":  # one deterministic network: the same figures and alarm, whatever the draws
                assert got == streamed(trained.stream(part), probs, y, None, 0)
                assert got.alarm == alarm_result(trained, part, probs, 50, 0)  # the same order, the same alarm
                plain = shifted(probs, y, rule)  # the rule alone, whatever the order
                assert (got.by_alarm.refused_alone, got.by_alarm.wrong_alone) == (plain.refused, plain.wrong)
            b = got.by_alarm
            assert got.alarm.stream == 50 and got.alarm.alpha == 0.01 and b.before + b.after == 50
            assert b.before == (50 if got.alarm.alarm_at is None else got.alarm.alarm_at - 1)
            assert got.wrong == pytest.approx((b.wrong_before + b.wrong_after) / 50)
            assert got.wrong == pytest.approx((1 - got.refused) * (1 - got.accuracy_accepted), abs=1e-6)
    assert result.test.alarm.stream == 50  # the test set's first 50 in a seeded order
    assert result.ood["noise"].alarm.stream == 60  # the whole OOD set, one stream: the stream's own alarm
    noise = result.ood["noise"]  # the tiny run is sure of white noise: refusing none, it sounds no alarm
    assert (noise.alarm.alarm_at is None) == (noise.refused_in_stream == 0.0)
    assert evaluation.skipped == {}


def test_evaluate_not_acting_on_the_alarm_answers_each_set_by_the_certified_rule_alone(certified_run, shared_data,
                                                                                      under_shift):
    off = evaluate_run(certified_run, num_samples=4, ood=(), test_size=100, data_root=str(shared_data),
                       shift=("rotate", "brightness"), shift_size=50, act_on_alarm=False)
    for part, result in off.posteriors.items():
        for name, got in result.shift.items():
            acting = under_shift.posteriors[part].shift[name]
            assert got.by_alarm.acting is False and acting.by_alarm.acting is True
            assert (got.refused, got.wrong) == (got.by_alarm.refused_alone, got.by_alarm.wrong_alone)
            if part == "twin":  # one network, the same draws: acting differs only from the alarm on
                assert got.alarm == acting.alarm and got.by_alarm.wrong_before == acting.by_alarm.wrong_before
                assert got.refused <= acting.refused and got.by_alarm.refused_alone == acting.by_alarm.refused_alone


def test_evaluate_without_corruptions_or_on_other_data_says_so(certified_run, shared_data):
    none = evaluate_run(certified_run, num_samples=2, ood=(), test_size=40, data_root=str(shared_data), shift=())
    assert all(r.shift == {} for r in none.posteriors.values()) and "shift" not in none.to_dict()["posteriors"]["bayes"]


@pytest.mark.parametrize("corruption", ["stripe", "zigzag"])
def test_the_shipped_twin_s_alarm_sounds_on_a_corruption_and_not_on_clean_test_inputs(shared_data, corruption):
    """The shipped lenet's twin against the validation inputs it was certified on: silent on 300 MNIST
    test digits, sounding within 300 corrupted ones (corruptions it never saw in training: rotated
    digits it was trained on, and reads)."""
    trained = load("lenet")
    twin = posteriors(trained)["twin"]
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    clean = pixel_inputs(trained.config.data, images[:300])
    with pyro.settings.context(module_local_params=True):
        assert not trained.alarm("twin").observe(twin.predict(clean)).alarmed
        shifted_x = pixel_inputs(trained.config.data, corrupt(images[:300], corruption))
        alarm = trained.alarm("twin").observe(twin.predict(shifted_x))
    assert alarm.alarmed and alarm.describe().startswith(f"shift alarm: by input {alarm.alarm_at} of 300, these inputs "
                                                         "are no longer like the ones the guarantee was certified on")


def test_a_run_on_other_data_has_no_corruptions_and_asking_for_them_says_why():
    from bnn_zoo.core.errors import DataError
    from bnn_zoo.data.config import DataConfig

    folder = DataConfig(name="folder", path="pngs")
    assert default_shift(folder) == () and list(corrupted_sets(folder, (), None, 10)) == []  # reads nothing
    with pytest.raises(DataError, match="the corruptions are of 28x28 MNIST-like images; a folder run has none"):
        list(corrupted_sets(folder, ("fog",), None, 10))


def test_evaluate_runs_one_alarm_over_each_ood_set(certified_run, shared_data, monkeypatch):
    """Issue 48: evaluate ran the alarm twice on an OOD set (once for its result, once in its stream).
    Each posterior's alarm takes the set's 30 inputs once, in its stream, and that is the set's alarm."""
    taken = []
    observe = ShiftAlarm.observe
    monkeypatch.setattr(ShiftAlarm, "observe", lambda self, probs, *a: taken.append(probs.shape[1]) or observe(self, probs, *a))
    evaluation = evaluate_run(certified_run, num_samples=2, ood=("noise",), ood_size=30, test_size=40,
                              data_root=str(shared_data), shift=())
    alarmed = [part for part, r in evaluation.posteriors.items() if r.ood["noise"].alarm is not None]
    assert alarmed and taken.count(30) == len(alarmed)
