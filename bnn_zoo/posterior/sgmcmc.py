"""Cyclical stochastic-gradient MCMC (Zhang et al. 2020, "Cyclical Stochastic Gradient MCMC for
Bayesian Deep Learning"): Langevin dynamics (SGLD) on the run's posterior (its prior over the
weights, ``model.prior``, N(0, 1) on each where none is given), started at the twin's weights, its learning rate a cosine restarted each cycle. Each cycle
explores at a high rate without noise, then samples as it cools, the Langevin noise on, keeping the
weights at evenly spaced steps of that stage: samples from several modes, as HMC's are of one.

Its rate is kept below where the steps diverge on the loss's sharpest direction
(``bnn_zoo.posterior.sharpness.stable_lr``: a regression's steep loss); a smaller step changes the
discretization, not the posterior it samples.

Usage: ``chain = CyclicalSGMCMC.fit(trained.twin, x_train, y_train); probs = chain.predict(x)``
"""
from __future__ import annotations

import copy
import itertools
import math
from typing import Optional

import torch
from torch import nn

from ..core.inference.predictive import sample_chunks
from ..core.networks.priors import GaussianPrior
from .base import count, register, state_tensor
from .sampled_weights import WeightSampler
from .sharpness import stable_lr

# fit's defaults: a cycle's length, its minibatches, the samples it keeps and the share it explores
EPOCHS_PER_CYCLE, BATCH_SIZE, SAMPLES_PER_CYCLE, EXPLORE = 2, 128, 3, 0.8


def sampling_steps(num_data: int, epochs_per_cycle: int = EPOCHS_PER_CYCLE, batch_size: int = BATCH_SIZE,
                   explore: float = EXPLORE) -> list[int]:
    """The steps of a cycle (counted from 0) that sample: those after its first ``explore``."""
    length = epochs_per_cycle * math.ceil(num_data / batch_size)
    return list(range(math.ceil(explore * length), length))


@register
class CyclicalSGMCMC(WeightSampler):
    """Weight samples of cyclical SGLD; ``predict`` takes ``num_samples`` evenly spaced ones."""

    name, title, fitted = "sgmcmc", "cyclical SG-MCMC", True
    takes_prior = True

    label_text = "cyclical SG-MCMC"

    def __init__(self, twin, samples: torch.Tensor):
        super().__init__(twin)
        self.samples = samples  # [S, P]
        self.label = f"{self.label_text} ({len(samples)} samples)"

    @classmethod
    def cannot_fit(cls, twin, num_data: int) -> str | None:
        steps = len(sampling_steps(num_data))
        if steps >= SAMPLES_PER_CYCLE:
            return None
        batches = next(k for k in itertools.count(1) if len(sampling_steps(k * BATCH_SIZE)) >= SAMPLES_PER_CYCLE)
        return (f"keeps {SAMPLES_PER_CYCLE} samples from the last {1 - EXPLORE:.0%} of each cycle of "
                f"{EPOCHS_PER_CYCLE} epochs in minibatches of {BATCH_SIZE}, and {num_data} training inputs give it "
                f"{steps} step(s) there: it needs at least {(batches - 1) * BATCH_SIZE + 1} training inputs")

    @classmethod
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held=None, y_held=None, cycles: int = 4,
            epochs_per_cycle: int = EPOCHS_PER_CYCLE, lr: float = 0.1, batch_size: int = BATCH_SIZE,
            samples_per_cycle: int = SAMPLES_PER_CYCLE, explore: float = EXPLORE, prior: Optional[nn.Module] = None,
            seed: int = 0) -> "CyclicalSGMCMC":
        """``cycles`` cycles of ``epochs_per_cycle`` epochs; the step w -= lr_t grad U_t / N (U the
        minibatch's estimate of minus the log joint under ``prior``, a module that maps a weight's
        shape to its prior as ``BayesianNet.prior`` does) with N(0, 2 lr_t / N) noise after the first
        ``explore`` of a cycle, lr_t = lr (cos(pi t / T) + 1) / 2 within the cycle (lr, or
        ``stable_lr``'s where the loss is too steep for it)."""
        n = len(x)
        length = epochs_per_cycle * math.ceil(n / batch_size)
        sampling = sampling_steps(n, epochs_per_cycle, batch_size, explore)
        if len(sampling) < samples_per_cycle:
            raise ValueError(f"each cycle samples over {len(sampling)} steps, fewer than the {samples_per_cycle} samples "
                             "it keeps: lengthen the cycles (more epochs, a smaller batch) or explore less")
        lr = stable_lr(twin, x, y, lr)
        prior = GaussianPrior(1.0).to(x.device) if prior is None else prior
        walker = copy.deepcopy(twin).train()
        params = list(walker.parameters())
        generator = torch.Generator(device=x.device).manual_seed(seed)
        keep = {sampling[round(i * (len(sampling) - 1) / max(samples_per_cycle - 1, 1))] for i in range(samples_per_cycle)}
        samples = []
        for _ in range(cycles):
            t = 0
            for _ in range(epochs_per_cycle):
                for idx in torch.randperm(n, generator=generator, device=x.device).split(batch_size):
                    rate = lr * (math.cos(math.pi * t / length) + 1) / 2
                    loss = walker.loss(x[idx], y[idx]) - sum(prior(p.shape).log_prob(p) for p in params) / n
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
        samples = state_tensor(state, "samples", (None, count(twin.net)))
        if not len(samples):
            raise ValueError("its 'samples' hold none")
        return cls(twin, samples)

    @property
    def parameters_stored(self) -> int:
        return self.samples.numel()
