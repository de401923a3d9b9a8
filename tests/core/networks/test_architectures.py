"""Every zoo pair in stock Pyro code: SVI with pyro.optim (Pyro's global parameter store) and torch
optimizers (module-local parameters), stock autoguides and ELBOs, Predictive, poutine, NUTS."""
import pyro
import pyro.poutine as poutine
import pytest
import torch
from conftest import SMALL, ZOO, adam_first_step_moved_every_parameter, example_batch, param_mode
from pyro.infer import (
    MCMC,
    NUTS,
    SVI,
    Predictive,
    RenyiELBO,
    Trace_ELBO,
    TraceGraph_ELBO,
    TraceMeanField_ELBO,
)
from pyro.infer.autoguide import (
    AutoDelta,
    AutoLaplaceApproximation,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
    AutoNormal,
)

from bnn_zoo import ARCHITECTURES, build, make_guide, predict

LR = 1e-3
STOCK_GUIDES = {  # as a Pyro user writes them, on the model itself
    "AutoNormal": lambda model: AutoNormal(model, init_loc_fn=model.init_loc, init_scale=0.05),
    "AutoLowRankMultivariateNormal": lambda model: AutoLowRankMultivariateNormal(
        model, init_loc_fn=model.init_loc, init_scale=0.05, rank=2),
    "AutoDelta": lambda model: AutoDelta(model, init_loc_fn=model.init_loc),
    "bnn_zoo meanfield": lambda model: make_guide(model, init_scale=0.05),
}
ELBOS = {"Trace_ELBO": Trace_ELBO, "TraceMeanField_ELBO": TraceMeanField_ELBO,
         "TraceGraph_ELBO": TraceGraph_ELBO, "RenyiELBO": lambda: RenyiELBO(alpha=0.5, num_particles=2)}


def _first_svi_step(arch, make_guide_fn, elbo):
    model, _ = build(arch, num_data=64, hidden=SMALL[arch])
    guide = make_guide_fn(model)
    x, y = example_batch(arch, 16)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": LR}), elbo)
    with poutine.block():
        guide(x, y)  # creates the parameters, so their first values can be kept
    store = pyro.get_param_store()
    before = {name: store.get_param(name).unconstrained().detach().clone() for name in store.keys()}
    loss = svi.step(x, y)
    assert torch.isfinite(torch.tensor(loss))
    after = {name: store.get_param(name).unconstrained() for name in store.keys()}
    assert after.keys() == before.keys() and len(after) > 0
    return before, after, guide


@pytest.mark.parametrize("guide_name", STOCK_GUIDES)
@pytest.mark.parametrize("arch", ZOO)
def test_svi_with_pyro_optim_and_each_autoguide(arch, guide_name):
    """Pyro's default: the global parameter store. One SVI step moves every parameter as Adam's
    first step must, so every parameter got its gradient."""
    before, after, guide = _first_svi_step(arch, STOCK_GUIDES[guide_name], Trace_ELBO())
    assert adam_first_step_moved_every_parameter(before, after, LR)
    # the store holds the guide's own tensors: a PyroModule and the store stay one
    own = {id(p) for p in guide.parameters()}
    assert {id(p) for p in after.values()} == own


@pytest.mark.parametrize("elbo", ELBOS)
@pytest.mark.parametrize("arch", ZOO)
def test_svi_with_each_elbo(arch, elbo):
    before, after, _ = _first_svi_step(arch, STOCK_GUIDES["bnn_zoo meanfield"], ELBOS[elbo]())
    assert adam_first_step_moved_every_parameter(before, after, LR)


@pytest.mark.parametrize("guide_name", STOCK_GUIDES)
@pytest.mark.parametrize("arch", ZOO)
def test_torch_optimizer_with_module_local_params(arch, guide_name):
    """Pyro's examples/svi_torch.py: module-local parameters, the ELBO as a torch module."""
    with param_mode("local"):
        model, _ = build(arch, num_data=64, hidden=SMALL[arch])
        guide = STOCK_GUIDES[guide_name](model)
        x, y = example_batch(arch, 16)
        loss_fn = Trace_ELBO()(model, guide)
        loss_fn(x, y)
        params = dict(loss_fn.named_parameters())
        before = {n: p.detach().clone() for n, p in params.items()}
        optimizer = torch.optim.Adam(params.values(), lr=LR)
        loss = loss_fn(x, y)
        loss.backward()
        optimizer.step()
    assert torch.isfinite(loss) and len(pyro.get_param_store()) == 0
    assert adam_first_step_moved_every_parameter(before, params, LR)


