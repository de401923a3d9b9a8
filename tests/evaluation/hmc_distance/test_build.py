"""A reference built from a few short NUTS chains: each set's pooled predictive, the predictive's R-hat
over the chains, the chain-to-chain floor, the recipe; and one chain of it scored against it."""
import pytest
import torch
from conftest import tiny_config

from bnn_zoo import against_hmc, predict
from bnn_zoo.core.inference.chains import nuts_chains
from bnn_zoo.data.sets import load_splits
from bnn_zoo.evaluation.hmc_distance.build import DRAWS, SEEDS, build_reference
from bnn_zoo.evaluation.hmc_distance.inputs import image_sets, toy_sets
from bnn_zoo.evaluation.hmc_distance.metrics import agreement, predictive_draws, total_variation, wasserstein_1
from bnn_zoo.runs.plans.factory import build_networks
from bnn_zoo.runs.plans.plan import Plan

BUILT = {"command": "a test", "commit": "unknown", "machine": "here"}


def _chains(plan: Plan, train, chains: int, samples: int, depth: int):
    """The chains build_reference draws, drawn again: its model from the plan's seed, its seeds."""
    import pyro

    pyro.set_rng_seed(plan.seed)
    model, _ = build_networks(plan.networks, len(train))
    return model, nuts_chains(model, train.x, train.y, chains, samples, samples, depth, plan.mcmc.target_accept,
                              plan.seed)


def test_a_toy_reference_holds_each_chain_s_draws_and_their_floor(tmp_path):
    plan = Plan.of(tiny_config("toy_mlp", **{"model.hidden": "[4]"}))
    train = load_splits(plan.data, plan.categorical).train
    reference = build_reference(plan, train, toy_sets("polynomial"), chains=2, num_samples=4, warmup_steps=4,
                                name="toy", built=BUILT, max_tree_depth=3, log=lambda line: None)
    assert reference.regression and reference.sets == ["test", "beyond"]
    model, drawn = _chains(plan, train, 2, 4, 3)
    for name in reference.sets:
        x = reference.x[name]
        per_chain = [predictive_draws(predict(model, s, x, None), DRAWS // 2, SEEDS + c)
                     for c, s in enumerate(drawn.samples)]
        assert torch.equal(reference.predictive[name], torch.cat(per_chain))
        apart = wasserstein_1(*per_chain)  # two chains: one pair, and each chain's rest is the other
        assert reference.floor(name) == {"w1": apart, "held_out_w1": apart}
        described = reference.recipe["sets"][name]
        assert described["max_r_hat"] >= described["median_r_hat"]  # split R-hat, of 2-sample halves here
        assert 0 <= described["share_r_hat_at_most_1.05"] <= 1
    assert reference.recipe["sets"]["test"]["hmc"].keys() == {"rmse", "nll"} and reference.y.keys() == {"test"}
    recipe = reference.recipe
    assert [c["seed"] for c in recipe["chains"]] == [0, 1] and recipe["max_tree_depth"] == 3
    assert recipe["built"] == BUILT and recipe["config"]["model"]["hidden"] == [4]
    reference.write(tmp_path / "toy.npz")
    chain = against_hmc(predict(model, drawn.samples[0], reference.x["test"], None), reference=tmp_path / "toy.npz")
    assert chain["test"].w1 < 2 * reference.floor("test")["w1"]


def test_a_build_keeps_each_chain_and_a_build_again_reads_them_instead_of_drawing(tmp_path):
    plan = Plan.of(tiny_config("toy_mlp", **{"model.hidden": "[4]"}))
    train = load_splits(plan.data, plan.categorical).train
    logged = []
    build = lambda chains: build_reference(plan, train, toy_sets("polynomial"), chains=chains, num_samples=4,
                                           warmup_steps=4, name="toy", built=BUILT, max_tree_depth=3,
                                           keep=tmp_path / "kept", log=logged.append)
    first = build(2)
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    assert len(kept) == 2 and kept[0].startswith("chain-") and kept[0].endswith("-0.npz")
    assert logged[1] == f"  chains kept in {tmp_path / 'kept'} as each ends ({kept[0]}, ...); read there: none"
    logged.clear()
    again = build(3)  # two chains read, a third drawn and kept
    assert logged[1].endswith("read there: [0, 1]") and len(list((tmp_path / "kept").iterdir())) == 3
    assert again.recipe["chains"][:2] == first.recipe["chains"]
    model, drawn = _chains(plan, train, 3, 4, 3)
    assert [c["seed"] for c in again.recipe["chains"]] == [0, 1, 2]
    per_chain = [predictive_draws(predict(model, s, again.x["test"], None), DRAWS // 3, SEEDS + c)
                 for c, s in enumerate(drawn.samples)]
    assert torch.equal(again.predictive["test"], torch.cat(per_chain))  # the chains read are those drawn


@pytest.mark.slow  # MNIST read, three chains drawn twice: seconds
def test_a_classifier_s_reference_holds_the_pooled_probabilities_and_the_chains_floor(shared_data):
    plan = Plan.of(tiny_config("mnist_mlp", **{"model.hidden": "[4]", "data.train_limit": 100,
                                               "data.root": str(shared_data)}))
    train = load_splits(plan.data, plan.categorical).train
    sets = image_sets("mnist", str(shared_data), 30, "notmnist", 10, "fog", 10)
    reference = build_reference(plan, train, sets, chains=3, num_samples=4, warmup_steps=4, name="tiny", built=BUILT,
                                max_tree_depth=2, log=lambda line: None)
    assert reference.sets == ["test", "notmnist", "fog"] and not reference.regression
    model, drawn = _chains(plan, train, 3, 4, 2)
    for found in sets:
        per_chain = [predict(model, s, found.x, None).mean(0) for s in drawn.samples]
        assert torch.allclose(reference.predictive[found.name], torch.stack(per_chain).mean(0))
        pairs = [(0, 1), (0, 2), (1, 2)]
        floor = reference.floor(found.name)
        assert floor["total_variation"] == pytest.approx(sum(total_variation(per_chain[i], per_chain[j])
                                                             for i, j in pairs) / 3)
        assert floor["agreement"] == pytest.approx(sum(agreement(per_chain[i], per_chain[j]) for i, j in pairs) / 3)
        rest = [(per_chain[i], (per_chain[j] + per_chain[k]) / 2) for i, j, k in [(0, 1, 2), (1, 0, 2), (2, 0, 1)]]
        assert floor["held_out_total_variation"] == pytest.approx(sum(total_variation(*p) for p in rest) / 3)
    assert reference.recipe["sets"]["fog"]["hmc"].keys() == {"accuracy", "nll"} and "notmnist" not in reference.y
