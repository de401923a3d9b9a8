"""The ladder of posteriors behind one interface: ``posterior.predict(x, num_samples)`` gives
sampled predictions [S, N, C] (class probabilities, or a regression's (mean, noise sd)), with memory
beyond the result bounded by chunk_size x batch_size activations, whatever the rung.

Rungs: ``VariationalPosterior`` (a guide: mean-field, low-rank), ``SampledPosterior`` (HMC weight
samples), ``PointPosterior`` (the twin: point weights, one prediction), ``ScaledPosterior`` (the
twin's logits divided by the temperature fitted on validation), ``DropoutPosterior`` (MC dropout on
a twin trained with dropout) and ``Mixture`` (an ensemble of any of them: K mean-field
guides from different seeds, or K twins, the deep ensemble). ``posteriors(trained)`` gives the ones a
trained run holds, under the names its rules and figures use (``BAYES``, ``TWIN``, ``TWIN_SCALED``,
``HMC``: the names of ``bnn_zoo.runs.checkpoint.PARTS``). A rung with a point network (a guide at its
posterior mean, a twin) also gives its penultimate ``features`` for ``bnn_zoo.abstain.density``.

Usage::

    rungs = posteriors(bnn_zoo.load("runs/lenet_ensemble"))    # {BAYES: Mixture, TWIN: Mixture}
    probs = rungs[BAYES].predict(x, num_samples=100)            # [100, N, 10]
    rungs[TWIN].label, rungs[TWIN].parameters_stored            # "deep ensemble of 5 twins", 308,530
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generator

import torch
from pyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal
from torch import nn

from ..abstain.rule import DENSITY, Rule
from ..core.bnn import BayesianNet
from ..runs.checkpoint import PARTS
from ..abstain.density import features
from ..core.errors import CheckpointError
from ..core.predictive import (Chunk, check_inputs, evaluating, fill_predictions, network_chunks, own_parameters, positive_sizes,
                       sample_chunks)
from ..runs.trained import Trained
from ..core.twin import Twin

BAYES, TWIN, TWIN_SCALED, HMC = PARTS  # the posteriors' names, in code that names one


class Posterior(ABC):
    """What any rung offers: sampled predictions, a label, and how many numbers it stores."""

    label: str
    stochastic: bool = True  # False: one prediction per input (a point estimate)
    networks: tuple = ()  # the models and twins it runs, which must take x's shape (``check_inputs``)

    def predict(self, x: torch.Tensor, num_samples: int = 100, chunk_size: int = 10,
                batch_size: int = 500) -> torch.Tensor:
        """Sampled predictions [S, N, ...] on ``x``: S = num_samples, or 1 for a point estimate,
        filled chunk by chunk by ``bnn_zoo.core.predictive.fill_predictions``."""
        check_inputs(x, *self.networks)
        rows = self.rows(num_samples)
        positive_sizes(rows, chunk_size, batch_size)
        return fill_predictions(x, self.chunks(x, num_samples, chunk_size), rows, batch_size)

    @abstractmethod
    def chunks(self, x: torch.Tensor, num_samples: int, chunk_size: int) -> Generator[Chunk, None, None]:
        """The chunks of ``rows(num_samples)`` predictions, in ``fill_predictions``'s format."""

    @property
    @abstractmethod
    def parameters_stored(self) -> int:
        """The numbers a saved copy of this posterior holds (what prediction needs)."""

    def rows(self, num_samples: int) -> int:
        """How many predictions per input ``predict`` returns for ``num_samples``."""
        return num_samples if self.stochastic else 1

    def features(self, x: torch.Tensor) -> torch.Tensor | None:
        """[N, D]: the penultimate features of ``x`` under this rung's point network (the input of
        its last ``nn.Linear``; ``bnn_zoo.abstain.density``), None where it has none (HMC, a mixture)."""
        return None


