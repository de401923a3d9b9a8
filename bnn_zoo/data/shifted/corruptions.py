"""MNIST-C's fifteen corruptions (Mu & Gilmer 2019, "MNIST-C: A Robustness Benchmark for Computer
Vision"), written here in torch from the paper's definitions at its severities: digits that stay
readable to a person, a shift a network meets in use. Each is seeded, so a corrupted set is the same
images every time.

Usage: ``rotated = corrupt(images, "rotate", seed=0)  # uint8 [N, 28, 28] in, the same out``
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

CORRUPTIONS = ("shot_noise", "impulse_noise", "glass_blur", "motion_blur", "shear", "scale", "rotate", "brightness",
               "translate", "stripe", "fog", "spatter", "dotted_line", "zigzag", "canny_edges")
SIDE = 28
CENTRE = (SIDE - 1) / 2  # 13.5: the geometric corruptions keep it in place


def corrupt(images: torch.Tensor, name: str, seed: int = 0) -> torch.Tensor:
    """uint8 images [N, 28, 28] (white on black) under corruption ``name``, drawn from ``seed``."""
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose one of {', '.join(CORRUPTIONS)}")
    if images.dtype != torch.uint8 or images.shape[1:] != (SIDE, SIDE):
        raise ValueError(f"expected uint8 images [N, 28, 28], got {images.dtype} {list(images.shape)}")
    g = torch.Generator().manual_seed(seed * len(CORRUPTIONS) + CORRUPTIONS.index(name))
    x = images.double() / 255
    return (_CORRUPTIONS[name](x, g).clamp(0, 1) * 255).round().to(torch.uint8)


def _gaussian(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """scipy.ndimage's gaussian_filter (mode nearest, truncated at 4 sd) over [N, H, W]."""
    radius = int(4 * sigma + 0.5)
    t = torch.arange(-radius, radius + 1, dtype=x.dtype)
    kernel = torch.exp(-0.5 * (t / sigma) ** 2)
    kernel = kernel / kernel.sum()
    y = F.pad(x[:, None], (radius, radius, 0, 0), mode="replicate")
    y = F.conv2d(y, kernel.view(1, 1, 1, -1))
    y = F.pad(y, (0, 0, radius, radius), mode="replicate")
    return F.conv2d(y, kernel.view(1, 1, -1, 1))[:, 0]


