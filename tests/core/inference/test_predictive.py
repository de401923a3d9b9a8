import subprocess
import sys

import pyro
import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from torch import nn

from bnn_zoo import bayesian, build, make_net, predict
from bnn_zoo.core.inference.inputs import evaluating
from bnn_zoo.core.inference.predictive import fill_predictions, sample_chunks


@pytest.mark.parametrize("arch", ZOO)
def test_predict_shapes_and_chunks(arch):
    model, guide = build(arch, num_data=100, hidden=SMALL[arch])
    x, _ = example_batch(arch, 7)
    out = predict(model, guide, x, num_samples=11, chunk_size=4, batch_size=3)
    expected = (11, 7, 10) if arch != "toy_mlp" else (11, 7, 2)  # regression: mean, noise scale
    assert out.shape == expected and not out.requires_grad
    assert not torch.allclose(out[0], out[1])  # every sample draws its own weights
    if arch != "toy_mlp":
        assert torch.allclose(out.sum(-1), torch.ones(11, 7))
    else:
        assert torch.equal(out[..., 1], torch.ones(11, 7))  # the fixed noise scale


@pytest.mark.parametrize("arch", ZOO)
def test_predict_on_weight_samples_is_the_network_at_each_sample(arch):
    """A dict of samples (an MCMC posterior): sample s is the plain network at weights s, and
    num_samples picks evenly spaced ones."""
    model, guide = build(arch, num_data=100, hidden=SMALL[arch], init_scale=0.1)
    x, _ = example_batch(arch, 5)
    with pyro.plate("s", 6, dim=-2):
        samples = {n: v[:, 0] for n, v in guide(x).items()}  # {site: [6, *shape]}
    out = predict(model, samples, x, num_samples=None, chunk_size=4, batch_size=2)
    net = make_net(arch, SMALL[arch])
    for s in range(6):
        net.load_state_dict({n[len("net."):]: v[s] for n, v in samples.items()})
        assert torch.allclose(out[s], model.likelihood.predictive(net(x)), rtol=1e-5, atol=1e-6)
    assert torch.allclose(predict(model, samples, x, num_samples=3), out[[0, 2, 5]], atol=1e-6)  # linspace(0, 5, 3)
    with pytest.raises(ValueError, match="holds 6 samples; asked for 7"):
        predict(model, samples, x, num_samples=7)


@pytest.mark.parametrize("kind", ["lowrank", "delta"])
def test_predict_takes_any_guide(kind):
    model, guide = build("mnist_mlp", num_data=100, hidden=[16], guide=kind, rank=2)
    x, _ = example_batch("mnist_mlp", 4)
    out = predict(model, guide, x, 5, chunk_size=2)
    assert out.shape == (5, 4, 10)
    assert torch.allclose(out[0], out[1]) == (kind == "delta")


def test_predict_runs_in_eval_mode_and_restores_the_mode():
    model, guide = build("toy_mlp", hidden=[4])
    seen = []
    model.net.register_forward_pre_hook(lambda module, _: seen.append(module.training))
    model.train()
    predict(model, guide, torch.zeros(2, 1), 2)
    model.forward_with({n: torch.zeros(s) for n, s in model.weight_shapes.items()}, torch.zeros(2, 1))
    assert model.training  # restored
    assert model._skeleton.training  # forward_with follows the model's mode


def test_predict_rejects_bad_sizes():
    model, guide = build("toy_mlp", hidden=[4])
    for kwargs in ({"num_samples": 0}, {"chunk_size": 0}, {"batch_size": 0}):
        with pytest.raises(ValueError, match="positive"):
            predict(model, guide, torch.zeros(2, 1), **kwargs)


def test_predict_refuses_images_that_were_not_normalized():
    model, guide = build("lenet", num_data=100)
    with pytest.raises(ValueError, match="values up to 255.*normalize"):
        predict(model, guide, torch.full((2, 1, 28, 28), 255.0), 2)
    with pytest.raises(ValueError, match="no inputs"):
        predict(model, guide, torch.zeros(0, 1, 28, 28), 2)


