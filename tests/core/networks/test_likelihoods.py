import math

import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from pyro.infer import TraceMeanField_ELBO
from torch import nn

from bnn_zoo import bayesian, build, predict
from bnn_zoo.core.networks.likelihoods import Categorical, Gaussian, make_likelihood
from bnn_zoo.core.networks.nets import MLP
from bnn_zoo.data.sets import TensorSet
from bnn_zoo.evaluation.figures.plots import variance_parts
from bnn_zoo.runs.plans.config import make_config
from bnn_zoo.runs.training.loop import fit, training_step


@pytest.mark.parametrize("arch", ZOO)
def test_minibatch_log_joint_has_the_full_data_scaling(arch):
    """With the weights held fixed, the mean of the minibatch log joints over a partition of the
    data equals the full-data log joint: the likelihood scaled by N/B, the prior counted once."""
    n, b = 24, 6
    model, guide = build(arch, num_data=n, hidden=SMALL[arch])
    x, y = example_batch(arch, n)
    weights = {k: v for k, v in guide(x, y).items()}
    fixed = poutine.condition(model, data=weights)
    full = poutine.trace(fixed).get_trace(x, y).log_prob_sum()
    parts = [poutine.trace(fixed).get_trace(x[i:i + b], y[i:i + b]).log_prob_sum() for i in range(0, n, b)]
    assert torch.stack(parts).mean().item() == pytest.approx(full.item(), rel=1e-5)
    obs = poutine.trace(fixed).get_trace(x[:b], y[:b]).nodes["obs"]
    assert obs["scale"] == n / b
    unlabelled = poutine.trace(fixed).get_trace(x[:b]).nodes["obs"]  # prediction: no scaling
    assert unlabelled["scale"] == 1.0 and not unlabelled["is_observed"]


def test_categorical_figures_are_the_mean_predictive_s():
    probs = torch.tensor([[[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]],
                          [[0.7, 0.3], [0.4, 0.6], [0.2, 0.8]]])  # S=2, N=3: means .8/.2, .3/.7, .4/.6
    figures = Categorical().metrics(probs, torch.tensor([0, 1, 0]))
    assert figures["accuracy"] == pytest.approx(2 / 3)
    assert figures["nll"] == pytest.approx(-(math.log(0.8) + math.log(0.7) + math.log(0.4)) / 3, rel=1e-6)


def test_gaussian_figures_use_the_mixture_of_the_samples():
    samples = torch.tensor([[[0.0, 1.0]], [[2.0, 0.5]]])  # two Normals for one point
    y = torch.tensor([1.0])
    density = 0.5 * (math.exp(-0.5) / math.sqrt(2 * math.pi) + math.exp(-2) / (0.5 * math.sqrt(2 * math.pi)))
    figures = Gaussian().metrics(samples, y)
    assert figures["nll"] == pytest.approx(-math.log(density), rel=1e-6)
    assert figures["rmse"] == pytest.approx(0.0)  # the mean of the two means is 1


def test_noise_modes_and_outputs():
    assert Gaussian(noise="heteroscedastic").outputs == 2 and Gaussian().outputs == 1
    # the noise output 0 means the configured scale; the softplus keeps any output positive
    sd = Gaussian(noise="heteroscedastic", scale=0.5).predictive(torch.tensor([[1.0, 0.0], [1.0, -30.0]]))[:, 1]
    assert sd[0].item() == pytest.approx(0.5, abs=1e-3) and 0 < sd[1].item() < 1e-3
    assert torch.equal(Gaussian(scale=0.3).predictive(torch.tensor([[2.0]])), torch.tensor([[2.0, 0.3]]))
    assert list(Gaussian(noise="homoscedastic").parameters()) and not list(Gaussian().parameters())
    assert torch.allclose(Categorical().predictive(torch.zeros(2, 4)), torch.full((2, 4), 0.25))


