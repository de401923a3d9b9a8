"""Declared augmentation: each training minibatch's images moved, scaled, rotated, sheared, their
strokes thickened or thinned, blurred, their ink dimmed, their background raised and noise added, each example its own
draw from the ranges the ``augment`` section of a run's config names (null: that transform off).
Robustness so comes from the posterior, which reads such images itself, not from a reading of the
input at prediction time; validation, test and every figure after training read the images as they are.

The transforms work on pixels (the normalized images brought back to 0..1 by the run's mean and
sd, light ink on a dark background as MNIST's, then normalized again), in this order: the affine map
(one per example, about the image's centre, black outside), the stroke (a grayscale dilation or
erosion by a 3x3 square, blended by the drawn fraction), the blur (a Gaussian of the drawn sd,
truncated at 3 sd), the ink (the image times a factor), the background (b + (1 - b) x: the dark
parts raised to b, the ink kept) and the noise (Gaussian, of the drawn sd, each pixel kept in 0..1).
Each transform works on the whole minibatch at once (one sampling grid for the batch), where the
batch is; an image's result is what it would be alone. The draws come from a generator seeded by
(seed, epoch) on the CPU, whatever the data's device, and are moved to the batch's in one copy, so a
resumed run, every rank of a DDP run and a GPU run augment alike. ``COVERS`` says which of MNIST-C's
corruptions (``bnn_zoo.data.shifted.corruptions``) each transform shows in training: the scoreboard
reports those apart, as seen in training.

Usage::

    augment = Augment.of(AugmentConfig(translate=0.1, rotate=20.0), plan.data, seed=0)  # None where none is on
    xb = augment(xb, augment.generator(epoch))   # normalized [N, C, H, W] in and out, on its device
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import List, Optional

import torch
import torch.nn.functional as F

from ...core.errors import DataError
from ..config import DataConfig
from ..sets import profile_of
from .pixels import OnPixels, moved


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


class Augment(OnPixels):
    """A callable that augments normalized images [N, C, H, W] as ``config`` declares (``OnPixels``:
    the run's mean and sd, the epoch's generator)."""

    @classmethod
    def of(cls, config: AugmentConfig, data: DataConfig, seed: int) -> Optional["Augment"]:
        """The augmentation of a run reading ``data`` (MNIST's statistics, or your images' own), None
        where its section turns nothing on."""
        if not config.active:
            return None
        if (trouble := misfit(config, data)) is not None:
            raise DataError(f"the augment section {trouble}")
        return cls.for_data(config, data, seed)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n = len(x)
        drawn, normals = _draws(self.config, x.shape, generator, x.dtype)  # on the CPU
        widths = [value.shape[1:].numel() for value in drawn.values()]
        table = torch.cat([value.reshape(n, width) for value, width in zip(drawn.values(), widths)], 1)
        at = {key: part.reshape(drawn[key].shape)  # on x's device, in one copy
              for key, part in zip(drawn, moved(table, x.device).split(widths, 1))}
        mean, std = self.statistics(x.device, x.dtype)
        out = x * std + mean  # pixels
        if "rows" in at:  # one sampling grid for the batch: F.affine_grid's, by broadcasting (_grid_terms)
            out = F.grid_sample(out, (at["rows"] + at["cols"]).permute(0, 2, 3, 1), mode="bilinear",
                                padding_mode="zeros", align_corners=False)
        if "stroke" in at:  # toward the dilation (sign 1) or the erosion, -dilation(-x) (sign -1)
            out = torch.lerp(out, at["sign"] * _dilated(at["sign"] * out), at["stroke"])
        if "blur" in at:
            out = _blurred(out, at["blur"].view(n), int(_reach(drawn["blur"]).max()))
        if normals is None:  # ink and background, then normalized again: one product and one sum
            out = out * (at["gain"] / std) + (at["offset"] - mean) / std
        else:
            out = (out * at["gain"] + at["offset"] + at["noise"] * moved(normals, x.device)).clamp(0, 1)
            out = (out - mean) / std
        return torch.where(at["chosen"] > 0, out, x)  # the others exactly as they came


def _draws(c: AugmentConfig, shape, generator: torch.Generator, dtype) -> tuple[dict, Optional[torch.Tensor]]:
    """A minibatch's draws on the CPU, each example its own, each transform's for the whole minibatch
    in turn: uniform draws for the affine map's angle, shear, size, move across and down, the stroke's
    share, the blur's sd, the ink's factor, the background's level and the noise's sd (each where on),
    then the noise's normals [N, C, H, W] and whether each example is augmented. Returned as the
    transforms read them, each [N, ...]: the grid's two terms, the stroke's sign and share, the blur's
    sd, the ink and background as a gain and offset of the pixels, the noise's sd, chosen (1 or 0);
    and the normals (None without noise)."""
    n, _, h, w = shape
    spans = {key: span for key, span in (
        ("angle", _either(c.rotate)), ("shear", _either(c.shear)), ("size", c.scale),
        ("across", _either(c.translate)), ("down", _either(c.translate)), ("stroke", _either(c.stroke)),
        ("blur", _upto(c.blur)), ("ink", c.ink), ("background", _upto(c.background)), ("noise", _upto(c.noise)))
        if span is not None}
    low, high = (torch.tensor([span[i] for span in spans.values()], dtype=dtype)[:, None] for i in (0, 1))
    u = dict(zip(spans, low + (high - low) * torch.rand(len(spans), n, generator=generator, dtype=dtype)))
    normals = torch.randn(tuple(shape), generator=generator, dtype=dtype) if c.noise is not None else None
    chosen = torch.rand(n, generator=generator) < c.p
    drawn = {}
    if {"angle", "shear", "size", "across"} & set(u):
        drawn["rows"], drawn["cols"] = _grid_terms(_inverse_map(u, n, dtype), h, w)
    if "stroke" in u:
        drawn["sign"], drawn["stroke"] = torch.where(u["stroke"] < 0, -1.0, 1.0).to(dtype), u["stroke"].abs()
    if "blur" in u:
        drawn["blur"] = u["blur"]
    level = u.get("background", torch.zeros(n, dtype=dtype))
    drawn["gain"], drawn["offset"] = u.get("ink", torch.ones(n, dtype=dtype)) * (1 - level), level  # b + (1 - b) k x
    if "noise" in u:
        drawn["noise"] = u["noise"]
    drawn["chosen"] = chosen.to(dtype)
    return {key: value.view(n, 1, 1, 1) if value.dim() == 1 else value for key, value in drawn.items()}, normals


def _either(bound: Optional[float]) -> Optional[tuple[float, float]]:
    """The range up to ``bound`` either way (None: off)."""
    return None if bound is None else (-bound, bound)


def _upto(bound: Optional[float]) -> Optional[tuple[float, float]]:
    """The range from 0 up to ``bound`` (None: off)."""
    return None if bound is None else (0.0, bound)


def _inverse_map(u: dict, n: int, dtype) -> torch.Tensor:
    """Each example's affine map about the centre from its draws ``u`` (rotated, sheared along the
    rows, resized, then moved by a share of the side; each left out where off), as the map ``theta``
    [N, 2, 3] from an output pixel to where it reads the input, in affine_grid's coordinates (-1..1):
    the inverse of size x rotation x shear, [[1, -s], [0, 1]] [[cos, sin], [-sin, cos]] / size."""
    zero = torch.zeros(n, dtype=dtype)
    angle, shear = u.get("angle", zero) * (math.pi / 180), torch.tan(u.get("shear", zero) * (math.pi / 180))
    cos, sin, size = torch.cos(angle), torch.sin(angle), u.get("size", zero + 1)
    a, b, c, d = (cos + shear * sin) / size, (sin - shear * cos) / size, -sin / size, cos / size
    across, down = u.get("across", zero) * 2, u.get("down", zero) * 2
    return torch.stack([torch.stack([a, b, -(a * across + b * down)], 1),
                        torch.stack([c, d, -(c * across + d * down)], 1)], 1)


def _grid_terms(theta: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``F.affine_grid(theta, [N, C, h, w], align_corners=False)`` as two terms whose sum, rows
    [N, 2, h, 1] + columns [N, 2, 1, w] permuted to [N, h, w, 2], is that grid to float rounding: each
    output pixel's centre (x, y) in -1..1 through each image's ``theta`` [N, 2, 3]. F.affine_grid's
    matrix product per image takes eight times as long on a CPU thread, and may run in TF32 on a GPU."""
    across = (torch.arange(w, dtype=theta.dtype) * 2 + 1) / w - 1
    down = (torch.arange(h, dtype=theta.dtype) * 2 + 1) / h - 1
    rows = theta[:, :, 1, None, None] * down[:, None] + theta[:, :, 2, None, None]
    return rows, theta[:, :, 0, None, None] * across


