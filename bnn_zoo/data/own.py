"""Your own data: a folder of labelled images (``data.name=folder``: a subfolder per class, as
torchvision's ImageFolder lays it out), a tensor file (``tensors``: a .pt or .npz holding ``x`` and
``y``, and optionally ``x_test`` and ``y_test``) or a table (``csv``: numeric feature columns and a
target column), read as the zoo's whole tensors. The test set is ``data.test_path``, else
PATH/test beside PATH/train for a folder, else a fixed fifth of the examples.

A classifier's classes are the subfolders' names, the target column's values or the labels 0..K-1.
What a run learns from its training split (input shape, classes, normalization statistics) goes
into its config (``bnn_zoo.data.profile.DataProfile``), so the checkpoint answers without the data.

Usage: ``python -m bnn_zoo.train lenet data.name=folder data.path=my_pngs data.image_size=28``
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Optional

import numpy as np
import torch

from ..core.errors import DataError
from .config import DataConfig
from .csv_tables import PICKLE, TEXT, ZIP, file_kind, is_number, read_csv, table_columns
from .folders import class_files
from .images import decode

OWN_DATA = ("folder", "tensors", "csv")
ROWS = ("tensors", "csv")  # the kinds whose inputs predict reads from a file of rows
TEST_SHARE = 0.2  # the examples held out for the test set when the data has no test part of its own
SPLIT_SEED = 1  # the held-out test examples are the same in every run
# A classifier's classes of rows: at most MAX_CLASSES. A target whose values are more than
# MANY_CLASSES and more than DISTINCT_SHARE of its rows, or are not whole numbers and either, is a
# regression's (a price, a feature taken for the target), refused before it builds a class for each.
MAX_CLASSES = 1000
MANY_CLASSES = 50
DISTINCT_SHARE = 0.5


@dataclass
class Examples:
    """Inputs as floats (images scaled to 0..1 [N, C, H, W], rows [N, F]) and labels or targets."""
    x: torch.Tensor
    y: torch.Tensor
    classes: Optional[list[str]]  # None: regression targets
    features: Optional[list[str]] = None  # a table's feature columns, in the order the network reads them
    target: Optional[str] = None  # a table's target column


def read_own(data: DataConfig, categorical: bool) -> tuple[Examples, Examples]:
    """The (training, test) examples the data section names, unnormalized; the test examples in a
    fixed random order (a --test-size takes a sample of every class, not the first class)."""
    d = data
    path = Path(d.path).expanduser()
    if d.name == "folder" and not d.test_path and (path / "train").is_dir():
        if not (path / "test").is_dir():
            raise DataError(f"{path} holds train/ but no test/: add test/ with the same class folders, or give "
                            f"data.path={path / 'train'} (a fifth of it is then held out for testing)")
        train = _read(data, path / "train", categorical)
        return train, _shuffled(_read(data, path / "test", categorical, train))
    stored = _tensor_file(path) if d.name == "tensors" else None  # read once, for both its parts
    train = _read(data, path, categorical, stored=stored)
    if d.test_path:
        return train, _shuffled(_read(data, Path(d.test_path).expanduser(), categorical, train))
    if stored is not None and all(key in stored for key in ("x_test", "y_test")):  # its own test set
        return train, _shuffled(_read(data, path, categorical, train, "_test", stored))
    order = torch.randperm(len(train.y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    held = max(1, int(TEST_SHARE * len(order)))
    if len(order) - held < 2:
        raise DataError(f"{path} holds {len(order)} examples: too few to hold out a test set; give more")
    part = lambda idx: replace(train, x=train.x[idx], y=train.y[idx])  # noqa: E731
    return part(order[held:]), part(order[:held])


def _shuffled(examples: Examples) -> Examples:
    order = torch.randperm(len(examples.y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    return replace(examples, x=examples.x[order], y=examples.y[order])


def _read(data: DataConfig, path: Path, categorical: bool, train: Optional[Examples] = None,
          suffix: str = "", stored: Optional[dict] = None) -> Examples:
    """One part's examples; a test part's labels index the ``train`` part's classes, and a test
    table's columns are read by the training table's names. ``stored``: a tensor file already read."""
    classes = train.classes if train is not None else None
    if data.name == "tensors":
        found = read_tensors(path, stored if stored is not None else _tensor_file(path), categorical, suffix)
        if classes is not None and found.classes is not None:
            if len(found.classes) > len(classes):
                raise DataError(f"{path}: y{suffix} holds label {len(found.classes) - 1}; its training labels are 0..{len(classes) - 1}")
            found.classes = classes
    elif data.name == "folder":
        found = read_folder(data, path)
    else:
        target = data.target if train is None else train.target  # a test table's is the training table's
        table = read_csv(path, target, categorical, classes, train.features if train is not None else None)
        found = Examples(table.x, table.y, table.classes, table.features, table.target)
    if classes is not None and found.classes != classes:
        raise DataError(f"{path} holds the classes {found.classes}, its training data {classes}: give both the same classes")
    if categorical and classes is None:
        _check_classes(data, path, found)
    part = " of the test part" if suffix else ""  # a tensor file's x_test and y_test
    if not bool(torch.isfinite(found.x).all()):
        row = int((~torch.isfinite(found.x)).flatten(1).any(1).nonzero()[0])
        raise DataError(f"{path}: example {row}{part} holds NaN or infinite inputs; fill or drop them")
    if found.classes is None and not bool(torch.isfinite(found.y).all()):
        row = int((~torch.isfinite(found.y)).nonzero()[0])
        raise DataError(f"{path}: example {row}{part} holds a NaN or infinite target; fill or drop it")
    return found


def _check_classes(data: DataConfig, path: Path, found: Examples) -> None:
    """A classifier's training classes: two or more; of rows, at most MAX_CLASSES and not a
    regression's target (many distinct values, or fractional ones)."""
    if len(found.classes) < 2:
        raise DataError(f"{path} holds one class ({found.classes[0]!r}): a classifier needs examples of two or more")
    distinct, rows = len(torch.unique(found.y)), len(found.y)
    fractional = all(map(is_number, found.classes)) and any(not float(c).is_integer() for c in found.classes)
    many, spread = distinct > MANY_CLASSES, distinct > DISTINCT_SHARE * rows
    if data.name in ROWS and (distinct > MAX_CLASSES or many and spread or fractional and (many or spread)):
        what, other = (f"column {found.target!r}", ", or is another column the target (data.target=NAME)") \
            if data.name == "csv" else ("y", "")
        values = "numbers, not all whole," if fractional else "values"
        why = f"more than the {MAX_CLASSES} classes a classifier may have" if distinct > MAX_CLASSES else \
            "too many for a classifier's classes"
        raise DataError(f"{path}: {what} holds {distinct} distinct {values} among {rows} rows: {why}. Was a regression "
                        f"meant (python -m bnn_zoo.train table_regression data.path=PATH){other}?")


