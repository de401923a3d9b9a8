"""Conformal sets (bnn_zoo.abstain.conformal) cover the true class at the promised rate, on any predictor."""
import math

import pytest
import torch

from bnn_zoo.abstain.conformal import SCORES, calibrate_sets, class_scores, fewest_inputs


def draws(n: int, generator: torch.Generator, classes: int = 10, overconfidence: float = 2.0):
    """Exchangeable (predictive, label) pairs: the labels follow softmax(logits), the predictive is
    softmax(overconfidence x logits) (2: a miscalibrated predictor; 1: a calibrated one)."""
    logits = torch.randn(n, classes, generator=generator) * 1.5
    labels = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
    return (overconfidence * logits).softmax(-1), labels


@pytest.mark.slow
@pytest.mark.parametrize("score", SCORES)
def test_the_true_class_scores_under_the_threshold_at_the_exact_conformal_rate(score):
    """With n = 50 calibration inputs and alpha = 0.1 the threshold is the 46th smallest score, so a
    new input's true class is under it with probability 46/51 = 0.902 exactly (continuous scores),
    not the 0.882 of the plain 90% quantile: 2,000 calibrations, each checked on 500 new inputs."""
    generator = torch.Generator().manual_seed(0)
    rates, covered = [], []
    for _ in range(2000):
        sets = calibrate_sets(*draws(50, generator), alpha=0.1, score=score, generator=generator)
        probs, labels = draws(500, generator)
        state = generator.get_state()
        true_scores = class_scores(probs, score, generator=generator).gather(-1, labels[:, None]).squeeze(-1)
        rates.append((true_scores <= sets.threshold).float().mean().item())
        generator.set_state(state)  # the sets' own draws of u: the same as the scores'
        covered.append(sets.coverage_and_size(probs, labels, generator, nonempty=True)[0])
    mean = sum(rates) / len(rates)
    assert abs(mean - 46 / 51) < 0.004, mean  # the standard error is 0.001
    assert min(c - r for c, r in zip(covered, rates)) >= 0  # nonempty sets cover at least as often


def test_sets_are_single_classes_where_the_predictive_is_sure_and_grow_where_it_is_not():
    generator = torch.Generator().manual_seed(1)
    sets = calibrate_sets(*draws(2000, generator, overconfidence=1.0), alpha=0.05, score="aps", generator=generator)
    sure = torch.full((1, 10), 0.001).index_fill_(1, torch.tensor([3]), 0.991)
    unsure = torch.full((1, 10), 0.1)
    assert sets.predict(sure, generator, nonempty=True).nonzero()[:, 1].tolist() == [3]
    assert sets.predict(unsure, generator).sum().item() > 5


def test_samples_are_averaged_into_the_predictive():
    probs = torch.tensor([[[0.9, 0.1]], [[0.3, 0.7]]])  # two posterior samples of one input
    assert torch.allclose(class_scores(probs, "thr"), torch.tensor([[0.4, 0.6]]))


def test_aps_and_raps_scores_are_the_mass_above_each_class_and_a_uniform_share_of_its_own():
    probs = torch.tensor([[0.5, 0.2, 0.3]])
    u = torch.rand(1, 1, generator=torch.Generator().manual_seed(5)).item()
    aps = class_scores(probs, "aps", generator=torch.Generator().manual_seed(5))
    assert torch.allclose(aps, torch.tensor([[0.0, 0.8, 0.5]]) + u * probs)
    raps = class_scores(probs, "raps", lam=0.1, k_reg=1, generator=torch.Generator().manual_seed(5))
    assert torch.allclose(raps, aps + torch.tensor([[0.0, 0.2, 0.1]]))  # ranks 1, 3, 2


def test_too_few_calibration_inputs_give_every_class():
    generator = torch.Generator().manual_seed(2)
    sets = calibrate_sets(*draws(50, generator), alpha=0.01)  # 1/0.01 - 1 = 99 inputs needed
    assert math.isinf(sets.threshold)
    assert sets.predict(draws(4, generator)[0]).all()


