"""The zoo: plain PyTorch networks, their Bayesian versions as Pyro model/guide pairs, a registry.

Usage::

    model, guide = bnn_zoo.build("lenet", num_data=55000)
    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), pyro.infer.Trace_ELBO())
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Optional

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_feasible
from pyro.nn import PyroModule, PyroParam, PyroSample
from pyro.nn.module import to_pyro_module_
from pyro.poutine.messenger import Messenger
from torch import nn


class MLP(nn.Module):
    """Fully connected ReLU network; flattens image inputs."""

    def __init__(self, in_features: int, hidden: list[int], out_features: int):
        super().__init__()
        widths = [in_features, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], out_features))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class LeNet5(nn.Module):
    """LeNet-5 for 1x28x28 inputs: conv 6@5x5 (padded to 28x28), pool, conv 16@5x5, pool, 120-84-10."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.classifier = nn.Sequential(
            nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _hyperparameter(module: nn.Module, name: str, value: float, constraint, learn: bool) -> None:
    """A prior hyperparameter: a buffer, or with ``learn`` a constrained PyroParam that the ELBO
    optimizes (empirical Bayes). Either way ``.to()`` moves it and the state dict saves it."""
    if learn:
        setattr(module, name, PyroParam(torch.tensor(float(value)), constraint))
    else:
        module.register_buffer(name, torch.tensor(float(value)))


class GaussianPrior(PyroModule):
    """N(0, scale^2) on every entry of a weight tensor; ``learn=True`` fits the scale by the ELBO.

    Usage: ``prior = GaussianPrior(1.0); prior(torch.Size([400, 784]))  # a Distribution``
    """

    def __init__(self, scale: float = 1.0, learn: bool = False):
        super().__init__()
        _hyperparameter(self, "scale", scale, constraints.positive, learn)

    @property
    def hyperparameters(self) -> dict[str, float]:
        return {"scale": self.scale.item()}

    def forward(self, shape: torch.Size) -> dist.Distribution:
        scale = self.scale
        return dist.Normal(torch.zeros_like(scale), scale).expand(shape).to_event(len(shape))


