"""Your own data: a folder of labelled images (``data.name=folder``: a subfolder per class, as
torchvision's ImageFolder lays it out), a tensor file (``tensors``: a .pt or .npz holding ``x`` and
``y``, and optionally ``x_test`` and ``y_test``) or a table (``csv``: numeric feature columns and a
target column), read as the zoo's whole tensors. The test set is ``data.test_path``, else
PATH/test beside PATH/train for a folder, else a fixed fifth of the examples.

A classifier's classes are the subfolders' names, the target column's values or the labels 0..K-1.
What a run learns from its training split (input shape, classes, normalization statistics) goes
into its config (``Found``), so the checkpoint answers without the data.

Usage: ``python -m bnn_zoo.train lenet data.name=folder data.path=my_pngs data.image_size=28``
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from omegaconf import DictConfig

from .errors import DataError

OWN_DATA = ("folder", "tensors", "csv")
ROWS = ("tensors", "csv")  # the kinds whose inputs predict reads from a file of rows
TEST_SHARE = 0.2  # the examples held out for the test set when the data has no test part of its own
SPLIT_SEED = 1  # the held-out test examples are the same in every run


@dataclass
class Examples:
    """Inputs as floats (images scaled to 0..1 [N, C, H, W], rows [N, F]) and labels or targets."""
    x: torch.Tensor
    y: torch.Tensor
    classes: Optional[list[str]]  # None: regression targets
    features: Optional[list[str]] = None  # a table's feature columns, in the order the network reads them


def read_own(cfg: DictConfig, categorical: bool) -> tuple[Examples, Examples]:
    """The (training, test) examples ``cfg.data`` names, unnormalized."""
    d = cfg.data
    if not d.path:
        raise DataError(f"data.name={d.name} reads your own data: give its location with data.path=PATH")
    path = Path(d.path).expanduser()
    if d.name == "folder" and not d.test_path and (path / "train").is_dir() and (path / "test").is_dir():
        train = _read(cfg, path / "train", categorical)
        return train, _read(cfg, path / "test", categorical, train.classes)
    train = _read(cfg, path, categorical)
    if d.test_path:
        test = _read(cfg, Path(d.test_path).expanduser(), categorical, train.classes)
        return train, test
    if d.name == "tensors" and test_parts(path):
        return train, _read(cfg, path, categorical, train.classes, "_test")
    order = torch.randperm(len(train.y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    held = max(1, int(TEST_SHARE * len(order)))
    if len(order) - held < 2:
        raise DataError(f"{path} holds {len(order)} examples: too few to hold out a test set; give more")
    part = lambda idx: replace(train, x=train.x[idx], y=train.y[idx])  # noqa: E731
    return part(order[held:]), part(order[:held])


def _read(cfg: DictConfig, path: Path, categorical: bool, classes: Optional[list[str]] = None,
          suffix: str = "") -> Examples:
    """One part's examples; a test part's labels index the training part's ``classes``."""
    if cfg.data.name == "tensors":
        found = read_tensors(cfg, path, categorical, suffix)
        if classes is not None and found.classes is not None:
            if len(found.classes) > len(classes):
                raise DataError(f"{path}: y{suffix} holds label {len(found.classes) - 1}; its training labels are 0..{len(classes) - 1}")
            found.classes = classes
    else:
        found = read_folder(cfg, path) if cfg.data.name == "folder" else read_csv(cfg, path, categorical, classes)
    if len(found.y) == 0:
        raise DataError(f"{path} holds no examples")
    if classes is not None and found.classes != classes:
        raise DataError(f"{path} holds the classes {found.classes}, its training data {classes}: give both the same classes")
    if categorical and len(found.classes) < 2 and classes is None:
        raise DataError(f"{path} holds one class ({found.classes[0]}): a classifier needs examples of two or more")
    if not bool(torch.isfinite(found.x).all()):
        row = int((~torch.isfinite(found.x)).flatten(1).any(1).nonzero()[0])
        raise DataError(f"{path}: example {row} holds NaN or infinite inputs; fill or drop them")
    return found


