"""Likelihoods: how a network's outputs explain the data. Each one owns the observation site
``obs`` and the data plate (so a minibatch's log-likelihood is scaled by num_data / batch size and
the KL counts once per pass through the data), the per-sample predictive, the deterministic twin's
loss and the figures of merit; a classifier's also "no class" observed at outlier inputs
(``no_class``: the plate ``outliers`` and the factor of the outlier-exposure term).

Usage::

    likelihood = Categorical(num_data=55000)       # the network gives logits
    likelihood(logits, y)                           # inside a model: the data plate and obs site
    likelihood.no_class(outlier_logits, 0.5)        # inside a model: "no class" at the outliers
    likelihood.predictive(logits)                   # class probabilities
    Gaussian(num_data=6, noise="heteroscedastic")   # the network gives mean and noise output
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.nn import PyroModule

from .priors import hyperparameter


def check_num_data(num_data: Optional[int]) -> None:
    """Refuse a training set's size that is not a positive integer (None: unknown, allowed)."""
    if num_data is not None and (isinstance(num_data, bool) or not isinstance(num_data, int) or num_data < 1):
        raise ValueError(f"num_data is the size of the training set, a positive integer; got {num_data!r}")


class Likelihood(PyroModule):
    """Base class: the data plate and the ``obs`` site around ``distribution(out)``.

    A subclass gives ``outputs`` (how many outputs the network needs per example) and four
    methods of the network's output ``out``: ``distribution`` (per example), ``returned`` (what
    the model returns, its ``_RETURN`` site), ``predictive`` (one weight sample's predictive, as
    ``bnn_zoo.predict`` stacks it) and ``metrics(samples, y)`` (figures of ``predict``'s samples).
    ``num_data`` is the size of the full training set (None: each batch is the whole data set).
    """

    outputs: int  # how many outputs the network needs per example

    def __init__(self, num_data: Optional[int] = None):
        super().__init__()
        check_num_data(num_data)
        self.num_data = num_data

    def data_plate(self, batch: int, observed: bool, device) -> pyro.plate:
        """The plate over the examples, at dim -1: full size num_data when fitting observed data."""
        size = self.num_data if observed and self.num_data else batch
        if batch > size:
            raise ValueError(f"a batch of {batch} examples is larger than num_data={size}")
        return pyro.plate("data", size, subsample=torch.arange(batch, device=device), dim=-1)

    def forward(self, out: torch.Tensor, y: Optional[torch.Tensor] = None) -> torch.Tensor:
        fn = self.distribution(out)
        with self.data_plate(fn.batch_shape[-1], y is not None, out.device):
            pyro.sample("obs", fn, obs=y)
        return self.returned(out)

    def twin_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood per example: the deterministic twin's training loss."""
        return -self.distribution(out).log_prob(y).mean()

    def no_class_log_prob(self, out: torch.Tensor) -> torch.Tensor:
        """[..., M]: the log-likelihood of "no class" at each of M outlier inputs (a classifier's)."""
        raise ValueError(f"outliers are observed as 'no class', and a {type(self).__name__.lower()} likelihood has no "
                         "classes: leave the outliers section out")

    def no_class(self, out: torch.Tensor, weight: float) -> None:
        """Inside a model: observe "no class" at M outlier inputs (the network's outputs at them,
        [..., M, outputs]), a factor ``no_class`` of ``weight`` times ``no_class_log_prob`` at each,
        in a plate ``outliers`` as large as the training set (num_data), so that the M stand for
        num_data of them as a minibatch's examples do in the data plate: the term is weight x
        num_data x their mean, and the ELBO stays an ELBO of the likelihood with it."""
        m = out.shape[-2]
        with pyro.plate("outliers", self.num_data or m, subsample=torch.arange(m, device=out.device), dim=-1):
            pyro.factor("no_class", weight * self.no_class_log_prob(out))

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict:
        """Figures of the posterior predictive from ``predict``'s samples (S = 1 for a twin)."""
        raise NotImplementedError

    @property
    def hyperparameters(self) -> dict[str, float]:
        return {}


