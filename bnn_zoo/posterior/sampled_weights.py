"""Posteriors fitted after training around the twin's network: each draws weights of some of its
layers (``draw``) and runs the plain network on them, every draw of a chunk in one vectorized pass
(``torch.func.vmap`` of ``functional_call``), the rest of its weights the twin's.

Usage: a subclass gives ``draw(n)`` ({parameter name: [n, *shape]}), ``state()``, ``from_state``.
"""
from __future__ import annotations

from abc import abstractmethod

import torch
from torch.func import functional_call, vmap

from ..abstain.density import features
from ..core.inference.inputs import evaluating
from ..core.inference.predictive import sample_chunks
from .base import Posterior


class WeightSampler(Posterior):
    """Draws of a twin's weights: ``draw(n)`` gives n of each drawn parameter, the others stay."""

    label = "weight draws of the twin"

    def __init__(self, twin):
        self.twin = twin
        self.networks = (twin,)

    @staticmethod
    def parameter_name_of(twin, module) -> str:
        """The dotted name of ``module`` in the twin's network (its parameters' prefix)."""
        return next(name for name, m in twin.net.named_modules() if m is module)

    def parameter_name(self, module) -> str:
        return self.parameter_name_of(self.twin, module)

    def flat(self) -> torch.Tensor:
        """The twin's network's parameters as one vector, in ``named_parameters`` order."""
        return torch.cat([p.detach().flatten() for p in self.twin.net.parameters()])

    def unflat(self, vectors: torch.Tensor) -> dict[str, torch.Tensor]:
        """[n, P] vectors of all the network's parameters as {name: [n, *shape]}."""
        out, start = {}, 0
        for name, p in self.twin.net.named_parameters():
            out[name] = vectors[:, start:start + p.numel()].reshape(len(vectors), *p.shape)
            start += p.numel()
        return out

    @abstractmethod
    def draw(self, n: int) -> dict[str, torch.Tensor]:
        """n draws of the drawn parameters: {name in the network: [n, *shape]}."""

    def point(self) -> dict[str, torch.Tensor]:
        """The weights of the posterior's point network (its mean), where they are not the twin's."""
        return {}

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin):
            for _, n in sample_chunks(num_samples, chunk_size):
                drawn = self.draw(n)
                yield n, lambda xb, drawn=drawn: self._predict(drawn, xb)

    def _predict(self, drawn: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        net = self.twin.net
        state = {**dict(net.named_parameters()), **dict(net.named_buffers())}
        out = vmap(lambda w: functional_call(net, {**state, **w}, (xb,)))(drawn)
        return self.twin.likelihood.predictive(out)

    @torch.no_grad()
    def features(self, x):
        """At the posterior's mean: its point network's penultimate features."""
        net, mean = self.twin.net, self.point()
        with evaluating(self.twin):
            if not mean:
                return features(net, net, x)
            state = {**dict(net.named_parameters()), **dict(net.named_buffers()), **mean}
            return features(net, lambda xb: functional_call(net, state, (xb,)), x)

    @abstractmethod
    def state(self) -> dict:
        """What a saved copy holds beside the twin (tensors and plain values)."""