def read_folder(cfg: DictConfig, path: Path) -> Examples:
    """The images of a class-per-subfolder folder (ImageFolder's layout), as [N, C, H, W] in 0..1."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    if not path.is_dir():
        raise DataError(f"no folder at {path}: data.path names a folder with a subfolder of images per class")
    try:
        classes, index = find_classes(str(path))
        files = make_dataset(str(path), index, IMG_EXTENSIONS)
    except FileNotFoundError as err:  # no class folder, or a class folder without images
        raise DataError(f"{path}: {str(err).splitlines()[0]} (a subfolder of images per class, "
                        f"{'/'.join(IMG_EXTENSIONS)})") from None
    size = cfg.data.image_size and (cfg.data.image_size, cfg.data.image_size)
    images = read_images([Path(f) for f, _ in files], size, cfg.data.channels, path)
    return Examples(images, torch.tensor([label for _, label in files]), classes)


def image_files(folder: Path) -> list[Path]:
    """The image files in a folder and its subfolders, sorted by path."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    if not folder.is_dir():
        raise DataError(f"no folder at {folder}")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMG_EXTENSIONS and p.is_file())
    if not files:
        raise DataError(f"no images ({'/'.join(IMG_EXTENSIONS)}) in {folder}")
    return files


def read_images(files: list[Path], size: Optional[tuple[int, int]], channels: int, where: Path | str) -> torch.Tensor:
    """Image files as floats [N, channels, H, W] in 0..1, each resized to size (height, width; None:
    all must share one size already)."""
    from PIL import Image, UnidentifiedImageError

    mode = {1: "L", 3: "RGB"}[channels]
    images, first = [], None
    for file in files:
        try:
            with Image.open(file) as img:
                img = img.convert(mode)
                if size:
                    img = img.resize((size[1], size[0]), Image.BILINEAR)
                pixels = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())
        except FileNotFoundError:
            raise DataError(f"no image at {file}") from None
        except (UnidentifiedImageError, OSError, ValueError) as err:
            raise DataError(f"cannot read the image {file} ({type(err).__name__}): delete or replace it") from None
        if first is None:
            first = (file, pixels.shape)
        elif pixels.shape != first[1]:
            raise DataError(f"{where} holds images of two sizes ({_size(first[1])} {first[0].name}, {_size(pixels.shape)} "
                            f"{file.name}): resize them all with data.image_size=N")
        images.append(pixels)
    if not images:
        raise DataError(f"no images in {where}")
    stacked = torch.stack(images).float() / 255.0
    return stacked.unsqueeze(1) if channels == 1 else stacked.permute(0, 3, 1, 2)


def _size(shape) -> str:
    return f"{shape[1]}x{shape[0]}"


def test_parts(path: Path) -> bool:
    """Whether a tensor file holds its own test set (x_test and y_test)."""
    return all(key in _tensor_file(path) for key in ("x_test", "y_test"))


def _tensor_file(path: Path) -> dict:
    if not path.is_file():
        raise DataError(f"no file at {path}: data.path names a .pt or .npz file holding x and y")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:  # decodes arrays only, never Python objects
                return {k: torch.from_numpy(arrays[k].copy()) for k in arrays.files}
        stored = torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain values only
    except Exception as err:
        raise DataError(f"cannot read {path} as a .npz of arrays or a .pt of tensors ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:120] if str(err) else ''})") from None
    if not isinstance(stored, dict):
        raise DataError(f"{path} holds a {type(stored).__name__}; save a dict: torch.save({{'x': X, 'y': Y}}, PATH)")
    return stored


def read_tensors(cfg: DictConfig, path: Path, categorical: bool, suffix: str = "") -> Examples:
    """``x`` [N, ...] and ``y`` [N] (or ``x_test``, ``y_test``) of a .pt or .npz file; uint8 inputs are
    images, scaled to 0..1."""
    stored = _tensor_file(path)
    x, y = stored.get("x" + suffix), stored.get("y" + suffix)
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise DataError(f"{path} lacks the tensors x{suffix} and y{suffix} (it holds {', '.join(map(str, stored)) or 'nothing'})")
    if x.dim() < 2 or y.shape != x.shape[:1]:
        raise DataError(f"{path}: x{suffix} {list(x.shape)} and y{suffix} {list(y.shape)} do not pair up; give x as "
                        "[N, features] or [N, C, H, W] and y as [N]")
    x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    if not categorical:
        return Examples(x, y.float(), None)
    if y.is_floating_point() or y.dtype == torch.bool or (len(y) and int(y.min()) < 0):
        raise DataError(f"{path}: a classifier's labels y{suffix} are whole numbers 0..K-1, got {y.dtype} "
                        f"from {y.min().item()}")
    return Examples(x, y.long(), [str(k) for k in range(int(y.max()) + 1)])


