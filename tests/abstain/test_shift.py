"""The shift alarm (bnn_zoo.abstain.shift): betting martingales on the certified rule's refusals and
the after-alarm rule's, against their rates on the certifying inputs plus a tolerance, and on inputs
repeating earlier ones; at most alpha false alarms on a stream refused within the tolerance, and soon
where the refusals rise past it or the inputs repeat."""
import math
import tracemalloc
from pathlib import Path

import pytest
import torch

from bnn_zoo.abstain.rule import Rule
from bnn_zoo.abstain.shift import MARTINGALES, REMEMBERED, TOLERANCE, ShiftAlarm, Watched

SURE, UNSURE = Rule(0.5, 0.5), Rule(0.5, 0.9)  # a rule, and a stricter one nested in it


def _watched(rate: float = 0.02, held: float | None = 0.08) -> dict:
    return {"refused": Watched(SURE, rate), **({} if held is None else {"held": Watched(UNSURE, held)})}


def _outcomes(n: int, refused: float, held: float, seed: int, repeated: float = 0.0) -> torch.Tensor:
    """[n, 3] bool: each input refused by the rule with probability ``refused``, by the stricter rule
    with probability ``held`` (at least whenever the rule refuses: the rules are nested), a repeat with
    probability ``repeated``."""
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    v = torch.rand(n, generator=torch.Generator().manual_seed(seed + 1))
    return torch.stack([u < refused, u < held, v < repeated], 1)


def _probs(sure: torch.Tensor) -> torch.Tensor:
    """Sampled predictions [2, N, 10]: class 3 at 0.91 to 0.99 where ``sure`` (both rules answer), else
    at 0.35 to 0.45 (both refuse), the rest spread evenly over the other classes; no two inputs alike
    (a stream of one input repeated sounds the repeat martingale)."""
    u = torch.rand(len(sure), generator=torch.Generator().manual_seed(len(sure)), dtype=torch.float64)
    top = torch.where(sure, 0.91 + 0.08 * u, 0.35 + 0.1 * u).float()
    p = ((1 - top) / 9)[:, None].expand(-1, 10).clone()
    p[:, 3] = top
    return p[None].expand(2, -1, -1).contiguous()


@pytest.mark.slow
def test_the_alarm_sounds_at_most_alpha_of_the_time_on_streams_within_the_tolerance_over_many_draws():
    """Ville's inequality: over whole streams whose inputs are refused at the certifying rate plus the
    tolerance, and repeat earlier ones at the tolerance (the most a null stream may), the alarm sounds in
    at most alpha of the draws (plus sampling slack); refused well past the tolerance, far more often."""
    alpha, draws, length = 0.1, 400, 300
    within, past = 0, 0
    for seed in range(draws):
        tolerated = _outcomes(length, 0.02 + TOLERANCE, 0.08 + TOLERANCE, seed, repeated=TOLERANCE)
        within += ShiftAlarm(_watched(), alpha).update(tolerated).alarmed
        past += ShiftAlarm(_watched(), alpha).update(_outcomes(length, 0.12, 0.2, seed + 10_000)).alarmed
    slack = 3 * math.sqrt(alpha * (1 - alpha) / draws)
    assert within / draws <= alpha + slack
    assert past / draws > 0.5  # the test can tell


def test_each_martingale_is_the_mixture_of_its_bets_on_a_rate_past_its_null_rate_plus_the_tolerance():
    outcomes = _outcomes(1200, 0.1, 0.3, seed=0, repeated=0.08)
    alarm = ShiftAlarm(_watched(0.02, 0.08), 0.01)
    alarm.update(outcomes[:700]).update(outcomes[700:])  # two calls: one stream
    for i, level in enumerate((0.02 + 0.05, 0.08 + 0.05, 0.0 + 0.05)):
        bets = torch.arange(1, 201, dtype=torch.float64) / 200 / level * 0.999  # up to 1 / level
        z = outcomes[:, i].double()
        mixture = torch.log1p(bets * (z[:, None] - level)).sum(0).logsumexp(0) - math.log(200)
        assert torch.allclose(alarm.log_martingales[i], mixture, rtol=1e-12, atol=1e-9)
    assert alarm.to_dict()["counted"] == dict(zip(("refused", "held", "repeated"), outcomes.sum(0).tolist()))


