"""Declared augmentation: each training minibatch's images moved, scaled, rotated, sheared, their
strokes thickened or thinned, blurred, their ink dimmed, their background raised and noise added, each example its own
draw from the ranges the ``augment`` section of a run's config names (null: that transform off).
Robustness so comes from the posterior, which reads such images itself, not from a reading of the
input at prediction time; validation, test and every figure after training read the images as they are.

The transforms work on pixels (the normalized images brought back to 0..1 by the run's mean and
sd, light ink on a dark background as MNIST's, then normalized again), in this order: the affine map
(one per example, about the image's centre, black outside), the stroke (a grayscale dilation or
erosion by a 3x3 square, blended by the drawn fraction), the blur (a Gaussian of the drawn sd), the
ink (the image times a factor), the background (b + (1 - b) x: the dark parts raised to b, the ink
kept) and the noise (Gaussian, of the drawn sd, each pixel kept in 0..1). Draws come from a generator
seeded by (seed, epoch) on the data's device, so a resumed run and every rank of a DDP run augment
alike. ``COVERS`` says which of MNIST-C's corruptions (``bnn_zoo.data.shifted.corruptions``) each transform
shows in training: the scoreboard reports those apart, as seen in training.

Usage::

    augment = Augment.of(AugmentConfig(translate=0.1, rotate=20.0), plan.data, seed=0)  # None where none is on
    xb = augment(xb, augment.generator(epoch, xb.device))   # normalized [N, C, H, W] in and out
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import List, Optional

import torch
import torch.nn.functional as F

from ...core.errors import DataError
from ..config import DataConfig
from ..sets import MNIST_MEAN, MNIST_STD, profile_of


@dataclass(frozen=True)
class AugmentConfig:
    # Moved by up to this share of the image's side each way, across and down (0.1: 2.8 pixels of 28)
    translate: Optional[float] = None
    # Resized by a factor drawn in [low, high] (0.7: to 70% of its size)
    scale: Optional[List[float]] = None
    # Rotated, and sheared along the rows, by up to this many degrees either way
    rotate: Optional[float] = None
    shear: Optional[float] = None
    # Strokes thickened or thinned by up to this share of a 3x3 dilation or erosion (1: a whole pixel)
    stroke: Optional[float] = None
    # Blurred by a Gaussian whose sd, in pixels, is drawn in [0, blur]
    blur: Optional[float] = None
    # The ink times a factor drawn in [low, high] (dimmed below 1)
    ink: Optional[List[float]] = None
    # The background raised to a level drawn in [0, background] of the ink's full brightness
    background: Optional[float] = None
    # Gaussian noise added to each pixel, its sd drawn in [0, noise] of the ink's full brightness
    noise: Optional[float] = None
    # The share of training examples augmented; the others are read as they are
    p: float = 1.0

    @property
    def active(self) -> list[str]:
        """The transforms the section turns on, in the order they apply."""
        return [f.name for f in fields(self) if f.name != "p" and getattr(self, f.name) is not None]

    def describe(self) -> str:
        """Its transforms and ranges in a line: ``translate 0.1, scale 0.7..1.1, p 0.8``."""
        shown = [f"{key} {'..'.join(map(str, value)) if isinstance(value, (list, tuple)) else value}"
                 for key, value in ((key, getattr(self, key)) for key in self.active)]
        return ", ".join(shown + ([f"p {self.p}"] if self.p != 1 else []))


# What each transform shows in training of MNIST-C's corruptions (the scoreboard's "seen in training")
COVERS = {"translate": ("translate",), "scale": ("scale",), "rotate": ("rotate",), "shear": ("shear",),
          "stroke": (), "blur": ("glass_blur",), "ink": (), "background": ("brightness",), "noise": ("shot_noise",)}


def problem(section) -> Optional[str]:
    """What is wrong with an ``augment`` section (an AugmentConfig, or a config node of its keys), in
    one line naming the key, or None."""
    def get(key: str):
        return getattr(section, key)

    ranges = {"translate": (0, 0.5, "a share of the image's side"), "rotate": (0, 180, "degrees"),
              "shear": (0, 60, "degrees"), "stroke": (0, 1, "a share of a pixel's dilation"),
              "background": (0, 1, "a level of the ink's brightness"), "blur": (0, 3, "a Gaussian's sd in pixels"),
              "noise": (0, 1, "a noise's sd in the ink's brightness")}
    for key, (low, high, unit) in ranges.items():
        value = get(key)
        if value is not None and not low <= value <= high:
            return f"bad value for augment.{key}: {unit}, from {low} to {high} (null: off), got {value}"
    for key, (low, high) in {"scale": (0.1, 4.0), "ink": (0.0, 1.0)}.items():
        value = get(key)
        if value is not None and not (len(value) == 2 and low <= value[0] <= value[1] <= high):
            return (f"bad value for augment.{key}: a range [low, high] with {low} <= low <= high <= {high} "
                    f"(null: off), got {list(value)}")
    if not 0 <= get("p") <= 1:
        return f"bad value for augment.p: the share of examples augmented, from 0 to 1, got {get('p')}"
    return None


def misfit(config: AugmentConfig, data: DataConfig) -> Optional[str]:
    """Why ``config``, turned on, cannot augment what a run on ``data`` reads (its own data's shape
    known: rows, a table, not images), as a clause (``transforms images ...``), or None."""
    found = profile_of(data)
    if not config.active or found is None or len(found.input_shape) == 3:
        return None
    return (f"transforms images [channels, height, width], and this run's inputs are of shape "
            f"{list(found.input_shape)} (rows of {data.name}: a table, not images): leave it out")


def covered(section: Optional[AugmentConfig]) -> tuple[str, ...]:
    """MNIST-C's corruptions a run's augmentation shows in training (none without one)."""
    if section is None:
        return ()
    return tuple(name for key in section.active for name in COVERS[key])


class Augment:
    """A callable that augments normalized images [N, C, H, W] as ``config`` declares; ``mean`` and
    ``std`` (per channel, or one for all) bring them to pixels and back; ``seed`` seeds its draws."""

    def __init__(self, config: AugmentConfig, mean, std, seed: int = 0):
        self.config, self.seed = config, seed
        self.mean = torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    @classmethod
    def of(cls, config: AugmentConfig, data: DataConfig, seed: int) -> Optional["Augment"]:
        """The augmentation of a run reading ``data`` (MNIST's statistics, or your images' own), None
        where its section turns nothing on."""
        if not config.active:
            return None
        if (trouble := misfit(config, data)) is not None:
            raise DataError(f"the augment section {trouble}")
        found = profile_of(data)
        return cls(config, *((MNIST_MEAN, MNIST_STD) if found is None else (found.mean, found.std)), seed)

    def generator(self, epoch: int, device) -> torch.Generator:
        """The draws of epoch ``epoch``: alike wherever (seed, epoch) is."""
        return torch.Generator(device).manual_seed((self.seed * 1_000_003 + epoch) % 2 ** 63)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        c, n = self.config, len(x)
        mean, std = self.mean.to(x.device, x.dtype), self.std.to(x.device, x.dtype)
        pixels = x * std + mean

        def uniform(low: float, high: float) -> torch.Tensor:
            return low + (high - low) * torch.rand(n, generator=generator, device=x.device, dtype=x.dtype)

        out = pixels
        if any(getattr(c, key) is not None for key in ("translate", "scale", "rotate", "shear")):
            out = _affine(out, uniform, c)
        if c.stroke is not None:
            amount = uniform(-c.stroke, c.stroke)[:, None, None, None]
            grown, shrunk = _dilated(out), -_dilated(-out)
            out = out + amount.clamp(min=0) * (grown - out) + (-amount).clamp(min=0) * (shrunk - out)
        if c.blur is not None:
            out = _blurred(out, uniform(0.0, c.blur))
        if c.ink is not None:
            out = out * uniform(*c.ink)[:, None, None, None]
        if c.background is not None:
            level = uniform(0.0, c.background)[:, None, None, None]
            out = level + (1 - level) * out
        if c.noise is not None:
            sd = uniform(0.0, c.noise)[:, None, None, None]
            out = (out + sd * torch.randn(out.shape, generator=generator, device=x.device, dtype=x.dtype)).clamp(0, 1)
        chosen = torch.rand(n, generator=generator, device=x.device) < c.p
        return torch.where(chosen[:, None, None, None], (out - mean) / std, x)  # the others exactly as they came


def _dilated(x: torch.Tensor) -> torch.Tensor:
    """The grayscale dilation of images [N, C, H, W] by a 3x3 square, as a row then a column maximum
    (the same as max_pool2d(x, 3, 1, 1), a tenth of its time on a CPU)."""
    padded = F.pad(x, (1, 1, 1, 1), value=float("-inf"))
    rows = torch.maximum(torch.maximum(padded[..., :, :-2], padded[..., :, 1:-1]), padded[..., :, 2:])
    return torch.maximum(torch.maximum(rows[..., :-2, :], rows[..., 1:-1, :]), rows[..., 2:, :])


def _blurred(x: torch.Tensor, sd: torch.Tensor) -> torch.Tensor:
    """Each image [N, C, H, W] blurred by a Gaussian of its own ``sd`` [N] pixels (0: as it is), a row
    then a column pass, its edges repeated; truncated at 3 sd."""
    n, c, h, w = x.shape
    radius = max(1, math.ceil(3 * float(sd.max())))
    at = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
    kernels = torch.exp(-0.5 * (at / sd.clamp_min(1e-3)[:, None]) ** 2)
    kernels = (kernels / kernels.sum(1, keepdim=True)).repeat_interleave(c, 0)  # [N * C, taps]: one per image's channel
    flat = x.reshape(1, n * c, h, w)
    rows = F.conv2d(F.pad(flat, (radius, radius, 0, 0), mode="replicate"), kernels[:, None, None, :], groups=n * c)
    both = F.conv2d(F.pad(rows, (0, 0, radius, radius), mode="replicate"), kernels[:, None, :, None], groups=n * c)
    return both.reshape(n, c, h, w)


def _affine(pixels: torch.Tensor, uniform, c: AugmentConfig) -> torch.Tensor:
    """Each image through its own affine map about the centre (bilinear, black outside): rotated,
    sheared along the rows, resized, then moved."""
    n = len(pixels)
    zero = torch.zeros(n, device=pixels.device, dtype=pixels.dtype)
    angle = uniform(-c.rotate, c.rotate) * (math.pi / 180) if c.rotate is not None else zero
    shear = torch.tan(uniform(-c.shear, c.shear) * (math.pi / 180)) if c.shear is not None else zero
    size = uniform(*c.scale) if c.scale is not None else zero + 1
    # the map from an output pixel to where it reads the input, in affine_grid's coordinates (-1..1)
    cos, sin = torch.cos(angle), torch.sin(angle)
    forward = torch.stack([torch.stack([cos, cos * shear - sin], 1), torch.stack([sin, sin * shear + cos], 1)], 1)
    forward = forward * size[:, None, None]
    inverse = torch.linalg.inv(forward)
    move = torch.stack([uniform(-c.translate, c.translate), uniform(-c.translate, c.translate)], 1) * 2 \
        if c.translate is not None else torch.zeros(n, 2, device=pixels.device, dtype=pixels.dtype)
    theta = torch.cat([inverse, -(inverse @ move[:, :, None])], 2)  # [N, 2, 3]
    grid = F.affine_grid(theta, list(pixels.shape), align_corners=False)
    return F.grid_sample(pixels, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
