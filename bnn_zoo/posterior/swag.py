"""SWAG, the stochastic-weight-averaging Gaussian (Maddox et al. 2019): SGD from the twin's weights at
a constant learning rate, its weights gathered at K moments along the way; the posterior is the
Gaussian of their mean (SWA's weights, ``torch.optim.swa_utils``' average), their diagonal variance
and the low-rank covariance of their K deviations from the mean, drawn as
w = mean + sqrt(scale / 2) (sd z1 + D^T z2 / sqrt(K - 1)). MultiSWAG is an ensemble's SWAGs mixed.

The learning rate is kept below where SGD diverges on the loss's sharpest direction
(``bnn_zoo.posterior.sharpness.stable_lr``): a regression's loss at a small noise is steep, and
SWAG's rate, a classifier's, would send it to NaN there.

Usage: ``swag = SWAG.fit(trained.twin, x_train, y_train); probs = swag.predict(x, num_samples=100)``
"""
from __future__ import annotations

import copy
import math

import torch
from torch.optim.swa_utils import AveragedModel

from .base import count, register, state_number, state_tensor
from .sampled_weights import WeightSampler
from .sharpness import stable_lr

LR = 0.01  # SGD's learning rate, where the loss is flat enough (stable_lr)


@register
class SWAG(WeightSampler):
    """A Gaussian over all the twin's weights from the moments of an SGD run's iterates."""

    name, title, fitted = "swag", "SWAG", True

    label_text = "SWAG"

    def __init__(self, twin, mean: torch.Tensor, variance: torch.Tensor, deviations: torch.Tensor, scale: float = 0.5,
                 lr: float = LR):
        super().__init__(twin)
        self.mean, self.variance, self.deviations, self.scale, self.lr = mean, variance, deviations, scale, lr
        rate = f", learning rate {lr:.3g}" if lr != LR else ""  # where the loss's sharpness kept it lower
        self.label = f"{self.label_text} ({len(deviations)} moments{rate})"

    @classmethod
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held=None, y_held=None, epochs: int = 10, lr: float = LR,
            batch_size: int = 128, moments: int = 20, seed: int = 0) -> "SWAG":
        """``epochs`` of SGD (momentum 0.9) from the twin's weights at learning rate ``lr`` (or
        ``stable_lr``'s, where the loss is too steep for it), its iterates gathered ``moments``
        times, evenly; the twin itself is left as it was."""
        if moments < 2:
            raise ValueError(f"SWAG's low-rank covariance needs at least 2 moments, got {moments}")
        lr = stable_lr(twin, x, y, lr)
        walker = copy.deepcopy(twin).train()
        average = AveragedModel(walker.net)  # SWA's running mean of the gathered iterates
        optimizer = torch.optim.SGD(walker.parameters(), lr=lr, momentum=0.9)
        generator = torch.Generator(device=x.device).manual_seed(seed)
        steps = epochs * math.ceil(len(x) / batch_size)
        every, gathered, squares = max(1, steps // moments), [], None
        step = 0
        for _ in range(epochs):
            for idx in torch.randperm(len(x), generator=generator, device=x.device).split(batch_size):
                optimizer.zero_grad(set_to_none=True)
                walker.loss(x[idx], y[idx]).backward()
                optimizer.step()
                step += 1
                if step % every == 0 and len(gathered) < moments:
                    average.update_parameters(walker.net)
                    flat = torch.cat([p.detach().flatten() for p in walker.net.parameters()])
                    gathered.append(flat)
                    squares = flat ** 2 if squares is None else squares + flat ** 2
        mean = torch.cat([p.detach().flatten() for p in average.module.parameters()])
        variance = (squares / len(gathered) - mean ** 2).clamp_min(1e-30)
        deviations = torch.stack(gathered) - mean  # [K, P]: each iterate's deviation from the final mean
        return cls(twin, mean, variance, deviations, lr=lr)

    def draw(self, n: int) -> dict[str, torch.Tensor]:
        k = len(self.deviations)
        z1 = torch.randn(n, len(self.mean), device=self.mean.device)
        z2 = torch.randn(n, k, device=self.mean.device)
        drawn = self.mean + math.sqrt(self.scale / 2) * (self.variance.sqrt() * z1 + z2 @ self.deviations / math.sqrt(k - 1))
        return self.unflat(drawn)

    def point(self) -> dict[str, torch.Tensor]:
        return {name: value[0] for name, value in self.unflat(self.mean[None]).items()}

    def state(self) -> dict:
        return {"mean": self.mean, "variance": self.variance, "deviations": self.deviations, "scale": self.scale,
                "lr": self.lr}

    @classmethod
    def from_state(cls, twin, state: dict) -> "SWAG":
        size = count(twin.net)
        deviations = state_tensor(state, "deviations", (None, size))
        if len(deviations) < 2:
            raise ValueError(f"its 'deviations' hold {len(deviations)} moment(s), not the 2 or more SWAG gathers")
        return cls(twin, state_tensor(state, "mean", (size,)), state_tensor(state, "variance", (size,), least=0),
                   deviations, float(state_number(state, "scale")), float(state_number(state, "lr")))

    @property
    def parameters_stored(self) -> int:
        return self.mean.numel() + self.variance.numel() + self.deviations.numel()
