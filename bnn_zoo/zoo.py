"""The zoo: plain PyTorch networks, their Bayesian versions as Pyro model/guide pairs, a registry.

Usage::

    model, guide = bnn_zoo.build("lenet", num_data=55000)
    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), pyro.infer.Trace_ELBO())
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_feasible
from pyro.nn import PyroModule, PyroSample
from pyro.nn.module import to_pyro_module_
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


class GaussianPrior(nn.Module):
    """N(loc, scale^2) on every entry of a weight tensor; loc and scale are buffers so ``.to()`` moves them."""

    def __init__(self, scale: float = 1.0, loc: float = 0.0):
        super().__init__()
        self.register_buffer("loc", torch.tensor(float(loc)))
        self.register_buffer("scale", torch.tensor(float(scale)))

    def forward(self, shape: torch.Size) -> dist.Distribution:
        return dist.Normal(self.loc, self.scale).expand(shape).to_event(len(shape))


class BayesianNet(PyroModule):
    """A plain network whose every parameter becomes a latent variable with a prior.

    ``make_net()`` builds the plain network (the same call builds the deterministic twin).
    ``likelihood`` is ``"categorical"`` (the network gives logits) or ``"gaussian"`` (one output,
    the mean, with standard deviation ``noise_scale``). ``num_data`` is the size of the full
    training set: the data plate scales a minibatch's log-likelihood by num_data / batch size, so
    the KL term counts once per pass through the data.

    Usage: ``model = BayesianNet(lambda: MLP(1, [50], 1), "gaussian", num_data=6)``
    """

    def __init__(self, make_net: Callable[[], nn.Module], likelihood: str,
                 prior: Optional[nn.Module] = None, noise_scale: float = 1.0,
                 num_data: Optional[int] = None):
        super().__init__()
        if likelihood not in ("categorical", "gaussian"):
            raise ValueError(f"likelihood must be 'categorical' or 'gaussian', not {likelihood!r}")
        self.make_net = make_net
        self.likelihood = likelihood
        self.num_data = num_data
        self.prior = prior if prior is not None else GaussianPrior()
        self.register_buffer("noise_scale", torch.tensor(float(noise_scale)))
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

    def create_plates(self, x: torch.Tensor, y: Optional[torch.Tensor] = None) -> pyro.plate:
        """The data plate, shared by model and guide: full size num_data when training on y."""
        size = self.num_data if (y is not None and self.num_data) else x.shape[0]
        return pyro.plate("data", size, subsample=torch.arange(x.shape[0], device=x.device), dim=-1)

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None) -> torch.Tensor:
        out = self.net(x)
        with self.create_plates(x, y):
            if self.likelihood == "categorical":
                pyro.sample("obs", dist.Categorical(logits=out), obs=y)
            else:
                out = out.squeeze(-1)
                pyro.sample("obs", dist.Normal(out, self.noise_scale), obs=y)
        return out

    def init_loc(self, site: dict) -> torch.Tensor:
        """AutoNormal ``init_loc_fn``: start each weight's mean at the plain network's initial value."""
        value = self.init_values.get(site["name"])
        if value is None:
            return init_to_feasible(site)
        return value.to(self.noise_scale.device)


def make_guide(model: BayesianNet, init_scale: float = 0.01) -> AutoNormal:
    """Mean-field normal posterior over every weight, sharing the model's data plate.

    The observed site is hidden from the guide, so calling it without labels (prediction) never
    mistakes ``obs`` for a latent variable.
    """
    return AutoNormal(poutine.block(model, hide=["obs"]), init_loc_fn=model.init_loc,
                      init_scale=init_scale, create_plates=model.create_plates)


@dataclass(frozen=True)
class Architecture:
    make_net: Callable[..., nn.Module]  # (hidden) -> plain network
    likelihood: str
    datasets: tuple[str, ...]  # the first is the default
    input_shape: tuple[int, ...]
    default_hidden: tuple[int, ...] = ()

    @property
    def has_hidden(self) -> bool:
        return bool(self.default_hidden)


ARCHITECTURES: dict[str, Architecture] = {
    "toy_mlp": Architecture(lambda hidden: MLP(1, hidden, 1), "gaussian",
                            ("polynomial", "sinusoid"), (1,), (50, 50)),
    "mnist_mlp": Architecture(lambda hidden: MLP(784, hidden, 10), "categorical",
                              ("mnist", "fashion_mnist"), (1, 28, 28), (400, 400)),
    "lenet": Architecture(lambda hidden: LeNet5(10), "categorical",
                          ("mnist", "fashion_mnist"), (1, 28, 28)),
}


def architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose one of "
                         f"{', '.join(ARCHITECTURES)}") from None


def make_net(arch: str, hidden: Optional[list[int]] = None) -> nn.Module:
    """The plain network of an architecture: the deterministic twin."""
    spec = architecture(arch)
    return spec.make_net(list(hidden or spec.default_hidden))


def build(arch: str, num_data: Optional[int] = None, hidden: Optional[list[int]] = None,
          prior_scale: float = 1.0, init_scale: float = 0.01, noise_scale: float = 1.0,
          ) -> tuple[BayesianNet, AutoNormal]:
    """A fresh, untrained (model, guide) pair. Usage: ``model, guide = build("lenet")``"""
    spec = architecture(arch)
    if hidden is not None and not spec.has_hidden:
        raise ValueError(f"{arch} has a fixed shape: drop hidden={hidden}")
    widths = list(hidden or spec.default_hidden)
    model = BayesianNet(lambda: spec.make_net(widths), spec.likelihood,
                        GaussianPrior(prior_scale), noise_scale, num_data)
    return model, make_guide(model, init_scale)