def read_csv(cfg: DictConfig, path: Path, categorical: bool, classes: Optional[list[str]] = None) -> Examples:
    """A table with a header row: numeric feature columns and the target column ``data.target``
    (None: the last). A classifier's classes are the target's values, in numeric or text order
    (``classes``: the training table's, which a test table's values must be among)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"cannot read {path} as a CSV table ({type(err).__name__}: {err})") from None
    if len(rows) < 2:
        raise DataError(f"{path} holds no rows under a header: give a header line and one row per example")
    header, rows = rows[0], [r for r in rows[1:] if r]
    target = cfg.data.target if cfg.data.target is not None else header[-1]
    if target not in header:
        raise DataError(f"{path} has no column {target!r} (data.target); its columns: {', '.join(header)}")
    column = header.index(target)
    values, labels = [], []
    for n, row in enumerate(rows, 2):
        if len(row) != len(header):
            raise DataError(f"{path} line {n} holds {len(row)} values under {len(header)} columns")
        labels.append(row[column].strip())
        values.append([_number(v, path, n, header[i]) for i, v in enumerate(row) if i != column])
    x, features = torch.tensor(values, dtype=torch.float32).reshape(len(values), -1), [h for h in header if h != target]
    if not categorical:
        return Examples(x, torch.tensor([_number(v, path, n, target) for n, v in enumerate(labels, 2)]), None, features)
    unknown = sorted(set(labels) - set(classes)) if classes is not None else []
    if unknown:
        raise DataError(f"{path}: column {target!r} holds {unknown[0]!r}, not one of the training classes {classes}")
    classes = classes or sorted(set(labels), key=lambda v: (0, float(v), v) if _is_number(v) else (1, 0.0, v))
    index = {name: i for i, name in enumerate(classes)}
    return Examples(x, torch.tensor([index[v] for v in labels]), classes, features)


def read_rows(cfg: DictConfig, path: Path) -> torch.Tensor:
    """The inputs [N, ...] of a file of a tensors or csv run's kind, unnormalized: a .pt or .npz's
    ``x``, or a CSV's feature columns (by name, in the run's order; the target column may be there)."""
    if cfg.data.name == "tensors":
        x = _tensor_file(path).get("x")
        if not isinstance(x, torch.Tensor):
            raise DataError(f"{path} lacks the tensor x of inputs")
        return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header, *rows = list(csv.reader(f)) or [[]]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"cannot read {path} as a CSV table ({type(err).__name__}: {err})") from None
    missing = [c for c in cfg.data.features if c not in header]
    if missing or not rows:
        raise DataError(f"{path} lacks the column(s) {', '.join(missing)} the run reads" if missing else f"{path} holds no rows")
    where = [header.index(c) for c in cfg.data.features]
    return torch.tensor([[_number(row[i] if i < len(row) else "", path, n, header[i]) for i in where]
                         for n, row in enumerate(rows, 2) if row], dtype=torch.float32)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _number(text: str, path: Path, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path} line {line}, column {column!r}: {text.strip()[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise DataError(f"{path} line {line}, column {column!r} holds {text.strip()}: fill or drop it")
    return value


@dataclass
class Found:
    """What a run learns from its training split, kept in its config (data.input_shape,
    data.classes, data.mean, data.std): normalization per channel of images, per feature of rows."""
    input_shape: list[int]
    classes: Optional[list[str]]
    mean: list[float]
    std: list[float]
    features: Optional[list[str]] = None  # a table's feature columns

    @classmethod
    def of(cls, x: torch.Tensor, classes: Optional[list[str]], features: Optional[list[str]] = None) -> "Found":
        over = [0, 2, 3] if x.dim() == 4 else [0]
        flat = x.flatten(2) if x.dim() == 4 else x.flatten(1)
        mean, std = x.mean(over).flatten(), x.std(over).flatten() if len(x) > 1 else torch.ones(flat.shape[1])
        std = torch.where(std > 0, std, torch.ones_like(std))  # a constant input stays as it is
        return cls(list(x.shape[1:]), classes, mean.tolist(), std.tolist(), features)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs as the network sees them; a DataError where their shape is not the run's."""
        if list(x.shape[1:]) != self.input_shape:
            raise DataError(f"inputs of shape {list(x.shape[1:])} where the run was trained on {self.input_shape}")
        shape = (1, -1, 1, 1) if x.dim() == 4 else (1, *self.input_shape)
        return (x - torch.tensor(self.mean).reshape(shape)) / torch.tensor(self.std).reshape(shape)