@pytest.mark.parametrize("arch", ZOO)
def test_a_pair_predicts_the_same_in_either_parameter_mode(arch):
    x, _ = example_batch(arch, 4)
    results = []
    for mode in ("global", "local"):
        pyro.clear_param_store()
        with param_mode(mode):
            pyro.set_rng_seed(0)
            model, guide = build(arch, num_data=64, hidden=SMALL[arch], init_scale=0.1)
            guide(x)
            results.append(predict(model, guide, x, 5))
        assert (len(pyro.get_param_store()) > 0) == (mode == "global")
    assert torch.equal(*results)


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_laplace_approximation_on_the_toy():
    """MAP by SVI, then a Gaussian at the MAP with the inverse Hessian as covariance. (A ReLU net's
    MAP is often a saddle in some direction, where the Hessian is not positive definite and Pyro's
    Cholesky fails; the two-unit toy's is a proper minimum.)"""
    model, _ = build("toy_mlp", num_data=6, hidden=[2], noise_scale=0.5)
    guide = AutoLaplaceApproximation(model, init_loc_fn=model.init_loc)
    x = torch.tensor([[-2.0], [-1.0], [0.0], [1.0], [1.5], [2.0]])
    y = x[:, 0].clone()
    svi = SVI(model, guide, pyro.optim.ClippedAdam({"lr": 0.05, "lrd": 0.998}), Trace_ELBO())
    for _ in range(1500):
        svi.step(x, y)
    laplace = guide.laplace_approximation(x, y)
    assert isinstance(laplace, AutoMultivariateNormal)
    at_map = model.forward_with({n[len("net."):]: w for n, w in laplace.median().items()}, x)[:, 0]
    assert (at_map - y).abs().max() < 0.3
    samples = predict(model, laplace, x, 200)
    assert samples.shape == (200, 6, 2)
    sd = samples[..., 0].std(0)
    assert (sd > 0.3).all() and (sd < 3).all()  # about the noise scale, wider at the ends
    assert sd[0] > sd[2] and sd[-1] > sd[2]


@pytest.mark.parametrize("arch", ZOO)
def test_predictive_parallel_equals_sequential(arch):
    model, guide = build(arch, num_data=64, hidden=SMALL[arch], init_scale=0.1)
    x, _ = example_batch(arch, 5)
    weights = Predictive(model, guide=guide, num_samples=4, return_sites=[f"net.{n}" for n in model.weight_shapes])(x)
    outs = [Predictive(model, posterior_samples=weights, parallel=parallel, return_sites=["_RETURN", "obs"])(x)
            for parallel in (False, True)]
    expected = (4, 5, 10) if ARCHITECTURES[arch].likelihood == "categorical" else (4, 5)
    assert outs[0]["_RETURN"].shape == outs[1]["_RETURN"].shape == expected
    assert outs[1]["obs"].shape == (4, 5)
    assert torch.allclose(outs[0]["_RETURN"], outs[1]["_RETURN"], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(outs[1]["_RETURN"][0], outs[1]["_RETURN"][1])  # four weight draws


@pytest.mark.parametrize("arch", ZOO)
def test_poutine_trace_condition_replay(arch):
    model, guide = build(arch, num_data=64, hidden=SMALL[arch], init_scale=0.1)
    x, y = example_batch(arch, 6)
    guide_trace = poutine.trace(guide).get_trace(x, y)
    weights = {n: s["value"] for n, s in guide_trace.nodes.items() if n.startswith("net.")}
    expected = model.forward_with({n[len("net."):]: w for n, w in weights.items()}, x)
    conditioned = poutine.condition(model, data=weights)(x)
    replayed = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y)
    returned = expected if arch != "toy_mlp" else expected[:, 0]
    assert torch.equal(conditioned, returned) and torch.equal(replayed.nodes["_RETURN"]["value"], returned)
    assert all(torch.equal(replayed.nodes[n]["value"], w) for n, w in weights.items())
    obs = replayed.nodes["obs"]
    assert torch.allclose(obs["fn"].log_prob(y), model.likelihood.distribution(expected).log_prob(y))


def _nuts(model, x, y, samples=8):
    kernel = NUTS(model, max_tree_depth=3, init_strategy=model.init_loc)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=samples, disable_progbar=True)
    mcmc.run(x, y)
    return mcmc.get_samples()


def test_nuts_on_the_toy_mlp():
    model, _ = build("toy_mlp", num_data=6, hidden=[8], noise_scale=0.1)
    x = torch.tensor([[-2.0], [-1.0], [0.0], [1.0], [1.5], [2.0]])
    samples = _nuts(model, x, -x[:, 0] ** 2)
    assert {n: v.shape[1:] for n, v in samples.items()} == {f"net.{n}": s for n, s in model.weight_shapes.items()}
    assert all(v.shape[0] == 8 for v in samples.values())
    assert predict(model, samples, x, None).shape == (8, 6, 2)


@pytest.mark.slow
def test_nuts_on_a_small_mnist_mlp(shared_data):
    from bnn_zoo.data.sets import load_torchvision, normalize

    images, labels = load_torchvision("mnist", str(shared_data), train=True, download=False)
    x, y = normalize(images[:100]), labels[:100]
    model, _ = build("mnist_mlp", num_data=100, hidden=[16])
    samples = _nuts(model, x, y, samples=50)
    probs = predict(model, samples, x, None)
    assert probs.shape == (50, 100, 10)
    assert (probs.mean(0).argmax(1) == y).float().mean() > 0.9  # it fits its training images
