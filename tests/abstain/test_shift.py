"""The shift alarm (bnn_zoo.abstain.shift): conformal test martingales that sound at most alpha of the
time on inputs like the validation inputs, and soon where they are not, a stream that repeats one
input included; counts per rounded score, not the stream's history."""
import bisect
import math
import random
import tracemalloc
from pathlib import Path

import pytest
import torch

from bnn_zoo.abstain.shift import MARTINGALES, ShiftAlarm, _Counts, checked_reference


@pytest.mark.slow
def test_the_alarm_sounds_at_most_alpha_of_the_time_on_exchangeable_streams_over_many_draws():
    """Ville's inequality: over whole streams of inputs drawn as the validation inputs were (bet on
    at tolerance 0), or a little unlike them (p-values of mean 0.4545, within the tolerance), any of
    the martingales ever reaches its bound in at most alpha of the draws (plus sampling slack); a
    stream past the tolerance (mean 0.37) sounds it far more often."""
    alpha, draws, length = 0.1, 400, 100
    alarms, tolerated, past = 0, 0, 0
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        exponential = lambda n, scale=1.0: -torch.log(torch.rand(n, generator=g, dtype=torch.float64)) * scale  # noqa: E731
        reference = exponential(200)
        alarms += ShiftAlarm(reference, alpha, seed=seed, tolerance=0.0).update(exponential(length)).alarmed
        tolerated += ShiftAlarm(reference, alpha, seed=seed).update(exponential(length, 1.2)).alarmed
        past += ShiftAlarm(reference, alpha, seed=seed).update(exponential(length, 1.7)).alarmed
    slack = 3 * math.sqrt(alpha * (1 - alpha) / draws)
    assert alarms / draws <= alpha + slack and tolerated / draws <= alpha + slack
    assert past / draws > alpha + slack  # the test can tell


class OldAlarm:
    """The alarm as it was before it kept counts: every score in a sorted list, the two martingales'
    p-values by bisection (the p-values must not move by a bit)."""

    def __init__(self, reference: list[float], seed: int):
        self.bag, self.generator = sorted(reference), torch.Generator().manual_seed(seed)

    def p_values(self, score: float) -> tuple[float, float]:
        low, high = bisect.bisect_left(self.bag, score), bisect.bisect_right(self.bag, score)
        ties = high - low + 1
        u = float(torch.rand((), generator=self.generator, dtype=torch.float64))
        bisect.insort(self.bag, score)
        n = len(self.bag)
        return ((n - 1 - high) + u * ties) / n, (low + u * ties) / n


def test_the_p_values_are_the_sorted_list_s_bit_for_bit_and_the_martingales_their_mixtures():
    g = torch.Generator().manual_seed(0)
    reference = torch.round(-torch.log(torch.rand(3000, generator=g, dtype=torch.float64)) * 0.3, decimals=4)
    stream = torch.round(-torch.log(torch.rand(2000, generator=g, dtype=torch.float64)) * 0.33, decimals=4)
    stream[500:700] = 0.0  # ties with the reference's, and among themselves
    old = OldAlarm(reference.tolist(), seed=4)
    expected = [old.p_values(s) for s in stream.tolist()]
    new = ShiftAlarm(reference, 0.01, seed=4)
    u = torch.rand(len(stream), generator=torch.Generator().manual_seed(4), dtype=torch.float64).tolist()
    found = [new.p_values(s, v) for s, v in zip(stream.tolist(), u)]
    assert [f[:2] for f in found] == expected  # bit for bit
    alarm = ShiftAlarm(reference, 0.01, seed=4).update(stream[:1000]).update(stream[1000:])  # two calls: one stream
    p = torch.tensor(found, dtype=torch.float64)
    bets = torch.linspace(0.005, 1.0, 200, dtype=torch.float64) / 0.55 * 0.999  # up to 1 / (1/2 + 0.05)
    mixture = torch.log1p(bets * (0.45 - p[..., None])).sum(0).logsumexp(1) - math.log(200)  # bets mean < 0.45
    assert torch.allclose(alarm.log_martingales, mixture, rtol=1e-12, atol=1e-9)


