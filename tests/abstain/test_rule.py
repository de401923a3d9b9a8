import math

import numpy as np
import pytest
import torch

from bnn_zoo.abstain.rule import Rule, abstain, uncertainty


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
        abstain(torch.rand(2, 3, 4).softmax(-1), quantile=1.5)


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


def test_the_gate_refuses_disagreeing_samples_that_the_quantile_rule_accepts():
    agree = [[0.9, 0.1], [0.9, 0.1], [0.9, 0.1]]
    disagree = [[0.99, 0.01], [0.99, 0.01], [0.45, 0.55]]  # median 0.99 for class 0, MI about 0.3 bits
    probs = torch.cat([samples(*agree), samples(*disagree)], 1)
    mi = uncertainty(probs)["mutual_information"]
    assert mi[0].item() == pytest.approx(0, abs=1e-6) and 0.2 < mi[1].item() < 0.4
    seed_rule = Rule()(probs)
    assert seed_rule.refused.tolist() == [False, False]
    gated = Rule(signal="mutual_information", cut=0.1)(probs)
    assert gated.refused.tolist() == [False, True] and gated.prediction.tolist() == [0, -1]
    assert gated.refused_by_gate.tolist() == [False, True] and gated.refused_by_quantile.tolist() == [False, False]
    assert gated.reasons(0) == [] and gated.reasons(1) == ["mutual_information"]
    assert gated.describe(1) == {"accepted": {}, "answer": None, "refused_by": ["mutual_information"]}  # nothing shown as accepted
    assert gated.describe(0)["accepted"] == {0: round(float(gated.quantile_probs[0, 0]), 4)}
    assert repr(gated) == ("Decision(2 inputs, 2 classes: 1 refused (0 by the quantile, 1 by mutual_information), "
                           "0 answered with a set of classes)")
    assert not gated.multiple.any()
    by_entropy = Rule(signal="entropy", cut=0.5)(probs)  # entropy of the means: 0.47 and 0.70 bits
    assert by_entropy.refused.tolist() == [False, True]


def test_both_signals_can_refuse_one_input():
    probs = samples([0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9])
    decision = Rule(signal="entropy", cut=1.0)(probs)
    assert decision.reasons(0) == ["quantile", "entropy"]


def test_rules_check_their_values_and_round_trip():
    for bad, message in (({"threshold": 1.5}, "threshold"), ({"signal": "variance"}, "signal"),
                         ({"cut": -1.0}, "cut"), ({"cut": float("nan")}, "cut")):
        with pytest.raises(ValueError, match=message):
            Rule(**bad)
    for rule in (Rule(), Rule(0.3, 0.4, "entropy", 0.25)):
        assert Rule.from_dict(rule.to_dict()) == rule
    assert Rule().to_dict()["cut"] is None  # JSON has no infinity


@pytest.mark.parametrize("probs, why", [
    (torch.randn(3, 2, 4), "logits"),
    (torch.full((3, 2, 4), 2.5), "probabilities x 10"),
    (torch.full((3, 2, 4), float("nan")), "NaN"),
])
def test_anything_but_probabilities_is_refused(probs, why):
    with pytest.raises(ValueError, match="softmax"):
        abstain(probs)


@pytest.mark.parametrize("probs, error, message", [
    (np.full((2, 3, 4), 0.25, dtype=np.float32), TypeError, "torch.Tensor.*got a ndarray"),
    (torch.tensor([[[0, 1], [1, 0]]]), TypeError, "floating-point probabilities, got torch.int64"),
    (torch.full((3, 0, 10), 0.1), ValueError, r"no inputs \(N\)"),
    (torch.full((0, 2, 10), 0.1), ValueError, r"no samples \(S\)"),
    (torch.full((3, 2, 0), 0.1), ValueError, r"no classes \(C\)"),
])
def test_misuse_is_named_before_torch_sees_it(probs, error, message):
    for use in (abstain, Rule(signal="entropy", cut=1.0), uncertainty):
        with pytest.raises(error, match=message):
            use(probs)
