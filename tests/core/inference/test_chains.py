"""Several NUTS chains, each from its own initialization and seed, and the R-hat and effective sample
size of a predictive quantity over them."""
import pytest
import torch

from bnn_zoo import build, predict
from bnn_zoo.core.inference import chains
from bnn_zoo.core.inference.chains import fresh_start, nuts_chains, predictive_convergence


def _toy():
    x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]])
    return x, x[:, 0] ** 3 / 4


def test_each_fresh_start_is_the_plain_network_s_initialization_under_its_seed():
    model, _ = build("toy_mlp", num_data=4, hidden=[4])
    first, again, other = fresh_start(model, 1), fresh_start(model, 1), fresh_start(model, 2)
    assert set(first) == set(model.init_values)
    for site, value in model.init_values.items():
        assert value.shape == first[site].shape and torch.equal(first[site], again[site])
        assert not torch.equal(first[site], value) and not torch.equal(first[site], other[site])
    bound = 1 / model.weight_shapes["layers.3.weight"][1] ** 0.5  # nn.Linear's: uniform within 1 / sqrt(fan_in)
    assert first["net.layers.3.weight"].abs().max() <= bound


def test_chains_start_apart_are_seeded_and_leave_the_caller_s_streams_alone():
    model, _ = build("toy_mlp", num_data=4, hidden=[4])
    torch.manual_seed(5)
    before = torch.get_rng_state()
    runs = [nuts_chains(model, *_toy(), chains=2, num_samples=4, warmup_steps=4, max_tree_depth=3, seed=7)
            for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), before)
    first, second = runs
    assert [run.seed for run in first.runs] == [7, 8] and first.num_samples == 4
    for site in first.samples[0]:
        assert first.samples[0][site].shape == (4, *model.sampled[site[len("net."):]])
        assert all(torch.equal(a[site], b[site]) for a, b in zip(first.samples, second.samples))
        assert not torch.equal(first.samples[0][site], first.samples[1][site])
    assert first.pooled()["net.layers.1.weight"].shape == (8, 4, 1)
    assert predict(model, first.pooled(), _toy()[0], None).shape == (8, 4, 2)


def test_chains_side_by_side_in_processes_draw_what_one_after_another_draws():
    model, _ = build("toy_mlp", num_data=4, hidden=[4])
    serial = nuts_chains(model, *_toy(), chains=3, num_samples=5, warmup_steps=5, max_tree_depth=3, seed=2)
    before = torch.get_rng_state()
    side = nuts_chains(model, *_toy(), chains=3, num_samples=5, warmup_steps=5, max_tree_depth=3, seed=2, jobs=2)
    assert torch.equal(torch.get_rng_state(), before) and [run.seed for run in side.runs] == [2, 3, 4]
    assert [(r.acceptance_rate, r.divergences) for r in side.runs] == [(r.acceptance_rate, r.divergences) for r in serial.runs]
    for mine, theirs in zip(side.samples, serial.samples):
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[site], theirs[site]) for site in mine)
    assert side.wall_seconds > 0 and side.seconds == sum(run.seconds for run in side.runs)
    with pytest.raises(ValueError, match="at least one job"):
        nuts_chains(model, *_toy(), chains=2, jobs=0)


@pytest.mark.parametrize("jobs", [1, 2])
def test_chains_drawn_already_are_not_drawn_again_and_each_new_one_is_heard_as_it_ends(jobs):
    model, _ = build("toy_mlp", num_data=4, hidden=[4])
    whole = nuts_chains(model, *_toy(), chains=3, num_samples=4, warmup_steps=4, max_tree_depth=3, seed=2)
    heard = {}
    resumed = nuts_chains(model, *_toy(), chains=3, num_samples=4, warmup_steps=4, max_tree_depth=3, seed=2, jobs=jobs,
                          drawn={1: (whole.samples[1], whole.runs[1])},
                          on_chain=lambda c, samples, run: heard.update({c: (samples, run)}))
    assert sorted(heard) == [0, 2] and resumed.runs == [heard[0][1], whole.runs[1], heard[2][1]]
    for c, mine in enumerate(resumed.samples):
        assert all(torch.equal(mine[site], whole.samples[c][site]) for site in mine)  # chain 1 read, 0 and 2 drawn again
        assert c == 1 or all(heard[c][0][site] is mine[site] for site in mine)
    assert [r.seed for r in resumed.runs] == [2, 3, 4]
    with pytest.raises(ValueError, match=r"among the 2 asked for, got chains \[1, 5\]"):
        nuts_chains(model, *_toy(), chains=2, drawn={1: heard[0], 5: heard[0]})


