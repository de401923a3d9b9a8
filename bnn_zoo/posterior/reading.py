"""Each input read two ways, as given and remade as MNIST's digits were made
(``bnn_zoo.data.images.remade``: background to black, the ink fitted into 20x20 and centred by its
mass), and answered from the posterior over both readings: each reading equally likely, the
posterior's predictive samples under the one pooled with those under the other. A run with
``data.remade`` holds its posteriors so (``posteriors`` in ``bnn_zoo.runs.storage.trained``).

Where the readings agree (MNIST's own digits, which remaking leaves as they are) the pool answers as
either would; where they disagree it is uncertain, as it should be: a letter that only its remade
reading calls a digit comes out split between that digit and whatever the given reading saw, and the
rule refuses it. Never the surer of the two: taking the lower of two uncertainties is a bias toward
answering, paid for out of distribution. Its rule, sets and alarm are certified on validation inputs
read the same way, so their guarantees are of this posterior.

Usage: ``BothReadings(posteriors(trained)["bayes"]).predict(x, 100)  # [200, N, C]; x normalized as MNIST's``
"""
from __future__ import annotations

import torch

from ..data.images import remade
from ..data.sets import MNIST_MEAN, MNIST_STD
from .base import Posterior


def remade_inputs(x: torch.Tensor) -> torch.Tensor:
    """Normalized MNIST inputs [N, 1, 28, 28] remade as MNIST's digits were, normalized again, on
    their own device."""
    pixels = ((x[:, 0].float() * MNIST_STD + MNIST_MEAN) * 255).round().clamp(0, 255)
    again = (remade(pixels).float() / 255 - MNIST_MEAN) / MNIST_STD
    return again[:, None].to(dtype=x.dtype)


class BothReadings(Posterior):
    """``posterior`` answering each input from both readings: ``num_samples`` predictions as given,
    then as many remade ([2 x rows, N, C]); twice its predictions. The rest (label, features, what it
    stores) is its."""

    def __init__(self, posterior: Posterior):
        self.posterior, self.label = posterior, posterior.label
        self.name, self.title = posterior.name, posterior.title
        self.stochastic, self.networks = posterior.stochastic, posterior.networks

    def predict(self, x: torch.Tensor, num_samples: int = 100, chunk_size: int = 10,
                batch_size: int = 500) -> torch.Tensor:
        """The posterior's predictions as given, then remade (each input remade once, not per chunk)."""
        given = self.posterior.predict(x, num_samples, chunk_size, batch_size)
        return torch.cat([given, self.posterior.predict(remade_inputs(x), num_samples, chunk_size, batch_size)])

    def chunks(self, x, num_samples, chunk_size):
        """The posterior's chunks as given, then the same on each batch remade."""
        yield from self.posterior.chunks(x, num_samples, chunk_size)
        for n, predict_batch in self.posterior.chunks(x, num_samples, chunk_size):
            yield n, lambda xb, predict_batch=predict_batch: predict_batch(remade_inputs(xb))

    def rows(self, num_samples: int) -> int:
        return 2 * self.posterior.rows(num_samples)

    def features(self, x: torch.Tensor) -> torch.Tensor | None:
        return self.posterior.features(x)

    @property
    def parameters_stored(self) -> int:
        return self.posterior.parameters_stored