def _warp(x: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """Each image resampled (bilinear, black outside) where its 3x3 matrix sends an output pixel's
    (column, row): skimage's warp with an inverse map."""
    r, c = torch.meshgrid(torch.arange(SIDE, dtype=x.dtype), torch.arange(SIDE, dtype=x.dtype), indexing="ij")
    points = torch.stack([c.flatten(), r.flatten(), torch.ones(SIDE * SIDE, dtype=x.dtype)])  # [3, P]
    source = matrices.to(x.dtype) @ points  # [N, 3, P]
    grid = (source[:, :2] / (SIDE - 1) * 2 - 1).transpose(1, 2).reshape(-1, SIDE, SIDE, 2)
    return F.grid_sample(x[:, None], grid, mode="bilinear", padding_mode="zeros", align_corners=True)[:, 0]


def _centred(linear: torch.Tensor) -> torch.Tensor:
    """[N, 2, 2] linear maps as [N, 3, 3] affine ones that keep (13.5, 13.5) in place."""
    n = len(linear)
    out = torch.eye(3, dtype=linear.dtype).repeat(n, 1, 1)
    out[:, :2, :2] = linear
    out[:, :2, 2] = CENTRE * (1 - linear.sum(2))
    return out


def _signs(n: int, g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, (n,), generator=g).double() * 2 - 1


def shot_noise(x, g):
    return torch.poisson(x * 3, generator=g) / 3  # severity 5: 3 photons per unit of ink


def impulse_noise(x, g):
    hit = torch.rand(x.shape, generator=g, dtype=x.dtype) < 0.17  # severity 4: 17% salt and pepper
    salt = torch.rand(x.shape, generator=g, dtype=x.dtype) < 0.5
    return torch.where(hit, salt.to(x.dtype), x)


def glass_blur(x, g):
    """Severity 1: blurred (sd 0.7), pixels swapped with a neighbour up to 1 away, twice, blurred again."""
    y = (_gaussian(x, 0.7) * 255).floor() / 255  # to 8 bits between, as the paper's uint8
    n, delta = len(y), 1
    rows = torch.arange(n)
    for _ in range(2):
        for h in range(SIDE - delta, delta, -1):
            for w in range(SIDE - delta, delta, -1):
                swap = torch.rand(n, generator=g) < 0.5
                dx, dy = (torch.randint(-delta, delta, (2, n), generator=g))
                h2, w2 = h + dy, w + dx
                a, b = y[rows, h, w].clone(), y[rows, h2, w2].clone()
                y[rows, h, w] = torch.where(swap, b, a)
                y[rows, h2, w2] = torch.where(swap, a, b)
    return _gaussian(y, 0.7)


def motion_blur(x, g):
    """ImageMagick's motion blur at severity 1 (radius 10, sd 3): a trailing Gaussian of 21 taps
    along an angle drawn from -45..45 degrees."""
    width, sigma = 21, 3.0
    i = torch.arange(width, dtype=x.dtype)
    weights = torch.exp(-i ** 2 / (2 * sigma ** 2))
    weights = weights / weights.sum()
    angle = torch.deg2rad(torch.rand(len(x), generator=g, dtype=x.dtype) * 90 - 45)
    out = torch.zeros_like(x)
    r, c = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    rows = torch.arange(len(x))[:, None, None]
    for k in range(width):
        dy = torch.ceil(k * torch.sin(angle) - 0.5).long()[:, None, None]
        dx = torch.ceil(k * torch.cos(angle) - 0.5).long()[:, None, None]
        out += weights[k] * x[rows, (r + dy).clamp(0, SIDE - 1), (c + dx).clamp(0, SIDE - 1)]
    return out


def shear(x, g):
    s = 0.4 * _signs(len(x), g)  # severity 2, either way
    linear = torch.zeros(len(x), 2, 2, dtype=x.dtype)
    linear[:, 0, 0], linear[:, 0, 1], linear[:, 1, 1] = 1, -torch.sin(s), torch.cos(s)
    return _warp(x, _centred(linear))


def scale(x, g):
    linear = torch.eye(2, dtype=x.dtype).repeat(len(x), 1, 1) / 0.7  # severity 3: 70% of its size
    return _warp(x, _centred(linear))


def rotate(x, g):
    a = 0.4 * _signs(len(x), g)  # severity 2: 0.4 radians, 23 degrees, either way
    linear = torch.stack([torch.stack([torch.cos(a), -torch.sin(a)], 1), torch.stack([torch.sin(a), torch.cos(a)], 1)], 1)
    return _warp(x, _centred(linear))


def brightness(x, g):
    return x + 0.5  # severity 5: HSV's value of a gray image, raised by 0.5


def translate(x, g):
    n = len(x)
    moves = torch.eye(3, dtype=x.dtype).repeat(n, 1, 1)
    moves[:, 0, 2], moves[:, 1, 2] = 3 * _signs(n, g), 3 * _signs(n, g)  # severity 3: 3 pixels each way
    return _warp(x, moves)


def stripe(x, g):
    y = x.clone()
    y[:, :, :7], y[:, :, 21:] = 1 - x[:, :, :7], 1 - x[:, :, 21:]
    return y


def _plasma(n: int, g: torch.Generator, size: int = 256, decay: float = 1.4) -> torch.Tensor:
    """Diamond-square height maps [n, size, size] in 0..1 (the paper's plasma fractal)."""
    maps = torch.zeros(n, size, size, dtype=torch.float64)
    step, wibble = size, 100.0

    def wibbled(a):
        return a / 4 + wibble * (torch.rand(a.shape, generator=g, dtype=a.dtype) * 2 * wibble - wibble)

    while step >= 2:
        half = step // 2
        corners = maps[:, 0:size:step, 0:size:step]
        square = corners + corners.roll(-1, 1)
        square = square + square.roll(-1, 2)
        maps[:, half:size:step, half:size:step] = wibbled(square)
        centres, corners = maps[:, half:size:step, half:size:step], maps[:, 0:size:step, 0:size:step]
        across = centres + centres.roll(1, 1) + corners + corners.roll(-1, 2)
        maps[:, 0:size:step, half:size:step] = wibbled(across)
        down = centres + centres.roll(1, 2) + corners + corners.roll(-1, 1)
        maps[:, half:size:step, 0:size:step] = wibbled(down)
        step, wibble = half, wibble / decay
    maps -= maps.flatten(1).min(1).values[:, None, None]
    return maps / maps.flatten(1).max(1).values[:, None, None]


def fog(x, g):
    """Severity 5: a plasma fractal of strength 3 over the digit, its ink scaled down to match."""
    top = x.flatten(1).max(1).values[:, None, None]
    patches = torch.cat([_plasma(len(part), g)[:, :SIDE, :SIDE] for part in x.split(256)])
    return (x + 3.0 * patches) * top / (top + 3.0)


def spatter(x, g):
    """Severity 4: blots of mud (gray 63) where a blurred random field runs high."""
    liquid = _gaussian(torch.randn(x.shape, generator=g, dtype=x.dtype) * 0.3 + 0.65, 1.0)
    liquid = torch.where(liquid < 0.65, torch.zeros_like(liquid), liquid)
    mask = _gaussian((liquid > 0.65).to(x.dtype), 1.5)
    mask = torch.where(mask < 0.8, torch.zeros_like(mask), mask)
    return x * (1 - mask) + 63 / 255 * mask


def _line(c0: float, r0: float, c1: float, r1: float) -> torch.Tensor:
    """The paper's anti-aliased line from (c0, r0) to (c1, r1): full where it passes, fading over 2.3 px."""
    if c1 == c0:
        return torch.zeros(SIDE, SIDE, dtype=torch.float64)
    cc = torch.arange(SIDE, dtype=torch.float64)[None, :]
    rr = torch.arange(SIDE, dtype=torch.float64)[:, None]
    slope = (r1 - r0) / (c1 - c0)
    distance = (rr - (slope * (cc - c0) + r0)).abs().clamp(max=2.3 - 1e-10)
    line = (torch.log(1 - distance / 2.3) + 1).clamp(0, 1)
    line[:, :math.floor(c0)] = 0
    line[:, math.ceil(c1):] = 0
    return line


def dotted_line(x, g):
    out = x.clone()
    for k in range(len(x)):
        r0, r1 = torch.randint(0, 27, (2,), generator=g).tolist()
        line = _line(0, r0, 27, r1)
        for start in range(0, 28, 4):  # every other 2-pixel dash is dropped
            line[:, start:start + 2] = 0
        out[k] = x[k] + line
    return out


def zigzag(x, g):
    """A zigzag (teeth 2 long and 2 wide) across the digit, at a slight slant."""
    out = x.clone()
    a = b = 2.0
    c0, c1 = 2, 25
    for k in range(len(x)):
        r0 = int(torch.randint(0, 27, (1,), generator=g))
        r1 = r0 + int(torch.randint(-5, 5, (1,), generator=g))
        theta = math.atan((r1 - r0) / (c1 - c0))
        d = (c1 - c0) / math.cos(theta)
        ends = [(0.0, 0.0)]
        r_i = 0.0
        for i in range(int((d - a) // (2 * a)) + 1):
            r_i = (-1) ** i * b
            ends.append(((2 * i + 1) * a, r_i))
        full = 2 * a * (d // (2 * a))
        if d != full:
            ends.append((d, r_i / (2 * (d - full))))
        points = [(c0 + ci * math.cos(theta) - ri * math.sin(theta), r0 + ci * math.sin(theta) + ri * math.cos(theta))
                  for ci, ri in ends]
        image = x[k]
        for (ca, ra), (cb, rb) in zip(points, points[1:]):
            image = (image + _line(ca, ra, cb, rb)).clamp(0, 1)
        out[k] = image
    return out


def canny_edges(x, g):
    """The digit's edges alone (Canny: blurred by sd 1, Sobel gradients thinned to their ridges, kept
    above 0.2 and, where joined to those, above 0.1)."""
    smooth = _gaussian(x, 1.0)[:, None]
    sobel = torch.tensor([[1.0, 0, -1], [2, 0, -2], [1, 0, -1]], dtype=x.dtype)
    padded = F.pad(smooth, (1, 1, 1, 1), mode="replicate")
    gx = -F.conv2d(padded, sobel.view(1, 1, 3, 3))[:, 0] / 4  # d/dcolumn
    gy = -F.conv2d(padded, sobel.t().reshape(1, 1, 3, 3))[:, 0] / 4  # d/drow
    magnitude = torch.hypot(gx, gy)
    direction = (torch.rad2deg(torch.atan2(gy, gx)) % 180 + 22.5) // 45 % 4  # 0: along rows, 1: diagonal, ...
    padded = F.pad(magnitude, (1, 1, 1, 1))
    steps = {0: (0, 1), 1: (1, 1), 2: (1, 0), 3: (1, -1)}
    ridge = torch.zeros_like(magnitude, dtype=torch.bool)
    for k, (dr, dc) in steps.items():
        ahead = padded[:, 1 + dr:1 + dr + SIDE, 1 + dc:1 + dc + SIDE]
        behind = padded[:, 1 - dr:1 - dr + SIDE, 1 - dc:1 - dc + SIDE]
        ridge |= (direction == k) & (magnitude >= ahead) & (magnitude >= behind)
    ridge[:, [0, -1]] = False
    ridge[:, :, [0, -1]] = False
    strong, weak = ridge & (magnitude >= 0.2), ridge & (magnitude >= 0.1)
    edges = strong
    while True:  # hysteresis: weak edges joined (8 ways) to strong ones
        grown = weak & (F.max_pool2d(edges[:, None].double(), 3, 1, 1)[:, 0] > 0)
        if torch.equal(grown, edges):
            return edges.to(x.dtype)
        edges = grown


_CORRUPTIONS: dict[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = {
    name: globals()[name] for name in CORRUPTIONS}