def test_an_input_whose_mean_prediction_came_before_to_the_bit_is_a_repeat_and_none_else_is():
    probs = _probs(torch.arange(6) % 2 == 0)
    probs[:, 3] = probs[:, 1]  # input 3 is input 1 again
    nudged = probs[:, 2:3].clone()
    nudged[:, 0, 0] = torch.nextafter(nudged[:, 0, 0], torch.tensor(1.0))  # a hair (a float's last bit) off input 2
    alarm = ShiftAlarm(_watched(), 0.5)
    assert alarm._repeats(probs.mean(0)).tolist() == [False, False, False, True, False, False]
    assert alarm._repeats(torch.cat([probs[:, :1], nudged], 1).mean(0)).tolist() == [True, False]  # and across calls


def test_a_stream_the_rule_refuses_far_more_sounds_the_refusal_martingale_soon_with_its_figures():
    sure = torch.arange(200) % 2 == 1  # every other input refused
    alarm = ShiftAlarm(_watched(), 0.01).observe(_probs(sure))
    assert alarm.alarmed and alarm.alarm_at <= 20 and alarm.direction == "refused"
    k = int((~sure[:alarm.alarm_at]).sum())
    assert alarm.describe() == (
        f"shift alarm: by input {alarm.alarm_at} of 200, these inputs are no longer like the ones the guarantee was "
        f"certified on: the certified rule refused {k} of them ({k / alarm.alarm_at:.0%}) where it refused 2.0% of the "
        "inputs it was certified on, more than the tolerance of 5% above that (a stream within it sounds the alarm at "
        "most 1% of the time)")
    found = alarm.to_dict()
    assert found["alarm_at"] == alarm.alarm_at and found["peaks"]["refused"] >= found["bounds"]["refused"]
    assert found["bounds"] == pytest.approx({"refused": 1 / 0.0045, "held": 1 / 0.0045, "repeated": 1 / 0.001})
    assert found["certified_rates"] == {"refused": 0.02, "held": 0.08} and found["signal"] == "refusals"
    assert found["counted"] == {"refused": 100, "held": 100, "repeated": 0}


def test_a_few_refusals_are_said_as_too_few_to_tell_and_many_answers_as_within_the_tolerance():
    few = ShiftAlarm(_watched(), 0.01).observe(_probs(torch.tensor([True, False, False, False])))
    assert not few.alarmed and few.describe() == (
        "no shift alarm: the certified rule refused 3 of 4 inputs (75%), where it refused 2.0% of the inputs it was "
        "certified on, plus a tolerance of 5%: too few inputs yet to tell that from chance (a stream within it sounds "
        "the alarm at most 1% of the time)")
    sure = torch.arange(300) % 50 != 0  # 2% refused
    quiet = ShiftAlarm(_watched(), 0.01).observe(_probs(sure))
    assert not quiet.alarmed and "refused 6 of 300 inputs (2%)" in quiet.describe()
    assert "within the tolerance" in quiet.describe()


def test_a_stream_refused_a_little_more_in_blocks_sounds_only_the_untolerant_alarm():
    """MNIST's test digits in their stored order, writer group by writer group: blocks refused at 4%
    and 1% where the certifying inputs were refused at 2.3%. Within the tolerance the alarm stays silent
    over all 10,000; with almost none it sounds in the first block; a corruption refused at 30% sounds
    it within 50 inputs."""
    blocks = torch.cat([_outcomes(5000, 0.04, 0.1, 1), _outcomes(5000, 0.01, 0.06, 2)])
    watched = _watched(0.023, 0.078)
    quiet = ShiftAlarm(watched, 0.01).update(blocks)
    assert not quiet.alarmed and quiet.to_dict()["tolerance"] == 0.05
    strict = ShiftAlarm(watched, 0.01, tolerance=0.001).update(blocks)
    assert strict.alarmed and strict.alarm_at <= 5000 and strict.direction in ("refused", "held")
    corrupted = ShiftAlarm(watched, 0.01).update(_outcomes(500, 0.3, 0.5, 4))
    assert corrupted.alarmed and corrupted.alarm_at <= 50