def test_the_third_p_value_is_the_share_of_inputs_whose_score_is_at_least_as_common():
    alarm = ShiftAlarm(torch.tensor([1.0, 1.0, 1.0, 2.0, 2.0, 3.0]), 0.5)
    # 3.0 has come twice now, as 2.0; 1.0 three times: 3 more common, 4 as common (itself included), of 7
    assert alarm.p_values(3.0, 0.25)[2] == (3 + 0.25 * 4) / 7
    assert alarm.p_values(3.0, 0.5)[2] == (0 + 0.5 * 6) / 8  # 3.0 and 1.0 three times each: 6 as common, of 8
    assert alarm.p_values(0.5, 1.0)[2] == (8 + 1.0 * 1) / 9  # a new score: the rarest


def test_the_counts_add_and_sum_as_a_list_does_as_they_grow():
    rng = random.Random(0)
    counts, plain = _Counts(4), [0] * 5000
    for _ in range(3000):
        key, times = rng.randrange(5000) if rng.random() < 0.3 else rng.randrange(20), rng.randrange(-2, 5)
        counts.add(key, times)
        plain[key] += times
        probe = rng.randrange(5100)
        assert counts.below(probe) == sum(plain[:probe]) and counts.total == sum(plain)


@pytest.mark.parametrize("shift, within", [(1.0, 30), (0.5, 100)])
def test_a_stream_of_higher_scores_sounds_the_alarm_soon(shift, within):
    g = torch.Generator().manual_seed(0)
    reference = -torch.log(torch.rand(2000, generator=g, dtype=torch.float64))
    stream = -torch.log(torch.rand(200, generator=g, dtype=torch.float64)) + shift
    alarm = ShiftAlarm(reference, 0.01).update(stream)
    assert alarm.alarmed and alarm.alarm_at <= within and alarm.direction == "higher"
    assert alarm.describe() == (f"shift alarm: by input {alarm.alarm_at} of 200, these inputs no longer look like the "
                                "ones the guarantee was certified on: they are more uncertain than those were (a "
                                "stream like those sounds it at most 1% of the time)")
    found = alarm.to_dict()
    assert found["alarm_at"] == alarm.alarm_at and found["peaks"]["higher"] >= found["bounds"]["higher"]
    assert found["bounds"] == pytest.approx({"higher": 1 / 0.0045, "lower": 1 / 0.0045, "repeated": 1 / 0.001})


def test_a_stream_more_certain_than_the_reference_sounds_it_too():
    """A network sure of what it never saw: every score at the reference's least (ties, broken at random)."""
    reference = torch.cat([torch.zeros(100), torch.rand(1900, generator=torch.Generator().manual_seed(0)) + 0.01])
    alarm = ShiftAlarm(reference, 0.01).update(torch.zeros(100))
    # at input 13: an input can multiply a bet by at most 1 + 0.45 / 0.55, so none sounds before input 10
    assert alarm.alarmed and alarm.direction == "lower" and alarm.alarm_at <= 13
    assert "they are surer than those were" in alarm.describe()
    g = torch.Generator().manual_seed(1)  # 300 fresh inputs drawn as the reference's were (its own repeat it)
    fresh = torch.where(torch.rand(300, generator=g) < 0.05, 0.0, torch.rand(300, generator=g) + 0.01)
    quiet = ShiftAlarm(reference, 0.01).update(fresh)
    assert not quiet.alarmed and quiet.describe() == (
        "no shift alarm: 300 inputs look like the ones the guarantee was certified on (a stream like those sounds it at "
        "most 1% of the time)")


