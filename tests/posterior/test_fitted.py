"""The posteriors fitted after training around the twin (Laplace, SWAG, cyclical SG-MCMC): each is
the distribution its definition says, checked on networks small enough to compute it directly."""
import math

import pytest
import torch
from torch import nn

from bnn_zoo.core.likelihoods import Categorical
from bnn_zoo.core.twin import Twin
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


@pytest.mark.parametrize("kind", [LastLayerLaplace, KFACLaplace])
def test_a_laplace_posterior_is_for_classifiers(kind):
    from bnn_zoo.core.likelihoods import Gaussian

    twin = Twin(nn.Sequential(nn.Linear(1, 3), nn.Tanh(), nn.Linear(3, 1)), Gaussian())
    with pytest.raises(ValueError, match="for classifiers"):
        kind.fit(twin, torch.randn(10, 1), torch.randn(10), torch.randn(5, 1), torch.randn(5))