class ScaleMixtureNormal(dist.TorchDistribution):
    """pi N(0, scale1^2) + (1 - pi) N(0, scale2^2) on every entry of ``batch_shape``.

    The hyperparameters stay scalars when the distribution is expanded to a weight's shape, so its
    log-density costs a few passes over the weights; torch's MixtureSameFamily expands the mixture
    weights to every entry and made a mnist_mlp epoch 4x slower (41.7 s against 10.4 s).
    """

    arg_constraints = {"pi": constraints.unit_interval, "scale1": constraints.positive,
                       "scale2": constraints.positive}
    support = constraints.real

    def __init__(self, pi, scale1, scale2, batch_shape=torch.Size(), validate_args=None):
        self.pi, self.scale1, self.scale2 = pi, scale1, scale2
        super().__init__(torch.Size(batch_shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ScaleMixtureNormal, _instance)
        new.pi, new.scale1, new.scale2 = self.pi, self.scale1, self.scale2
        super(ScaleMixtureNormal, new).__init__(torch.Size(batch_shape), validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        first = torch.log(self.pi) - torch.log(self.scale1) - 0.5 * (value / self.scale1) ** 2
        second = torch.log1p(-self.pi) - torch.log(self.scale2) - 0.5 * (value / self.scale2) ** 2
        return torch.logaddexp(first, second) - 0.5 * math.log(2 * math.pi)

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            first = torch.rand(shape, device=self.pi.device) < self.pi
            return torch.randn(shape, device=self.pi.device) * torch.where(first, self.scale1, self.scale2)


class ScaleMixturePrior(PyroModule):
    """Bayes by Backprop's scale mixture pi N(0, scale1^2) + (1 - pi) N(0, scale2^2) on every
    entry; ``learn=True`` fits pi, scale1 and scale2 by the ELBO. No closed-form KL to a Normal
    exists, so the ELBO estimates this prior's KL by Monte Carlo.

    Usage: ``prior = ScaleMixturePrior(0.25, 0.75, 0.1)``
    """

    def __init__(self, pi: float = 0.25, scale1: float = 0.75, scale2: float = 0.1,
                 learn: bool = False):
        super().__init__()
        _hyperparameter(self, "pi", pi, constraints.unit_interval, learn)
        _hyperparameter(self, "scale1", scale1, constraints.positive, learn)
        _hyperparameter(self, "scale2", scale2, constraints.positive, learn)

    @property
    def hyperparameters(self) -> dict[str, float]:
        return {name: getattr(self, name).item() for name in ("pi", "scale1", "scale2")}

    def forward(self, shape: torch.Size) -> dist.Distribution:
        return ScaleMixtureNormal(self.pi, self.scale1, self.scale2).expand(shape).to_event(len(shape))


PRIORS = ("gaussian", "scale_mixture")


def make_prior(kind: str = "gaussian", scale: float = 1.0, pi: float = 0.25, scale1: float = 0.75,
               scale2: float = 0.1, learn: bool = False) -> PyroModule:
    """The prior a config names: ``gaussian`` (uses scale) or ``scale_mixture`` (pi, scale1, scale2)."""
    if kind == "gaussian":
        return GaussianPrior(scale, learn)
    if kind == "scale_mixture":
        return ScaleMixturePrior(pi, scale1, scale2, learn)
    raise ValueError(f"unknown prior {kind!r}; choose one of {', '.join(PRIORS)}")


NOISE_MODES = ("fixed", "homoscedastic", "heteroscedastic")


class GaussianNoise(PyroModule):
    """Observation noise of a regression network; maps its outputs to (mean, scale), stacked [..., 2].

    ``fixed``: scale is ``scale``. ``homoscedastic``: one scale, learned (starts at ``scale``).
    ``heteroscedastic``: the network has a second output, the noise scale at each input,
    softplus-positive and equal to ``scale`` where that output is 0.

    Usage: ``loc, sd = GaussianNoise("heteroscedastic", 0.5)(net(x)).unbind(-1)``
    """

    def __init__(self, mode: str = "fixed", scale: float = 1.0):
        super().__init__()
        if mode not in NOISE_MODES:
            raise ValueError(f"unknown noise mode {mode!r}; choose one of {', '.join(NOISE_MODES)}")
        if not scale > 0:
            raise ValueError(f"the noise scale must be positive, got {scale}")
        self.mode = mode
        _hyperparameter(self, "scale", scale, constraints.positive, mode == "homoscedastic")

    @property
    def outputs(self) -> int:
        """How many outputs the network needs: the mean, and the scale when heteroscedastic."""
        return 2 if self.mode == "heteroscedastic" else 1

    @property
    def hyperparameters(self) -> dict[str, float]:
        return {} if self.mode == "heteroscedastic" else {"scale": self.scale.item()}

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        loc = out[..., 0]
        if self.mode == "heteroscedastic":
            # softplus(raw + softplus^-1(scale)): equals scale at raw = 0; 1e-4 keeps it off zero.
            offset = self.scale + torch.log(-torch.expm1(-self.scale))
            return torch.stack([loc, F.softplus(out[..., 1] + offset) + 1e-4], -1)
        return torch.stack([loc, self.scale.expand_as(loc)], -1)


class LocalReparameterization:
    """Local reparameterization, shared by a BayesianNet and its guide: the guide records each
    weight's Normal as it draws it (``record()``); inside ``apply()`` the model's linear layers
    sample their pre-activations from mean x mu and variance x^2 sigma^2 (Kingma et al. 2015), and
    its convolutions add a Flipout perturbation, conv(x * s_in, W - mu) * s_out with random signs
    per example (Wen et al. 2018). Either way each example sees its own weights, which lowers the
    gradient variance; the posterior (the guide) and the KL are unchanged.
    """

    def __init__(self):
        self.normals: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def record(self) -> Messenger:
        return _NormalRecorder(self.normals)

    @contextmanager
    def apply(self):
        linear, conv2d = F.linear, F.conv2d
        F.linear, F.conv2d = self._linear(linear), self._conv2d(conv2d)
        try:
            yield
        finally:
            F.linear, F.conv2d = linear, conv2d

    def _normal(self, value: Optional[torch.Tensor]):
        """(loc, scale) of the guide's Normal that drew exactly this tensor, or None."""
        entry = self.normals.get(id(value)) if value is not None else None
        return entry[1:] if entry is not None and entry[0] is value else None

    def _linear(self, linear):
        def local_linear(x, weight, bias=None):
            w, b = self._normal(weight), self._normal(bias)
            if w is None:
                return linear(x, weight, bias)
            mean = linear(x, w[0], b[0] if b else bias)
            var = linear(x * x, w[1] ** 2, b[1] ** 2 if b else None)
            return mean + var.clamp_min(1e-16).sqrt() * torch.randn_like(mean)
        return local_linear

    def _conv2d(self, conv2d):
        def flipout_conv2d(x, weight, bias=None, *args, **kwargs):
            w, b = self._normal(weight), self._normal(bias)
            if w is None:
                return conv2d(x, weight, bias, *args, **kwargs)
            mean = conv2d(x, w[0], b[0] if b else bias, *args, **kwargs)
            sign_in = torch.randint(0, 2, (x.shape[0], x.shape[1], 1, 1), device=x.device) * 2.0 - 1
            delta = conv2d(x * sign_in, weight - w[0], bias - b[0] if b else None, *args, **kwargs)
            sign_out = torch.randint(0, 2, (x.shape[0], delta.shape[1], 1, 1), device=x.device) * 2.0 - 1
            return mean + delta * sign_out
        return flipout_conv2d


class _NormalRecorder(Messenger):
    """Records the Normal behind every sample drawn while active (a fresh record each time)."""

    def __init__(self, normals: dict):
        super().__init__()
        self.normals = normals

    def __enter__(self):
        self.normals.clear()
        return super().__enter__()

    def _pyro_post_sample(self, msg: dict) -> None:
        fn = msg["fn"]
        while isinstance(fn, dist.Independent):
            fn = fn.base_dist
        if isinstance(fn, dist.Normal) and not msg["is_observed"]:
            self.normals[id(msg["value"])] = (msg["value"], fn.loc, fn.scale)


class BayesianNet(PyroModule):
    """A plain network whose every parameter becomes a latent variable with a prior.

    ``make_net()`` builds the plain network (the same call builds the deterministic twin).
    ``likelihood`` is ``"categorical"`` (the network gives logits) or ``"gaussian"`` (the network
    gives the mean, and ``noise`` turns its outputs into a mean and a noise scale). ``prior`` is a
    module mapping a weight shape to its prior (``GaussianPrior()`` by default). ``num_data`` is
    the size of the full training set: the data plate scales a minibatch's log-likelihood by
    num_data / batch size, so the KL term counts once per pass through the data.
    ``local_reparam`` turns on ``LocalReparameterization`` (with the guide of ``make_guide``).

    Usage: ``model = BayesianNet(lambda: MLP(1, [50], 1), "gaussian", num_data=6)``
    """

    def __init__(self, make_net: Callable[[], nn.Module], likelihood: str,
                 prior: Optional[nn.Module] = None, noise: Optional[GaussianNoise] = None,
                 num_data: Optional[int] = None, local_reparam: bool = False):
        super().__init__()
        self.local = LocalReparameterization() if local_reparam else None
        if likelihood not in ("categorical", "gaussian"):
            raise ValueError(f"likelihood must be 'categorical' or 'gaussian', not {likelihood!r}")
        self.make_net = make_net
        self.likelihood = likelihood
        self.num_data = num_data
        self.prior = prior if prior is not None else GaussianPrior()
        if likelihood == "gaussian":
            self.noise = noise if noise is not None else GaussianNoise()
        net = make_net()
        # The plain network's own initialization becomes the posterior means' starting point.
        self.init_values = {f"net.{n}": p.detach().clone() for n, p in net.named_parameters()}
        to_pyro_module_(net)
        for module in list(net.modules()):
            for name, param in list(module.named_parameters(recurse=False)):
                delattr(module, name)
                setattr(module, name, PyroSample(self._prior_for(param.shape)))
        self.net = net

    def _prior_for(self, shape: torch.Size) -> Callable[[nn.Module], dist.Distribution]:
        prior = self.prior
        return lambda _module: prior(shape)

    @property
    def device(self) -> torch.device:
        """Where the model's prior (and noise) tensors live."""
        return next(t.device for t in (*self.buffers(), *self.parameters()))

    def create_plates(self, x: torch.Tensor, y: Optional[torch.Tensor] = None) -> pyro.plate:
        """The data plate, shared by model and guide: full size num_data when training on y."""
        size = self.num_data if (y is not None and self.num_data) else x.shape[0]
        return pyro.plate("data", size, subsample=torch.arange(x.shape[0], device=x.device), dim=-1)

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None) -> torch.Tensor:
        with self.local.apply() if self.local else nullcontext():
            out = self.net(x)
        with self.create_plates(x, y):
            if self.likelihood == "categorical":
                pyro.sample("obs", dist.Categorical(logits=out), obs=y)
                return out
            loc, scale = self.noise(out).unbind(-1)
            pyro.sample("obs", dist.Normal(loc, scale), obs=y)
            return loc

    def init_loc(self, site: dict) -> torch.Tensor:
        """AutoNormal ``init_loc_fn``: start each weight's mean at the plain network's initial value."""
        value = self.init_values.get(site["name"])
        if value is None:
            return init_to_feasible(site)
        return value.to(self.device)


def hyperparameters(model: BayesianNet) -> dict[str, float]:
    """The prior's and the noise model's current hyperparameters, e.g. {"prior/scale": 1.0}."""
    parts = {"prior": model.prior, "noise": getattr(model, "noise", None)}
    with torch.no_grad():
        return {f"{part}/{name}": value for part, module in parts.items()
                for name, value in getattr(module, "hyperparameters", {}).items()}


def _is_real(support) -> bool:
    while hasattr(support, "base_constraint"):
        support = support.base_constraint
    return support is constraints.real


class DirectAutoNormal(AutoNormal):
    """AutoNormal for real-valued latents that samples each weight straight from its Normal.

    Same parameters and posterior as AutoNormal, but without the auxiliary ``*_unconstrained``
    site and Delta per weight that AutoNormal adds: one sample site per weight, whose
    distribution ``TraceMeanField_ELBO`` can hand to an analytic KL.
    """

    recorder: Optional[Messenger] = None  # a LocalReparameterization's record(), when used

    def forward(self, *args, **kwargs) -> dict:
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        with self.recorder or nullcontext():
            return self._sample(*args, **kwargs)

    def _sample(self, *args, **kwargs) -> dict:
        plates = self._create_plates(*args, **kwargs)
        result = {}
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if not _is_real(site["fn"].support):
                raise ValueError(f"DirectAutoNormal needs real-valued latents; {name} has support "
                                 f"{site['fn'].support}: use pyro's AutoNormal")
            with ExitStack() as stack:
                for frame in site["cond_indep_stack"]:
                    if frame.vectorized:
                        stack.enter_context(plates[frame.name])
                loc, scale = self._get_loc_and_scale(name)
                result[name] = pyro.sample(name, dist.Normal(loc, scale).to_event(self._event_dims[name]))
        return result


def make_guide(model: BayesianNet, init_scale: float = 0.01) -> AutoNormal:
    """Mean-field normal posterior over every weight, sharing the model's data plate.

    The observed site is hidden from the guide, so calling it without labels (prediction) never
    mistakes ``obs`` for a latent variable.
    """
    guide = DirectAutoNormal(poutine.block(model, hide=["obs"]), init_loc_fn=model.init_loc,
                             init_scale=init_scale, create_plates=model.create_plates)
    if model.local is not None:
        guide.recorder = model.local.record()
    return guide


@dataclass(frozen=True)
class Architecture:
    make_net: Callable[[list[int], int], nn.Module]  # (hidden, outputs) -> plain network
    likelihood: str
    datasets: tuple[str, ...]  # the first is the default
    input_shape: tuple[int, ...]
    default_hidden: tuple[int, ...] = ()

    @property
    def has_hidden(self) -> bool:
        return bool(self.default_hidden)


ARCHITECTURES: dict[str, Architecture] = {
    "toy_mlp": Architecture(lambda hidden, outputs: MLP(1, hidden, outputs), "gaussian",
                            ("polynomial", "sinusoid"), (1,), (50, 50)),
    "mnist_mlp": Architecture(lambda hidden, outputs: MLP(784, hidden, outputs), "categorical",
                              ("mnist", "fashion_mnist"), (1, 28, 28), (400, 400)),
    "lenet": Architecture(lambda hidden, outputs: LeNet5(outputs), "categorical",
                          ("mnist", "fashion_mnist"), (1, 28, 28)),
}
NUM_CLASSES = 10


def architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose one of "
                         f"{', '.join(ARCHITECTURES)}") from None


