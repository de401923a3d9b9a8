"""The zoo: registered recipes (a plain network, a likelihood, data sets) on top of ``bayesian``,
and any network by name: ``package.module:factory``, a callable returning an ``nn.Module`` (built
with the config's ``model.kwargs``).

Usage::

    model, guide = bnn_zoo.build("lenet", num_data=55000)
    model, guide = bnn_zoo.build("mnist_mlp", num_data=55000, hidden=[100], guide="lowrank")
    model, guide = bnn_zoo.build(architecture("table_mlp", likelihood="gaussian"), num_data=300)
    model, guide = bnn_zoo.build(architecture("mynets:small_cnn", {"width": 32}), num_data=55000)
    twin = bnn_zoo.make_twin("lenet")
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Union

import torch
from torch import nn

from .bnn import BayesianNet, bayesian
from .likelihoods import make_likelihood
from .nets import MLP, LeNet5
from .network_names import build_network, guarded, import_factory
from .twin import Twin

NUM_CLASSES = 10


@dataclass(frozen=True)
class Recipe:
    # (hidden widths, outputs, dropout, input shape) -> plain network
    make_net: Callable[[list[int], int, float, tuple[int, ...]], nn.Module]
    likelihood: str  # a name of bnn_zoo.core.networks.likelihoods.make_likelihood
    datasets: tuple[str, ...]  # the first is the default
    input_shape: tuple[int, ...]
    default_hidden: tuple[int, ...] = ()  # empty: the network's shape is fixed
    classes: int = NUM_CLASSES  # a classifier's (your own data: its number of classes)

    @property
    def has_hidden(self) -> bool:
        return bool(self.default_hidden)


CLASSIFIER_DATA, TOY_DATA = ("mnist", "fashion_mnist"), ("polynomial", "sinusoid")
TABLE = "table_mlp"  # rows of your own, regressed or classified as model.likelihood says
TABLE_DATA = ("csv", "tensors")  # its data: a CSV table (the default) or a tensor file of rows


def _mlp(hidden: list[int], outputs: int, dropout: float, shape: tuple[int, ...]) -> nn.Module:
    return MLP(math.prod(shape), hidden, outputs, dropout)


def _lenet(hidden: list[int], outputs: int, dropout: float, shape: tuple[int, ...]) -> nn.Module:
    if len(shape) != 3 or shape[1] != shape[2]:
        raise ValueError(f"lenet takes square images [channels, size, size], not inputs of shape {list(shape)}: resize "
                         "images with data.image_size=N, or train mnist_mlp or your own network on them")
    return LeNet5(outputs, dropout, shape[0], shape[1])


ARCHITECTURES: dict[str, Recipe] = {
    "toy_mlp": Recipe(_mlp, "gaussian", TOY_DATA, (1,), (50, 50)),
    "mnist_mlp": Recipe(_mlp, "categorical", CLASSIFIER_DATA, (1, 28, 28), (400, 400)),
    "lenet": Recipe(_lenet, "categorical", CLASSIFIER_DATA, (1, 28, 28)),
    TABLE: Recipe(_mlp, "categorical", TABLE_DATA, (1,), (50,)),
}


def architecture(name: Union[str, Recipe], kwargs: Optional[dict] = None, likelihood: Optional[str] = None) -> Recipe:
    """The recipe of a registered architecture (table_mlp's with ``likelihood``), or of a network by
    name (``package.module:factory``, built as ``factory(**kwargs)``, with ``likelihood``); a
    likelihood is categorical, the default, or gaussian."""
    if isinstance(name, Recipe):
        return name
    if ":" in name:
        return _imported(name, dict(kwargs or {}), likelihood or "categorical")
    if kwargs:
        raise ValueError(f"model.kwargs are for a network by name (package.module:factory); {name} takes none")
    if likelihood and name != TABLE:
        raise ValueError(f"model.likelihood is for {TABLE} and a network by name (package.module:factory); "
                         f"{name} has its own")
    try:
        spec = ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}, or name a "
                         "network factory as package.module:factory") from None
    return replace(spec, likelihood=likelihood) if likelihood else spec


def _imported(name: str, kwargs: dict, likelihood: str) -> Recipe:
    factory = import_factory(name)
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as err:
        raise ValueError(f"{name} does not take model.kwargs {kwargs} ({err})") from None
    except ValueError:  # a callable without a signature to read: the call says
        pass
    input_shape = (1, 28, 28) if likelihood == "categorical" else (1,)

    def make(hidden: list[int], outputs: int, dropout: float, input_shape: tuple[int, ...]) -> nn.Module:
        if dropout:
            raise ValueError(f"{name} keeps its own layers: MC dropout (train.twin_dropout) is for the registered "
                             "recipes; put dropout in your network instead")
        net = build_network(name, factory, kwargs)
        was_training = net.training
        try:
            with torch.no_grad(), guarded() as done:  # in eval mode: the probe moves no BatchNorm statistics
                out = net.eval()(torch.zeros(2, *input_shape))
        except Exception as err:
            if not done:
                raise ValueError(f"{name}(**{kwargs}) cannot take inputs of shape {list(input_shape)} "
                                 f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
        finally:
            net.train(was_training)
        if done:
            raise ValueError(f"{name}(**{kwargs})'s forward pass {done[0]}; a network by name may not")
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        if shape != [2, outputs]:
            raise ValueError(f"{name}(**{kwargs}) gives {shape} for 2 inputs; its {likelihood} likelihood needs "
                             f"[2, {outputs}]")
        return net

    datasets = CLASSIFIER_DATA if likelihood == "categorical" else TOY_DATA
    return Recipe(make, likelihood, datasets, input_shape)


def likelihood_of(name: str, likelihood: Optional[str] = None) -> str:
    """The likelihood an architecture's outputs have (``categorical`` or ``gaussian``), without
    building it: a registered recipe's, or a network by name's ``model.likelihood`` (None:
    categorical)."""
    if ":" in name:
        return likelihood or "categorical"
    return architecture(name).likelihood


def _widths(spec: Recipe, hidden: Optional[list[int]]) -> list[int]:
    if hidden is None:
        return list(spec.default_hidden)
    if not spec.has_hidden:
        raise ValueError(f"this network has a fixed shape: drop hidden={hidden}")
    if not hidden or not all(isinstance(h, int) and h >= 1 for h in hidden):
        raise ValueError(f"hidden must list one or more positive layer widths, got {hidden}")
    return list(hidden)


def make_net(arch: Union[str, Recipe], hidden: Optional[list[int]] = None, noise: str = "fixed",
             dropout: float = 0.0) -> nn.Module:
    """The plain network of an architecture (a name, or a ``Recipe`` from ``architecture``): logits,
    or a regression's mean [and noise output], with dropout at rate ``dropout`` after its hidden
    layers when it is above 0."""
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout is a rate in [0, 1), got {dropout}")
    spec = architecture(arch)
    outputs = make_likelihood(spec.likelihood, noise=noise, num_classes=spec.classes).outputs
    return spec.make_net(_widths(spec, hidden), outputs, dropout, spec.input_shape)


def make_twin(arch: Union[str, Recipe], hidden: Optional[list[int]] = None, noise: str = "fixed",
              noise_scale: float = 1.0, dropout: float = 0.0, target: Optional[list[float]] = None) -> Twin:
    """The deterministic twin: the plain network with its own likelihood (and noise scale); with
    ``dropout`` > 0 it trains with dropout, and ``bnn_zoo.posterior.DropoutPosterior`` samples it."""
    spec = architecture(arch)
    likelihood = make_likelihood(spec.likelihood, None, noise, noise_scale, spec.classes, target)
    twin = Twin(make_net(arch, hidden, noise, dropout), likelihood)
    twin.input_shape = tuple(spec.input_shape)
    return twin


def build(arch: Union[str, Recipe], num_data: Optional[int] = None, hidden: Optional[list[int]] = None,
          prior: Optional[nn.Module] = None, init_scale: float = 0.01, noise: str = "fixed",
          noise_scale: float = 1.0, guide: str = "meanfield", rank: int = 10,
          target: Optional[list[float]] = None) -> tuple[BayesianNet, nn.Module]:
    """A fresh, untrained (model, guide) pair of a registered architecture.

    ``prior`` defaults to ``GaussianPrior(1.0)``; ``noise``, ``noise_scale`` and ``target`` (the
    targets' mean and sd) set a regression's noise model (see ``likelihoods.Gaussian``); ``guide``
    is ``meanfield``, ``lowrank`` or ``delta``.

    Usage: ``model, guide = build("lenet", num_data=55000, prior=ScaleMixturePrior())``
    """
    spec = architecture(arch)
    likelihood = make_likelihood(spec.likelihood, num_data, noise, noise_scale, spec.classes, target)
    model, guide = bayesian(make_net(arch, hidden, noise), prior, likelihood, guide=guide,
                            init_scale=init_scale, rank=rank)
    model.input_shape = tuple(spec.input_shape)
    return model, guide