def _dilated(x: torch.Tensor) -> torch.Tensor:
    """The grayscale dilation of images [N, C, H, W] by a 3x3 square, as a row then a column maximum
    (the same as max_pool2d(x, 3, 1, 1), a tenth of its time on a CPU)."""
    padded = F.pad(x, (1, 1, 1, 1), value=float("-inf"))
    rows = torch.maximum(torch.maximum(padded[..., :, :-2], padded[..., :, 1:-1]), padded[..., :, 2:])
    return torch.maximum(torch.maximum(rows[..., :-2, :], rows[..., 1:-1, :]), rows[..., 2:, :])


def _reach(sd: torch.Tensor) -> torch.Tensor:
    """How many pixels a Gaussian blur of each ``sd`` reaches either way: 3 sd up, at least one."""
    return (3 * sd).ceil().clamp_min(1)


def _blurred(x: torch.Tensor, sd: torch.Tensor, reach: int) -> torch.Tensor:
    """Each image [N, C, H, W] blurred by a Gaussian of its own ``sd`` [N] pixels (0: as it is), a row
    then a column pass, its edges repeated; each truncated at its own 3 sd (``_reach``), ``reach`` the
    batch's widest."""
    n, c, h, w = x.shape
    at = torch.arange(-reach, reach + 1, device=x.device, dtype=x.dtype)
    kernels = torch.exp(-0.5 * (at / sd.clamp_min(1e-3)[:, None]) ** 2)
    kernels = kernels * (at.abs() <= _reach(sd)[:, None])  # its own taps, as alone
    kernels = (kernels / kernels.sum(1, keepdim=True)).repeat_interleave(c, 0)  # [N * C, taps]: one per image's channel
    flat = x.reshape(1, n * c, h, w)
    rows = F.conv2d(F.pad(flat, (reach, reach, 0, 0), mode="replicate"), kernels[:, None, None, :], groups=n * c)
    both = F.conv2d(F.pad(rows, (0, 0, reach, reach), mode="replicate"), kernels[:, None, :, None], groups=n * c)
    return both.reshape(n, c, h, w)
