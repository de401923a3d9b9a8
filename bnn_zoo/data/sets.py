"""Data sets as whole tensors: MNIST/FashionMNIST (torchvision), toy curves,
and your own folder, tensor file or table (``bnn_zoo.data.own``).

Usage: ``splits = load_splits(plan.data, plan.categorical, plan.seed, device)  # .train.x, .val, .test, normalized``
"""
from __future__ import annotations

import gzip
import math
import os
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

import torch
from omegaconf import DictConfig, OmegaConf

from ..core.errors import DataError
from .config import DataConfig
from .own import OWN_DATA, read_own
from .profile import DataProfile

# One normalization for every image set (train, test, out-of-distribution): MNIST's statistics.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
DATA_ENV = "BNN_ZOO_DATA"
# Fixed, so the validation split is the same images in every run, whatever the run's seed.
SPLIT_SEED = 0

TORCHVISION_SETS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
# What each class of a classifier's data set is called (torchvision's FashionMNIST.classes).
CLASS_NAMES = {"mnist": [str(d) for d in range(10)],
               "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                                 "Sneaker", "Bag", "Ankle boot"]}
IDX_FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


@dataclass
class TensorSet:
    x: torch.Tensor
    y: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device) -> "TensorSet":
        return TensorSet(self.x.to(device), None if self.y is None else self.y.to(device))

    def batches(self, batch_size: int, shuffle: bool = True, generator=None):
        """Minibatches sliced on the tensors' device (no DataLoader, no per-sample transforms)."""
        n = len(self)
        order = (torch.randperm(n, device=self.x.device, generator=generator) if shuffle
                 else torch.arange(n, device=self.x.device))
        for idx in order.split(batch_size):
            yield self.x[idx], self.y[idx]


@dataclass
class Splits:
    train: TensorSet
    val: Optional[TensorSet]
    test: TensorSet
    profile: Optional[DataProfile] = field(default=None)  # your own data: what the training split showed

    def to(self, device) -> "Splits":
        return Splits(self.train.to(device), None if self.val is None else self.val.to(device), self.test.to(device),
                      self.profile)


def data_root(root: Optional[str] = None) -> Path:
    """The data folder: ``root`` if given, else $BNN_ZOO_DATA, else ./data."""
    return Path(root or os.environ.get(DATA_ENV) or "data").expanduser()


