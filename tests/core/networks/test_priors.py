import math

import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from pyro.infer import TraceMeanField_ELBO

from bnn_zoo import build
from bnn_zoo.core.networks.priors import PRIORS, FanInPrior, GaussianPrior, ScaleMixturePrior, make_prior


def test_gaussian_prior_is_one_event_over_the_weight():
    prior = GaussianPrior(0.5)(torch.Size([3, 4]))
    w = torch.randn(3, 4)
    assert prior.event_shape == (3, 4) and prior.batch_shape == ()
    expected = (-0.5 * (w / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)).sum()
    assert prior.log_prob(w).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.slow
def test_the_fan_in_prior_divides_a_weight_s_scale_by_the_root_of_its_inputs():
    for shape, scale in (([50, 10], 2 / math.sqrt(10)), ([50], 2.0), ([6, 3, 5, 5], 2 / math.sqrt(75))):
        prior = FanInPrior(2.0)(torch.Size(shape))
        assert prior.event_shape == tuple(shape) and prior.base_dist.scale.unique().tolist() == pytest.approx([scale])
    model, _ = build("toy_mlp", num_data=10, hidden=[400], prior=make_prior("fan_in", 1.0))
    x = torch.linspace(-1, 1, 5).unsqueeze(-1)
    spread = torch.stack([model(x) for _ in range(2000)]).std(0)  # prior functions, not the weights
    assert spread.max() < 3  # N(0, 1) on every weight: each output's sd is sqrt(400 x E[relu^2]) ~ 14


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
    model, guide = build(arch, num_data=1000, hidden=SMALL[arch], prior=make_prior(kind, learn=True))
    x, y = example_batch(arch)
    loss_fn = TraceMeanField_ELBO()(model, guide)
    loss_fn(x, y)
    before = model.hyperparameters
    assert set(before) == {f"prior/{n}" for n in model.prior.hyperparameters} | (
        {"noise/scale"} if arch == "toy_mlp" else set())
    optimizer = torch.optim.Adam([*guide.parameters(), *model.parameters()], lr=0.05)
    for _ in range(5):
        optimizer.zero_grad()
        loss_fn(x, y).backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.prior.parameters())
        optimizer.step()
    after = model.hyperparameters
    assert all(after[k] != before[k] for k in before if k.startswith("prior/"))
    assert all(v > 0 for v in after.values()) and after.get("prior/pi", 0.5) < 1


@pytest.mark.parametrize("kind", PRIORS)
def test_fixed_priors_are_buffers_that_move_with_the_model(kind):
    model, _ = build("mnist_mlp", hidden=[8], prior=make_prior(kind))
    assert list(model.parameters()) == []
    assert set(dict(model.named_buffers())) >= {f"prior.{n}" for n in model.prior.hyperparameters}
    model.to(torch.float64)
    assert all(b.dtype == torch.float64 for b in model.prior.buffers())


@pytest.mark.parametrize("make, message", [
    (lambda: make_prior("laplace"), "unknown prior 'laplace'"),
    (lambda: GaussianPrior(-1.0), "positive"),
    (lambda: GaussianPrior(float("inf")), "finite"),
    (lambda: ScaleMixturePrior(pi=1.0), "0 < pi < 1"),
    (lambda: ScaleMixturePrior(scale2=0.0), "positive scales"),
])
def test_bad_prior_values_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()