def _count(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


class VariationalPosterior(Posterior):
    """A guide of a Bayesian network (``bnn_zoo.core.guides``): weights drawn from it."""

    def __init__(self, model: BayesianNet, guide: nn.Module):
        self.model, self.guide, self.networks = model, guide, (model,)
        self.stochastic = not isinstance(guide, AutoDelta)
        self.label = ("MAP (delta guide)" if not self.stochastic else
                      f"low-rank VI (rank {guide.rank})" if isinstance(guide, AutoLowRankMultivariateNormal) else
                      "mean-field VI")

    def chunks(self, x, num_samples, chunk_size):
        return network_chunks(self.model, self.guide, x, self.rows(num_samples), chunk_size)

    def features(self, x):
        """At the guide's posterior mean (its median: the mean of a Gaussian guide)."""
        prefix = len("net.")
        with torch.no_grad(), evaluating(self.model), own_parameters(self.guide):
            mean = {name[prefix:]: value for name, value in self.guide.median().items()}
            return features(self.model.skeleton, lambda xb: self.model.forward_with(mean, xb), x)

    @property
    def parameters_stored(self) -> int:
        return _count(self.guide, self.model)


class SampledPosterior(Posterior):
    """Weight samples {site: [S, *shape]} (NUTS): ``num_samples`` evenly spaced ones, None for all."""

    def __init__(self, model: BayesianNet, samples: dict[str, torch.Tensor]):
        self.model, self.samples, self.networks = model, samples, (model,)
        self.total = len(next(iter(samples.values())))
        self.label = f"HMC (NUTS, {self.total} samples)"

    def chunks(self, x, num_samples, chunk_size):
        return network_chunks(self.model, self.samples, x, self.rows(num_samples), chunk_size)

    def rows(self, num_samples: int) -> int:
        return min(num_samples or self.total, self.total)

    @property
    def parameters_stored(self) -> int:
        return sum(v.numel() for v in self.samples.values()) + _count(self.model)


class PointPosterior(Posterior):
    """A twin's point weights: one prediction per input, whatever num_samples is."""

    stochastic = False

    def __init__(self, twin: Twin, label: str = "MAP (the twin)"):
        self.twin, self.label, self.networks = twin, label, (twin,)

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin):
            yield 1, lambda xb: self.twin(xb)[None]

    @property
    def parameters_stored(self) -> int:
        return _count(self.twin)

    def features(self, x):
        with evaluating(self.twin):
            return features(self.twin.net, self.twin.net, x)


class ScaledPosterior(PointPosterior):
    """A classifier twin with its logits divided by a temperature (``bnn_zoo.abstain.temperature``, fitted
    on validation): the same answers, other confidences."""

    def __init__(self, twin: Twin, temperature: float):
        if not temperature > 0:
            raise ValueError(f"a temperature must be positive, got {temperature}")
        super().__init__(twin, f"MAP (the twin), temperature-scaled (T = {temperature:.3g})")
        self.temperature = temperature

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin):
            yield 1, lambda xb: (self.twin.net(xb) / self.temperature).softmax(-1)[None]


class DropoutPosterior(PointPosterior):
    """MC dropout (Gal & Ghahramani 2016): a twin trained with dropout, sampled with its dropout on.
    Each chunk of samples is one pass over the batch repeated chunk_size times (fresh masks per copy)."""

    stochastic = True

    def __init__(self, twin: Twin):
        rates = [m.p for m in twin.modules() if isinstance(m, nn.Dropout)]
        if not rates:
            raise ValueError("MC dropout needs a twin trained with dropout (train.twin_dropout > 0)")
        super().__init__(twin, f"MC dropout (p = {rates[0]:g})")

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin, dropout=True):
            for _, n in sample_chunks(num_samples, chunk_size):
                yield n, lambda xb: self._repeated(xb, n)

    def _repeated(self, xb: torch.Tensor, n: int) -> torch.Tensor:
        """n draws on the batch: one pass over it repeated n times, [n, len(xb), ...]."""
        out = self.twin(xb.repeat(n, *[1] * (xb.dim() - 1)))
        return out.reshape(n, len(xb), *out.shape[1:])


