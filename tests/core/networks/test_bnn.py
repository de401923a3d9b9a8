import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from pyro.infer import SVI, Predictive, Trace_ELBO
from torch import nn

from bnn_zoo import bayesian, build, make_net, predict
from bnn_zoo.core.networks.likelihoods import Categorical


@pytest.mark.parametrize("arch", ZOO)
def test_every_parameter_is_a_sample_site_of_its_shape(arch):
    model, guide = build(arch, num_data=100, hidden=SMALL[arch])
    x, y = example_batch(arch)
    trace = poutine.trace(model).get_trace(x, y)
    latent = {n: s["value"].shape for n, s in trace.nodes.items()
              if s["type"] == "sample" and not s["is_observed"] and n != "data"}
    assert latent == {f"net.{n}": p.shape for n, p in make_net(arch, SMALL[arch]).named_parameters()}
    assert trace.nodes["obs"]["is_observed"] and trace.nodes["obs"]["value"].shape == (8,)
    assert list(model.parameters()) == []  # fixed prior, no point estimates


@pytest.mark.parametrize("arch", ZOO)
def test_to_moves_priors_and_changes_dtype(arch):
    model, guide = build(arch, hidden=SMALL[arch])
    x, y = example_batch(arch)
    model.to(torch.float64)
    assert model.prior.scale.dtype == torch.float64
    trace = poutine.trace(model).get_trace(x.double(), y if y.dtype == torch.long else y.double())
    assert all(s["value"].dtype == torch.float64 for n, s in trace.nodes.items() if n.startswith("net."))
    model.to("cpu", torch.float32)
    assert model.prior.scale.dtype == torch.float32 and model.device.type == "cpu"


@pytest.mark.parametrize("arch", ZOO)
def test_vectorized_weights_give_each_draw_its_own_network(arch):
    """forward_with on [S, *shape] weights equals running the plain network once per draw."""
    model, guide = build(arch, num_data=100, hidden=SMALL[arch], init_scale=0.05)
    x, y = example_batch(arch, 5)
    guide(x, y)
    with pyro.plate("draws", 4, dim=-2):
        draws = {k[len("net."):]: v for k, v in guide(x).items()}  # [4, 1, *shape]
    assert all(v.shape[:2] == (4, 1) for v in draws.values())
    batched = model.forward_with({k: v[:, 0] for k, v in draws.items()}, x)
    net = make_net(arch, SMALL[arch])
    for s in range(4):
        net.load_state_dict({k: v[s, 0] for k, v in draws.items()})
        assert torch.allclose(batched[s], net(x), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(batched[0], batched[1], rtol=1e-3)  # the draws differ
    # Through the model under a plate (weights [4, 1, ...]) the logits line up with the data plate.
    conditioned = poutine.condition(model, data={f"net.{k}": v for k, v in draws.items()})
    with pyro.plate("draws", 4, dim=-2):
        returned = conditioned(x)
    expected = batched if arch != "toy_mlp" else batched[..., 0]
    assert torch.allclose(returned, expected, atol=1e-6)


class ResidualNet(nn.Module):
    """A network the zoo does not ship: a conv stem, a residual block with BatchNorm, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                   nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = torch.relu(h + self.block(h))
        return self.head(h.mean((2, 3)))


@pytest.mark.slow
def test_bayesian_wraps_a_residual_network_with_batchnorm():
    net = ResidualNet()
    original = {k: v.clone() for k, v in net.state_dict().items()}
    model, guide = bayesian(net, likelihood=Categorical(num_data=64, num_classes=3))
    assert all(torch.equal(v, original[k]) for k, v in net.state_dict().items())  # the user's net is untouched
    # BatchNorm's affine parameters are point estimates; every other parameter is a sample site.
    assert {n for n, _ in model.named_parameters()} == {
        "net.block.1.weight", "net.block.1.bias", "net.block.4.weight", "net.block.4.bias"}
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, 8, 8, generator=g)
    y = (x.mean((1, 2, 3)) > 0).long() + (x[:, 0, 0, 0] > 1).long()
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.02}), Trace_ELBO())
    losses = [svi.step(x, y) for _ in range(60)]
    assert sum(losses[-10:]) < sum(losses[:10])
    assert "net.block.1.weight" in pyro.get_param_store()  # the point estimates train with the guide
    running = model.net.block[1].running_mean
    assert running.abs().sum() > 0 and model.net.block[1].num_batches_tracked == 61  # 60 steps, 1 prototype trace
    model.eval()  # running statistics now: an input's output does not depend on its batch
    alone = predict(model, guide, x[:1], 3, chunk_size=3)
    pyro.set_rng_seed(0)
    in_batch = predict(model, guide, x[:16], 3, chunk_size=3)
    pyro.set_rng_seed(0)
    assert torch.allclose(predict(model, guide, x[:1], 3, chunk_size=3), in_batch[:, :1], atol=1e-5)
    assert alone.shape == (3, 1, 3)
    assert torch.equal(model.net.block[1].running_mean, running)  # prediction leaves them alone
    out = Predictive(model, guide=guide, num_samples=5, parallel=True, return_sites=["_RETURN"])(x[:7])
    assert out["_RETURN"].shape == (5, 7, 3)


def test_num_data_given_twice_must_agree():
    with pytest.raises(ValueError, match="contradicts"):
        bayesian(nn.Linear(2, 2), likelihood=Categorical(num_data=10, num_classes=2), num_data=20)
    model, _ = bayesian(nn.Linear(2, 2), likelihood="categorical", num_data=20)
    assert model.likelihood.num_data == 20


def test_wrong_weight_shapes_are_named():
    model, _ = build("toy_mlp", hidden=[4])
    with pytest.raises(ValueError, match=r"weight layers.1.weight has shape \(3, 3\)"):
        model.forward_with({"layers.1.weight": torch.zeros(3, 3)}, torch.zeros(2, 1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ZOO)
def test_cuda_round_trip(arch):
    model, guide = build(arch, num_data=100)
    model.cuda()
    x, y = (t.cuda() for t in example_batch(arch))
    loss = Trace_ELBO()(model, guide)(x, y)
    assert loss.device.type == "cuda" and torch.isfinite(loss)
    assert predict(model, guide, x, num_samples=3).device.type == "cuda"
    model.cpu(), guide.cpu()
    assert torch.isfinite(Trace_ELBO()(model, guide)(*example_batch(arch)))


@pytest.mark.parametrize("num_data", [0, -1, 2.5, True])
def test_num_data_must_be_a_positive_integer(num_data):
    for likelihood in ("categorical", Categorical(num_classes=2)):  # a given likelihood once took 0
        with pytest.raises(ValueError, match=f"positive integer; got {num_data!r}"):
            bayesian(nn.Linear(2, 2), likelihood=likelihood, num_data=num_data)