def test_a_stream_a_little_unlike_the_reference_in_blocks_sounds_only_the_untolerant_alarm():
    """MNIST's test digits in their stored order: a first half ranked a little more uncertain than
    the validation digits, a second a little surer (p-values of mean 1 / (1 + 1.15) = 0.465, then
    0.46 from below). Within the tolerance (0.05) the alarm stays silent over all 10,000; a bet on
    any departure from uniform p-values (tolerance 0) sounds on them."""
    g = torch.Generator().manual_seed(0)
    exponential = lambda n, scale: -torch.log(torch.rand(n, generator=g, dtype=torch.float64)) * scale  # noqa: E731
    reference = exponential(5000, 1.0)
    stream = torch.cat([exponential(5000, 1.15), exponential(5000, 0.85)])
    quiet = ShiftAlarm(reference, 0.01).update(stream)
    assert not quiet.alarmed and quiet.to_dict()["tolerance"] == 0.05
    strict = ShiftAlarm(reference, 0.01, tolerance=0.0).update(stream)
    assert strict.alarmed and strict.alarm_at <= 5000 and strict.direction == "higher"
    shifted = ShiftAlarm(reference, 0.01).update(exponential(500, 2.0))  # p-values of mean 1/3: far off
    assert shifted.alarmed and shifted.alarm_at <= 100 and shifted.direction == "higher"


def test_a_stream_of_one_ordinary_input_repeated_sounds_the_repeat_martingale():
    """The same score over and over, one the validation inputs hold in their middle: the two
    martingales of its level see nothing (it is an ordinary score), the third sees it come back."""
    g = torch.Generator().manual_seed(0)
    reference = torch.round(torch.rand(3000, generator=g, dtype=torch.float64) * 2, decimals=4)
    stream = torch.full((2000,), float(reference.median()), dtype=torch.float64)
    alarm = ShiftAlarm(reference, 0.01).update(stream)
    assert alarm.direction == "repeated" and alarm.alarm_at <= 60
    assert "they repeat one another far more than inputs drawn like those would" in alarm.describe()
    bounds = alarm.log_bounds[:2]
    assert bool((alarm.peaks[:2] < bounds).all())  # what the alarm saw before the third martingale: nothing


@pytest.mark.slow
def test_the_shipped_lenet_sees_a_stream_of_one_ordinary_digit_repeated(shared_data):
    """10,000 copies of an ordinary MNIST test digit left the alarm silent ("10000 inputs look like the
    ones the guarantee was certified on"): its entropy lies among the certifying digits' own. The
    repeat martingale sounds once the digit has come more often than the certifying inputs' most
    common score (0 bits, 2,310 of 5,000: the shipped lenet's reference, each digit read as given
    and remade)."""
    trained, probs = _shipped_lenet_draws(shared_data, slice(4, 5))
    alarm = trained.alarm("bayes").observe(probs.expand(-1, 3000, -1))
    assert alarm.direction == "repeated" and 2310 < alarm.alarm_at <= 3000
    assert bool((alarm.peaks[:2] < alarm.log_bounds[:2]).all())  # the two martingales of its level: silent


@pytest.mark.slow
def test_the_shipped_lenet_stays_silent_on_mnist_s_test_set_in_its_stored_order(shared_data):
    """The issue's clean stream: all 10,000 MNIST test digits, in the order the files hold them
    (writer group by writer group, a little unlike the certifying digits). Within the tolerance the
    alarm stays silent; a bet on any departure from uniform p-values sounds on them."""
    from bnn_zoo.abstain.shift import scores

    trained, probs = _shipped_lenet_draws(shared_data, slice(None))
    found = scores(probs)
    alarm = trained.alarm("bayes").update(found)
    assert alarm.seen == 10000 and not alarm.alarmed
    assert ShiftAlarm(alarm.reference, tolerance=0.0).update(found).alarmed


def _shipped_lenet_draws(shared_data, chosen: slice):
    """The shipped lenet and its Bayesian posterior's 100 draws [100, N, 10] for MNIST's test digits
    ``chosen``, in their stored order, read as it reads them (seed 0)."""
    import pyro

    from bnn_zoo.data.inputs import pixel_inputs
    from bnn_zoo.data.sets import load_torchvision
    from bnn_zoo.runs.loading import load
    from bnn_zoo.runs.trained import posteriors

    trained = load("lenet")
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    with pyro.settings.context(module_local_params=True):
        pyro.set_rng_seed(0)
        return trained, posteriors(trained)["bayes"].predict(pixel_inputs(trained.config.data, images[chosen]), 100)


