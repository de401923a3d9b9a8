"""The data a run reads (``data.name``, else told by ``data.path``'s kind, else its recipe's own set),
and the keys that fit some data only (``FITS_DATA``), in one place: a recipe (a config file) that
sets one keeps it where its run reads data it fits, and leaves it at its default elsewhere, saying
so in one line, so that ``configs/lenet.yaml`` trains a folder of your images as it trains MNIST;
the same key given on the command line for data it does not fit is refused (``check_fits``).

Usage::

    base = fitted_to_data(base, overrides, "configs/lenet.yaml", lambda: "folder")   # in load_config
    check_fits(cfg, data)                                                      # in checks.check
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from omegaconf import DictConfig, OmegaConf

from ...core.errors import ConfigError, say_once, show
from .schema import Config

# key, or a whole section: (the data it fits, data.name's values, a tensors file by what it holds;
# what it does, as a refusal says it). A recipe's value of one is kept where its run reads such data,
# and left at the default elsewhere.
FITS_DATA = {"data.remade": (("mnist",), "it reads inputs as MNIST's digits were made"),
             "augment": (("mnist", "fashion_mnist", "folder", "tensors of images"), "it transforms images"),
             "outliers": (("mnist", "fashion_mnist", "folder", "tensors of images"), "it makes outliers from images")}
# A tensors file of rows (x [N, features]) is a table, not images: what ``fitted_to_data``'s reads()
# tells it as, where it can read the file; its images, or a file not read yet, are data.name=tensors.
TENSOR_ROWS = "tensors of rows"
# What a data.path's name says it holds, where data.name is left out (a folder: data.name=folder)
DATA_SUFFIXES = {".csv": "csv", ".pt": "tensors", ".npz": "tensors"}


def data_kind(path: str) -> str:
    """The kind of your own data ``path`` holds: a folder of images per class (``folder``), a CSV
    table (``csv``) or a tensor file (``tensors``), told by the folder or the file's suffix; a
    ConfigError where neither says."""
    where = Path(path).expanduser()
    if where.is_dir():
        return "folder"
    if where.suffix.lower() in DATA_SUFFIXES:
        return DATA_SUFFIXES[where.suffix.lower()]
    held = "a file of another kind" if where.exists() else "not there"
    raise ConfigError(f"bad config key 'data.name': left out, and data.path={show(path)} ({held}) is neither a folder "
                      "nor a .csv, .pt or .npz file to tell its kind by: give data.name=folder, tensors or csv")


def default_of(key: str):
    """The schema's default of a dotted key (``data.remade``: False) or section."""
    return OmegaConf.select(OmegaConf.structured(Config), key)


def _shown(value) -> str:
    """A value as a command line gives it: ``true``, ``0.5``, ``{"num_samples": 7}``."""
    return json.dumps(OmegaConf.to_container(value) if isinstance(value, DictConfig) else value)


def fits_data(data: str, fits: tuple[str, ...]) -> bool:
    """Whether a run reading ``data`` (data.name, or ``TENSOR_ROWS``) reads data a key ``fits``; a
    tensors file not told apart fits as images (a file of rows is refused once read: checks.check_augment)."""
    return data in fits or f"{data} of images" in fits


def check_fits(cfg: DictConfig, data: str) -> None:
    """Each key of ``FITS_DATA`` that ``cfg`` sets away from its default fits ``data``, the data its
    run reads; else a ConfigError naming it (a recipe's value never gets here: ``fitted_to_data``)."""
    for key, (fits, what) in FITS_DATA.items():
        if OmegaConf.select(cfg, key) != default_of(key) and not fits_data(data, fits):
            default = "" if isinstance(default_of(key), DictConfig) else f" ({key}={_shown(default_of(key))})"
            raise ConfigError(f"bad config key {key!r}: {what}, and this run reads {data}: leave it out{default}")


def fitted_to_data(base: DictConfig, overrides: list[str], source: str, reads: Callable[[], Optional[str]]) -> DictConfig:
    """``base``, a recipe's keys from ``source``, with each key of ``FITS_DATA`` it sets, and the
    command line (``overrides``) does not, left at its default where the run reads data it does
    not fit (``reads()``: that data, ``TENSOR_ROWS`` for a tensors file of rows, None where it
    cannot be told yet), said in a line on stderr."""
    given = {override.partition("=")[0].strip() for override in overrides}
    set_here = lambda key: any(g == key or g.startswith(f"{key}.") for g in given)  # noqa: E731 (a section's keys too)
    held = [key for key in FITS_DATA if not set_here(key) and OmegaConf.select(base, key) not in (None, default_of(key))]
    data = reads() if held else None  # only then: telling it may import a network by name
    if data is None:
        return base
    base = base.copy()
    for key in held:
        if not fits_data(data, FITS_DATA[key][0]):
            section, _, name = key.rpartition(".")
            value = OmegaConf.select(base, key)
            (OmegaConf.select(base, section) if section else base).pop(name)  # a key, or a whole section
            fits = FITS_DATA[key][0]
            left = "left out" if isinstance(value, DictConfig) else f"left at {key}={_shown(default_of(key))}"
            say_once(f"note: {source} sets {key}={_shown(value)}, which fits "
                     f"{', '.join(fits[:-1]) + ' or ' if fits[:-1] else ''}{fits[-1]} only; this run reads {data}, so it is {left}")
    return base
