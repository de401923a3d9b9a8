"""The contenders scripts/peers.py times: for each, a closure that runs one optimizer step of the
same Bayesian network (N(0, 1) prior, a Normal posterior per weight started at sd ``INIT_SCALE``,
one weight draw per minibatch, Adam at ``LR``) on a minibatch and returns its loss: the zoo's own
step (train.capture eager, trace or compile), Bayes by Backprop written by hand (eager or compiled),
TyXe, bayesian-torch (Reparameterization or Flipout), blitz, and the plain twin (eager or compiled).
The peers are imported only when their step is built (``pip install -e .[bench]``): importing this
module needs none of them.

Usage: ``step = training_step("bbb", "mnist_mlp", None, 128, torch.device("cpu")); loss = step(x, y)``
"""
import functools
import math

import pyro
import pyro.distributions as dist
import pyro.util
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ..core.networks.architectures import make_net
from ..runs.plans.config import load_config, resolved
from ..runs.plans.plan import Plan
from ..runs.training.loop import adam
from ..runs.training.loop import training_step as loop_step
from ..runs.training.phases import BayesPhase

CONTENDERS = ("zoo", "zoo_traced", "zoo_compiled", "bbb", "bbb_compiled", "tyxe", "bt_reparam", "bt_flipout", "blitz",
              "twin", "twin_compiled")
CAPTURE = {"zoo": "eager", "zoo_traced": "trace", "zoo_compiled": "compile"}
NUM_DATA = 55000
INIT_SCALE = 0.01  # the posterior sds at the start, for every contender
LR = 1e-3


def data_fit(out, y):
    """The minibatch's negative log-likelihood, summed, up to a constant: cross-entropy for labels,
    a Gaussian of scale 1 for real targets (the tiny network)."""
    if y.is_floating_point():
        return 0.5 * ((out.squeeze(-1) - y) ** 2).sum()
    return F.cross_entropy(out, y, reduction="sum")


def bayes_by_backprop(net, prior_scale: float = 1.0, init_scale: float = INIT_SCALE):
    """Blundell et al.'s Bayes by Backprop for any plain network: a Normal posterior per weight,
    w = mu + softplus(rho) * eps (one draw per minibatch), a N(0, prior_scale^2) prior with its
    closed-form KL. Returns (parameters, loss(x, y, num_batches)): the minibatch's summed NLL plus
    KL / number of batches."""
    names = [n for n, _ in net.named_parameters()]
    mus = [p.detach().clone().requires_grad_() for p in net.parameters()]
    rhos = [torch.full_like(p, math.log(math.expm1(init_scale))).requires_grad_() for p in net.parameters()]

    def loss(x, y, num_batches: int):
        sigmas = [F.softplus(r) for r in rhos]
        weights = {n: m + s * torch.randn_like(s) for n, m, s in zip(names, mus, sigmas)}
        nll = data_fit(functional_call(net, weights, (x,)), y)
        kl = sum((math.log(prior_scale) - s.log() + (s ** 2 + m ** 2) / (2 * prior_scale ** 2) - 0.5).sum()
                 for m, s in zip(mus, sigmas))
        return nll + kl / num_batches

    return mus + rhos, loss


def _zoo(capture: str, arch: str, hidden, batch_size: int, device):
    """The zoo's step as ``python -m bnn_zoo.train`` takes it, under ``train.capture=capture``."""
    pyro.settings.set(module_local_params=True)  # as python -m bnn_zoo.train runs

    def refuse(note: str):  # a step that fell back to another mode would be timed under a wrong name
        raise RuntimeError(f"the zoo's step did not run as train.capture={capture}: {note}")

    overrides = [f"train.capture={capture}", f"train.batch_size={batch_size}", f"train.lr={LR}",
                 f"model.init_scale={INIT_SCALE}", *([f"model.hidden={hidden}"] if hidden else [])]
    plan = Plan.of(resolved(load_config(arch, overrides)))
    phase = BayesPhase(plan.networks, plan.train, NUM_DATA, device, log=refuse)
    optimizer = adam(phase.parameters(), LR)
    whole = phase.updating(optimizer) or loop_step(phase.loss, optimizer)  # as train_phase steps

    def step(x, y):
        with phase.stepping():
            return whole(x, y)

    return step


