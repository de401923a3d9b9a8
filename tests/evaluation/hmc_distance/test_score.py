"""Scoring against a reference: HMC's own predictive at agreement 1 and total variation 0, a wider
posterior further away, a model and its guide scored on the reference's own inputs, and predictive
samples that cannot be scored refused in one line."""
import pytest
import torch
from test_reference import hand_made

import bnn_zoo
from bnn_zoo import against_hmc, predict
from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.evaluation.hmc_distance.metrics import predictive_draws, total_variation, wasserstein_1


def test_the_reference_scored_against_itself_agrees_everywhere_at_no_distance():
    reference, _ = hand_made()
    found = against_hmc(reference.predictive["test"][None], reference=reference)["test"]
    assert (found.agreement, found.total_variation, found.times_floor) == (1.0, 0.0, 0.0)
    assert found.inputs == 300 and found.floor == reference.floor("test")
    regression, _ = hand_made(regression=True)
    assert against_hmc(regression.predictive["test"], reference=regression)["test"].w1 == 0.0


def test_a_chain_of_the_reference_is_as_far_as_the_chains_are_from_one_another():
    reference, samples = hand_made()
    chain = against_hmc(samples[:25], reference=reference)["test"]
    floor = reference.floor("test")
    # against the pool of both chains a chain is closer than to the other chain alone
    assert 0 < chain.total_variation < floor["total_variation"] and chain.agreement >= floor["agreement"]
    assert chain.total_variation == pytest.approx(total_variation(samples[:25].mean(0), reference.predictive["test"]))


def test_a_posterior_made_wider_is_scored_further_away():
    reference, samples = hand_made()
    logits = samples.log()
    tempered = [against_hmc((logits / t).softmax(-1), reference=reference)["test"] for t in (1.0, 2.0, 4.0)]
    assert tempered[0].total_variation < tempered[1].total_variation < tempered[2].total_variation
    assert tempered[2].times_floor > 10 * tempered[0].times_floor
    regression, draws = hand_made(regression=True)
    spread = [against_hmc(draws.mean(0) + k * (draws - draws.mean(0)), reference=regression)["test"].w1
              for k in (1.0, 2.0, 4.0)]
    assert spread[0] < 0.05 < spread[1] < spread[2]


def test_a_regression_s_mean_and_noise_sd_are_scored_by_draws_of_their_mixture():
    regression, draws = hand_made(regression=True)
    outputs = torch.stack([draws, torch.full_like(draws, 0.5)], -1)  # each draw a Normal of sd 0.5
    found = against_hmc(outputs, reference=regression, seed=3)["test"]
    hmc = regression.predictive["test"]
    assert found.w1 == pytest.approx(wasserstein_1(predictive_draws(outputs, 50, seed=3), hmc))
    assert found.w1 > against_hmc(draws, reference=regression)["test"].w1  # the noise widens the predictive


@pytest.mark.parametrize("outputs, message", [
    (torch.randn(4, 300, 10), "not class probabilities .* give softmax\\(logits\\)"),
    (torch.full((4, 301, 10), 0.1), "holds 300 inputs of 10 classes: give predictive samples \\[S, N, 10\\] on N of "
                                    "them, got \\[4, 301, 10\\]"),
    (torch.full((4, 300, 5), 0.2), "got \\[4, 300, 5\\]"),
    (torch.full((300, 10), 0.1), "got \\[300, 10\\]")])
def test_predictive_samples_that_cannot_be_scored_are_refused_in_one_line(outputs, message):
    with pytest.raises(ValueError, match=message):
        against_hmc(outputs, reference=hand_made()[0])


def test_predictive_samples_of_a_set_the_reference_lacks_or_of_several_sets_are_refused():
    reference, samples = hand_made()
    with pytest.raises(ValueError, match="holds no set 'fog'; its sets: test"):
        against_hmc({"fog": samples}, reference=reference)
    with pytest.raises(ValueError, match="one tensor of predictive samples scores one set, not 2"):
        against_hmc(samples, reference=reference, sets=("test", "fog"))
    assert against_hmc(samples, reference=reference, sets=("test",))["test"].inputs == 300


def test_a_prefix_of_the_inputs_is_scored_against_the_same_prefix():
    reference, samples = hand_made()
    found = against_hmc(samples[:, :40], reference=reference)["test"]
    assert found.inputs == 40
    assert found.total_variation == pytest.approx(total_variation(samples[:, :40].mean(0),
                                                                  reference.predictive["test"][:40]))


def test_a_model_and_its_guide_are_scored_on_the_reference_s_own_inputs():
    reference, _ = hand_made(regression=True, n=30)
    model, guide = bnn_zoo.build("toy_mlp", num_data=6, hidden=[8], noise_scale=0.1)
    predict(model, guide, reference.x["test"], 1)  # the guide's parameters made (its first call draws)
    found = against_hmc(model, guide, reference=reference, num_samples=20, seed=4)
    with seeded(4):
        outputs = predict(model, guide, reference.x["test"], 20)
    hmc = reference.predictive["test"]
    assert found["test"].w1 == pytest.approx(wasserstein_1(predictive_draws(outputs, 50, 4), hmc))
    assert str(found) == f"hand_made test (30 inputs): {found['test']}"
    assert found.to_dict()["sets"]["test"]["times_floor"] == found["test"].times_floor
    with pytest.raises(ValueError, match="pass the guide"):
        against_hmc(model, reference=reference)
