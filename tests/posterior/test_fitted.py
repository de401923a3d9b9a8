"""The posteriors fitted after training around the twin (Laplace, SWAG, cyclical SG-MCMC): each is
the distribution its definition says, checked on networks small enough to compute it directly."""
import math

import pytest
import torch
from torch import nn

from bnn_zoo.core.networks.likelihoods import Categorical
from bnn_zoo.core.networks.twin import Twin
from bnn_zoo.posterior.laplace import KFACLaplace, LastLayerLaplace
from bnn_zoo.posterior.sgmcmc import CyclicalSGMCMC
from bnn_zoo.posterior.swag import SWAG


def logistic(classes: int = 3, inputs: int = 4, seed: int = 0):
    """A twin (one linear layer after a fixed feature layer) and data it fits."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(inputs, 5), nn.Tanh(), nn.Linear(5, classes))
    x = torch.randn(300, inputs)
    y = net(x).argmax(1)
    return Twin(net, Categorical(num_classes=classes)).eval(), x, y


def empirical_covariance(draws: torch.Tensor) -> torch.Tensor:
    centred = draws - draws.mean(0)
    return centred.T @ centred / (len(draws) - 1)


def test_last_layer_laplace_draws_from_the_inverse_of_its_curvature_plus_the_prior():
    twin, x, y = logistic()
    laplace = LastLayerLaplace.fit(twin, x, y, x[:50], y[:50])
    layer = twin.net[2]
    with torch.no_grad():
        phi = torch.cat([torch.tanh(twin.net[0](x)), torch.ones(300, 1)], 1).double()
        p = twin.net(x).softmax(-1).double()
    # the curvature, example by example: (diag(p) - p p^T) kron phi phi^T
    curvature = sum(torch.kron(torch.diag(pn) - torch.outer(pn, pn), torch.outer(fn, fn)) for pn, fn in zip(p, phi))
    covariance = torch.linalg.inv(curvature + laplace.prior_precision * torch.eye(len(curvature), dtype=torch.float64))
    torch.manual_seed(1)
    drawn = laplace.draw(20000)
    flat = torch.cat([drawn["2.weight"], drawn["2.bias"][..., None]], -1).flatten(1).double()
    assert torch.allclose(flat.mean(0), torch.cat([layer.weight, layer.bias[:, None]], 1).flatten().double(), atol=0.05)
    assert torch.allclose(empirical_covariance(flat), covariance, atol=0.05 * covariance.abs().max().item())
    assert laplace.prior_precision in [10 ** (k / 2) for k in range(-4, 13)]


def test_kfac_laplace_draws_each_layer_from_its_kronecker_factored_precision():
    twin, x, y = logistic(classes=2, inputs=2)
    laplace = KFACLaplace.fit(twin, x, y, x[:50], y[:50])
    f, layer = laplace.factors["2"], twin.net[2]
    a = f["a_vectors"] @ torch.diag(f["a_values"]) @ f["a_vectors"].T
    g = f["g_vectors"] @ torch.diag(f["g_values"]) @ f["g_vectors"].T
    with torch.no_grad():
        phi = torch.cat([torch.tanh(twin.net[0](x)), torch.ones(300, 1)], 1)
    assert torch.allclose(a, phi.T @ phi / 300, atol=1e-5)  # A: the second moment of the layer's inputs
    precision = 300 * torch.kron(a.double(), g.double()) + laplace.prior_precision * torch.eye(12, dtype=torch.float64)
    torch.manual_seed(2)
    drawn = laplace.draw(40000)
    w = torch.cat([drawn["2.weight"], drawn["2.bias"][..., None]], -1)  # [n, out, in + 1]
    flat = w.transpose(1, 2).flatten(1).double()  # column-stacked: vec(W) with (A kron G)
    expected = torch.linalg.inv(precision)
    assert torch.allclose(empirical_covariance(flat), expected, atol=0.05 * expected.abs().max().item())
    assert set(laplace.factors) == {"0", "2"} and torch.equal(f["mean"][:, :-1], layer.weight.detach())


def test_swag_is_the_gaussian_of_its_iterates_moments():
    twin, x, y = logistic()
    swag = SWAG.fit(twin, x, y, epochs=3, lr=0.05, batch_size=30, moments=10)
    iterates = swag.deviations + swag.mean
    assert torch.allclose(iterates.mean(0), swag.mean, atol=1e-5)  # SWA's average is the iterates' mean
    assert torch.allclose(swag.variance, iterates.var(0, correction=0).clamp_min(1e-30), atol=1e-6)
    torch.manual_seed(3)
    drawn = torch.cat([v.flatten(1) for v in swag.draw(40000).values()], 1).double()
    d = swag.deviations.double()
    expected = 0.25 * (torch.diag(swag.variance.double()) + d.T @ d / (len(d) - 1))  # scale 0.5, halves
    assert torch.allclose(empirical_covariance(drawn), expected, atol=0.06 * expected.abs().max().item())
    assert torch.equal(twin.net[2].weight, logistic()[0].net[2].weight)  # the twin left as it was


def test_cyclical_sg_mcmc_keeps_its_samples_from_each_cycle_s_cooling():
    twin, x, y = logistic()
    chain = CyclicalSGMCMC.fit(twin, x, y, cycles=3, epochs_per_cycle=2, lr=0.05, batch_size=60, samples_per_cycle=4,
                               explore=0.5)  # 5 steps of 10 a cycle sample, 4 kept
    assert chain.samples.shape == (12, sum(p.numel() for p in twin.parameters()))
    assert chain.rows(100) == 12 and chain.predict(x[:5], 100).shape == (12, 5, 3)
    start = torch.cat([p.detach().flatten() for p in twin.parameters()])
    assert not torch.equal(chain.samples[0], chain.samples[1]) and not torch.equal(chain.samples[0], start)
    quiet = CyclicalSGMCMC.fit(twin, x, y, cycles=1, epochs_per_cycle=2, lr=1e-12, batch_size=60, samples_per_cycle=1,
                               explore=0.9)  # a step too small to move, its noise as small
    assert torch.allclose(quiet.samples[0], start)
    assert math.isclose(chain.parameters_stored, 12 * len(start))
    with pytest.raises(ValueError, match="each cycle samples over 2 steps, fewer than the 4 samples it keeps"):
        CyclicalSGMCMC.fit(twin, x, y, cycles=1, epochs_per_cycle=2, batch_size=60, samples_per_cycle=4)


def test_cyclical_sg_mcmc_walks_under_the_run_s_prior():
    from bnn_zoo.core.networks.priors import FanInPrior, GaussianPrior

    twin, x, y = logistic()
    one_step = dict(cycles=1, epochs_per_cycle=1, lr=0.01, batch_size=len(x), samples_per_cycle=1, explore=0.0)
    wide, fan_in = (CyclicalSGMCMC.fit(twin, x, y, prior=prior, **one_step).samples[0]
                    for prior in (GaussianPrior(1.0), FanInPrior(2.0)))
    assert torch.equal(CyclicalSGMCMC.fit(twin, x, y, **one_step).samples[0], wide)  # no prior given: N(0, 1)
    # the same data gradient and noise; the priors' pulls differ: lr / n * (w / 1 - w / var), var 4 / fan_in (a bias's: 4)
    variance = torch.cat([torch.full((p.numel(),), 4.0 / (p.shape[1] if p.dim() == 2 else 1)) for p in twin.parameters()])
    start = torch.cat([p.detach().flatten() for p in twin.parameters()])
    assert torch.allclose(fan_in - wide, 0.01 / len(x) * (start - start / variance), atol=1e-7)
    assert CyclicalSGMCMC.takes_prior and not LastLayerLaplace.takes_prior and not SWAG.takes_prior


@pytest.mark.parametrize("kind", [LastLayerLaplace, KFACLaplace])
def test_a_laplace_posterior_is_for_classifiers(kind):
    from bnn_zoo.core.networks.likelihoods import Gaussian

    twin = Twin(nn.Sequential(nn.Linear(1, 3), nn.Tanh(), nn.Linear(3, 1)), Gaussian())
    with pytest.raises(ValueError, match="for classifiers"):
        kind.fit(twin, torch.randn(10, 1), torch.randn(10), torch.randn(5, 1), torch.randn(5))


def summed_nll_hessian(twin, x, y, layer) -> torch.Tensor:
    """The Hessian of the summed categorical NLL in ``layer``'s weights (and bias), flattened class
    by class as last-layer Laplace lays them out, by torch.autograd.functional."""
    with torch.no_grad():
        phi = twin.net[:-1](x)
    has_bias = layer.bias is not None

    def nll(flat):
        w = flat.reshape(layer.out_features, -1)
        logits = phi @ w[:, :layer.in_features].T + (w[:, -1] if has_bias else 0)
        return torch.nn.functional.cross_entropy(logits, y, reduction="sum")

    start = torch.cat([layer.weight, layer.bias[:, None]], 1) if has_bias else layer.weight
    return torch.autograd.functional.hessian(nll, start.detach().double().flatten())


@pytest.mark.parametrize("bias", [True, False])
def test_last_layer_laplace_s_curvature_is_the_nll_s_hessian_and_its_factor_the_posterior_precision(bias):
    """The fast path (each pair of classes' block one matrix product, the precision factored once
    per prior precision) against torch.autograd's Hessian; a last layer without a bias fits too."""
    from bnn_zoo.posterior.laplace import last_layer_curvature

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3, bias=bias)).double()
    x = torch.randn(200, 4, dtype=torch.float64)
    twin = Twin(net, Categorical(num_classes=3)).eval()
    y = net(x).argmax(1)
    layer = net[2]
    hessian = summed_nll_hessian(twin, x, y, layer)
    with torch.no_grad():
        phi = torch.tanh(net[0](x))
        phi = torch.cat([phi, torch.ones(200, 1, dtype=phi.dtype)], 1) if bias else phi
        weights = torch.cat([layer.weight, layer.bias[:, None]], 1) if bias else layer.weight
        assert torch.allclose(last_layer_curvature(phi, weights, batch_size=64), hessian, atol=1e-10)
    twin = Twin(net.float(), Categorical(num_classes=3)).eval()
    laplace = LastLayerLaplace.fit(twin, x.float(), y, x[:50].float(), y[:50])
    factor = laplace.factor.double()
    expected = hessian + laplace.prior_precision * torch.eye(len(hessian), dtype=torch.float64)
    assert torch.allclose(factor @ factor.T, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    drawn = laplace.draw(7)
    assert set(drawn) == ({"2.weight", "2.bias"} if bias else {"2.weight"}) and drawn["2.weight"].shape == (7, 3, 5)
    assert laplace.predict(x[:4].float(), 7).shape == (7, 4, 3)


@pytest.fixture(scope="module")
def sine():
    """A regression twin (fixed noise sd 0.1) fitted by Adam to sin(x) at 200 points in [-2, 2]."""
    from bnn_zoo.core.networks.likelihoods import Gaussian

    torch.manual_seed(0)
    twin = Twin(nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1)), Gaussian(noise="fixed", scale=0.1))
    x = torch.linspace(-2, 2, 200)[:, None]
    y = torch.sin(x[:, 0])
    optimizer = torch.optim.Adam(twin.parameters(), lr=0.01)
    for _ in range(500):
        optimizer.zero_grad()
        twin.loss(x, y).backward()
        optimizer.step()
    return twin.eval(), x, y


