import threading

import pyro
import pyro.poutine as poutine
import pytest
import torch
import torch.nn.functional as F
from conftest import ZOO, example_batch

from bnn_zoo import LocalReparameterization, build, predict
from bnn_zoo.core.inference.elbo import TraceKL_ELBO

HIDDEN = {"toy_mlp": [32], "mnist_mlp": [32], "lenet": None}


def _replayed(model, guide, x):
    return poutine.replay(model, trace=poutine.trace(guide).get_trace(x))(x)


@pytest.mark.parametrize("arch", ZOO)
@torch.no_grad()
def test_each_example_gets_its_own_weights_from_the_same_posterior(arch):
    """One input repeated: with weight sampling every copy gets the same output; with local
    reparameterization (Flipout in LeNet's convolutions) each copy gets its own, distributed as
    the network's output under independent posterior draws of all the weights. (Flipout's copies
    share one weight draw up to random signs, so the test pools 20 guide draws of 100 copies.)"""
    model, guide = build(arch, num_data=100, hidden=HIDDEN[arch], init_scale=0.1)
    x = example_batch(arch, 1)[0].expand(100, *example_batch(arch, 1)[0].shape[1:])
    guide(x[:1])
    shared = _replayed(model, guide, x)
    assert torch.allclose(shared, shared[:1].expand_as(shared))  # one weight set per minibatch
    with LocalReparameterization() as handler:
        trace = poutine.trace(guide).get_trace(x)
        assert len(handler.normals) == len(model.weight_shapes)  # the guide's Normal for every weight
        del trace
        draws = [_replayed(model, guide, x) for _ in range(20)]
        assert len(handler.normals) <= len(model.weight_shapes)  # records go with their draws
    assert draws[0].std(0).min() > 0  # every copy its own weights
    local = torch.cat(draws)
    reference = predict(model, guide, x[:1], 2000)[:, 0]  # independent full weight draws
    if arch == "toy_mlp":
        local, reference = local.unsqueeze(-1), reference[..., :1]
    else:  # log-probabilities: nearer Gaussian than probabilities, so the moments estimate well
        local, reference = local.log_softmax(-1), reference.log()
    assert torch.allclose(local.mean(0), reference.mean(0), atol=0.2 * reference.std(0).max().item())
    assert torch.allclose(local.std(0), reference.std(0), rtol=0.15, atol=1e-3)


def test_it_swaps_nothing_process_wide():
    """torch.nn.functional is untouched, and another thread's computation is not rewritten."""
    model, guide = build("mnist_mlp", num_data=100, hidden=[16], init_scale=0.1)
    x = torch.randn(8, 1, 28, 28)
    linear = F.linear
    seen = {}
    with LocalReparameterization() as handler:
        assert F.linear is linear
        trace = poutine.trace(guide).get_trace(x)
        weight = trace.nodes["net.layers.1.weight"]["value"]
        assert id(weight) in handler.normals
        poutine.replay(model, trace=trace)(x)  # no labels, so no observed site to end the rewriting
        here = F.linear(x.flatten(1), weight)
        worker = threading.Thread(target=lambda: seen.update(out=F.linear(x.flatten(1), weight)))
        worker.start(), worker.join()
    plain = F.linear(x.flatten(1), weight)
    assert torch.equal(seen["out"], plain) and not torch.allclose(here, plain)
    assert not handler.normals  # records are dropped on exit
    assert torch.equal(F.linear(x.flatten(1), weight), plain)


def test_it_rewrites_between_the_replayed_draws_and_the_observed_site():
    model, guide = build("mnist_mlp", num_data=100, hidden=[16], init_scale=0.1)
    x, y = example_batch("mnist_mlp")
    with LocalReparameterization() as handler:
        trace = poutine.trace(guide).get_trace(x, y)
        assert not handler._rewriting  # the guide's own draws do not start it
        poutine.replay(model, trace=trace)(x, y)
        assert not handler._rewriting  # the observed site ended it


def test_prediction_under_the_handler_is_unchanged():
    """Vectorized weight draws pass through: predict samples whole weights either way."""
    model, guide = build("lenet", num_data=100, init_scale=0.1)
    x = torch.randn(5, 1, 28, 28)
    guide(x)  # its set-up draws from the prior once
    pyro.set_rng_seed(3)
    plain = predict(model, guide, x, 6, chunk_size=3)
    pyro.set_rng_seed(3)
    with LocalReparameterization():
        assert torch.equal(predict(model, guide, x, 6, chunk_size=3), plain)


def test_replayed_weights_are_not_taken_for_the_prior_s_draws():
    """A model replaying a guide trace drawn outside the handler keeps one weight set."""
    model, guide = build("mnist_mlp", num_data=100, hidden=[16], init_scale=0.1)
    x = torch.randn(1, 1, 28, 28).expand(10, 1, 28, 28)
    trace = poutine.trace(guide).get_trace(x)
    with LocalReparameterization():
        out = poutine.replay(model, trace=trace)(x)
    # the same weights for every row: equal up to the matmul's rounding (about 1e-6), where a second
    # weight set would differ by tenths
    assert torch.allclose(out, out[:1].expand_as(out), atol=1e-5)


def test_it_lowers_the_gradient_variance():
    model, guide = build("mnist_mlp", num_data=1000, hidden=[64], init_scale=0.1)
    x, y = example_batch("mnist_mlp", 64)
    elbo = TraceKL_ELBO()
    variance = {}
    for label, handler in (("weights", None), ("local", LocalReparameterization)):
        grads = []
        for _ in range(30):
            guide.zero_grad()
            with handler() if handler else torch.enable_grad():
                loss = elbo.differentiable_loss(model, guide, x, y)
            loss.backward()
            grads.append(getattr(guide.locs.net.layers, "1").weight_unconstrained.grad.flatten().clone())
        variance[label] = torch.stack(grads).var(0).mean().item()
    assert variance["weights"] > 3 * variance["local"], variance