@pytest.mark.slow
def test_a_stream_of_40000_inputs_holds_counts_not_its_history():
    """+1.1 GB at the peak once (the bets of every input at once, and a list of every score): now
    the bets of CHUNK inputs at a time and counts per rounded score."""
    g = torch.Generator().manual_seed(0)
    reference = torch.round(torch.rand(5000, generator=g, dtype=torch.float64) * 3, decimals=4)
    stream = torch.round(torch.rand(40000, generator=g, dtype=torch.float64) * 3, decimals=4)
    alarm = ShiftAlarm(reference)
    status, clear = Path("/proc/self/status"), Path("/proc/self/clear_refs")
    if not (status.is_file() and clear.is_file()):
        pytest.skip("needs Linux's /proc/self to measure the peak memory")
    clear.write_text("5")  # the peak resident memory starts again from here
    before = _kilobytes(status, "VmRSS")
    tracemalloc.start()
    alarm.update(stream)
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert alarm.seen == 40000
    assert (_kilobytes(status, "VmHWM") - before) / 1024 < 150  # MB, tensors included
    assert python_peak / 2 ** 20 < 10  # MB of Python objects: no list of every score


def _kilobytes(status: Path, key: str) -> int:
    line = next(line for line in status.read_text().splitlines() if line.startswith(key + ":"))
    return int(line.split()[1])


@pytest.mark.parametrize("entry, said", [
    ({"signal": "entropy", "scores": [0.1, 10 ** 400]}, "its alarm reference's score 2 is 1000000000000"),
    ({"signal": "entropy", "scores": [-0.5]}, "its alarm reference's score 1 is -0.5: an entropy is a number of bits "
                                              "from 0 to log2(10) = 3.3219"),
    ({"signal": "entropy", "scores": [0.1, 3.33]}, "its alarm reference's score 2 is 3.33: an entropy"),
    ({"signal": "entropy", "scores": [True]}, "its alarm reference's score 1 is True"),
    ({"signal": "entropy", "scores": ["0.1"]}, "its alarm reference's score 1 is '0.1'"),
    ({"signal": "entropy", "scores": []}, "an alarm reference holds at least one score rounded to 4 decimals, got 0"),
    ({"signal": "entropy", "scores": [0.1], "decimals": 2}, "an alarm reference holds at least one score rounded to 4 "
                                                           "decimals, got 1 scores at 2 decimals"),
    ([{"a": 1}], "an alarm reference holds the signal 'entropy' and a list of scores, got [{'a': 1}]"),
    ({"signal": "entropy", "scores": {"a": 1}}, "an alarm reference holds the signal 'entropy' and a list of scores, "
                                                "got {'signal': 'entropy'"),
])
def test_an_impossible_reference_is_refused_by_what_is_wrong(entry, said):
    with pytest.raises(ValueError, match="^" + __import__("re").escape(said)):
        ShiftAlarm.of(entry, classes=10)
    assert checked_reference({"signal": "entropy", "scores": [0, 3.3219]}, classes=10) == [0.0, 3.3219]


def test_bad_settings_and_scores_are_refused():
    with pytest.raises(ValueError, match=r"alpha is a false-alarm rate in \(0, 1\), got 1.5"):
        ShiftAlarm(torch.ones(3), 1.5)
    with pytest.raises(ValueError, match="needs the validation inputs' scores"):
        ShiftAlarm(torch.tensor([]), 0.1)
    with pytest.raises(ValueError, match="a score of the stream is nan"):
        ShiftAlarm(torch.ones(3), 0.1).update(torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="a score of the stream is -1.0: the alarm's scores are entropies in bits"):
        ShiftAlarm(torch.ones(3), 0.1).update(torch.tensor([-1.0]))
    assert set(MARTINGALES) == {"higher", "lower", "repeated"} and math.isclose(sum(MARTINGALES.values()), 1.0)