@pytest.mark.parametrize("noise", ["fixed", "heteroscedastic"])
def test_a_regression_in_its_targets_units_is_the_standard_one_moved_and_stretched(noise):
    """With the targets' mean m and sd s, the network's output means m + s * out and the noise sd
    s times its own: the log-likelihood of y is the standard one's of (y - m) / s, less log s."""
    out, y = torch.tensor([[0.3, -0.2], [-1.1, 0.4]])[:, :2 if noise == "heteroscedastic" else 1], torch.tensor([1300.0, 700.0])
    standard, moved = Gaussian(noise=noise, scale=0.5), Gaussian(noise=noise, scale=0.5, target=(1000.0, 250.0))
    assert torch.allclose(moved.predictive(out), standard.predictive(out) * torch.tensor([250.0, 250.0]) + torch.tensor([1000.0, 0.0]))
    assert torch.allclose(moved.distribution(out).log_prob(y),
                          standard.distribution(out).log_prob((y - 1000.0) / 250.0) - math.log(250.0))
    assert torch.allclose(moved.returned(out), 1000.0 + 250.0 * out[:, 0])
    assert moved.state_dict().keys() == standard.state_dict().keys()  # the targets' figures come from the config


@pytest.mark.parametrize("make, message", [
    (lambda: Gaussian(noise="poisson"), "unknown noise mode 'poisson'"),
    (lambda: Gaussian(scale=0.0), "positive"),
    (lambda: Gaussian(target=(3.0, 0.0)), "the targets' sd must be positive"),
    (lambda: Categorical(num_data=-5), "positive integer"),
    (lambda: Categorical(num_data=0), "positive integer"),
    (lambda: Categorical(num_data=True), "positive integer"),
    (lambda: make_likelihood("poisson"), "unknown likelihood"),
])
def test_bad_likelihood_values_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_batch_larger_than_the_data_set_is_refused():
    model, guide = build("toy_mlp", num_data=4, hidden=[4])
    with pytest.raises(ValueError, match="batch of 6 examples is larger than num_data=4"):
        model(*example_batch("toy_mlp", 6))


def _train(model, guide, x, y, epochs, batch_size, lr):
    guide(x[:2], y[:2])
    optimizer = torch.optim.Adam([*guide.parameters(), *model.parameters()], lr=lr)
    t = make_config(None, [f"train.batch_size={batch_size}", "train.progress=false"]).train
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    fit("bayes", training_step(TraceMeanField_ELBO()(model, guide), optimizer), optimizer, scheduler, TensorSet(x, y),
        t, epochs, [], 1.0 / len(x), lambda record, due: None)


@pytest.mark.slow
def test_homoscedastic_noise_recovers_a_known_scale():
    n, noise = 400, 0.3
    g = torch.Generator().manual_seed(2)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    y = 2 * x[:, 0] - 0.5 + noise * torch.randn(n, generator=g)
    model, guide = bayesian(nn.Linear(1, 1), likelihood=Gaussian(n, "homoscedastic", 1.0))
    _train(model, guide, x, y, epochs=150, batch_size=100, lr=0.03)
    assert model.hyperparameters["noise/scale"] == pytest.approx(noise, rel=0.1)


@pytest.mark.slow
def test_heteroscedastic_noise_recovers_a_known_scale():
    """The noise sd grows from 0.1 at x = -1 to 0.5 at x = 1; the network's noise output finds it."""
    n = 1000
    g = torch.Generator().manual_seed(3)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    true_sd = lambda x: 0.3 + 0.2 * x  # noqa: E731
    y = torch.sin(2 * x[:, 0]) + true_sd(x[:, 0]) * torch.randn(n, generator=g)
    model, guide = bayesian(MLP(1, [32], 2), likelihood=Gaussian(n, "heteroscedastic", 0.3))
    _train(model, guide, x, y, epochs=100, batch_size=250, lr=0.02)
    grid = torch.tensor([[-0.75], [0.0], [0.75]])
    found = variance_parts(predict(model, guide, grid, 50))["aleatoric"]
    assert torch.allclose(found, true_sd(grid[:, 0]), rtol=0.25), found