def run_data_root(given: Optional[str], stored: Optional[str]) -> Optional[str]:
    """The data folder a trained run reads its sets from: the one the user gives (--data-root), else
    $BNN_ZOO_DATA, else the one it trained on (its config's data.root: a folder of the machine it
    trained on, which a shipped posterior does not hold), else None (./data)."""
    return given or os.environ.get(DATA_ENV) or stored


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 images [N, 28, 28] (0..255, white on black) -> float [N, 1, 28, 28], normalized."""
    if images.dtype != torch.uint8:
        raise TypeError(f"expected uint8 images, got {images.dtype}")
    return ((images.float() / 255.0 - MNIST_MEAN) / MNIST_STD).unsqueeze(1)


def load_torchvision(name: str, root: Optional[str] = None, train: bool = True,
                     download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST or FashionMNIST as (uint8 images [N, 28, 28], int64 labels), read from
    ``ROOT/<Name>/raw`` (IDX files, plain or .gz); downloaded there by torchvision when missing."""
    folder = TORCHVISION_SETS[name]
    root_path = data_root(root)
    raw = root_path / folder / "raw"
    prefix = "train" if train else "t10k"
    stems = (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte")
    if not all(find_idx(raw, stem) for stem in stems):
        if not download:
            raise _missing(folder, root_path, "downloads are off (data.download=false)")
        from .vision import torchvision

        made = _outermost_missing(raw)  # the folders the download makes: gone again where it fails
        try:
            getattr(torchvision.datasets, folder)(str(root_path), train=train, download=True)
        except Exception as err:  # network errors come as URLError, OSError, RuntimeError...
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            last = str(err).strip().splitlines()[-1][:160] if str(err).strip() else ""
            raise _missing(folder, root_path, f"the download failed ({type(err).__name__}: {last})") from None
    image_file, label_file = (find_idx(raw, stem) for stem in stems)
    images, labels = read_idx(image_file), read_idx(label_file)
    if images.dim() != 3 or images.shape[1:] != (28, 28):
        raise DataError(f"{image_file} holds images of shape {tuple(images.shape)}, not N x 28 x 28")
    if labels.shape != images.shape[:1]:
        raise DataError(f"{label_file} holds {tuple(labels.shape)} labels for {len(images)} images in "
                        f"{image_file}: replace both with the original files")
    if len(labels) and labels.max() >= 10:
        raise DataError(f"{label_file} holds label {int(labels.max())}; {folder} has classes 0-9: "
                        "replace it with the original file")
    return images, labels.long()


def _outermost_missing(path: Path) -> Optional[Path]:
    """The outermost of ``path`` and the folders above it that does not exist yet (None: it exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _missing(folder: str, root: Path, why: str) -> DataError:
    return DataError(
        f"{folder} not found in {root.resolve() / folder / 'raw'} and {why}. It needs the files "
        f"{', '.join(IDX_FILES)} (or their .gz) there. Put them in DIR/{folder}/raw and point at "
        f"DIR: the environment variable {DATA_ENV}=DIR, or data.root=DIR to train, --data-root DIR to "
        "evaluate or certify.")


def read_idx(path: str | Path) -> torch.Tensor:
    """Read an IDX file (MNIST's format), plain or .gz, as a uint8 tensor."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read IDX file {path}: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or not 1 <= raw[3] <= 4:
        raise DataError(f"{path} is not an unsigned-byte IDX file (its magic number is {raw[:4].hex()}, "
                        f"not 0000080N with N of 1 to 4 dimensions): replace it with the original file")
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    start, count = 4 + 4 * ndim, math.prod(shape)
    if len(raw) - start != count:
        raise DataError(f"{path} is truncated: header says {shape}, "
                        f"found {len(raw) - start} of {count} bytes")
    return torch.frombuffer(bytearray(raw[start:]), dtype=torch.uint8).reshape(shape)


def find_idx(folder: Path, stem: str) -> Optional[Path]:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


# Toy regression sets: name -> (true function, observed inputs or a rule for them, noise sd)
def polynomial(x: torch.Tensor) -> torch.Tensor:
    return -x ** 4 + 3 * x ** 2 + 1


def sinusoid(x: torch.Tensor) -> torch.Tensor:
    return 10 * torch.sin(2 * math.pi * x)


TOY_FUNCTIONS = {"polynomial": polynomial, "sinusoid": sinusoid}
# Ranges for plots, well beyond the observed inputs (Bayes by Backprop's tutorial went to +-100).
TOY_PLOT_RANGES = {"polynomial": [(-5.0, 5.0), (-100.0, 100.0)], "sinusoid": [(-5.0, 5.0)]}


def toy_data(name: str, seed: int = 0) -> TensorSet:
    """The observed points: x [N, 1], y [N]."""
    if name == "polynomial":
        x = torch.tensor([-2.0, -1.8, -1.0, 1.0, 1.8, 2.0])
        y = polynomial(x)
    elif name == "sinusoid":
        g = torch.Generator().manual_seed(seed)
        x = torch.linspace(-0.5, 0.5, 32)
        y = sinusoid(x) + torch.randn(32, generator=g)
    else:
        raise DataError(f"unknown toy data set {name!r}; choose one of {', '.join(TOY_FUNCTIONS)}")
    return TensorSet(x.unsqueeze(-1), y)


def toy_test(name: str, n: int = 200, seed: int = 1) -> TensorSet:
    """Held-out points of the true function over the observed range (with the sinusoid's noise)."""
    train = toy_data(name)
    x = torch.linspace(float(train.x.min()), float(train.x.max()), n)
    y = TOY_FUNCTIONS[name](x)
    if name == "sinusoid":
        y = y + torch.randn(n, generator=torch.Generator().manual_seed(seed))
    return TensorSet(x.unsqueeze(-1), y)


def validation_split(n: int, val_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (train, validation) of a training set of n: the same held-out images every run."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED))
    return order[val_size:], order[:val_size]


def run_split(data: DataConfig, part: str, root: str | None = None, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A classifier run's ``train`` split (as it trained: at most ``data.train_limit``), ``val`` split
    or ``test`` set, the first ``limit`` of it, as normalized inputs and labels; ``data``: the run's
    data section; ``root`` the user's, else $BNN_ZOO_DATA, else its (``run_data_root``)."""
    if data.name in OWN_DATA:
        splits = load_splits(data, categorical=True)
        chosen = {"train": splits.train, "val": splits.val, "test": splits.test}[part]
        return chosen.x[:limit], chosen.y[:limit]
    images, labels = load_torchvision(data.name, run_data_root(root, data.root), train=part != "test",
                                      download=data.download)
    if part == "test":
        return normalize(images[:limit]), labels[:limit]
    train_idx, val_idx = validation_split(len(images), data.val_size)
    idx = {"train": train_idx[:data.train_limit], "val": val_idx}[part][:limit]
    return normalize(images[idx]), labels[idx]


def load_splits(data: DataConfig, categorical: bool, seed: int = 0, device="cpu") -> Splits:
    """Train / validation / test tensors for a resolved config, on ``device``."""
    d = data
    if d.name in TOY_FUNCTIONS:
        return Splits(toy_data(d.name, seed).to(device), None, toy_test(d.name).to(device))
    if d.name in OWN_DATA:
        return _own_splits(d, categorical).to(device)
    x, y = load_torchvision(d.name, d.root, train=True, download=d.download)
    xt, yt = load_torchvision(d.name, d.root, train=False, download=d.download)
    if d.val_size >= len(x):
        raise DataError(f"data.val_size={d.val_size} leaves no training images (of {len(x)})")
    train_idx, val_idx = validation_split(len(x), d.val_size)
    if d.train_limit:
        train_idx = train_idx[:d.train_limit]
    if d.test_limit:
        xt, yt = xt[:d.test_limit], yt[:d.test_limit]
    val = TensorSet(normalize(x[val_idx]), y[val_idx]).to(device) if d.val_size else None
    return Splits(TensorSet(normalize(x[train_idx]), y[train_idx]).to(device), val,
                  TensorSet(normalize(xt), yt).to(device))


def _own_splits(data: DataConfig, categorical: bool) -> Splits:
    """Your own data's splits, normalized with the statistics of its training split (the config's,
    where the run already holds them: they must describe the same classes and shapes)."""
    d = data
    train, test = read_own(d, categorical)
    val_size = d.val_size if d.val_size is not None else len(train.y) // 5
    if val_size >= len(train.y):
        raise DataError(f"data.val_size={val_size} leaves no training examples (of {len(train.y)}): give a smaller one")
    train_idx, val_idx = validation_split(len(train.y), val_size)
    train_idx = train_idx[:d.train_limit] if d.train_limit else train_idx
    found = DataProfile.of(train.x[train_idx], train.y[train_idx], train, test)
    if d.input_shape is not None:  # the run's own data: the shapes, classes, columns and examples it trained on
        shape, classes = list(d.input_shape), None if d.classes is None else list(d.classes)
        columns = found.features if d.features is None else list(d.features)  # held beside the config, where given
        if (shape, classes, columns) != (found.input_shape, found.classes, found.features):
            raise DataError(f"{d.path} now holds inputs {found.input_shape} of classes {found.classes}, where the run "
                            f"trained on {shape} of {classes}: point data.path at that data")
        if d.digest != found.digest:
            raise DataError(f"{d.path} holds other examples than the run trained on (added, removed or changed): its "
                            "validation and test splits would move onto training examples; point data.path at that "
                            "data, or train a new run")
        found = profile_of(d) if d.mean is not None else found  # its own statistics: the same examples give the same
    part = lambda ex, idx: TensorSet(found.normalize(ex.x[idx]), ex.y[idx])  # noqa: E731
    test_idx = torch.arange(len(test.y))[:d.test_limit]
    return Splits(part(train, train_idx), part(train, val_idx) if val_size else None, part(test, test_idx), found)


def profile_of(data: DataConfig) -> Optional[DataProfile]:
    """What a run on your own data found in its training split (None: MNIST's statistics, or a
    run that has not begun), from a typed data section that holds the keys its config holds beside
    it (``HELD_BESIDE``: ``Plan.data``, ``Trained.data``); a ValueError from a config's own section."""
    if data.input_shape is None:
        return None
    if data.mean is None:
        raise ValueError("this data section holds the run's shape but not its statistics, which its config holds "
                         "beside it: read them from the run's typed section (trained.data, plan.data)")
    data = OmegaConf.to_container(data) if isinstance(data, DictConfig) else asdict(data)
    return DataProfile(**{f.name: data[f.name] for f in fields(DataProfile)})
