"""Each input answered from the reading the posterior is surer of: as given, or remade as MNIST's
digits were made (``bnn_zoo.data.images.remade``: background to black, the ink fitted into 20x20
and centred by its mass). A run with ``data.remade`` holds its posteriors so (``posteriors`` in
``bnn_zoo.runs.trained``): a translated, rescaled or brightened digit is read as the digit it is,
and a digit that remaking would spoil (a line through it moves its centre of mass) as it came. The
reading chosen is the one whose mean prediction has the lower entropy; its rule, sets and alarm are
certified on validation inputs read the same way, so their guarantees are of this posterior.

Usage: ``SurerReading(posteriors(trained)["bayes"]).predict(x, 100)  # x normalized as MNIST's``
"""
from __future__ import annotations

import torch

from ..abstain.rule import predictive_entropy
from ..data.images import remade
from ..data.sets import MNIST_MEAN, MNIST_STD, normalize
from .base import Posterior


def remade_inputs(x: torch.Tensor) -> torch.Tensor:
    """Normalized MNIST inputs [N, 1, 28, 28] remade as MNIST's digits were, normalized again."""
    pixels = ((x[:, 0].float() * MNIST_STD + MNIST_MEAN) * 255).round().clamp(0, 255).to(torch.uint8)
    return normalize(remade(pixels.cpu())).to(device=x.device, dtype=x.dtype)


class SurerReading(Posterior):
    """``posterior`` answering each input as given or remade, whichever its mean prediction is surer
    of (lower entropy); twice its predictions. The rest (label, features, what it stores) is its."""

    def __init__(self, posterior: Posterior):
        self.posterior, self.label = posterior, posterior.label
        self.name, self.title = posterior.name, posterior.title
        self.stochastic, self.networks = posterior.stochastic, posterior.networks

    def predict(self, x: torch.Tensor, num_samples: int = 100, chunk_size: int = 10,
                batch_size: int = 500) -> torch.Tensor:
        given = self.posterior.predict(x, num_samples, chunk_size, batch_size)
        again = self.posterior.predict(remade_inputs(x), num_samples, chunk_size, batch_size)
        surer = predictive_entropy(again) < predictive_entropy(given)
        return torch.where(surer[None, :, None], again, given)

    def chunks(self, x, num_samples, chunk_size):
        """The posterior's chunks of the inputs as given (``predict`` reads both ways)."""
        return self.posterior.chunks(x, num_samples, chunk_size)

    def rows(self, num_samples: int) -> int:
        return self.posterior.rows(num_samples)

    def features(self, x: torch.Tensor) -> torch.Tensor | None:
        return self.posterior.features(x)

    @property
    def parameters_stored(self) -> int:
        return self.posterior.parameters_stored
