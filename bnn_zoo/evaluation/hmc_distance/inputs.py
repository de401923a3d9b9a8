"""The inputs a reference's HMC predictive is drawn on, and how to draw them again: for a classifier
of 28x28 digits, the test set's first images, an out-of-distribution set (notMNIST) and one of
MNIST-C's corruptions, each described by a small recipe (``spec``) with the SHA-256 of its pixels,
so a reference stores probabilities, not images, and refuses pixels that differ from its own; for a
toy regression, points inside the observed range and beyond it, stored with the reference.

Usage: ``sets = image_sets("mnist", root, test_size=10000, ood="notmnist", ood_size=2000, corruption="fog",
shift_size=2000)``; ``x, y = drawn_again(spec, root)``
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

import torch

from ...core.errors import DataError
from ...data.sets import TOY_FUNCTIONS, TORCHVISION_SETS, load_torchvision, normalize, toy_data, toy_test
from ...data.shifted.corruptions import corrupt
from ...data.shifted.ood_sets import ood_images

BEYOND = 100  # toy inputs on each side of the observed range


@dataclass(frozen=True)
class InputSet:
    """A named set of inputs as the network reads them, their labels or targets where known (None
    for an out-of-distribution set), and the recipe that draws them again."""

    name: str
    x: torch.Tensor
    y: Optional[torch.Tensor]
    spec: dict


def pixels_digest(images: torch.Tensor) -> str:
    return hashlib.sha256(images.contiguous().numpy().tobytes()).hexdigest()


def _pixels(spec: dict, root: Optional[str]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """uint8 images [n, 28, 28] and labels (None for an OOD set) that ``spec`` describes."""
    kind, size, seed = spec["kind"], spec["size"], spec.get("seed", 0)
    if kind == "ood":
        return ood_images(spec["name"], root, size, seed), None
    images, labels = load_torchvision(spec["data"], root, train=False, download=False)
    if kind == "test":
        return images[:size], labels[:size]
    if kind != "corruption":
        raise DataError(f"a reference's set of kind {kind!r} is none this bnn-zoo draws (test, ood, corruption): "
                        "install the bnn-zoo that built it")
    chosen = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:size]
    return corrupt(images[chosen], spec["name"], seed), labels[chosen]


def _image_set(name: str, spec: dict, root: Optional[str]) -> InputSet:
    images, labels = _pixels(spec, root)
    if len(images) < spec["size"]:
        raise DataError(f"the {name} set holds {len(images)} images here, fewer than the {spec['size']} asked for")
    return InputSet(name, normalize(images), labels, {**spec, "digest": pixels_digest(images)})


def image_sets(data: str, root: Optional[str], test_size: int, ood: Optional[str], ood_size: int,
               corruption: Optional[str], shift_size: int, seed: int = 0) -> list[InputSet]:
    """The test set's first ``test_size`` images of ``data`` (mnist, fashion_mnist); the OOD set
    ``ood``'s first ``ood_size``; ``shift_size`` test images drawn by ``seed`` under ``corruption``
    (None leaves a set out)."""
    if data not in TORCHVISION_SETS:
        raise DataError(f"a reference of a classifier is drawn on 28x28 digits ({', '.join(TORCHVISION_SETS)}), "
                        f"not {data}")
    sets = [_image_set("test", {"kind": "test", "data": data, "size": test_size}, root)]
    if ood:
        sets.append(_image_set(ood, {"kind": "ood", "name": ood, "size": ood_size, "seed": seed}, root))
    if corruption:
        spec = {"kind": "corruption", "data": data, "name": corruption, "size": shift_size, "seed": seed}
        sets.append(_image_set(corruption, spec, root))
    return sets


def toy_sets(data: str) -> list[InputSet]:
    """A toy curve's test points over the observed range, and ``BEYOND`` points on each side of it,
    out to half the range's width past its end (no targets there): where the data say less, not
    nothing (out at the plots' range the posterior is its prior's, which no chain mixes over)."""
    if data not in TOY_FUNCTIONS:
        raise DataError(f"a reference of a regression is drawn on a toy curve ({', '.join(TOY_FUNCTIONS)}), not {data}")
    test, seen = toy_test(data), toy_data(data).x
    lo, hi = float(seen.min()), float(seen.max())
    left = torch.linspace(lo - (hi - lo) / 2, lo, BEYOND + 1)[:-1]
    right = torch.linspace(hi, hi + (hi - lo) / 2, BEYOND + 1)[1:]
    return [InputSet("test", test.x, test.y, {"kind": "toy_test", "data": data}),
            InputSet("beyond", torch.cat([left, right]).unsqueeze(-1), None, {"kind": "toy_beyond", "data": data})]


def drawn_again(name: str, spec: dict, root: Optional[str]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The inputs (as the network reads them) and labels of the image set ``spec`` describes,
    refused in one line where this machine's pixels differ from those the reference was drawn on."""
    found = _image_set(name, {k: v for k, v in spec.items() if k != "digest"}, root)
    if found.spec["digest"] != spec["digest"]:
        raise DataError(f"the {name} images found here (data root {root or '$BNN_ZOO_DATA'}) are not the ones the "
                        "reference was drawn on: point --data-root at the data sets it names in its recipe")
    return found.x, found.y