def _tyxe(net, regression: bool, device):
    """TyXe 0.0.2's VariationalBNN and Pyro's SVI. It calls ``pyro.util.deep_getattr``, which Pyro 1.9
    no longer has: supplied here (``functools.reduce(getattr, ...)``, what it was)."""
    if not hasattr(pyro.util, "deep_getattr"):  # removed from Pyro after TyXe 0.0.2 was released
        pyro.util.deep_getattr = lambda obj, name: functools.reduce(getattr, name.split("."), obj)
    import tyxe

    prior = dist.Normal(torch.tensor(0.0, device=device), torch.tensor(1.0, device=device))  # its sites' device
    bnn = tyxe.VariationalBNN(net.to(device), tyxe.priors.IIDPrior(prior),
                              tyxe.likelihoods.HomoskedasticGaussian(NUM_DATA, scale=1.0) if regression
                              else tyxe.likelihoods.Categorical(NUM_DATA),
                              functools.partial(tyxe.guides.AutoNormal, init_scale=INIT_SCALE,  # means start at
                                                init_loc_fn=tyxe.guides.PretrainedInitializer.from_net(net)))  # the net's
    svi = pyro.infer.SVI(bnn.model, bnn.guide, pyro.optim.Adam({"lr": LR}), pyro.infer.TraceMeanField_ELBO())

    def step(x, y):
        with pyro.validation_enabled(False):  # as the zoo's steps run
            return svi.step(x, y.unsqueeze(-1) if regression else y)  # its Gaussian's targets are [N, 1]

    return step


def _bayesian_torch(net, kind: str, device):
    """bayesian-torch's ``dnn_to_bnn`` layers (``kind``: Reparameterization or Flipout) and their KL."""
    from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss

    dnn_to_bnn(net, {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0,
                     "posterior_rho_init": math.log(math.expm1(INIT_SCALE)), "type": kind, "moped_enable": False})
    net.to(device)
    optimizer = adam(net.parameters(), LR)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = data_fit(net(x), y) + get_kl_loss(net) * len(x) / NUM_DATA
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _blitz(net, device):
    """blitz's layers in place of the network's, and the loss of its ``sample_elbo`` with one
    sample (cross-entropy plus its Monte Carlo KL, ``kl_divergence_from_nn``, per example)."""
    from blitz.losses import kl_divergence_from_nn
    from blitz.modules import BayesianConv2d, BayesianLinear

    rho = math.log(math.expm1(INIT_SCALE))
    prior = {"prior_sigma_1": 1.0, "prior_sigma_2": 1.0, "prior_pi": 1.0, "posterior_rho_init": rho}
    for module in list(net.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, BayesianLinear(child.in_features, child.out_features, **prior))
            elif isinstance(child, nn.Conv2d):
                setattr(module, name, BayesianConv2d(child.in_channels, child.out_channels, child.kernel_size,
                                                     stride=child.stride, padding=child.padding, **prior))
    net.to(device)
    optimizer = adam(net.parameters(), LR)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = data_fit(net(x), y) / len(x) + kl_divergence_from_nn(net) / NUM_DATA
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def training_step(contender: str, arch: str, hidden, batch_size: int, device):
    """A closure ``step(x, y)`` running one optimizer step of ``contender`` on a minibatch; it
    returns the minibatch's loss (in the contender's own scaling)."""
    if contender in CAPTURE:
        return _zoo(CAPTURE[contender], arch, hidden, batch_size, device)
    net = make_net(arch, hidden).to(device)
    if contender in ("twin", "twin_compiled"):
        optimizer = adam(net.parameters(), LR)
        graphed = contender == "twin_compiled" and device.type == "cuda"

        def twin_loss(x, y):
            return data_fit(net(x), y) / len(x)
        if contender == "twin_compiled":
            twin_loss = torch.compile(twin_loss, dynamic=False, options={"triton.cudagraphs": graphed})

        step = loop_step(twin_loss, optimizer)  # the twin's step as the zoo trains it
        if not graphed:
            return step

        def twin_step(x, y):
            torch.compiler.cudagraph_mark_step_begin()  # a new step of the CUDA graphs: the last loss is no longer read
            return step(x, y)
        return twin_step
    if contender in ("bbb", "bbb_compiled"):
        params, loss = bayes_by_backprop(net)
        optimizer = adam(params, LR)
        if contender == "bbb_compiled":
            loss = torch.compile(loss, dynamic=False, options={"fallback_random": True})

        def bbb_step(x, y):
            optimizer.zero_grad(set_to_none=True)
            value = loss(x, y, math.ceil(NUM_DATA / batch_size))
            value.backward()
            optimizer.step()
            return value.detach()
        return bbb_step
    if contender == "tyxe":
        return _tyxe(net, arch == "toy_mlp", device)
    if contender in ("bt_reparam", "bt_flipout"):
        return _bayesian_torch(net, "Reparameterization" if contender == "bt_reparam" else "Flipout", device)
    if contender == "blitz":
        return _blitz(net, device)
    raise ValueError(f"unknown contender {contender!r}; choose from {', '.join(CONTENDERS)}")
