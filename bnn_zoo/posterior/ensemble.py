"""An equally weighted ensemble of posteriors (``Mixture``): K mean-field guides from different
seeds, or K twins (the deep ensemble), or K of any kind.

Usage: ``Mixture([VariationalPosterior(m, g) for m, g in pairs], "ensemble of 3 mean-field VI")``
"""
from __future__ import annotations

from .base import Posterior


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
