import math

import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import ZOO, example_batch
from pyro.infer import SVI, Predictive, Trace_ELBO, TraceMeanField_ELBO
from pyro.poutine.util import site_is_subsample
from torch import nn

from bnn_zoo import (
    ARCHITECTURES,
    BayesianNet,
    GaussianNoise,
    GaussianPrior,
    ScaleMixturePrior,
    build,
    make_guide,
    make_net,
    make_prior,
    make_twin,
    predict,
)
from bnn_zoo.config import make_config
from bnn_zoo.data import TensorSet
from bnn_zoo.plots import variance_parts
from bnn_zoo.train import fit
from bnn_zoo.zoo import MLP, PRIORS, hyperparameters


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

    model = BayesianNet(lambda: nn.Linear(d, 1), "gaussian", GaussianPrior(prior_scale),
                        GaussianNoise("fixed", noise), n)
    guide = make_guide(model, init_scale=0.05)
    guide(x[:2], y[:2])
    optimizer = torch.optim.Adam(guide.parameters(), lr=0.02)
    t = make_config(None, ["train.batch_size=50", "train.progress=false"]).train
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 150, 0.1)
    fit("bayes", TraceMeanField_ELBO()(model, guide), optimizer, scheduler,
        TensorSet(x, y), t, 300, [], 1.0 / n, lambda record, due: None)
    locs = guide.median()
    found = torch.cat([locs["net.weight"].flatten(), locs["net.bias"].flatten()])
    assert torch.allclose(found, exact, atol=0.03), (found, exact)


def test_scale_mixture_log_density_is_the_formula():
    pi, s1, s2 = 0.25, 0.75, 0.1
    w = torch.tensor([[-2.0, -0.3, 0.0], [0.05, 0.4, 1.5]])
    normal = lambda x, s: torch.exp(-x ** 2 / (2 * s ** 2)) / (s * math.sqrt(2 * math.pi))  # noqa: E731
    expected = torch.log(pi * normal(w, s1) + (1 - pi) * normal(w, s2)).sum()
    prior = ScaleMixturePrior(pi, s1, s2)(w.shape)
    assert prior.event_shape == w.shape
    assert prior.log_prob(w).item() == pytest.approx(expected.item(), rel=1e-6)
    draws = ScaleMixturePrior(pi, s1, s2)(torch.Size([200000])).sample()
    assert draws.var().item() == pytest.approx(pi * s1 ** 2 + (1 - pi) * s2 ** 2, rel=0.03)


@pytest.mark.parametrize("kind", PRIORS)
@pytest.mark.parametrize("arch", ZOO)
def test_learned_prior_hyperparameters_get_gradients_and_move(arch, kind):
    model, guide = build(arch, num_data=1000, prior=make_prior(kind, learn=True))
    x, y = example_batch(arch)
    loss_fn = TraceMeanField_ELBO()(model, guide)
    loss_fn(x, y)
    before = hyperparameters(model)
    assert set(before) == {f"prior/{n}" for n in model.prior.hyperparameters} | (
        {"noise/scale"} if arch == "toy_mlp" else set())
    optimizer = torch.optim.Adam([*guide.parameters(), *model.parameters()], lr=0.05)
    for _ in range(5):
        optimizer.zero_grad()
        loss_fn(x, y).backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.prior.parameters())
        optimizer.step()
    after = hyperparameters(model)
    assert all(after[k] != before[k] for k in before if k.startswith("prior/"))
    assert all(v > 0 for v in after.values()) and after.get("prior/pi", 0.5) < 1


@pytest.mark.parametrize("kind", PRIORS)
def test_fixed_priors_have_no_parameters_and_move_with_the_model(kind):
    model, _ = build("mnist_mlp", prior=make_prior(kind))
    assert list(model.parameters()) == []
    model.to(torch.float64)
    assert all(b.dtype == torch.float64 for b in model.prior.buffers())


def test_homoscedastic_noise_recovers_a_known_scale():
    n, noise = 400, 0.3
    g = torch.Generator().manual_seed(2)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    y = 2 * x[:, 0] - 0.5 + noise * torch.randn(n, generator=g)
    model = BayesianNet(lambda: nn.Linear(1, 1), "gaussian", noise=GaussianNoise("homoscedastic", 1.0),
                        num_data=n)
    _train(model, make_guide(model), x, y, epochs=150, batch_size=100, lr=0.03)
    assert hyperparameters(model)["noise/scale"] == pytest.approx(noise, rel=0.1)


