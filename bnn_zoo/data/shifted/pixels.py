"""What augmentation and outliers share: a run's normalized images brought to pixels (0..1, by the
run's mean and sd) and back, draws seeded by (seed, epoch) on the CPU whatever the data's device, and
one copy of them to the batch's device, so a resumed run, every rank of a DDP run and a GPU run draw
alike.

Usage::

    class Made(OnPixels):             # a section's maker: Made.for_data(config, data, seed) builds it for a run
        def __call__(self, x, generator): ...
"""
from __future__ import annotations

import torch

from ..config import DataConfig
from ..sets import MNIST_MEAN, MNIST_STD, profile_of


class OnPixels:
    """Works on normalized images [N, C, H, W] as pixels: ``mean`` and ``std`` (per channel, or one
    for all) bring them to pixels and back; ``seed`` seeds its draws, ``stream`` keeps them apart from
    another maker's of the same seed."""

    stream = 0

    def __init__(self, config, mean, std, seed: int = 0):
        self.config, self.seed = config, seed
        self.mean = torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    @classmethod
    def for_data(cls, config, data: DataConfig, seed: int) -> "OnPixels":
        """Built with the statistics of a run reading ``data``: MNIST's, or your images' own."""
        found = profile_of(data)
        return cls(config, *((MNIST_MEAN, MNIST_STD) if found is None else (found.mean, found.std)), seed)

    def generator(self, epoch: int) -> torch.Generator:
        """The draws of epoch ``epoch``, on the CPU whatever the data's device: alike wherever (seed, epoch) is."""
        return torch.Generator().manual_seed((self.seed * 1_000_003 + epoch + self.stream) % 2 ** 63)

    def statistics(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and sd [1, C, 1, 1] on ``device``, of ``dtype``."""
        return tuple(moved(value, torch.device(device)).to(dtype) for value in (self.mean, self.std))


def moved(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``value``, on the CPU, on ``device`` without waiting there: to a GPU from pinned memory (the
    caching host allocator's, kept until the copy is done), in the stream's order."""
    if device.type == "cuda":
        value = value.pin_memory()
    return value.to(device, non_blocking=True)