@pytest.mark.parametrize("alpha, fewest", [(0.01, 99), (0.02, 49), (0.05, 19), (0.1, 9), (0.2, 4), (0.013, 76)])
def test_the_fewest_inputs_for_sets_smaller_than_every_class(alpha, fewest):
    """n >= 1/alpha - 1: with fewer calibration inputs the threshold is infinite (what predict and
    calibrate say a run's validation split needs)."""
    generator = torch.Generator().manual_seed(4)
    assert fewest_inputs(alpha) == fewest
    assert math.isfinite(calibrate_sets(*draws(fewest, generator), alpha=alpha).threshold)
    assert math.isinf(calibrate_sets(*draws(fewest - 1, generator), alpha=alpha).threshold)


@pytest.mark.parametrize("kwargs, message", [
    ({"alpha": 0.0}, r"alpha must lie in \(0, 1\), got 0.0"),
    ({"alpha": 1.5}, r"alpha must lie in \(0, 1\), got 1.5"),
    ({"score": "lac"}, r"unknown conformal score 'lac'; choose one of thr, aps, raps"),
])
def test_bad_settings_are_refused_in_one_line(kwargs, message):
    probs, labels = draws(20, torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match=message):
        calibrate_sets(probs, labels, **kwargs)


def test_what_is_not_a_classifier_s_probabilities_is_refused():
    labels = torch.zeros(4, dtype=torch.long)
    for probs in (torch.randn(4, 2), torch.full((4, 3), float("nan"))):  # a regression's [N, 2]; NaN
        with pytest.raises(ValueError, match="probs must be class probabilities, finite and summing to 1"):
            calibrate_sets(probs, labels)


def test_labels_must_match_the_inputs():
    probs, labels = draws(20, torch.Generator().manual_seed(4))
    with pytest.raises(ValueError, match="19 labels for 20 inputs"):
        calibrate_sets(probs, labels[:19])


@pytest.mark.slow
def test_sets_on_a_trained_posterior_cover_fresh_images_at_the_stated_rate(tiny_run, shared_data):
    """Calibrated on 4,000 MNIST test images drawn at random, the sets of a trained posterior's
    predictive hold the true digit of 90% of the other 6,000, to within sampling error (sd 0.5
    points). (In file order the two parts are not exchangeable: MNIST's test set puts the digits of
    two groups of writers one after the other.)"""
    from bnn_zoo import load, predict
    from bnn_zoo.data.sets import load_torchvision, normalize

    trained = load(tiny_run)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    probs = predict(trained.model, trained.guide, normalize(images[order]).to(trained.device), 10)
    labels = labels[order].to(trained.device)
    for score in SCORES:
        generator = torch.Generator().manual_seed(0)
        sets = calibrate_sets(probs[:, :4000], labels[:4000], alpha=0.1, score=score, generator=generator)
        coverage, size = sets.coverage_and_size(probs[:, 4000:], labels[4000:], generator)
        assert abs(coverage - 0.9) < 0.02, (score, coverage)
        assert 0.5 < size < 3  # not every class: sets that say something


def test_an_input_s_answered_set_does_not_depend_on_the_inputs_beside_it():
    """aps draws a u per input: answer() seeds each input's own, so an image gets the same set alone
    as in a batch, and no set is empty."""
    generator = torch.Generator().manual_seed(6)
    sets = calibrate_sets(*draws(500, generator), alpha=0.2, score="aps", generator=generator)
    probs = draws(12, generator)[0][None]  # one posterior sample of 12 inputs
    batch = sets.answer(probs, seed=3)
    assert batch == [sets.answer(probs[:, i:i + 1], seed=3)[0] for i in range(12)]
    assert all(batch) and sets.answer(probs, seed=3) == batch
