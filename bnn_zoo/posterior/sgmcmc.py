"""Cyclical stochastic-gradient MCMC (Zhang et al. 2020, "Cyclical Stochastic Gradient MCMC for
Bayesian Deep Learning"): Langevin dynamics (SGLD) on the posterior, N(0, prior_scale^2) on every
weight, started at the twin's weights, its learning rate a cosine restarted each cycle. Each cycle
explores at a high rate without noise, then samples as it cools, the Langevin noise on, keeping the
weights at evenly spaced steps of that stage: samples from several modes, as HMC's are of one.

Usage: ``chain = CyclicalSGMCMC.fit(trained.twin, x_train, y_train); probs = chain.predict(x)``
"""
from __future__ import annotations

import copy
import math

import torch

from ..core.predictive import sample_chunks
from .base import register
from .sampled_weights import WeightSampler


@register
class CyclicalSGMCMC(WeightSampler):
    """Weight samples of cyclical SGLD; ``predict`` takes ``num_samples`` evenly spaced ones."""

    name, title, fitted = "sgmcmc", "cyclical SG-MCMC", True

    label_text = "cyclical SG-MCMC"

    def __init__(self, twin, samples: torch.Tensor):
        super().__init__(twin)
        self.samples = samples  # [S, P]
        self.label = f"{self.label_text} ({len(samples)} samples)"

    @classmethod
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held=None, y_held=None, cycles: int = 4, epochs_per_cycle: int = 2, lr: float = 0.1,
            batch_size: int = 128, samples_per_cycle: int = 3, explore: float = 0.8, prior_scale: float = 1.0,
            seed: int = 0) -> "CyclicalSGMCMC":
        """``cycles`` cycles of ``epochs_per_cycle`` epochs; the step w -= lr_t grad U_t / N (U the
        minibatch's estimate of minus the log joint) with N(0, 2 lr_t / N) noise after the first
        ``explore`` of a cycle, lr_t = lr (cos(pi t / T) + 1) / 2 within the cycle."""
        walker = copy.deepcopy(twin).train()
        params = list(walker.parameters())
        generator = torch.Generator(device=x.device).manual_seed(seed)
        n, per_epoch = len(x), math.ceil(len(x) / batch_size)
        length = epochs_per_cycle * per_epoch
        sampling = list(range(math.ceil(explore * length), length))
        if len(sampling) < samples_per_cycle:
            raise ValueError(f"each cycle samples over {len(sampling)} steps, fewer than the {samples_per_cycle} samples "
                             "it keeps: lengthen the cycles (more epochs, a smaller batch) or explore less")
        keep = {sampling[round(i * (len(sampling) - 1) / max(samples_per_cycle - 1, 1))] for i in range(samples_per_cycle)}
        samples = []
        for _ in range(cycles):
            t = 0
            for _ in range(epochs_per_cycle):
                for idx in torch.randperm(n, generator=generator, device=x.device).split(batch_size):
                    rate = lr * (math.cos(math.pi * t / length) + 1) / 2
                    loss = walker.loss(x[idx], y[idx]) + sum(p.pow(2).sum() for p in params) / (2 * prior_scale ** 2 * n)
                    grads = torch.autograd.grad(loss, params)
                    with torch.no_grad():
                        for p, g in zip(params, grads):
                            p -= rate * g
                            if t >= sampling[0]:
                                p += math.sqrt(2 * rate / n) * torch.randn(p.shape, generator=generator, device=p.device)
                    if t in keep:
                        samples.append(torch.cat([p.detach().flatten() for p in params]))
                    t += 1
        return cls(twin, torch.stack(samples))

    def rows(self, num_samples: int) -> int:
        return min(num_samples or len(self.samples), len(self.samples))

    def chunks(self, x, num_samples, chunk_size):
        index = torch.linspace(0, len(self.samples) - 1, self.rows(num_samples)).round().long()
        with torch.no_grad():
            for start, k in sample_chunks(len(index), chunk_size):
                drawn = self.unflat(self.samples[index[start:start + k]])
                yield k, lambda xb, drawn=drawn: self._predict(drawn, xb)

    def draw(self, n: int) -> dict[str, torch.Tensor]:
        index = torch.randint(len(self.samples), (n,))
        return self.unflat(self.samples[index])

    def state(self) -> dict:
        return {"samples": self.samples}

    @classmethod
    def from_state(cls, twin, state: dict) -> "CyclicalSGMCMC":
        return cls(twin, state["samples"])

    @property
    def parameters_stored(self) -> int:
        return self.samples.numel()
