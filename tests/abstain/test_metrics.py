import pytest
import torch

from bnn_zoo.abstain.metrics import detection, expected_calibration_error, fpr_at_95_tpr, reliability_bins


def test_auroc_is_the_probability_an_ood_input_scores_higher():
    g = torch.Generator().manual_seed(0)
    inside, outside = torch.randn(300, generator=g), torch.randn(200, generator=g) + 1.0
    pairs = (outside[:, None] > inside[None, :]).float().mean().item()  # no ties among random floats
    found = detection(inside, outside)
    assert found["auroc"] == pytest.approx(pairs, abs=1e-6)
    assert detection(torch.rand(200), torch.rand(300) + 1.0) == {"auroc": 1.0, "aupr": 1.0, "fpr95": 0.0}
    same = torch.rand(500)
    assert detection(same, same.clone())["auroc"] == pytest.approx(0.5)


def test_fpr95_counts_the_in_distribution_inputs_above_the_95_percent_cut():
    outside = torch.arange(100.0)  # 95% of them are >= 5
    inside = torch.tensor([0.0, 1.0, 2.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0])  # 7 of 10 are >= 5
    assert fpr_at_95_tpr(inside, outside) == pytest.approx(0.7)


def test_calibration_of_a_known_predictor():
    # confidence 0.9 on every input, right on 7 of 10: ECE = |0.9 - 0.7| = 0.2
    probs = torch.tensor([[0.9, 0.1]]).repeat(10, 1)
    labels = torch.tensor([0] * 7 + [1] * 3)
    assert expected_calibration_error(probs, labels) == pytest.approx(0.2, abs=1e-6)
    conf, acc, count = reliability_bins(probs.unsqueeze(0), labels, bins=10)
    assert count.tolist() == [0] * 9 + [10]  # 0.9 * 10 = bin 9
    assert conf[9].item() == pytest.approx(0.9) and acc[9].item() == pytest.approx(0.7)