def test_heteroscedastic_noise_recovers_a_known_scale():
    """The noise sd grows from 0.1 at x = -1 to 0.5 at x = 1; the network's noise output finds it."""
    n = 1000
    g = torch.Generator().manual_seed(3)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    true_sd = lambda x: 0.3 + 0.2 * x  # noqa: E731
    y = torch.sin(2 * x[:, 0]) + true_sd(x[:, 0]) * torch.randn(n, generator=g)
    model = BayesianNet(lambda: MLP(1, [32], 2), "gaussian", noise=GaussianNoise("heteroscedastic", 0.3),
                        num_data=n)
    guide = make_guide(model)
    _train(model, guide, x, y, epochs=100, batch_size=250, lr=0.02)
    grid = torch.tensor([[-0.75], [0.0], [0.75]])
    found = variance_parts(predict(model, guide, grid, 50))["aleatoric"]
    assert torch.allclose(found, true_sd(grid[:, 0]), rtol=0.25), found


def _train(model, guide, x, y, epochs, batch_size, lr):
    guide(x[:2], y[:2])
    optimizer = torch.optim.Adam([*guide.parameters(), *model.parameters()], lr=lr)
    t = make_config(None, [f"train.batch_size={batch_size}", "train.progress=false"]).train
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    fit("bayes", TraceMeanField_ELBO()(model, guide), optimizer, scheduler, TensorSet(x, y), t, epochs,
        [], 1.0 / len(x), lambda record, due: None)


def test_noise_modes_and_outputs():
    assert make_net("toy_mlp", noise="heteroscedastic").layers[-1].out_features == 2
    assert make_twin("toy_mlp", noise="heteroscedastic")(torch.zeros(3, 1)).shape == (3, 2)
    # the noise output 0 means the configured scale; the softplus keeps any output positive
    sd = GaussianNoise("heteroscedastic", 0.5)(torch.tensor([[1.0, 0.0], [1.0, -30.0]]))[:, 1]
    assert sd[0].item() == pytest.approx(0.5, abs=1e-3) and 0 < sd[1].item() < 1e-3
    assert make_twin("mnist_mlp", noise="heteroscedastic")(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    with pytest.raises(ValueError, match="unknown noise mode 'poisson'"):
        GaussianNoise("poisson")
    with pytest.raises(ValueError, match="unknown prior 'laplace'"):
        make_prior("laplace")


@pytest.mark.parametrize("arch", ZOO)
@torch.no_grad()
def test_local_reparameterization_draws_per_example_weights_from_the_same_posterior(arch):
    """One input repeated: with weight sampling every copy gets the same output; with local
    reparameterization (Flipout in LeNet's convolutions) each copy gets its own, distributed as
    the network's output under independent posterior draws of all the weights. (Flipout's copies
    share one weight draw up to random signs, so the test pools 20 guide draws of 100 copies.)"""
    hidden = [32] if ARCHITECTURES[arch].has_hidden else None
    model, guide = build(arch, num_data=100, hidden=hidden, init_scale=0.1, local_reparam=True)
    x = example_batch(arch, 1)[0].expand(100, *example_batch(arch, 1)[0].shape[1:])
    guide(x[:1])
    draws = [poutine.replay(model, trace=poutine.trace(guide).get_trace(x))(x) for _ in range(20)]
    assert len(model.local.normals) == len(dict(make_net(arch, hidden).named_parameters()))
    assert draws[0].std(0).min() > 0  # every copy its own weights
    local = torch.cat(draws)
    reference = predict(model, guide, x[:1], 2000)[:, 0]  # independent full weight draws
    if arch == "toy_mlp":
        local, reference = local.unsqueeze(-1), reference[..., :1]
    else:  # log-probabilities: nearer Gaussian than probabilities, so the moments estimate well
        local, reference = local.log_softmax(-1), reference.log()
    assert torch.allclose(local.mean(0), reference.mean(0), atol=0.2 * reference.std(0).max().item())
    assert torch.allclose(local.std(0), reference.std(0), rtol=0.15, atol=1e-3)

    plain, plain_guide = build(arch, num_data=100, hidden=hidden, init_scale=0.1)
    plain_guide(x[:1])
    shared = poutine.replay(plain, trace=poutine.trace(plain_guide).get_trace(x))(x)
    assert torch.allclose(shared, shared[:1].expand_as(shared))  # one weight set per minibatch