@pytest.mark.slow
def test_predict_memory_does_not_grow_with_the_number_of_samples():
    """Peak memory of 5,000 posterior samples of the shipped mnist_mlp for one input, against 50:
    the chunks' buffers are reused (the output is 0.2 MB)."""
    code = ("import resource, sys, torch, pyro\nfrom bnn_zoo import load, predict\n"
            "with pyro.settings.context(module_local_params=True):\n"
            "    t = load('mnist_mlp'); x = torch.zeros(1, 1, 28, 28)\n"
            "    predict(t.model, t.guide, x, 50)\n"
            "    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "    predict(t.model, t.guide, x, int(sys.argv[1]))\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)")
    grown = float(subprocess.run([sys.executable, "-c", code, "5000"], capture_output=True, text=True,
                                 check=True).stdout)
    assert grown < 40, f"{grown:.0f} MB more for 5,000 samples than for 50"


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_predict_refuses_inputs_that_are_not_numbers(bad):
    model, guide = build("toy_mlp", hidden=[4])
    x = torch.zeros(3, 1)
    x[1] = bad  # once gave NaN probabilities without a word
    with pytest.raises(ValueError, match=r"^x holds 1 non-finite values \(NaN or inf\)"):
        predict(model, guide, x, 2)


@pytest.mark.parametrize("arch", ZOO)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64], ids=str)
def test_a_batch_of_another_dtype_is_predicted_as_the_weights_dtype(arch, dtype):
    """A float64 batch (numpy's default) failed inside torch ("Input type (double) and bias type
    (float)"): it is cast to the weights' dtype and answers as that batch does, draw for draw, by
    the function and by a run's posteriors (bnn_zoo.posteriors: a model's, a twin's)."""
    from bnn_zoo.core.networks.twin import Twin
    from bnn_zoo.posterior.point import PointPosterior

    model, guide = build(arch, num_data=100, hidden=SMALL[arch])
    x = example_batch(arch, 5)[0].clamp(-0.4, 2.8).to(dtype)
    same = x.float()  # the numbers the cast batch holds
    predicted = []
    for batch in (same, x, same):  # the first sets the guide up (which draws), the others compare
        pyro.set_rng_seed(1)
        predicted.append(predict(model, guide, batch, 3))
    assert predicted[1].dtype == torch.float32 and torch.equal(predicted[1], predicted[2])
    twin = PointPosterior(Twin(make_net(arch, SMALL[arch]), model.likelihood), "twin")
    assert torch.equal(twin.predict(x, 1), twin.predict(same, 1))


def test_predict_names_what_is_wrong_with_its_arguments():
    model, guide = build("toy_mlp", hidden=[4])
    x = torch.zeros(3, 1)
    with pytest.raises(TypeError, match="x must be a torch.Tensor.*got a ndarray"):
        predict(model, guide, x.numpy(), 2)
    with pytest.raises(ValueError, match="holds no weight samples"):
        predict(model, {}, x, 2)
    uneven = {"net.layers.1.weight": torch.zeros(5, 4, 1), "net.layers.1.bias": torch.zeros(4, 4)}
    with pytest.raises(ValueError, match=r"different numbers of samples \(net.layers.1.weight: 5, net.layers.1.bias: 4\)"):
        predict(model, uneven, x, 2)
    with pytest.raises(TypeError, match="'net.layers.1.bias' is not a tensor of samples"):
        predict(model, {"net.layers.1.bias": [0.0, 1.0]}, x, 2)


TAKES = "the model takes inputs [N, 1, 28, 28]; x has shape "


@pytest.mark.parametrize("shape, said", [
    ((3, 784), "[3, 784], reshape it: x.reshape(-1, 1, 28, 28)"),
    ((3, 3, 28, 28), "[3, 3, 28, 28], give it inputs of that shape"),
    ((1, 28, 28), "[1, 28, 28], one input without its batch dimension: pass x[None]"),
    ((2, 1, 14, 14), "[2, 1, 14, 14], give it inputs of that shape"),
])
def test_predict_says_what_shape_the_model_takes(shape, said):
    """Inputs of a shape the network does not take were torch's shape error from deep inside it."""
    model, guide = build("lenet", num_data=100)
    with pytest.raises(ValueError) as err:
        predict(model, guide, torch.zeros(shape), 2)
    assert str(err.value) == TAKES + said


