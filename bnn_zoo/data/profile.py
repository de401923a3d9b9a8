"""What a run learns from its own data's training split (``DataProfile``: shape, classes, the
normalization per channel or feature, a regression's target mean and sd, the digest of every example),
and where a regression's noise starts (``least_squares_sd``: the residual sd of a least-squares line).

Usage: ``profile = DataProfile.of(x, y, train, test); x = profile.normalize(rows)``
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

import torch

from ..core.errors import DataError
from .own import Examples, name_problem


@dataclass
class DataProfile:
    """What a run learns from its own data, kept in its config (data.input_shape, data.classes, data.target,
    data.target_stats, data.digest) and beside it (data.features, data.mean, data.std: HELD_BESIDE): a table's
    target column (the one read where data.target was not given); normalization per channel
    of images, per feature of rows, and a regression's target mean and sd, from the training split;
    the digest of every example, so that data changed since (the held-out splits would move with
    it) is refused."""
    input_shape: list[int]
    classes: Optional[list[str]]
    mean: list[float]
    std: list[float]
    features: Optional[list[str]] = None  # a table's feature columns
    digest: Optional[str] = None
    target_stats: Optional[list[float]] = None  # a regression's
    target: Optional[str] = None  # a table's target column

    @classmethod
    def of(cls, x: torch.Tensor, y: torch.Tensor, train: Examples, test: Examples) -> "DataProfile":
        """From ``x`` and ``y``, the training split's inputs and labels or targets, and the examples
        its train and test parts hold."""
        problem = next(filter(None, map(name_problem, [*(train.classes or []), *(train.features or [])])), None)
        if problem is not None:
            raise DataError(problem)
        over = [0, 2, 3] if x.dim() == 4 else [0]
        flat = x.flatten(2) if x.dim() == 4 else x.flatten(1)
        mean, std = x.mean(over).flatten(), x.std(over).flatten() if len(x) > 1 else torch.ones(flat.shape[1])
        std = torch.where(std > 0, std, torch.ones_like(std))  # a constant input stays as it is
        targets = None
        if train.classes is None:  # a regression; a constant target is centred, not stretched
            sd = float(y.double().std()) if len(y) > 1 else 0.0
            targets = [float(y.double().mean()), sd if sd > 0 else 1.0]
        return cls(list(x.shape[1:]), train.classes, mean.tolist(), std.tolist(), train.features,
                   _digest(train, test), targets, train.target)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs as the network sees them; a DataError where their shape is not the run's."""
        if list(x.shape[1:]) != self.input_shape:
            raise DataError(f"inputs of shape {list(x.shape[1:])} where the run was trained on {self.input_shape}"
                            + (" (data.image_size=N resizes images)" if len(self.input_shape) == 3 else ""))
        shape = (1, -1, 1, 1) if x.dim() == 4 else (1, *self.input_shape)
        return (x - torch.tensor(self.mean).reshape(shape)) / torch.tensor(self.std).reshape(shape)


LEAST_SQUARES_ROWS = 100_000  # a line's residual sd is read from at most this many training rows
NOISE_FLOOR = 0.01  # of the targets' sd: where a line fits (almost) exactly


def least_squares_sd(x: torch.Tensor, y: torch.Tensor) -> float:
    """The residual sd a least-squares line through the training split (inputs ``x``, standardized
    targets ``y``) leaves, at least NOISE_FLOOR; 1.0 where there are too few rows to say (no more
    rows than the line's coefficients): a regression's noise sd to start from, in standard units.

    Usage: ``noise = least_squares_sd(splits.train.x, standardized_targets)``
    """
    rows = x[:LEAST_SQUARES_ROWS].flatten(1).double().cpu()  # the CPU's solver takes a rank-deficient line too
    design, target = torch.cat([rows, torch.ones(len(rows), 1, dtype=rows.dtype)], 1), y[:len(rows)].double().cpu()
    spare = len(rows) - design.shape[1]  # degrees of freedom the line leaves
    if spare < 1:
        return 1.0
    residual = target - design @ torch.linalg.lstsq(design, target.unsqueeze(1)).solution.squeeze(1)
    return max(float((residual.pow(2).sum() / spare).sqrt()), NOISE_FLOOR)


def _digest(*parts: Examples) -> str:
    h = hashlib.sha256()
    for part in parts:
        for t in (part.x, part.y):
            h.update(str((t.dtype, tuple(t.shape))).encode())
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:32]
