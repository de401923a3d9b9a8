"""The competition's metrics against their definitions on hand-made distributions: top-1 agreement,
total variation, the 1-Wasserstein distance (scipy's where scipy is installed), the regression's
draws and the chain-to-chain floor."""
import pytest
import torch

from bnn_zoo.evaluation.hmc_distance.metrics import (agreement, chain_floor, predictive_draws, total_variation,
                                                     wasserstein_1, wasserstein_1_each)

P = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.0, 0.5]])
Q = torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.2, 0.2, 0.6], [0.0, 1.0, 0.0]])


def test_agreement_is_the_share_of_inputs_with_the_same_most_probable_class():
    # argmax P: 0, 1, 2, 0 (ties to the first); Q: 0, 0, 2, 1 -> inputs 0 and 2 agree
    assert agreement(P, Q) == 0.5
    assert agreement(P, P) == 1.0


def test_total_variation_is_half_the_l1_distance_averaged_over_inputs():
    # per input: (0.1+0.1+0)/2, (0.4+0.4+0)/2, (0.1+0.1+0.2)/2, (0.5+1+0.5)/2 = 0.1, 0.4, 0.2, 1.0
    assert total_variation(P, Q) == pytest.approx((0.1 + 0.4 + 0.2 + 1.0) / 4)
    assert total_variation(P, P) == 0.0
    assert total_variation(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])) == 1.0  # nothing in common


def test_distributions_of_other_shapes_are_refused():
    with pytest.raises(ValueError, match=r"predictive distributions \[N, C\].*\[4, 3\] and \[4, 2\]"):
        total_variation(P, Q[:, :2])


def test_wasserstein_1_of_hand_made_draws():
    a = torch.tensor([[0.0], [1.0], [3.0]])
    assert wasserstein_1(a, a + 2.0) == pytest.approx(2.0)  # a shift moves every draw by 2
    assert wasserstein_1(a, a[[2, 0, 1]]) == 0.0  # the draws' order does not matter
    # one point at 0 against mass 1/2 at -1 and 1/2 at 1: each half moves 1
    assert wasserstein_1(torch.zeros(1, 1), torch.tensor([[-1.0], [1.0]])) == pytest.approx(1.0)
    # unequal counts: {0, 1} against {0, 0, 3}: the area between the CDFs: |1/2 - 2/3| on [0, 1], |1 - 2/3| on [1, 3]
    found = wasserstein_1(torch.tensor([[0.0], [1.0]]), torch.tensor([[0.0], [0.0], [3.0]]))
    assert found == pytest.approx(1 / 6 + 2 / 3)


def test_wasserstein_1_is_scipy_s_at_each_input():
    stats = pytest.importorskip("scipy.stats", reason='scipy comes with scikit-learn: pip install -e ".[bench]"')
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 5, generator=g).double(), 2 * torch.randn(12, 5, generator=g).double() + 0.5
    b[3, 2] = a[1, 2]  # a tie between the two sets
    expected = [stats.wasserstein_distance(a[:, n].numpy(), b[:, n].numpy()) for n in range(5)]
    assert wasserstein_1_each(a, b).tolist() == pytest.approx(expected, rel=1e-9)
    assert wasserstein_1(a, b) == pytest.approx(sum(expected) / 5, rel=1e-9)


def test_predictive_draws_follow_the_mixture_of_the_samples():
    # two samples at one input: N(0, 1) and N(10, 1): half the draws near each, each its own noise
    outputs = torch.tensor([[[0.0, 1.0]], [[10.0, 1.0]]])
    draws = predictive_draws(outputs, count=4000, seed=0)[:, 0]
    assert draws.shape == (4000,)
    near = draws < 5
    assert near.sum() == 2000  # each sample drawn count / S times
    assert draws[near].mean() == pytest.approx(0.0, abs=0.1) and draws[near].std() == pytest.approx(1.0, abs=0.1)
    assert torch.equal(predictive_draws(outputs, 10, seed=3), predictive_draws(outputs, 10, seed=3))


def test_the_floor_averages_each_pair_of_chains_and_each_chain_against_the_others_pool():
    chains = [P, Q, P]  # pairs (P, Q), (P, P), (Q, P); each against the rest: P to (Q+P)/2, Q to P, P to (P+Q)/2
    floor = chain_floor(chains, regression=False)
    assert floor["agreement"] == pytest.approx((0.5 + 1 + 0.5) / 3)
    assert floor["total_variation"] == pytest.approx(2 * total_variation(P, Q) / 3)
    assert floor["held_out_total_variation"] == pytest.approx((2 * total_variation(P, (P + Q) / 2)
                                                               + total_variation(Q, P)) / 3)
    draws = torch.tensor([[0.0], [1.0]])
    assert chain_floor([draws, draws + 3], regression=True) == {"w1": pytest.approx(3.0), "held_out_w1": pytest.approx(3.0)}
    # draws {0, 1} against {3, 4, 6, 7}: quantiles matched a quarter each, (3 + 4 + 5 + 6) / 4 = 4.5; {3, 4}
    # against {0, 1, 6, 7}: (3 + 2 + 2 + 3) / 4 = 2.5; {6, 7} as {0, 1}
    three = chain_floor([draws, draws + 3, draws + 6], regression=True)
    assert three == {"w1": pytest.approx((3 + 6 + 3) / 3), "held_out_w1": pytest.approx((4.5 + 2.5 + 4.5) / 3)}
    with pytest.raises(ValueError, match="at least two"):
        chain_floor([P], regression=False)
