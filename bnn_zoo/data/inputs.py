"""Inputs as a run's network reads them: uint8 28x28 pixels (the OOD sets, the page's drawings)
and image files, normalized with MNIST's statistics or, for a run on your own data, its own; and
what its classes are called.

Each function takes the run's typed data section (``trained.data``, a plan's ``data``), which holds
its statistics beside its config (``HELD_BESIDE``); ``class_names`` takes the config's as well.

Usage: ``x = image_inputs(data, [Path("new.png")], "new.png"); names = class_names(data)``;
``x, resized_from = image_input(data, Path("new.png"))  # its own [H, W] where it was resized``
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..core.errors import DataError
from .config import DataConfig
from .own import read_images
from .sets import CLASS_NAMES, MNIST_MEAN, MNIST_STD, normalize, profile_of


def class_names(data: DataConfig) -> list[str]:
    """What each class of a classifier run is called: its data's names, or its class numbers."""
    d = data
    return list(d.classes) if d.classes is not None else CLASS_NAMES.get(d.name, [str(k) for k in range(10)])


def pixel_inputs(data: DataConfig, images: torch.Tensor) -> torch.Tensor:
    """uint8 28x28 images [N, 28, 28] (MNIST's format: the OOD sets, the page's drawings) as a
    run's network sees them; a DataError where the run takes other inputs."""
    found = profile_of(data)
    return normalize(images) if found is None else found.normalize(images.float().unsqueeze(1) / 255.0)


def image_inputs(data: DataConfig, files: list[Path], where: str) -> torch.Tensor:
    """Image files (a folder run's kind) read at the run's size and channels, normalized with its
    statistics (a MNIST run: 28x28 gray, MNIST's)."""
    found = profile_of(data)
    if found is None:
        return (read_images(files, (28, 28), 1, where) - MNIST_MEAN) / MNIST_STD
    if len(found.input_shape) != 3 or found.input_shape[0] not in (1, 3):
        raise DataError(f"this run reads inputs of shape {found.input_shape}, not gray or RGB images: give it files of them")
    channels, height, width = found.input_shape
    return found.normalize(read_images(files, (height, width), channels, where))


def image_input(data: DataConfig, file: Path) -> tuple[torch.Tensor, list[int] | None]:
    """One image file as a run on your own images reads it (``image_inputs``), and the size [height,
    width] it had where that is not the run's, so it was resized (None where it was not)."""
    found = profile_of(data)
    own = read_images([file], None, found.input_shape[0], str(file))  # at its own size
    if list(own.shape[1:]) == list(found.input_shape):
        return found.normalize(own), None
    return image_inputs(data, [file], str(file)), list(own.shape[2:])