def test_inputs_nearer_refusal_sound_the_after_alarm_rule_s_martingale_where_the_rule_s_stays_silent():
    """A mild shift: the rule refuses as before (2%), the stricter rule 35% where it refused 8%."""
    alarm = ShiftAlarm(_watched(), 0.01).update(_outcomes(400, 0.02, 0.35, 5))
    assert alarm.alarmed and alarm.direction == "held" and alarm.alarm_at <= 100
    assert "the stricter after-alarm rule refused" in alarm.describe()
    without = ShiftAlarm(_watched(held=None), 0.01).update(_outcomes(400, 0.02, 0.35, 5))
    assert not without.alarmed and without.to_dict()["certified_rates"] == {"refused": 0.02}


def test_a_stream_of_one_ordinary_input_repeated_sounds_the_repeat_martingale():
    """The same sure input over and over, refused no more than the certifying inputs were: the refusal
    martingales see nothing, the third sees it come back."""
    probs = _probs(torch.ones(1, dtype=torch.bool)).expand(-1, 2000, -1)
    alarm = ShiftAlarm(_watched(), 0.01).observe(probs)
    assert alarm.direction == "repeated" and alarm.alarm_at <= 5
    assert alarm.describe().startswith(
        f"shift alarm: by input {alarm.alarm_at} of 2000, these inputs are no longer like the ones the guarantee was "
        f"certified on: {alarm.alarm_at - 1} of them repeat an earlier one exactly")
    assert bool((alarm.peaks[:2] <= 0).all())  # no refusal: the refusal martingales only lost


def test_repeats_are_counted_on_the_inputs_themselves_where_they_are_given():
    """Issue 51: 8 copies of one digit in one batch were counted 5 repeats of 7: the same input gives
    predictions that differ in their last bits by batch row. Given the inputs, the alarm counts the
    repeats of the inputs; different inputs of the same predictions are no repeat."""
    x = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    x[1:] = x[0]  # one digit, 8 times
    probs = _probs(torch.ones(8, dtype=torch.bool))  # no two rows alike, as a batch's rows may be
    assert ShiftAlarm(_watched(), 0.01).observe(probs).to_dict()["counted"]["repeated"] == 0  # what predictions tell
    assert ShiftAlarm(_watched(), 0.01).observe(probs, inputs=x).to_dict()["counted"]["repeated"] == 7
    same = probs[:, :1].expand(-1, 8, -1)  # 8 inputs answered alike to the bit
    others = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    assert ShiftAlarm(_watched(), 0.01).observe(same, inputs=others).to_dict()["counted"]["repeated"] == 0
    held = ShiftAlarm(_watched(), 0.01).observe(probs[:, :4], inputs=x[:4])
    assert held.observe(probs[:, 4:], inputs=x[4:]).to_dict()["counted"]["repeated"] == 7  # across batches too
    with pytest.raises(ValueError, match="3 inputs for the predictions of 8"):
        ShiftAlarm(_watched(), 0.01).observe(probs, inputs=x[:3])


def test_an_alarm_of_a_calibration_entry_watches_its_rule_and_after_alarm_rule_at_their_validation_rates():
    rule, after = Rule(0.5, 0.85, "mutual_information", 0.46), Rule(0.02, 0.85, "mutual_information", 0.46)
    entry = {"rule": rule.to_dict(), "validation": {"refused": 0.0234, "size": 5000},
             "after_alarm": {"rule": after.to_dict(), "validation": {"refused": 0.0778, "size": 5000}}}
    alarm = ShiftAlarm.of(entry)
    assert alarm.watched == {"refused": Watched(rule, 0.0234), "held": Watched(after, 0.0778)}
    assert alarm.levels.tolist() == pytest.approx([0.0734, 0.1278, 0.05])
    no_after = ShiftAlarm.of({**entry, "after_alarm": {"error": "none certified"}})
    assert set(no_after.watched) == {"refused"}
    again = alarm.observe(_probs(torch.zeros(30, dtype=torch.bool))).restarted()
    assert again.seen == 0 and again.watched == alarm.watched and not again.digests