def test_predictive_r_hat_is_near_one_where_chains_agree_and_large_where_they_do_not():
    g = torch.Generator().manual_seed(0)
    agree = torch.randn(4, 500, 3, 2, generator=g)  # four chains, 500 draws of one distribution
    mixing = predictive_convergence(agree)
    assert mixing.max_r_hat < 1.01 and mixing.min_ess > 1000 and mixing.share_at_most(1.05) == 1.0
    apart = agree + torch.arange(4.0)[:, None, None, None]  # each chain about its own mean
    assert predictive_convergence(apart).max_r_hat > 1.5 and predictive_convergence(apart).share_at_most(1.05) == 0.0
    half = predictive_convergence(torch.cat([agree[..., :1], apart[..., 1:]], -1))  # the first of each input's two entries mixes
    assert half.r_hats.shape == (6,) and half.max_r_hat == float(half.r_hats.max())
    assert (half.r_hats <= 1.05).tolist() == [True, False] * 3 and half.share_at_most(1.05) == 0.5
    assert half.median_r_hat == float(half.r_hats.median()) and half.median_r_hat < 1.05
    stuck = torch.zeros(2, 8, 1)
    stuck[1] = 1.0  # each chain at a value of its own: no within-chain spread at all
    assert predictive_convergence(stuck).max_r_hat == float("inf")


def test_entries_at_one_value_everywhere_are_left_out_of_r_hat():
    g = torch.Generator().manual_seed(1)
    probs = torch.cat([torch.randn(4, 200, 5, 1, generator=g), torch.zeros(4, 200, 5, 1)], -1)
    mixing, first = predictive_convergence(probs), predictive_convergence(probs[..., :1])
    assert torch.equal(mixing.r_hats, first.r_hats) and len(mixing.r_hats) == 5 and mixing.min_ess == first.min_ess
    none = predictive_convergence(torch.zeros(4, 8, 3))
    assert (none.max_r_hat, none.median_r_hat, none.share_at_most(1.05), none.min_ess) == (1.0, 1.0, 1.0, float("inf"))
    with pytest.raises(ValueError, match="two halves"):
        predictive_convergence(torch.zeros(4, 3, 2))


def test_effective_sample_size_is_taken_in_chunks_of_entries_that_fit_its_budget(monkeypatch):
    """Pyro's effective_sample_size holds [S, S, entries]: a reference of 10,000 x 10 probabilities
    over 500 samples ran out of memory (46 GB) after its chains. Chunked, the smallest ESS is the
    one taken at once."""
    g = torch.Generator().manual_seed(2)
    probs = torch.randn(4, 40, 30, generator=g) * torch.linspace(0.1, 3.0, 30) + torch.arange(4.0)[:, None, None] * 0.05
    whole = float(chains.effective_sample_size(probs.double(), chain_dim=0, sample_dim=1).min())
    seen = []
    real = chains.effective_sample_size
    monkeypatch.setattr(chains, "effective_sample_size", lambda x, **kw: seen.append(x.shape[-1]) or real(x, **kw))
    monkeypatch.setattr(chains, "ESS_BYTES", 40 ** 2 * 8 * 7)  # 7 entries of 40 samples in double a chunk
    assert predictive_convergence(probs).min_ess == pytest.approx(whole, rel=1e-12)
    assert seen == [7, 7, 7, 7, 2]
