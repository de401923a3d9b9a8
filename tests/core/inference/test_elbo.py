import inspect

import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from pyro.infer import ELBO, SVI, Trace_ELBO, TraceMeanField_ELBO

from bnn_zoo import build, make_prior
from bnn_zoo.core.inference.elbo import TraceKL_ELBO
from bnn_zoo.core.networks.priors import PRIORS


def _loss_and_grads(elbo, model, guide, x, y, seed=5):
    pyro.set_rng_seed(seed)
    guide.zero_grad()
    loss = elbo.differentiable_loss(model, guide, x, y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in guide.parameters()]


def _parts(elbo, model, guide, x, y, seed=5):
    pyro.set_rng_seed(seed)
    return elbo.loss_and_parts(model, guide, x, y)


def _same(ours, pyros):
    (loss, grads), (ref, ref_grads) = ours, pyros
    assert torch.allclose(loss, ref, rtol=1e-5)
    # the same terms summed in another order: equal up to float32 rounding
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-5 * b.abs().max().item()) for a, b in zip(grads, ref_grads))


@pytest.mark.parametrize("kind", PRIORS)
@pytest.mark.parametrize("arch", ZOO)
def test_split_elbo_is_pyros_estimator(arch, kind):
    """On the same draws: closed-form KL gives TraceMeanField_ELBO's loss and gradients, Monte
    Carlo KL gives Trace_ELBO's; the two returned parts, detached, add up to the loss."""
    model, guide = build(arch, num_data=500, hidden=SMALL[arch], prior=make_prior(kind))
    x, y = example_batch(arch)
    guide(x, y)
    for ours, pyros in ((TraceKL_ELBO(), TraceMeanField_ELBO()), (TraceKL_ELBO(closed_form_kl=False), Trace_ELBO())):
        _same(_loss_and_grads(ours, model, guide, x, y), _loss_and_grads(pyros, model, guide, x, y))
        loss, parts = _parts(ours, model, guide, x, y)
        assert loss.requires_grad and not parts.data_fit.requires_grad and not parts.kl.requires_grad
        assert torch.allclose(parts.data_fit + parts.kl, _loss_and_grads(ours, model, guide, x, y)[0])
    # the data fit is minus the scaled log-likelihood at the guide's draw
    _, parts = _parts(TraceKL_ELBO(), model, guide, x, y, seed=9)
    pyro.set_rng_seed(9)
    replayed = poutine.trace(poutine.replay(model, trace=poutine.trace(guide).get_trace(x, y))).get_trace(x, y)
    expected = -(500 / 8) * replayed.nodes["obs"]["fn"].log_prob(y).sum()
    assert parts.data_fit.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("arch", ZOO)
def test_kl_weight_scales_the_kl_and_nothing_else(arch):
    model, guide = build(arch, num_data=500, hidden=SMALL[arch])
    x, y = example_batch(arch)
    guide(x, y)
    plain, tempered = TraceKL_ELBO(), TraceKL_ELBO(kl_weight=0.25)
    full, full_grads = _loss_and_grads(plain, model, guide, x, y)
    cold, cold_grads = _loss_and_grads(tempered, model, guide, x, y)
    _, parts = _parts(plain, model, guide, x, y)
    assert torch.equal(_parts(tempered, model, guide, x, y)[1].kl, parts.kl)  # returned unweighted
    assert cold.item() == pytest.approx((parts.data_fit + 0.25 * parts.kl).item(), rel=1e-6)
    assert cold.item() < full.item() - 0.5 * parts.kl.item()
    assert not all(torch.allclose(a, b) for a, b in zip(full_grads, cold_grads))
    with pytest.raises(ValueError, match="kl_weight must be a positive finite number, got 0"):
        TraceKL_ELBO(kl_weight=0)


@pytest.mark.parametrize("kind", ["lowrank", "delta"])
def test_split_elbo_with_other_guides_is_trace_elbo(kind):
    model, guide = build("mnist_mlp", num_data=500, hidden=[16], guide=kind, rank=2)
    x, y = example_batch("mnist_mlp")
    guide(x, y)
    _same(_loss_and_grads(TraceKL_ELBO(), model, guide, x, y), _loss_and_grads(Trace_ELBO(), model, guide, x, y))