class Categorical(Likelihood):
    """Classification: the network gives logits; the model returns them.

    Usage: ``Categorical(num_data=55000, num_classes=10)``
    """

    def __init__(self, num_data: Optional[int] = None, num_classes: int = 10):
        super().__init__(num_data)
        self.outputs = num_classes

    def distribution(self, out):
        return dist.Categorical(logits=out)

    def returned(self, out):
        return out

    def predictive(self, out):
        """Class probabilities [..., C]."""
        return out.softmax(-1)

    def twin_loss(self, out, y):
        return F.cross_entropy(out, y)

    def no_class_log_prob(self, out):
        """The mean log-probability over the C classes, minus the cross-entropy to the uniform
        distribution: the log-likelihood of a label drawn uniformly, outlier exposure's term
        (Hendrycks et al. 2019); its largest, -log C, where the network gives every class 1 / C."""
        return out.log_softmax(-1).mean(-1)

    def metrics(self, samples, y):
        """Accuracy and NLL (nats per example) of the mean probability over the samples [S, N, C]."""
        mean = samples.mean(0)
        picked = mean.gather(1, y.unsqueeze(1)).squeeze(1).clamp_min(1e-12)
        return {"accuracy": (mean.argmax(1) == y).float().mean().item(), "nll": -picked.log().mean().item()}


NOISE_MODES = ("fixed", "homoscedastic", "heteroscedastic")


class Gaussian(Likelihood):
    """Regression with Gaussian noise; the model returns the mean.

    ``fixed``: the noise sd is ``scale``. ``homoscedastic``: one sd, learned (starts at ``scale``).
    ``heteroscedastic``: the network has a second output, the noise sd at each input,
    softplus-positive and equal to ``scale`` where that output is 0. ``target``: the targets' mean
    and sd (your own data's, from its training split): the network and ``scale`` work in standard
    units, the mean and sd it returns are in the targets' own.

    Usage: ``loc, sd = Gaussian(noise="heteroscedastic", scale=0.5).loc_scale(net(x))``
    """

    def __init__(self, num_data: Optional[int] = None, noise: str = "fixed", scale: float = 1.0,
                 target: tuple[float, float] = (0.0, 1.0)):
        super().__init__(num_data)
        if noise not in NOISE_MODES:
            raise ValueError(f"unknown noise mode {noise!r}; choose one of {', '.join(NOISE_MODES)}")
        if not scale > 0:
            raise ValueError(f"the noise scale must be positive, got {scale}")
        self.noise = noise
        self.outputs = 2 if noise == "heteroscedastic" else 1
        hyperparameter(self, "scale", scale, constraints.positive, noise == "homoscedastic")
        if not target[1] > 0:
            raise ValueError(f"the targets' sd must be positive, got {target[1]}")
        self.register_buffer("target_mean", torch.tensor(float(target[0])), persistent=False)  # from the config
        self.register_buffer("target_sd", torch.tensor(float(target[1])), persistent=False)

    def loc_scale(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.returned(out)
        if self.noise == "heteroscedastic":
            # softplus(raw + softplus^-1(scale)): equals scale at raw = 0; 1e-4 keeps it off zero.
            offset = self.scale + torch.log(-torch.expm1(-self.scale))
            return loc, self.target_sd * (F.softplus(out[..., 1] + offset) + 1e-4)
        return loc, self.target_sd * self.scale.expand_as(loc)

    def distribution(self, out):
        return dist.Normal(*self.loc_scale(out))

    def returned(self, out):
        """The mean, in the targets' units."""
        return self.target_mean + self.target_sd * out[..., 0]

    def predictive(self, out):
        """The sample's Normal as [..., 2]: (mean, noise sd)."""
        return torch.stack(self.loc_scale(out), -1)

    def metrics(self, samples, y):
        """RMSE of the predictive mean, and NLL (nats per point) of the mixture of the S Normals."""
        loc, scale = samples.unbind(-1)
        log_mix = torch.distributions.Normal(loc, scale).log_prob(y).logsumexp(0) - math.log(len(loc))
        return {"rmse": (loc.mean(0) - y).pow(2).mean().sqrt().item(), "nll": -log_mix.mean().item()}

    @property
    def hyperparameters(self) -> dict[str, float]:
        """The noise sd in the targets' units (``scale`` in standard units times their sd)."""
        return {} if self.noise == "heteroscedastic" else {"scale": (self.target_sd * self.scale).item()}


LIKELIHOODS = ("categorical", "gaussian")


def make_likelihood(kind: str, num_data: Optional[int] = None, noise: str = "fixed",
                    noise_scale: float = 1.0, num_classes: int = 10,
                    target: Optional[Sequence[float]] = None) -> Likelihood:
    """The likelihood a recipe names: ``categorical`` or ``gaussian`` (with its noise model, and
    its targets' mean and sd)."""
    if kind == "categorical":
        return Categorical(num_data, num_classes)
    if kind == "gaussian":
        return Gaussian(num_data, noise, noise_scale, tuple(target) if target is not None else (0.0, 1.0))
    raise ValueError(f"unknown likelihood {kind!r}; choose one of {', '.join(LIKELIHOODS)}")
