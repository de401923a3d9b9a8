import pyro
import pytest
import torch

from bnn_zoo import build, predict
from bnn_zoo.core.inference.nuts import nuts_posterior


def _toy():
    x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]])
    return x, x[:, 0] ** 3 / 4


@pytest.mark.slow
def test_nuts_posterior_returns_samples_and_their_diagnostics():
    model, _ = build("toy_mlp", num_data=4, hidden=[4], noise_scale=0.2)
    x, y = _toy()
    samples, diagnostics = nuts_posterior(model, x, y, num_samples=40, warmup_steps=40, max_tree_depth=4)
    assert {n: v.shape for n, v in samples.items()} == {f"net.{n}": (40, *s) for n, s in model.weight_shapes.items()}
    assert set(diagnostics) == {"seconds", "num_samples", "warmup_steps", "acceptance_rate", "divergences",
                                "min_n_eff", "max_r_hat"}
    assert 0 < diagnostics["acceptance_rate"] <= 1 and diagnostics["min_n_eff"] > 0
    fit = predict(model, samples, x, None)[..., 0].mean(0)
    assert (fit - y).abs().max() < 1.0  # the samples fit the four points (noise sd 0.2)


def test_nuts_posterior_is_seeded():
    model, _ = build("toy_mlp", num_data=4, hidden=[4])
    runs = []
    for _ in range(2):
        pyro.set_rng_seed(3)
        runs.append(nuts_posterior(model, *_toy(), num_samples=5, warmup_steps=5, max_tree_depth=3)[0])
    assert all(torch.equal(runs[0][n], runs[1][n]) for n in runs[0])
