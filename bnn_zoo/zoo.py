"""The zoo: registered recipes (a plain network, a likelihood, data sets) on top of ``bayesian``.

Usage::

    model, guide = bnn_zoo.build("lenet", num_data=55000)
    model, guide = bnn_zoo.build("mnist_mlp", num_data=55000, hidden=[100], guide="lowrank")
    twin = bnn_zoo.make_twin("lenet")
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn

from .bnn import BayesianNet, bayesian
from .likelihoods import make_likelihood
from .nets import MLP, LeNet5
from .twin import Twin

NUM_CLASSES = 10


@dataclass(frozen=True)
class Recipe:
    make_net: Callable[[list[int], int, float], nn.Module]  # (hidden widths, outputs, dropout) -> plain network
    likelihood: str  # a name of bnn_zoo.likelihoods.make_likelihood
    datasets: tuple[str, ...]  # the first is the default
    input_shape: tuple[int, ...]
    default_hidden: tuple[int, ...] = ()  # empty: the network's shape is fixed

    @property
    def has_hidden(self) -> bool:
        return bool(self.default_hidden)


ARCHITECTURES: dict[str, Recipe] = {
    "toy_mlp": Recipe(lambda hidden, outputs, dropout: MLP(1, hidden, outputs, dropout), "gaussian",
                      ("polynomial", "sinusoid"), (1,), (50, 50)),
    "mnist_mlp": Recipe(lambda hidden, outputs, dropout: MLP(784, hidden, outputs, dropout), "categorical",
                        ("mnist", "fashion_mnist"), (1, 28, 28), (400, 400)),
    "lenet": Recipe(lambda hidden, outputs, dropout: LeNet5(outputs, dropout), "categorical",
                    ("mnist", "fashion_mnist"), (1, 28, 28)),
}


def architecture(name: str) -> Recipe:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose one of "
                         f"{', '.join(ARCHITECTURES)}") from None


def _widths(arch: str, hidden: Optional[list[int]]) -> list[int]:
    spec = architecture(arch)
    if hidden is None:
        return list(spec.default_hidden)
    if not spec.has_hidden:
        raise ValueError(f"{arch} has a fixed shape: drop hidden={hidden}")
    if not hidden or not all(isinstance(h, int) and h >= 1 for h in hidden):
        raise ValueError(f"hidden must list one or more positive layer widths, got {hidden}")
    return list(hidden)


def make_net(arch: str, hidden: Optional[list[int]] = None, noise: str = "fixed", dropout: float = 0.0) -> nn.Module:
    """The plain network of an architecture (logits, or a regression's mean [and noise output]),
    with dropout at rate ``dropout`` after its hidden layers when it is above 0."""
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout is a rate in [0, 1), got {dropout}")
    outputs = make_likelihood(architecture(arch).likelihood, noise=noise, num_classes=NUM_CLASSES).outputs
    return architecture(arch).make_net(_widths(arch, hidden), outputs, dropout)


def make_twin(arch: str, hidden: Optional[list[int]] = None, noise: str = "fixed",
              noise_scale: float = 1.0, dropout: float = 0.0) -> Twin:
    """The deterministic twin: the plain network with its own likelihood (and noise scale); with
    ``dropout`` > 0 it trains with dropout, and ``bnn_zoo.ladder.DropoutPosterior`` samples it."""
    likelihood = make_likelihood(architecture(arch).likelihood, None, noise, noise_scale, NUM_CLASSES)
    return Twin(make_net(arch, hidden, noise, dropout), likelihood)


def build(arch: str, num_data: Optional[int] = None, hidden: Optional[list[int]] = None,
          prior: Optional[nn.Module] = None, init_scale: float = 0.01, noise: str = "fixed",
          noise_scale: float = 1.0, guide: str = "meanfield", rank: int = 10) -> tuple[BayesianNet, nn.Module]:
    """A fresh, untrained (model, guide) pair of a registered architecture.

    ``prior`` defaults to ``GaussianPrior(1.0)``; ``noise`` and ``noise_scale`` set a regression's
    noise model (see ``likelihoods.Gaussian``); ``guide`` is ``meanfield``, ``lowrank`` or ``delta``.

    Usage: ``model, guide = build("lenet", num_data=55000, prior=ScaleMixturePrior())``
    """
    likelihood = make_likelihood(architecture(arch).likelihood, num_data, noise, noise_scale, NUM_CLASSES)
    return bayesian(make_net(arch, hidden, noise), prior, likelihood, guide=guide,
                    init_scale=init_scale, rank=rank)
