"""Declared outliers: inputs that are no digit, made in each training minibatch from noise and from
the minibatch's own digits (never from a file or another data set), which the model observes as "no
class" (``bnn_zoo.core.networks.likelihoods.Categorical.no_class``: the outlier-exposure term,
Hendrycks et al. 2019, in the ELBO). The ``outliers`` section of a run's config names each kind's
share of a minibatch (null: that kind off) and the term's weight:

- ``noise``: pixels drawn, each outlier one of four kinds: uniform in 0..1; Gaussian (mean 0.5, sd
  ``NOISE_SD``) clipped to 0..1; Bernoulli (each pixel 0 or 1, even odds); blobs (Bernoulli pixels
  of odds 0.7, blurred by a Gaussian of sd 1 pixel, what falls under 0.75 set to 0: outlier
  exposure's own blobs)
- ``scrambled``: a digit's 4 x 4 grid of patches (7 x 7 pixels on MNIST) in a random order
- ``mixed``: two digits of different classes: their pixelwise maximum (overlaid), their mean, or the
  left half of one beside the right half of the other
- ``cut``: a square crop of a digit, ``CUT`` of its side, centred on a pixel of its ink drawn by
  brightness, blown up to the full image
- ``warped``: a digit through an elastic warp far past reading: a displacement of up to ``WARP`` of
  the half side at each point of a 4 x 4 grid, drawn uniformly, spread bilinearly over the image

Each works on pixels of the minibatch as training reads it, augmented where the run augments (the
normalized images brought back to 0..1 by the run's mean and sd, then normalized again), and draws
from a generator seeded by (seed, epoch) on the CPU, a stream apart from augmentation's; they are
made there and moved to the batch's device in one copy, so a resumed run, every rank of a DDP run
and a GPU run make the same outliers.
``COVERS`` says which of the scoreboard's OOD sets (``bnn_zoo.data.shifted.ood_sets``) each kind
shows in training, made the same way: those are reported apart, as seen in training.

Usage::

    outliers = Outliers.of(OutliersConfig(noise=0.25, mixed=0.25), plan.data, seed=0)  # None where none is on
    xo = outliers(xb, yb, outliers.generator(epoch))   # normalized [M, C, H, W]: M = 64 of 128
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Optional

import torch
import torch.nn.functional as F

from ...core.errors import DataError
from ..config import DataConfig
from ..sets import profile_of
from .pixels import OnPixels, moved

KINDS = ("noise", "scrambled", "mixed", "cut", "warped")
NOISES = ("uniform", "gaussian", "bernoulli", "blobs")  # the noise kind's four, each drawn with even odds
MIXES = ("max", "mean", "halves")  # the mixed kind's three, each drawn with even odds
NOISE_SD = 0.5  # the Gaussian noise's sd before clipping: a sixth of its pixels at 0, a sixth at 1
BLOBS = (0.7, 1.0, 0.75)  # the blobs' odds of a lit pixel, the blur's sd in pixels, the level below which it is dark
GRID = 4  # scrambled: the patches across and down; warped: the points of its displacement grid
CUT = (0.3, 0.5)  # cut: the crop's side, a share of the image's, drawn uniformly
WARP = 1.0  # warped: the largest displacement at a grid point, a share of the image's half side (1: 14 pixels of 28)
# Which of the scoreboard's OOD sets each kind shows in training, made the same way (ood_sets: "noise"
# is uniform pixels, "overlaid" the pixelwise maximum of two digits of different classes)
COVERS = {"noise": ("noise",), "scrambled": (), "mixed": ("overlaid",), "cut": (), "warped": ()}


@dataclass(frozen=True)
class OutliersConfig:
    # Each kind's share of a minibatch: that many outliers of it (at least one) beside the minibatch's
    # examples, made afresh for each minibatch (null: that kind off)
    noise: Optional[float] = None
    scrambled: Optional[float] = None
    mixed: Optional[float] = None
    cut: Optional[float] = None
    warped: Optional[float] = None
    # The term's weight: minus this times the mean log-probability the network gives each class at an
    # outlier (its cross-entropy to the uniform distribution), as many times as the training set has
    # examples (outlier exposure's lambda, 0.5 in its paper)
    weight: float = 0.5

    @property
    def active(self) -> list[str]:
        """The kinds the section turns on, in the order they are made."""
        return [kind for kind in KINDS if getattr(self, kind) is not None]

    def counts(self, batch: int) -> dict[str, int]:
        """How many outliers of each kind a minibatch of ``batch`` examples gets: its share, rounded, at least one."""
        return {kind: max(1, round(getattr(self, kind) * batch)) for kind in self.active}

    def describe(self) -> str:
        """Its kinds, shares and weight in a line: ``noise 0.25, mixed 0.25, weight 0.5``."""
        return ", ".join([f"{kind} {getattr(self, kind)}" for kind in self.active] + [f"weight {self.weight}"])


def problem(section) -> Optional[str]:
    """What is wrong with an ``outliers`` section (an OutliersConfig, or a config node of its keys),
    in one line naming the key, or None."""
    for key in KINDS:
        share = getattr(section, key)
        if share is not None and not 0 < share <= 1:
            return (f"bad value for outliers.{key}: a share of a minibatch, above 0 and at most 1 (null: off), "
                    f"got {share}")
    weight = section.weight
    if not (isinstance(weight, (int, float)) and 0 < weight <= 10):
        return f"bad value for outliers.weight: the term's weight, above 0 and at most 10, got {weight}"
    return None


def covered(section: Optional[OutliersConfig]) -> tuple[str, ...]:
    """The scoreboard's OOD sets a run's outliers show it in training (none without them)."""
    if section is None:
        return ()
    return tuple(name for kind in section.active for name in COVERS[kind])


class Outliers(OnPixels):
    """A callable that makes a minibatch's outliers as ``config`` declares, from its normalized images
    [N, C, H, W] and labels [N] (``OnPixels``: the run's mean and sd, the epoch's generator, a stream
    apart from augmentation's)."""

    stream = 7_919 * 1_000_033

    @classmethod
    def of(cls, config: OutliersConfig, data: DataConfig, seed: int) -> Optional["Outliers"]:
        """The outliers of a run reading ``data`` (MNIST's statistics, or your images' own), None where
        its section turns no kind on."""
        if not config.active:
            return None
        found = profile_of(data)
        if found is not None and len(found.input_shape) != 3:
            raise DataError(f"the outliers section makes images [channels, height, width], and this run's inputs "
                            f"are of shape {list(found.input_shape)}: leave it out")
        return cls.for_data(config, data, seed)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Made on the CPU from ``generator`` and moved to ``x``'s device in one copy: a GPU run's
        outliers are the CPU's."""
        mean, std = self.mean.to(x.dtype), self.std.to(x.dtype)
        pixels = x.cpu() * std + mean
        made = [MAKERS[kind](pixels, y.cpu(), count, generator) for kind, count in self.config.counts(len(x)).items()]
        return moved((torch.cat(made) - mean) / std, x.device)


def _rand(g: torch.Generator, like: torch.Tensor, *shape: int) -> torch.Tensor:
    return torch.rand(shape, generator=g, device=like.device, dtype=like.dtype)


def _picked(pixels: torch.Tensor, count: int, g: torch.Generator) -> torch.Tensor:
    """[count]: digits of the minibatch drawn uniformly, with replacement."""
    return torch.randint(len(pixels), (count,), generator=g, device=pixels.device)


def _drawn_among(options: int, count: int, like: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """[count, 1, 1, 1]: each outlier's choice among ``options``, with even odds."""
    return torch.randint(options, (count, 1, 1, 1), generator=g, device=like.device)


def noise(pixels: torch.Tensor, _labels, count: int, g: torch.Generator) -> torch.Tensor:
    """``count`` images of noise the shape of the minibatch's, each one of ``NOISES``."""
    shape = (count, *pixels.shape[1:])
    uniform = _rand(g, pixels, *shape)
    gaussian = (0.5 + NOISE_SD * torch.randn(shape, generator=g, device=pixels.device, dtype=pixels.dtype)).clamp(0, 1)
    bernoulli = (_rand(g, pixels, *shape) < 0.5).to(pixels.dtype)
    lit, sd, dark = BLOBS
    blobs = _gaussian_blur((_rand(g, pixels, *shape) < lit).to(pixels.dtype), sd)
    blobs = torch.where(blobs < dark, torch.zeros_like(blobs), blobs)
    which = _drawn_among(len(NOISES), count, pixels, g)
    return torch.stack([uniform, gaussian, bernoulli, blobs]).gather(0, which[None].expand(1, *shape))[0]


def _gaussian_blur(x: torch.Tensor, sd: float) -> torch.Tensor:
    """Images [N, C, H, W] blurred by a Gaussian of ``sd`` pixels (truncated at 3 sd), zeros outside."""
    radius = math.ceil(3 * sd)
    at = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
    kernel = torch.exp(-0.5 * (at / sd) ** 2)
    kernel = kernel / kernel.sum()
    n, c, h, w = x.shape
    flat = x.reshape(n * c, 1, h, w)
    flat = F.conv2d(flat, kernel.view(1, 1, 1, -1), padding=(0, radius))
    return F.conv2d(flat, kernel.view(1, 1, -1, 1), padding=(radius, 0)).reshape(n, c, h, w)


def scrambled(pixels: torch.Tensor, _labels, count: int, g: torch.Generator) -> torch.Tensor:
    """``count`` digits of the minibatch, each cut into a ``GRID`` x ``GRID`` grid of patches put back
    in a random order of its own (rows and columns past the grid, where the side is no multiple of
    it, as they were)."""
    digits = pixels[_picked(pixels, count, g)]
    n, c, h, w = digits.shape
    ph, pw = h // GRID, w // GRID
    grid = digits[..., :GRID * ph, :GRID * pw]
    patches = grid.reshape(n, c, GRID, ph, GRID, pw).permute(0, 2, 4, 1, 3, 5).reshape(n, GRID * GRID, c, ph, pw)
    order = _rand(g, pixels, n, GRID * GRID).argsort(1)
    patches = patches.gather(1, order[:, :, None, None, None].expand_as(patches))
    out = digits.clone()
    out[..., :GRID * ph, :GRID * pw] = patches.reshape(n, GRID, GRID, c, ph, pw).permute(0, 3, 1, 4, 2, 5) \
        .reshape(n, c, GRID * ph, GRID * pw)
    return out


def partners(labels: torch.Tensor, first: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """[len(first)]: for each digit ``first``, another of the minibatch drawn uniformly among those of
    a different class (the Gumbel-max trick: no value read on the host; where the whole minibatch is
    of one class, any)."""
    other = labels[None, :] != labels[first][:, None]
    keys = -torch.log(-torch.log(_rand(g, labels.float(), len(first), len(labels)).clamp_min(1e-20)))
    return keys.masked_fill(~other, -math.inf).argmax(1)


def mixed(pixels: torch.Tensor, labels: torch.Tensor, count: int, g: torch.Generator) -> torch.Tensor:
    """``count`` pairs of the minibatch's digits of different classes, each mixed one of ``MIXES`` ways."""
    first = _picked(pixels, count, g)
    a, b = pixels[first], pixels[partners(labels, first, g)]
    left = torch.arange(pixels.shape[-1], device=pixels.device) < pixels.shape[-1] // 2
    options = torch.stack([torch.maximum(a, b), (a + b) / 2, torch.where(left, a, b)])
    which = _drawn_among(len(MIXES), count, pixels, g)
    return options.gather(0, which[None].expand(1, *a.shape))[0]


def cut(pixels: torch.Tensor, _labels, count: int, g: torch.Generator) -> torch.Tensor:
    """``count`` digits of the minibatch, each a square crop of ``CUT`` of its side (bilinear, inside
    the image) about a pixel of its ink drawn with odds by its brightness, blown up to full size."""
    digits = pixels[_picked(pixels, count, g)]
    n, c, h, w = digits.shape
    ink = digits.sum(1).reshape(n, h * w)
    keys = ink.clamp_min(1e-6).log() - torch.log(-torch.log(_rand(g, pixels, n, h * w).clamp_min(1e-20)))
    at = keys.argmax(1)
    size = CUT[0] + (CUT[1] - CUT[0]) * _rand(g, pixels, n)
    # the pixel's centre in affine_grid's coordinates (-1..1), the crop kept between the outer pixels' centres
    col = ((at % w).to(pixels.dtype) + 0.5) / w * 2 - 1
    row = ((at // w).to(pixels.dtype) + 0.5) / h * 2 - 1
    room_across, room_down = (1 - size) * (1 - 1 / w), (1 - size) * (1 - 1 / h)
    col, row = torch.maximum(torch.minimum(col, room_across), -room_across), \
        torch.maximum(torch.minimum(row, room_down), -room_down)
    zero = torch.zeros_like(size)
    theta = torch.stack([torch.stack([size, zero, col], 1), torch.stack([zero, size, row], 1)], 1)
    grid = F.affine_grid(theta, list(digits.shape), align_corners=False)
    return F.grid_sample(digits, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def warped(pixels: torch.Tensor, _labels, count: int, g: torch.Generator, strength: float = WARP) -> torch.Tensor:
    """``count`` digits of the minibatch, each through its own elastic warp: at each point of a
    ``GRID`` x ``GRID`` grid over the image a displacement across and down drawn in [-strength,
    strength] of the half side, spread bilinearly between them; black outside."""
    digits = pixels[_picked(pixels, count, g)]
    n, _, h, w = digits.shape
    coarse = strength * (2 * _rand(g, pixels, n, 2, GRID, GRID) - 1)
    moved = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=True).permute(0, 2, 3, 1)
    eye = torch.eye(2, 3, device=pixels.device, dtype=pixels.dtype).expand(n, 2, 3)
    grid = F.affine_grid(eye, list(digits.shape), align_corners=False) + moved
    return F.grid_sample(digits, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


MAKERS = {"noise": noise, "scrambled": scrambled, "mixed": mixed, "cut": cut, "warped": warped}