@pytest.mark.slow
def test_a_stream_of_200000_inputs_remembers_the_last_100000():
    """The repeat martingale's memory is bounded: an input further back than REMEMBERED is forgotten."""
    probs = torch.softmax(torch.randn(1, 200_000, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    alarm = ShiftAlarm(_watched(), 0.01)
    status = Path("/proc/self/status")
    tracemalloc.start()
    alarm.observe(probs.float())
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert alarm.seen == 200_000 and len(alarm.digests) == len(alarm.order) == REMEMBERED
    assert python_peak / 2 ** 20 < 60 or not status.is_file()  # MB of Python objects: the digests alone
    assert alarm._repeats(probs[:, -1:].float().mean(0)).tolist() == [True]
    assert alarm._repeats(probs[:, :1].float().mean(0)).tolist() == [False]  # forgotten


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"alpha is a false-alarm rate in \(0, 1\), got 1.5"):
        ShiftAlarm(_watched(), 1.5)
    with pytest.raises(ValueError, match=r"the tolerance is a rise in a rate, in \(0, 0.5\), got 0"):
        ShiftAlarm(_watched(), 0.1, tolerance=0)
    with pytest.raises(ValueError, match=r"watches the certified rule \(refused\) and may watch the after-alarm rule"):
        ShiftAlarm({"held": Watched(UNSURE, 0.1)}, 0.1)
    assert set(MARTINGALES) == {"refused", "held", "repeated"} and math.isclose(sum(MARTINGALES.values()), 1.0)


def _shipped_lenet_draws(shared_data, images: torch.Tensor):
    """The shipped lenet and its Bayesian posterior's 100 draws [S, N, 10] for ``images`` (uint8
    [N, 28, 28]), in their order, read as it reads them (seed 0)."""
    import pyro

    from bnn_zoo.data.inputs import pixel_inputs
    from bnn_zoo.runs.storage.loading import load
    from bnn_zoo.runs.storage.trained import posteriors

    trained = load("lenet")
    with pyro.settings.context(module_local_params=True):
        pyro.set_rng_seed(0)
        return trained, posteriors(trained)["bayes"].predict(pixel_inputs(trained.config.data, images), 100)


@pytest.mark.slow
def test_the_shipped_lenet_s_alarm_stays_silent_on_every_window_of_mnist_s_test_set_in_its_stored_order(shared_data):
    """Issue 46: the other writers' digits of MNIST's test set, window by window in the order the files
    hold them (scripts/alarm_rates.py's windows), each a stream of its own: no alarm; a corruption that
    blurs the digits, one stream of 500, sounds it within 50 inputs."""
    from bnn_zoo.data.shifted.corruptions import corrupt
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    trained, probs = _shipped_lenet_draws(shared_data, images)
    windows = {"first 1,000": (0, 1000), "last 1,000": (9000, 10000), "4,000-5,000": (4000, 5000),
               "5,000-6,000": (5000, 6000), "last 5,000": (5000, 10000), "whole set": (0, 10000)}
    for name, (start, end) in windows.items():
        alarm = trained.alarm("bayes").observe(probs[:, start:end])
        assert alarm.seen == end - start and not alarm.alarmed, (name, alarm.describe())
    _, corrupted = _shipped_lenet_draws(shared_data, corrupt(images[:500], "impulse_noise"))
    alarm = trained.alarm("bayes").observe(corrupted)
    assert alarm.alarmed and alarm.alarm_at <= 50 and alarm.direction in ("refused", "held")


@pytest.mark.slow
def test_the_shipped_lenet_sees_a_stream_of_one_ordinary_digit_repeated(shared_data):
    """10,000 copies of an ordinary MNIST test digit, each answered and none refused: the repeat
    martingale sounds within a few inputs, the refusal martingales never."""
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    trained, probs = _shipped_lenet_draws(shared_data, images[4:5])
    alarm = trained.alarm("bayes").observe(probs.expand(-1, 10000, -1))
    assert alarm.direction == "repeated" and alarm.alarm_at <= 5
    assert bool((alarm.peaks[:2] < alarm.log_bounds[:2]).all())