def read_folder(data: DataConfig, path: Path) -> Examples:
    """The images of a class-per-subfolder folder (ImageFolder's layout), as [N, C, H, W] in 0..1."""
    classes, files = class_files(path)
    size = data.image_size and (data.image_size, data.image_size)
    images = read_images([f for f, _ in files], size, data.channels, path)
    return Examples(images, torch.tensor([label for _, label in files]), classes)


def read_images(files: list[Path], size: Optional[tuple[int, int]], channels: int, where: Path | str,
                skip_unreadable: bool = False) -> torch.Tensor:
    """Image files as floats [N, channels, H, W] in 0..1, each read by ``pixels_of`` (None: all
    must share one size already); ``skip_unreadable`` leaves out the files that are no image."""
    images, first, bad = [], None, []
    for file in files:
        try:
            pixels = pixels_of(file, size, channels)
        except ValueError as err:  # a missing file too (a broken link), a format not read, a bomb
            bad.append((file, str(err)))
            continue
        if first is None:
            first = (file, pixels.shape)
        elif pixels.shape != first[1]:
            raise DataError(f"{where} holds images of two sizes ({_size(first[1])} {first[0].name}, {_size(pixels.shape)} "
                            f"{file.name}): resize them all with data.image_size=N")
        images.append(pixels)
    if bad and not skip_unreadable:
        file, why = bad[0]
        if len(bad) == 1:
            raise DataError(f"no image at {file}" if why == "no such file" else
                            f"cannot read the image {file} ({why}): delete or replace it")
        raise DataError(f"cannot read {len(bad)} images in {where}, the first {file} ({why}): delete or replace them")
    if not images:
        raise DataError(f"no images in {where}")
    stacked = torch.stack(images).float() / 255.0
    return stacked.unsqueeze(1) if channels == 1 else stacked.permute(0, 3, 1, 2)


def pixels_of(file: Path | BinaryIO, size: Optional[tuple[int, int]], channels: int) -> torch.Tensor:
    """One image file (a path, or a binary file object: an upload) as uint8 [H, W] (gray) or [H, W,
    3], decoded by ``bnn_zoo.data.images.decode`` and resized to ``size`` (height, width) with Pillow's
    bilinear filter; ValueError with the reason where it is no image bnn-zoo reads."""
    values = decode(file, channels).round().clamp(0, 255).to(torch.uint8)
    pixels = values[0] if channels == 1 else values.permute(1, 2, 0)
    return resized(pixels, size) if size else pixels


