from operator import attrgetter

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, example_batch, param_mode
from pyro.infer import Predictive
from pyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal, AutoNormal

from bnn_zoo import build, load, predict
from bnn_zoo.core.networks.guides import GUIDES, DirectAutoNormal, make_guide
from bnn_zoo.data.sets import normalize
from bnn_zoo.runs.storage.loading import SHIPPED


def _weights(trace) -> dict:
    return {n: s["value"] for n, s in trace.nodes.items()
            if s["type"] == "sample" and n.startswith("net.") and not s["infer"].get("is_auxiliary")}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ZOO)
def test_direct_autonormal_is_autonormal_without_the_auxiliary_sites(arch):
    """The same parameters as Pyro's AutoNormal (so its state dicts load both ways), and at the same
    seed exactly AutoNormal's draws, medians and quantiles, from one Normal site per weight."""
    model, direct = build(arch, num_data=50, hidden=SMALL[arch], init_scale=0.3)
    x, y = example_batch(arch)
    stock = AutoNormal(poutine.block(model, hide=["obs"]), init_loc_fn=model.init_loc, init_scale=0.3)
    direct(x, y), stock(x, y)
    assert isinstance(direct, AutoNormal)
    assert dict(direct.named_parameters()).keys() == dict(stock.named_parameters()).keys()
    with torch.no_grad():
        for p in direct.parameters():  # away from the initial values, scales included
            p.add_(0.1 * torch.randn_like(p))
    stock.load_state_dict(direct.state_dict())
    pyro.set_rng_seed(4)
    ours = poutine.trace(direct).get_trace(x, y)
    pyro.set_rng_seed(4)
    theirs = poutine.trace(stock).get_trace(x, y)
    assert _weights(ours).keys() == _weights(theirs).keys()
    assert all(torch.equal(v, _weights(theirs)[n]) for n, v in _weights(ours).items())
    assert [n for n, s in ours.nodes.items() if s["type"] == "sample"] == list(_weights(ours))
    site = ours.nodes[next(iter(_weights(ours)))]
    assert isinstance(site["fn"].base_dist, dist.Normal) and site["fn"].event_dim == site["value"].dim()
    assert all(torch.equal(direct.median()[n], stock.median()[n]) for n in _weights(ours))
    q = [0.05, 0.5, 0.9]
    assert all(torch.allclose(direct.quantiles(q)[n], stock.quantiles(q)[n]) for n in _weights(ours))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lenet", "mnist_mlp"])
def test_shipped_posteriors_answer_as_the_autonormal_they_were_trained_as(name):
    """A shipped guide's stored tensors load unchanged and, at a fixed seed, give exactly the
    predictions of Pyro's AutoNormal holding the same tensors (which the earlier DirectAutoNormal
    matched draw for draw)."""
    trained = load(name)
    stored = {k: v.float() for k, v in torch.load(SHIPPED / f"{name}.pt", weights_only=True)["guide"].items()}
    assert trained.guide.state_dict().keys() == stored.keys()
    assert all(torch.equal(v, stored[k]) for k, v in trained.guide.state_dict().items())
    x = normalize(torch.randint(0, 256, (6, 28, 28), dtype=torch.uint8))
    with pyro.settings.context(module_local_params=True):
        stock = AutoNormal(poutine.block(trained.model, hide=["obs"]), init_loc_fn=trained.model.init_loc)
        stock(x)
    stock.load_state_dict(stored)
    pyro.set_rng_seed(3)
    ours = predict(trained.model, trained.guide, x, 7, chunk_size=3)
    pyro.set_rng_seed(3)
    assert torch.equal(ours, predict(trained.model, stock, x, 7, chunk_size=3))
    assert all(torch.equal(v, stock.median()[n]) for n, v in trained.guide.median().items())


@pytest.mark.parametrize("mode", ["global", "local"])
def test_a_fresh_guide_first_called_by_parallel_predictive(mode):
    """Set up inside Predictive's plate (at dim -2, over the data plate), the parameters still have
    the weights' shapes, and the vectorized draws are the posterior's: one per sample."""
    with param_mode(mode):
        model, guide = build("mnist_mlp", num_data=50, hidden=[8], init_scale=0.1)
        x, _ = example_batch("mnist_mlp", 3)
        found = Predictive(model, guide=guide, num_samples=400, parallel=True,
                           return_sites=[f"net.{n}" for n in model.weight_shapes])(x)
        for name, shape in model.weight_shapes.items():
            loc = attrgetter(f"net.{name}")(guide.locs)
            assert loc.shape == shape and found[f"net.{name}"].shape == (400, 1, *shape)
        w = found["net.layers.1.weight"][:, 0]
        assert (w.mean(0) - guide.median()["net.layers.1.weight"]).abs().max() < 0.05
        assert w.std(0).mean().item() == pytest.approx(0.1, rel=0.05)
    assert (len(pyro.get_param_store()) > 0) == (mode == "global")


def _positive():
    pyro.sample("s", dist.HalfNormal(1.0))


def _local():
    with pyro.plate("p", 3):
        pyro.sample("z", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize("model, message", [(_positive, "real-valued latents; s has support"),
                                            (_local, "global latents; z lies in plate 'p'")])
def test_direct_autonormal_refuses_latents_it_cannot_draw(model, message):
    with pytest.raises(ValueError, match=message):
        DirectAutoNormal(model)()


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
