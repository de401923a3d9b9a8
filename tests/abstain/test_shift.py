"""The shift alarm (bnn_zoo.abstain.shift): a conformal test martingale that sounds at most alpha of the
time on inputs like the validation inputs, and soon where they are not."""
import math

import pytest
import torch

from bnn_zoo.abstain.shift import ShiftAlarm


def test_the_alarm_sounds_at_most_alpha_of_the_time_on_exchangeable_streams_over_many_draws():
    """Ville's inequality: over whole streams of inputs drawn as the validation inputs were, the
    martingale ever reaches 1 / alpha in at most alpha of the draws (plus sampling slack)."""
    alpha, draws, length = 0.1, 400, 100
    alarms, naive_alarms = 0, 0
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        scores = -torch.log(torch.rand(200 + length, generator=g, dtype=torch.float64))  # exponential
        alarms += ShiftAlarm(scores[:200], alpha, seed=seed).update(scores[200:]).alarmed
        naive = ShiftAlarm(scores[:200], alpha, seed=seed)
        naive.p_values = lambda score, alarm=naive: _without_itself(alarm, score)
        naive_alarms += naive.update(scores[200:]).alarmed
    slack = 3 * math.sqrt(alpha * (1 - alpha) / draws)
    assert alarms / draws <= alpha + slack
    assert naive_alarms / draws > alpha + slack  # the test can tell a p-value a little too small


def _without_itself(alarm: ShiftAlarm, score: float) -> tuple[float, float]:
    """The p-values with the new score left out of their own count: at most 1/n smaller, not uniform."""
    above, below = sum(b > score for b in alarm.bag), sum(b < score for b in alarm.bag)
    alarm.bag = sorted([*alarm.bag, score])
    return above / len(alarm.bag), below / len(alarm.bag)


@pytest.mark.parametrize("shift, within", [(1.0, 30), (0.5, 100)])
def test_a_stream_of_higher_scores_sounds_the_alarm_soon(shift, within):
    g = torch.Generator().manual_seed(0)
    reference = -torch.log(torch.rand(2000, generator=g, dtype=torch.float64))
    stream = -torch.log(torch.rand(200, generator=g, dtype=torch.float64)) + shift
    alarm = ShiftAlarm(reference, 0.01).update(stream)
    assert alarm.alarmed and alarm.alarm_at <= within and alarm.direction == "higher"
    assert alarm.describe().startswith("shift alarm: these inputs do not look like the ones the guarantee was "
                                       "certified on (their entropy ran higher than the certifying inputs': its "
                                       "test martingale reached")
    assert f"after {alarm.alarm_at} of 200 inputs; false alarms at most 1% over the whole stream" in alarm.describe()


def test_a_stream_more_certain_than_the_reference_sounds_it_too():
    """A network sure of what it never saw: every score at the reference's least (ties, broken at random)."""
    reference = torch.cat([torch.zeros(100), torch.rand(1900, generator=torch.Generator().manual_seed(0)) + 0.01])
    alarm = ShiftAlarm(reference, 0.01).update(torch.zeros(100))
    assert alarm.alarmed and alarm.direction == "lower" and alarm.alarm_at <= 10
    assert "their entropy ran lower than the certifying inputs'" in alarm.describe()
    quiet = ShiftAlarm(reference, 0.01).update(reference[torch.randperm(2000, generator=torch.Generator().manual_seed(1))[:300]])
    assert not quiet.alarmed and quiet.describe().startswith("no shift alarm: 300 inputs look like the ones")


def test_each_martingale_is_the_mixture_of_power_martingales_over_its_p_values():
    alarm = ShiftAlarm(torch.tensor([1.0, 2.0, 3.0]), 0.5, seed=3)
    p = []
    for score in (2.5, 0.5, 9.0, 2.0):
        bag = sorted(alarm.bag)
        p.append(alarm.p_values(score))
        above, below = sum(s > score for s in bag), sum(s < score for s in bag)
        ties = sum(s == score for s in bag) + 1
        n = len(bag) + 1
        assert above / n <= p[-1][0] <= (above + ties) / n and below / n <= p[-1][1] <= (below + ties) / n
        assert p[-1][0] + p[-1][1] == pytest.approx((above + below + 2 * (p[-1][0] * n - above)) / n)  # one u
    fresh = ShiftAlarm(torch.tensor([1.0, 2.0, 3.0]), 0.5, seed=3).update(torch.tensor([2.5, 0.5, 9.0, 2.0]))
    bets = torch.linspace(0.001, 1.0, 1000, dtype=torch.float64)
    expected = [float(torch.stack([bets * q[side] ** (bets - 1) for q in p]).prod(0).mean()) for side in (0, 1)]
    assert fresh.log_martingale == pytest.approx(math.log(max(expected)), rel=1e-9)


def test_bad_settings_and_scores_are_refused():
    with pytest.raises(ValueError, match=r"alpha is a false-alarm rate in \(0, 1\), got 1.5"):
        ShiftAlarm(torch.ones(3), 1.5)
    with pytest.raises(ValueError, match="needs the validation inputs' scores"):
        ShiftAlarm(torch.tensor([]), 0.1)
    with pytest.raises(ValueError, match="a score of the stream is nan"):
        ShiftAlarm(torch.ones(3), 0.1).update(torch.tensor([float("nan")]))