def test_a_network_that_takes_other_shapes_takes_them_and_the_check_costs_nothing_at_its_own(monkeypatch):
    """The shape a model ran on is known (its guide's first trace); another is tried on the meta
    device, where a network that pools to any size takes it; the known one is tried at no cost."""
    import bnn_zoo.core.inference.inputs as sampling

    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    model, guide = bayesian(net, num_data=10)
    with pytest.raises(ValueError, match=r"^the model cannot take x of shape \[2, 3, 16, 16\] \(RuntimeError: .*\): "
                                         r"give it inputs \[N, ...\] of the shape its network was built for$"):
        predict(model, guide, torch.zeros(2, 3, 16, 16), 2)
    assert predict(model, guide, torch.zeros(2, 1, 16, 16), 2).shape == (2, 2, 10)
    assert model.input_shape == (1, 16, 16)  # its guide traced it on these
    assert predict(model, guide, torch.zeros(2, 1, 9, 9), 2).shape == (2, 2, 10)
    monkeypatch.setattr(sampling, "_refusal", lambda *_: pytest.fail("the known shape was tried again"))
    predict(model, guide, torch.zeros(2, 1, 16, 16), 2)


def test_a_guide_or_samples_of_another_network_are_named():
    lenet, lenet_guide = build("lenet", num_data=100)
    mlp, mlp_guide = build("mnist_mlp", num_data=100, hidden=[16], guide="lowrank", rank=2)
    x = torch.zeros(3, 1, 28, 28)
    predict(mlp, mlp_guide, x, 2)  # the guide traced, on its own model
    fix = "pass the guide built with this model, not another network's (bnn_zoo.build and bayesian return the pair)"
    with pytest.raises(ValueError) as err:
        predict(lenet, mlp_guide, x, 2)
    assert str(err.value) == ("the guide and the model do not match (no site net.features.0.weight [6, 1, 5, 5]; site "
                              f"net.layers.1.weight [16, 784] is no weight of the model's): {fix}")
    with pytest.raises(ValueError) as err:
        predict(mlp, lenet_guide, x, 2)  # not yet traced: it runs on lenet, and draws lenet's weights
    assert str(err.value).startswith("the guide and the model do not match (no site net.layers.1.weight [16, 784]; ")
    toy, toy_guide = build("toy_mlp", num_data=100)
    with pytest.raises(ValueError) as err:  # not yet traced: its own network refuses images
        predict(lenet, toy_guide, x, 2)
    assert str(err.value).startswith("the guide cannot draw weights for inputs of shape [3, 1, 28, 28] (RuntimeError: ")
    assert str(err.value).endswith(fix) and "\n" not in str(err.value)
    wide, _ = build("mnist_mlp", num_data=100, hidden=[32])
    with pyro.plate("s", 4, dim=-2):
        samples = {n: v[:, 0] for n, v in mlp_guide(x).items() if n.startswith("net.")}
    with pytest.raises(ValueError) as err:
        predict(wide, samples, x, 2)
    assert str(err.value) == ("the weight samples and the model do not match (site net.layers.1.weight is [16, 784] "
                              "where the model's weight is [32, 784]): pass samples drawn for this model, not another "
                              "network's (bnn_zoo.core.inference.nuts.nuts_posterior)")


def test_evaluating_sets_eval_mode_keeps_dropout_sampling_when_asked_and_restores_the_mode():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.BatchNorm1d(2)).train()
    with evaluating(net, dropout=True):
        assert [m.training for m in net.modules()] == [False, False, True, False]
    assert all(m.training for m in net.modules())
    with pytest.raises(ZeroDivisionError), evaluating(net):
        assert not any(m.training for m in net.modules())
        1 / 0
    assert all(m.training for m in net.modules())  # restored after a failure too
    with evaluating(net.eval()):
        pass
    assert not net.training  # the mode it had, not train mode


def test_fill_predictions_fills_each_chunk_s_rows_over_the_batches():
    x = torch.arange(5.0)[:, None]
    drawn = []

    def chunks():
        for start, n in sample_chunks(7, 3):
            drawn.append((start, n))  # drawn when the loop reaches it, not before
            yield n, lambda xb, start=start, n=n: 10 * torch.arange(start, start + n)[:, None, None] + xb[None]

    out = fill_predictions(x, chunks(), 7, batch_size=2)
    assert drawn == [(0, 3), (3, 3), (6, 1)]
    assert torch.equal(out[..., 0], 10 * torch.arange(7.0)[:, None] + torch.arange(5.0)[None])


def test_fill_predictions_closes_the_chunks_when_a_chunk_fails():
    net = nn.Linear(1, 1).train()

    def failing():
        with evaluating(net):
            yield 1, lambda xb: 1 / 0

    with pytest.raises(ZeroDivisionError) as failure:  # its traceback, held, holds the loop's frame
        fill_predictions(torch.zeros(2, 1), failing(), 1, 2)
    assert failure.type is ZeroDivisionError and net.training  # the eval mode ended with the failure