def test_sharpness_is_the_largest_eigenvalue_of_the_loss_hessian(sine):
    from torch.func import functional_call

    from bnn_zoo.posterior.sharpness import sharpness

    twin, x, y = sine
    assert [name for name, _ in twin.named_parameters()] == [f"net.{name}" for name, _ in twin.net.named_parameters()]
    names = [name for name, _ in twin.net.named_parameters()]
    shapes = [p.shape for _, p in twin.net.named_parameters()]
    flat = torch.cat([p.detach().flatten() for p in twin.parameters()])

    def loss(vector):
        parts = vector.split([s.numel() for s in shapes])
        pieces = {name: part.reshape(shape) for name, part, shape in zip(names, parts, shapes)}
        return twin.likelihood.twin_loss(functional_call(twin.net, pieces, (x,)), y)

    eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, flat).double())
    assert sharpness(twin, x, y) == pytest.approx(eigenvalues.abs().max().item(), rel=1e-3)


def test_swag_fits_a_regression_at_a_rate_its_steep_loss_bears(sine):
    """Issue 40, 4: SWAG on a regression (noise sd 0.1) sent its SGD to NaN ("Expected parameter loc
    ..."); its rate is now kept at 1 / the loss's sharpness, and it predicts around the twin."""
    from bnn_zoo.posterior.sharpness import sharpness

    twin, x, y = sine
    sharp = sharpness(twin, x, y)
    assert sharp > 100  # the classifier's rate, 0.01, would diverge here
    swag = SWAG.fit(twin, x, y)
    assert swag.lr == pytest.approx(1 / sharp) and swag.label == f"SWAG (20 moments, learning rate {1 / sharp:.3g})"
    torch.manual_seed(4)
    drawn = swag.predict(x, 200)  # [200, N, 2]: each draw's mean and noise sd
    with torch.no_grad():
        twin_mean = twin(x)[:, 0]
    assert torch.equal(drawn[..., 1], torch.full_like(drawn[..., 1], 0.1))  # the fixed noise sd, untouched
    assert (drawn[..., 0].mean(0) - twin_mean).abs().max() < 0.05  # about the twin's fit of sin(x)
    assert (drawn[..., 0].mean(0) - y).abs().max() < 0.15 and drawn[..., 0].std(0).max() < 0.1


@pytest.mark.parametrize("kind, num_data, message", [
    (LastLayerLaplace, 300, "fits a classifier's categorical likelihood, and this run regresses"),
    (KFACLaplace, 300, "fits a classifier's categorical likelihood, and this run regresses"),
    (SWAG, 6, None),
    (CyclicalSGMCMC, 896, "and 896 training inputs give it 2 step(s) there: it needs at least 897 training inputs"),
    (CyclicalSGMCMC, 897, None),
])
def test_each_fitted_kind_says_what_it_cannot_fit(kind, num_data, message, sine):
    said = kind.cannot_fit(sine[0], num_data)
    assert said is None if message is None else message in said
    convolutional = Twin(nn.Sequential(nn.Conv2d(1, 2, 3, bias=False), nn.Flatten()), Categorical(num_classes=8))
    assert "has none" in LastLayerLaplace.cannot_fit(convolutional, 1000)
    assert "has none" in KFACLaplace.cannot_fit(convolutional, 1000)