def _widths(arch: str, hidden: Optional[list[int]]) -> list[int]:
    spec = architecture(arch)
    if hidden is not None and not spec.has_hidden:
        raise ValueError(f"{arch} has a fixed shape: drop hidden={hidden}")
    return list(hidden or spec.default_hidden)


def _outputs(arch: str, noise: str) -> int:
    if architecture(arch).likelihood == "categorical":
        return NUM_CLASSES
    return GaussianNoise(noise).outputs


def make_net(arch: str, hidden: Optional[list[int]] = None, noise: str = "fixed") -> nn.Module:
    """The plain network of an architecture (logits, or a regression's mean [and noise output])."""
    return architecture(arch).make_net(_widths(arch, hidden), _outputs(arch, noise))


def make_twin(arch: str, hidden: Optional[list[int]] = None, noise: str = "fixed",
              noise_scale: float = 1.0) -> nn.Module:
    """The deterministic twin: the plain network; for regression followed by its own noise model,
    so it outputs [..., 2] (mean, noise scale) like the Bayesian model's predictions."""
    net = make_net(arch, hidden, noise)
    if architecture(arch).likelihood == "categorical":
        return net
    return nn.Sequential(net, GaussianNoise(noise, noise_scale))


def build(arch: str, num_data: Optional[int] = None, hidden: Optional[list[int]] = None,
          prior: Optional[nn.Module] = None, init_scale: float = 0.01, noise: str = "fixed",
          noise_scale: float = 1.0, local_reparam: bool = False) -> tuple[BayesianNet, AutoNormal]:
    """A fresh, untrained (model, guide) pair; ``prior`` defaults to ``GaussianPrior(1.0)``;
    ``noise`` and ``noise_scale`` set the regression noise (see ``GaussianNoise``);
    ``local_reparam`` samples pre-activations instead of weights (see ``LocalReparameterization``).

    Usage: ``model, guide = build("lenet", num_data=55000, prior=ScaleMixturePrior())``
    """
    spec = architecture(arch)
    widths, outputs = _widths(arch, hidden), _outputs(arch, noise)
    noise_model = GaussianNoise(noise, noise_scale) if spec.likelihood == "gaussian" else None
    model = BayesianNet(lambda: spec.make_net(widths, outputs), spec.likelihood,
                        prior, noise_model, num_data, local_reparam)
    return model, make_guide(model, init_scale)
