"""The twin's posteriors: its point weights (``PointPosterior``, one prediction per input), its
logits temperature-scaled (``ScaledPosterior``), MC dropout on a twin trained with dropout
(``DropoutPosterior``), and an ensemble's twins (the deep ensemble).

Usage: ``probs = PointPosterior(trained.twin).predict(x)  # [1, N, C]``
"""
from __future__ import annotations

import torch
from torch import nn

from ..abstain.density import features
from ..core.inference.inputs import evaluating
from ..core.inference.predictive import sample_chunks
from ..core.networks.twin import Twin
from .base import Mixture, Posterior, count, phase_seconds, register


@register
class PointPosterior(Posterior):
    """A twin's point weights: one prediction per input, whatever num_samples is; a run's (MC dropout
    where it trained with dropout), the deep ensemble of an ensemble's twins."""

    name, title = "twin", "deterministic"
    stochastic = False

    @classmethod
    def of_run(cls, trained) -> Posterior | None:
        twins = [_twin_posterior(t.twin) for t in (trained, *trained.members) if t.twin is not None]
        if len(twins) <= 1:
            return twins[0] if twins else None
        kind = twins[0].label if twins[0].stochastic else "twins"
        return Mixture(twins, f"deep ensemble of {len(twins)} {kind}")

    @classmethod
    def training_seconds(cls, metrics):
        return phase_seconds(metrics, "twin")  # a temperature's fit is in the certificate's seconds

    def __init__(self, twin: Twin, label: str = "MAP (the twin)"):
        self.twin, self.label, self.networks = twin, label, (twin,)

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin):
            yield 1, lambda xb: self.twin(xb)[None]

    @property
    def parameters_stored(self) -> int:
        return count(self.twin)

    def features(self, x):
        with evaluating(self.twin):
            return features(self.twin.net, self.twin.net, x)


@register
class ScaledPosterior(PointPosterior):
    """A classifier twin with its logits divided by a temperature (``bnn_zoo.abstain.temperature``, fitted
    on validation's first fifth): the same answers, other confidences; a lone plain twin's, where
    the run's certification fitted one."""

    name, title, held_out = "twin_scaled", "deterministic, temperature-scaled", True

    @classmethod
    def of_run(cls, trained) -> Posterior | None:
        lone = trained.twin is not None and not trained.members and not any(
            isinstance(m, nn.Dropout) for m in trained.twin.modules())
        return cls(trained.twin, trained.temperature) if lone and trained.temperature is not None else None

    def __init__(self, twin: Twin, temperature: float):
        if not temperature > 0:
            raise ValueError(f"a temperature must be positive, got {temperature}")
        super().__init__(twin, f"MAP (the twin), temperature-scaled (T = {temperature:.3g})")
        self.temperature = temperature

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin):
            yield 1, lambda xb: (self.twin.net(xb) / self.temperature).softmax(-1)[None]


class DropoutPosterior(PointPosterior):
    name = ""  # a twin's kind (PointPosterior.of_run makes it), not one of its own
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


def _twin_posterior(twin: Twin) -> Posterior:
    if any(isinstance(m, nn.Dropout) for m in twin.modules()):
        return DropoutPosterior(twin)
    return PointPosterior(twin)
