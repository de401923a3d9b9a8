import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import ZOO, example_batch
from pyro.infer import SVI, Predictive, Trace_ELBO
from pyro.poutine.util import site_is_subsample
from torch import nn

from bnn_zoo import BayesianNet, GaussianPrior, build, make_guide, make_net
from bnn_zoo.config import make_config
from bnn_zoo.data import TensorSet
from bnn_zoo.train import fit


@pytest.mark.parametrize("arch", ZOO)
def test_sample_sites_match_the_plain_network(arch):
    model, guide = build(arch, num_data=100)
    x, y = example_batch(arch)
    trace = poutine.trace(model).get_trace(x, y)
    params = dict(make_net(arch).named_parameters())
    latent = {n: s["value"].shape for n, s in trace.nodes.items()
              if s["type"] == "sample" and n.startswith("net.")}
    assert latent == {f"net.{n}": p.shape for n, p in params.items()}
    assert trace.nodes["obs"]["is_observed"] and trace.nodes["obs"]["value"].shape == (8,)
    guide_trace = poutine.trace(guide).get_trace(x, y)
    sampled = {n for n, s in guide_trace.nodes.items() if s["type"] == "sample"
               and not s["infer"].get("is_auxiliary") and not site_is_subsample(s)}
    assert sampled == set(latent)


@pytest.mark.parametrize("arch", ZOO)
def test_to_moves_priors_and_back(arch):
    model, guide = build(arch)
    x, y = example_batch(arch)
    model.to(torch.float64)
    assert model.prior.scale.dtype == torch.float64
    trace = poutine.trace(model).get_trace(x.double(), y if y.dtype == torch.long else y.double())
    assert trace.nodes["net." + next(iter(dict(make_net(arch).named_parameters())))]["value"].dtype \
        == torch.float64
    model.to("cpu", torch.float32)
    assert model.prior.scale.dtype == torch.float32 and model.prior.scale.device.type == "cpu"
    assert torch.isfinite(Trace_ELBO()(model, guide)(x, y))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ZOO)
def test_cuda_round_trip(arch):
    from bnn_zoo import predict

    model, guide = build(arch, num_data=100)
    model.cuda()
    x, y = (t.cuda() for t in example_batch(arch))
    loss = Trace_ELBO()(model, guide)(x, y)
    assert loss.device.type == "cuda" and torch.isfinite(loss)
    assert predict(model, guide, x, num_samples=3).device.type == "cuda"
    model.cpu(), guide.cpu()
    assert torch.isfinite(Trace_ELBO()(model, guide)(*example_batch(arch)))


@pytest.mark.parametrize("arch", ZOO)
def test_one_svi_step_gives_a_finite_loss(arch):
    model, guide = build(arch, num_data=1000)
    x, y = example_batch(arch)
    loss_fn = Trace_ELBO()(model, guide)
    loss_fn(x, y)
    optimizer = torch.optim.Adam(loss_fn.parameters(), lr=1e-3)
    before = {k: v.clone() for k, v in guide.state_dict().items()}
    loss = loss_fn(x, y)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert any(not torch.equal(before[k], v) for k, v in guide.state_dict().items())


@pytest.mark.parametrize("arch", ZOO)
def test_minibatch_elbo_has_the_full_data_scaling(arch):
    """With the weights held fixed, the mean of the minibatch log joints over a partition of the
    data equals the full-data log joint: likelihood scaled by N/B, prior counted once."""
    n, b = 24, 6
    model, guide = build(arch, num_data=n)
    x, y = example_batch(arch, n)
    weights = {n: s["value"] for n, s in poutine.trace(guide).get_trace(x, y).nodes.items()
               if n.startswith("net.") and not n.endswith("_unconstrained")}
    fixed = poutine.condition(model, data=weights)
    full = poutine.trace(fixed).get_trace(x, y).log_prob_sum()
    parts = [poutine.trace(fixed).get_trace(x[i:i + b], y[i:i + b]).log_prob_sum()
             for i in range(0, n, b)]
    assert torch.stack(parts).mean().item() == pytest.approx(full.item(), rel=1e-5)
    obs = poutine.trace(fixed).get_trace(x[:b], y[:b]).nodes["obs"]
    assert obs["scale"] == n / b


@pytest.mark.parametrize("arch", ZOO)
def test_plain_pyro_svi_and_predictive(arch):
    model, guide = build(arch, num_data=64)
    x, y = example_batch(arch, 16)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
    losses = [svi.step(x, y) for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses)))
    samples = Predictive(model, guide=guide, num_samples=5, return_sites=["obs", "_RETURN"])(x)
    assert samples["obs"].shape == (5, 16)
    expected = (5, 16, 10) if arch != "toy_mlp" else (5, 16)
    assert samples["_RETURN"].shape == expected


def test_build_rejects_what_does_not_fit():
    with pytest.raises(ValueError, match="unknown architecture 'resnet'"):
        build("resnet")
    with pytest.raises(ValueError, match="fixed shape"):
        build("lenet", hidden=[10])
    with pytest.raises(ValueError, match="likelihood"):
        BayesianNet(lambda: nn.Linear(2, 1), "poisson")


def test_conjugate_linear_regression_recovers_the_posterior_mean():
    """Bayesian linear regression has a Gaussian posterior; trained by our loop on minibatches,
    AutoNormal's means must match the exact posterior mean."""
    n, d, noise, prior_scale = 200, 3, 0.5, 1.0
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.tensor([1.5, -2.0, 0.5]) + 0.3 + noise * torch.randn(n, generator=g)
    design = torch.cat([x, torch.ones(n, 1)], 1)
    precision = design.T @ design / noise ** 2 + torch.eye(d + 1) / prior_scale ** 2
    exact = torch.linalg.solve(precision, design.T @ y / noise ** 2)

    model = BayesianNet(lambda: nn.Linear(d, 1), "gaussian", GaussianPrior(prior_scale), noise, n)
    guide = make_guide(model, init_scale=0.05)
    guide(x[:2], y[:2])
    optimizer = torch.optim.Adam(guide.parameters(), lr=0.02)
    t = make_config(None, ["train.batch_size=50", "train.progress=false"]).train
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 150, 0.1)
    fit("bayes", Trace_ELBO(num_particles=4)(model, guide), optimizer, scheduler,
        TensorSet(x, y), t, 300, [], 1.0 / n, lambda record, due: None)
    locs = guide.median()
    found = torch.cat([locs["net.weight"].flatten(), locs["net.bias"].flatten()])
    assert torch.allclose(found, exact, atol=0.03), (found, exact)