@pytest.mark.parametrize("kind", PRIORS)
def test_kl_estimators_say_which_terms_are_closed_form(kind):
    model, guide = build("lenet", num_data=500, prior=make_prior(kind))
    x, y = example_batch("lenet")
    found = TraceKL_ELBO().kl_estimators(model, guide, x, y)
    assert found["closed_form" if kind in ("gaussian", "fan_in") else "monte_carlo"] == [f"net.{n}" for n in model.weight_shapes]
    assert TraceKL_ELBO(closed_form_kl=False).kl_estimators(model, guide, x, y)["closed_form"] == []


@pytest.mark.slow
def test_split_elbo_trains_with_svi_and_num_particles():
    model, guide = build("toy_mlp", num_data=20, hidden=[8], noise_scale=0.5)
    x = torch.linspace(-1, 1, 20).unsqueeze(-1)
    y = 2 * x[:, 0]
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), TraceKL_ELBO(num_particles=4))
    losses = [svi.step(x, y) for _ in range(150)]
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    pyro.set_rng_seed(1)
    pair = TraceKL_ELBO(num_particles=2).loss(model, guide, x, y)
    pyro.set_rng_seed(1)
    singles = [TraceKL_ELBO().loss(model, guide, x, y) for _ in range(2)]
    assert pair == pytest.approx(sum(singles) / 2, rel=1e-6)  # the mean of the particles, drawn in turn


def _replaying(guide, x, weights: dict, i: int):
    """The guide with its draws replaced by particle ``i`` of vectorized ``weights`` [N, 1, *shape]."""
    trace = poutine.trace(guide).get_trace(x)
    for name, w in weights.items():
        trace.nodes[name]["value"] = w[i, 0]
    return poutine.replay(guide, trace=trace)


@pytest.mark.parametrize("closed_form_kl", [True, False])
@pytest.mark.parametrize("arch", ["mnist_mlp", "lenet"])
def test_vectorized_particles_are_the_mean_of_single_particles(arch, closed_form_kl):
    """vectorize_particles=True draws all particles in one guide call, in a plate left of the data
    plate, and its loss and parts are the mean of the single-particle ones at those draws."""
    model, guide = build(arch, num_data=500, hidden=SMALL[arch], init_scale=0.1)
    x, y = example_batch(arch)
    calls = []

    def recorded(*args):
        calls.append(guide(*args))
        return calls[-1]

    elbo = TraceKL_ELBO(num_particles=4, vectorize_particles=True, closed_form_kl=closed_form_kl)
    loss, parts = elbo.loss_and_parts(model, recorded, x, y)
    assert len(calls) == 2 and elbo.max_plate_nesting == 2  # Pyro's one guess of the plates, then one pass
    weights = calls[-1]
    assert {n: w.shape for n, w in weights.items()} == {f"net.{n}": (4, 1, *s) for n, s in model.weight_shapes.items()}
    singles = [TraceKL_ELBO(closed_form_kl=closed_form_kl).loss_and_parts(model, _replaying(guide, x, weights, i), x, y)
               for i in range(4)]
    assert torch.allclose(loss, torch.stack([s[0] for s in singles]).mean(), rtol=1e-5)
    assert torch.allclose(parts.data_fit, torch.stack([s[1].data_fit for s in singles]).mean(), rtol=1e-5)
    assert torch.allclose(parts.kl, torch.stack([s[1].kl for s in singles]).mean(), rtol=1e-5)
    assert len({s[1].data_fit.item() for s in singles}) == 4  # four different draws


def test_max_plate_nesting_is_honoured():
    """Validation checks every site against max_plate_nesting, as Pyro's ELBOs do."""
    model, guide = build("toy_mlp", num_data=20, hidden=[4])
    x, y = torch.linspace(-1, 1, 5).unsqueeze(-1), torch.zeros(5)
    with pyro.validation_enabled(True):
        assert TraceKL_ELBO(max_plate_nesting=1).loss(model, guide, x, y) > 0  # the data plate
        with pytest.raises(ValueError, match='at site "obs", plate stack overflow'):
            TraceKL_ELBO(max_plate_nesting=0).loss(model, guide, x, y)


def test_the_pyro_internals_split_elbo_builds_on():
    """pyro.infer.ELBO's hooks TraceKL_ELBO uses (hence pyro-ppl < 1.10 in pyproject.toml): it
    implements the abstract ``_get_trace(model, guide, args, kwargs)`` and iterates
    ``_get_traces(model, guide, args, kwargs)``. A Pyro release that changes them fails here."""
    assert "_get_trace" in ELBO.__abstractmethods__
    for hook in (ELBO._get_trace, ELBO._get_traces):
        assert list(inspect.signature(hook).parameters) == ["self", "model", "guide", "args", "kwargs"]
