import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO

from bnn_zoo import build, make_prior
from bnn_zoo.elbo import SplitELBO
from bnn_zoo.priors import PRIORS


def _loss_and_grads(elbo, model, guide, x, y, seed=5):
    pyro.set_rng_seed(seed)
    guide.zero_grad()
    loss = elbo.differentiable_loss(model, guide, x, y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in guide.parameters()]


def _same(ours, pyros):
    (loss, grads), (ref, ref_grads) = ours, pyros
    assert torch.allclose(loss, ref, rtol=1e-5)
    # the same terms summed in another order: equal up to float32 rounding
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-5 * b.abs().max().item()) for a, b in zip(grads, ref_grads))


@pytest.mark.parametrize("kind", PRIORS)
@pytest.mark.parametrize("arch", ZOO)
def test_split_elbo_is_pyros_estimator(arch, kind):
    """On the same draws: closed-form KL gives TraceMeanField_ELBO's loss and gradients, Monte
    Carlo KL gives Trace_ELBO's; the two logged parts add up to the loss."""
    model, guide = build(arch, num_data=500, hidden=SMALL[arch], prior=make_prior(kind))
    x, y = example_batch(arch)
    guide(x, y)
    for ours, pyros in ((SplitELBO(), TraceMeanField_ELBO()), (SplitELBO(closed_form_kl=False), Trace_ELBO())):
        _same(_loss_and_grads(ours, model, guide, x, y), _loss_and_grads(pyros, model, guide, x, y))
        parts = ours.last_parts
        assert torch.allclose(parts["data_fit"] + parts["kl"], _loss_and_grads(ours, model, guide, x, y)[0])
    # the data fit is minus the scaled log-likelihood at the guide's draw
    pyro.set_rng_seed(9)
    elbo = SplitELBO()
    elbo.differentiable_loss(model, guide, x, y)
    pyro.set_rng_seed(9)
    replayed = poutine.trace(poutine.replay(model, trace=poutine.trace(guide).get_trace(x, y))).get_trace(x, y)
    expected = -(500 / 8) * replayed.nodes["obs"]["fn"].log_prob(y).sum()
    assert elbo.last_parts["data_fit"].item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("arch", ZOO)
def test_kl_weight_scales_the_kl_and_nothing_else(arch):
    model, guide = build(arch, num_data=500, hidden=SMALL[arch])
    x, y = example_batch(arch)
    guide(x, y)
    plain, tempered = SplitELBO(), SplitELBO(kl_weight=0.25)
    full, full_grads = _loss_and_grads(plain, model, guide, x, y)
    cold, cold_grads = _loss_and_grads(tempered, model, guide, x, y)
    assert torch.equal(tempered.last_parts["kl"], plain.last_parts["kl"])  # logged unweighted
    assert cold.item() == pytest.approx((plain.last_parts["data_fit"] + 0.25 * plain.last_parts["kl"]).item(), rel=1e-6)
    assert cold.item() < full.item() - 0.5 * plain.last_parts["kl"].item()
    assert not all(torch.allclose(a, b) for a, b in zip(full_grads, cold_grads))
    with pytest.raises(ValueError, match="kl_weight must be a positive finite number, got 0"):
        SplitELBO(kl_weight=0)


@pytest.mark.parametrize("kind", ["lowrank", "delta"])
def test_split_elbo_with_other_guides_is_trace_elbo(kind):
    model, guide = build("mnist_mlp", num_data=500, hidden=[16], guide=kind, rank=2)
    x, y = example_batch("mnist_mlp")
    guide(x, y)
    _same(_loss_and_grads(SplitELBO(), model, guide, x, y), _loss_and_grads(Trace_ELBO(), model, guide, x, y))


@pytest.mark.parametrize("kind", PRIORS)
def test_kl_estimators_say_which_terms_are_closed_form(kind):
    model, guide = build("lenet", num_data=500, prior=make_prior(kind))
    x, y = example_batch("lenet")
    found = SplitELBO().kl_estimators(model, guide, x, y)
    assert found["closed_form" if kind == "gaussian" else "monte_carlo"] == [f"net.{n}" for n in model.weight_shapes]
    assert SplitELBO(closed_form_kl=False).kl_estimators(model, guide, x, y)["closed_form"] == []


def test_split_elbo_trains_with_svi_and_num_particles():
    model, guide = build("toy_mlp", num_data=20, hidden=[8], noise_scale=0.5)
    x = torch.linspace(-1, 1, 20).unsqueeze(-1)
    y = 2 * x[:, 0]
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), SplitELBO(num_particles=4))
    losses = [svi.step(x, y) for _ in range(150)]
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    pyro.set_rng_seed(1)
    single = SplitELBO().loss(model, guide, x, y)
    pyro.set_rng_seed(1)
    first = SplitELBO(num_particles=2).particle(model, guide, (x, y), {})
    assert single == pytest.approx(sum(first).item(), rel=1e-6)  # particle 1 of 2 is the single draw