class Mixture(Posterior):
    """An equally weighted ensemble: num_samples split as evenly as possible over the members
    (a point estimate gives its one prediction), their predictions stacked."""

    def __init__(self, members: list[Posterior], label: str):
        if len(members) < 2:
            raise ValueError("a mixture needs at least two members")
        self.members, self.label = members, label
        self.networks = tuple(network for member in members for network in member.networks)

    def _shares(self, num_samples: int) -> list[int]:
        k = len(self.members)
        if num_samples < k and any(m.stochastic for m in self.members):
            raise ValueError(f"an ensemble of {k} members needs at least {k} samples, got {num_samples}")
        return [m.rows(num_samples // k + (i < num_samples % k)) for i, m in enumerate(self.members)]

    def rows(self, num_samples: int) -> int:
        return sum(self._shares(num_samples))

    def chunks(self, x, num_samples, chunk_size):
        for member, n in zip(self.members, self._shares(num_samples)):
            yield from member.chunks(x, n, chunk_size)

    @property
    def parameters_stored(self) -> int:
        return sum(m.parameters_stored for m in self.members)


def _twin_posterior(twin: Twin) -> Posterior:
    if any(isinstance(m, nn.Dropout) for m in twin.modules()):
        return DropoutPosterior(twin)
    return PointPosterior(twin)


def posteriors(trained: Trained) -> dict[str, Posterior]:
    """The posteriors a trained run holds: BAYES (its guide, or the mixture of its ensemble's
    guides), TWIN (the twin, MC dropout, or the deep ensemble of the members' twins) where it
    trained one, TWIN_SCALED (the twin temperature-scaled) where calibration fitted a temperature
    to a lone twin, and HMC where it drew NUTS samples."""
    runs = [trained, *trained.members]
    bayes = [VariationalPosterior(t.model, t.guide) for t in runs]
    rungs: dict[str, Posterior] = {
        BAYES: bayes[0] if len(bayes) == 1 else Mixture(bayes, f"ensemble of {len(bayes)} {bayes[0].label}")}
    twins = [_twin_posterior(t.twin) for t in runs if t.twin is not None]
    if len(twins) == 1:
        rungs[TWIN] = twins[0]
    elif twins:
        kind = twins[0].label if twins[0].stochastic else "twins"
        rungs[TWIN] = Mixture(twins, f"deep ensemble of {len(twins)} {kind}")
    if trained.temperature is not None and len(twins) == 1 and not twins[0].stochastic:
        rungs[TWIN_SCALED] = ScaledPosterior(trained.twin, trained.temperature)
    if trained.samples is not None:
        rungs[HMC] = SampledPosterior(trained.model, trained.samples)
    return rungs


def gate_density(rule: Rule, trained: Trained, part: str, posterior: Posterior, x: torch.Tensor) -> torch.Tensor | None:
    """[N]: the feature density scores ``rule`` (``part``'s) gates ``x`` on, None where its gate
    reads the probabilities alone (``rule(probs, gate_density(...))`` either way)."""
    if rule.signal != DENSITY:
        return None
    if part not in trained.densities:
        raise CheckpointError(f"the {part} rule gates on a feature density this run does not hold (density.pt): "
                              "certify it again with python -m bnn_zoo.calibrate RUN_DIR --twin-signal feature_density")
    return trained.densities[part].score(posterior.features(x))


def sampled_probs(trained: Trained, x: torch.Tensor, num_samples: int) -> dict[str, torch.Tensor]:
    """Each posterior's sampled predictions on ``x``: [num_samples, N, C] ([1, N, C] for a point
    estimate, [K, N, C] for a deep ensemble of K twins)."""
    return {part: posterior.predict(x, num_samples) for part, posterior in posteriors(trained).items()}