def resized(pixels: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """uint8 pixels [H, W] or [H, W, 3] resized to ``size`` (height, width) with Pillow's bilinear
    filter (an image of that size already is given back as it is)."""
    from PIL import Image

    small = Image.fromarray(pixels.contiguous().numpy()).resize((size[1], size[0]), Image.BILINEAR)
    return torch.from_numpy(np.asarray(small, dtype=np.uint8).copy())


def _size(shape) -> str:
    return f"{shape[1]}x{shape[0]}"


def _tensor_file(path: Path) -> dict:
    """The content of a .pt or .npz file, each told by its first bytes (a zip of .npy files: a .npz)."""
    if not path.is_file():
        raise DataError(f"no file at {path}: data.path names a .pt or .npz file holding x and y")
    kind = file_kind(path)
    if kind == TEXT:
        raise DataError(f"{path} is text, a CSV table perhaps, not a tensor file (.pt or .npz): data.name=tensors "
                        "reads tensor files, data.name=csv tables")
    if kind not in (ZIP, PICKLE):
        raise DataError(f"{path} is {kind}, neither a .pt (a zip archive or pickle) nor a .npz (a zip archive): "
                        "save x and y with torch.save or numpy.savez")
    try:
        if kind == ZIP and _npz(path):
            with np.load(path, allow_pickle=False) as arrays:  # decodes arrays only, never Python objects
                return {k: torch.from_numpy(arrays[k].copy()) for k in arrays.files if arrays[k].dtype.kind in "biuf"}
        stored = torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain values only
    except Exception as err:
        raise DataError(f"cannot read {path} as a .npz of arrays or a .pt of tensors ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:120] if str(err) else ''})") from None
    if not isinstance(stored, dict):
        raise DataError(f"{path} holds a {type(stored).__name__}; save a dict: torch.save({{'x': X, 'y': Y}}, PATH)")
    return stored


def holds_rows(path: str | Path) -> bool:
    """Whether the tensors file ``path`` (a .pt or .npz) holds rows, x of [N, features]: a table, not
    images; False where it cannot be read (reading the run's data says why)."""
    try:
        x = _tensor_file(Path(path).expanduser()).get("x")
    except (DataError, OSError):
        return False
    return isinstance(x, torch.Tensor) and x.dim() == 2


def _npz(path: Path) -> bool:
    with zipfile.ZipFile(path) as archive:  # torch.save's zip holds data.pkl, numpy.savez's .npy files
        return all(name.endswith(".npy") for name in archive.namelist())


def read_tensors(path: Path, stored: dict, categorical: bool, suffix: str = "") -> Examples:
    """``x`` [N, ...] and ``y`` [N] (or ``x_test``, ``y_test``) of a .pt or .npz file (``stored``, its
    content, read from ``path``); uint8 images [N, H, W] or [N, C, H, W] are scaled to 0..1, rows
    [N, F] are the numbers they are."""
    x, y = stored.get("x" + suffix), stored.get("y" + suffix)
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise DataError(f"{path} lacks the tensors x{suffix} and y{suffix} (it holds {', '.join(map(str, stored)) or 'nothing'})")
    if x.dim() < 2 or y.shape != x.shape[:1] or not len(y):
        raise DataError(f"{path}: x{suffix} {list(x.shape)} and y{suffix} {list(y.shape)} do not pair up; give x as "
                        "[N, features] or [N, C, H, W] and y as [N], N > 0")
    x = _inputs(x, images=x.dim() > 2)
    if not categorical:
        return Examples(x, y.float(), None)
    if y.is_floating_point() or y.dtype == torch.bool or int(y.min()) < 0:
        raise DataError(f"{path}: a classifier's labels y{suffix} are whole numbers 0..K-1, got {y.dtype} "
                        f"from {y.min().item()}")
    if int(y.max()) >= MAX_CLASSES:  # before a name for each of its classes
        raise DataError(f"{path}: y{suffix} holds the label {int(y.max())}, where a classifier's labels are 0..K-1, "
                        f"K at most {MAX_CLASSES}: was a regression meant? python -m bnn_zoo.train table_regression "
                        "data.name=tensors data.path=PATH regresses")
    return Examples(x, y.long(), [str(k) for k in range(int(y.max()) + 1)])


def _inputs(x: torch.Tensor, images: bool) -> torch.Tensor:
    """A tensor file's inputs as floats: uint8 ``images`` scaled to 0..1, gray [N, H, W] given a
    channel and channels-last [N, H, W, 1 or 3] turned channels-first; any other as the numbers
    they are, whatever their dtype (rows of uint8 are numbers, not pixels)."""
    if x.dtype != torch.uint8 or not images:
        return x.float()
    if x.dim() == 3:
        x = x.unsqueeze(1)
    elif x.dim() == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.permute(0, 3, 1, 2)
    return x.float() / 255.0


def read_rows(data: DataConfig, path: Path) -> torch.Tensor:
    """The inputs [N, ...] of a file of a tensors or csv run's kind, unnormalized: a .pt or .npz's
    ``x``, or a CSV's feature columns (by name, in the run's order; the target column may be there)."""
    if data.name == "tensors":
        x = _tensor_file(path).get("x")
        if not isinstance(x, torch.Tensor):
            raise DataError(f"{path} lacks the tensor x of inputs")
        return _inputs(x, images=len(data.input_shape) == 3)  # as the run read its training inputs
    return table_columns(path, list(data.features))


def name_problem(name: str) -> Optional[str]:
    """Why a class or column name cannot be used, None where it can: it must hold no '${' (the
    config would read it as an interpolation) and only printable characters (a line break, a
    carriage return or an escape sequence would rewrite the terminal that prints it)."""
    if "${" in name:
        return f"the class or column name {name!r} holds '${{': rename it"
    odd = next((c for c in name if not c.isprintable()), None)
    if odd is not None:
        return f"the class or column name {name!r} holds {odd!r}, a character that is not printable: rename it"
    return None
