import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from pyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal, AutoNormal

from bnn_zoo import build
from bnn_zoo.guides import GUIDES, DirectAutoNormal, make_guide


def _weights(trace) -> dict:
    return {n: s["value"] for n, s in trace.nodes.items()
            if s["type"] == "sample" and n.startswith("net.") and not s["infer"].get("is_auxiliary")}


@pytest.mark.parametrize("arch", ZOO)
def test_direct_autonormal_is_autonormal_without_the_auxiliary_sites(arch):
    """The contract with the pyro-ppl internals DirectAutoNormal builds on (_setup_prototype,
    _create_plates, _get_loc_and_scale, _event_dims): the same parameters as AutoNormal, and at the
    same seed exactly AutoNormal's draws, one Normal site per weight. A Pyro upgrade that changes
    those internals fails here."""
    model, direct = build(arch, num_data=50, hidden=SMALL[arch], init_scale=0.3)
    x, y = example_batch(arch)
    stock = AutoNormal(poutine.block(model, hide=["obs"]), init_loc_fn=model.init_loc, init_scale=0.3)
    direct(x, y), stock(x, y)
    assert dict(direct.named_parameters()).keys() == dict(stock.named_parameters()).keys()
    stock.load_state_dict(direct.state_dict())
    pyro.set_rng_seed(4)
    ours = poutine.trace(direct).get_trace(x, y)
    pyro.set_rng_seed(4)
    theirs = poutine.trace(stock).get_trace(x, y)
    assert _weights(ours).keys() == _weights(theirs).keys()
    assert all(torch.equal(v, _weights(theirs)[n]) for n, v in _weights(ours).items())
    assert [n for n, s in ours.nodes.items() if s["type"] == "sample"] == list(_weights(ours))
    site = ours.nodes[next(iter(_weights(ours)))]
    assert isinstance(site["fn"].base_dist, pyro.distributions.Normal)
    assert all(torch.equal(direct.median()[n], stock.median()[n]) for n in _weights(ours))


@pytest.mark.parametrize("kind", GUIDES)
@pytest.mark.parametrize("arch", ZOO)
def test_every_guide_draws_every_weight_and_never_the_observations(arch, kind):
    model, guide = build(arch, num_data=50, hidden=SMALL[arch], guide=kind, rank=3)
    x, y = example_batch(arch)
    guide(x)  # first called without labels, as a fresh Predictive does
    trace = poutine.trace(guide).get_trace(x)
    assert "obs" not in trace.nodes
    assert {n: v.shape for n, v in _weights(trace).items()} == {f"net.{n}": s for n, s in model.weight_shapes.items()}
    expected = {"meanfield": DirectAutoNormal, "lowrank": AutoLowRankMultivariateNormal, "delta": AutoDelta}[kind]
    assert type(guide) is expected
    again = _weights(poutine.trace(guide).get_trace(x))
    same = all(torch.equal(v, again[n]) for n, v in _weights(trace).items())
    assert same == (kind == "delta")  # only the point estimate draws the same weights twice
    # every weight starts at the plain network's initialization
    assert all(torch.equal(guide.median()[n], model.init_values[n]) for n in _weights(trace))


def test_lowrank_guide_has_rank_factors():
    model, guide = build("toy_mlp", hidden=[4], guide="lowrank", rank=3)
    guide(torch.zeros(2, 1))
    total = sum(s.numel() for s in model.weight_shapes.values())
    assert guide.cov_factor.shape == (total, 3)


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "laplace"}, "unknown guide 'laplace'"),
    ({"init_scale": 0.0}, "init_scale must be a positive number"),
    ({"init_scale": float("nan")}, "init_scale"),
    ({"kind": "lowrank", "rank": 0}, "rank must be a positive integer"),
])
def test_bad_guide_choices_are_refused(kwargs, message):
    model, _ = build("toy_mlp", hidden=[4])
    with pytest.raises(ValueError, match=message):
        make_guide(model, **kwargs)
