import math

import pytest
import torch

from bnn_zoo.abstention import abstain, calibrate_threshold, uncertainty


def samples(*rows):
    """[S, 1, C] from S rows of class probabilities for one input."""
    return torch.tensor(rows, dtype=torch.float32).unsqueeze(1)


def test_median_exactly_at_the_threshold_is_accepted():
    probs = samples([0.1, 0.9], [0.2, 0.8], [0.3, 0.7])  # median of class 0 is 0.2
    decision = abstain(probs, quantile=0.5, threshold=0.2)
    assert decision.accepted.tolist() == [[True, True]]
    assert decision.multiple.tolist() == [True] and decision.refused.tolist() == [False]
    assert decision.prediction.tolist() == [1]


def test_two_classes_accepted_is_a_set_valued_answer():
    probs = samples([0.45, 0.45, 0.1], [0.5, 0.4, 0.1], [0.4, 0.5, 0.1])
    decision = abstain(probs)
    assert decision.accepted.tolist() == [[True, True, False]]
    assert decision.multiple.item() and not decision.refused.item()


def test_no_class_accepted_is_refused():
    probs = samples([0.9, 0.05, 0.05], [0.05, 0.85, 0.1], [0.1, 0.05, 0.85])  # medians 0.1, 0.05, 0.1
    decision = abstain(probs)
    assert decision.refused.tolist() == [True] and decision.prediction.tolist() == [-1]
    assert torch.allclose(decision.quantile_probs, torch.tensor([[0.1, 0.05, 0.1]]))
    assert torch.allclose(decision.mean_probs, torch.tensor([[0.35, 0.95 / 3, 1 / 3]]))
    assert decision.forced.tolist() == [0]  # the argmax of the mean probabilities


def test_quantile_and_threshold_are_knobs():
    probs = samples(*[[p, 1 - p] for p in (0.3, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6)])
    assert not abstain(probs, quantile=0.5, threshold=0.5).refused.item()
    # The 10th percentile of class 0 sits between 0.3 and 0.6, class 1's below 0.5.
    assert abstain(probs, quantile=0.0, threshold=0.5).refused.item()


def test_deterministic_softmax_is_one_sample():
    probs = torch.tensor([[0.15, 0.85], [0.5, 0.5]]).unsqueeze(0)
    decision = abstain(probs, threshold=0.6)
    assert decision.refused.tolist() == [False, True]


def test_bad_shapes_and_quantiles_are_explained():
    with pytest.raises(ValueError, match=r"\[S, N, C\].*unsqueeze\(0\)"):
        abstain(torch.rand(4, 10))
    with pytest.raises(ValueError, match="quantile"):
        abstain(torch.rand(2, 3, 4), quantile=1.5)


def test_entropy_is_maximal_at_uniform():
    uniform = torch.full((1, 1, 10), 0.1)
    peaked = torch.softmax(torch.randn(50, 200, 10) * 3, -1)
    u_uniform, u_peaked = uncertainty(uniform), uncertainty(peaked)
    assert u_uniform["entropy"].item() == pytest.approx(math.log2(10))
    assert (u_peaked["entropy"] < math.log2(10)).all()
    assert (u_peaked["mutual_information"] >= 0).all()
    assert torch.allclose(u_peaked["entropy"],
                          u_peaked["expected_entropy"] + u_peaked["mutual_information"], atol=1e-5)


def test_disagreeing_samples_have_mutual_information():
    agree = samples([0.5, 0.5], [0.5, 0.5])
    disagree = samples([1.0, 0.0], [0.0, 1.0])
    assert uncertainty(agree)["mutual_information"].item() == pytest.approx(0, abs=1e-6)
    assert uncertainty(disagree)["mutual_information"].item() == pytest.approx(1.0, abs=1e-4)


def test_calibration_reaches_its_target_coverage():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(20, 1000, 10) * 2, -1)
    labels = torch.randint(0, 10, (1000,))
    for target in (0.5, 0.8, 0.95):
        threshold = calibrate_threshold(probs, labels, coverage=target)
        accepted = int((~abstain(probs, threshold=threshold).refused).sum())
        assert math.ceil(target * 1000) <= accepted <= math.ceil(target * 1000) + 10


def test_calibration_reaches_its_target_risk():
    torch.manual_seed(0)
    labels = torch.randint(0, 10, (2000,))
    confidence = torch.rand(2000)
    # Confident inputs are mostly right, unconfident ones mostly wrong.
    predicted = torch.where(torch.rand(2000) < confidence, labels, (labels + 1) % 10)
    probs = torch.full((1, 2000, 10), 0.0)
    probs[0, torch.arange(2000), predicted] = 0.1 + 0.9 * confidence
    threshold = calibrate_threshold(probs, labels, risk=0.05)
    decision = abstain(probs, threshold=threshold)
    accepted = ~decision.refused
    risk = (decision.prediction[accepted] != labels[accepted]).float().mean().item()
    assert risk <= 0.05 and accepted.float().mean() > 0.05
    # The threshold is the lowest within the risk: accepting the next input breaks it.
    lower = probs[0].max(1).values[decision.refused].max().item()
    looser = abstain(probs, threshold=lower)
    taken = ~looser.refused
    assert (looser.prediction[taken] != labels[taken]).float().mean().item() > 0.05
    with pytest.raises(ValueError, match="exactly one"):
        calibrate_threshold(probs, labels)
