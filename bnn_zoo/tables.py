"""CSV tables as tensors: numeric feature columns read by name, a target column of classes or
numbers, each bad cell named by its line and column.

Usage: ``table = read_csv(Path("flowers.csv"), "species", categorical=True)  # table.x, .y, .classes``
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from .errors import DataError


@dataclass
class Table:
    """A table's features [N, F], its targets (class indices or numbers), its classes (None: numbers)
    and its feature columns' names."""
    x: torch.Tensor
    y: torch.Tensor
    classes: Optional[list[str]]
    features: list[str]
    target: str


def read_csv(path: Path, target: Optional[str], categorical: bool, classes: Optional[list[str]] = None,
             features: Optional[list[str]] = None) -> Table:
    """A table with a header row: numeric feature columns and the column ``target`` (None: the
    last). A classifier's classes are the target's values, in numeric or text order.
    ``classes`` and ``features``: the training table's, which a test table's values must be among
    and whose columns it is read by."""
    header, rows = _table(path)
    target = target if target is not None else header[-1]
    if target not in header:
        raise DataError(f"{path} has no column {target!r} (data.target); its columns: {', '.join(header)}")
    features = features or [h for h in header if h != target]
    if not features:
        raise DataError(f"{path} holds the column {target!r} alone: give feature columns beside it, separated by commas")
    x, column = _columns(path, header, rows, features), header.index(target)
    labels = [(n, row[column].strip()) for n, row in rows]
    blank = next((n for n, label in labels if not label), None)
    if blank is not None:
        raise DataError(f"{path} line {blank}: the target {target!r} is empty; fill or drop the row")
    if not categorical:
        return Table(x, torch.tensor([_number(v, path, n, target) for n, v in labels]), None, features, target)
    values = [v for _, v in labels]
    unknown = sorted(set(values) - set(classes)) if classes is not None else []
    if unknown:
        raise DataError(f"{path}: column {target!r} holds {unknown[0]!r}, not one of the training classes {classes}")
    classes = classes or sorted(set(values), key=lambda v: (0, float(v), v) if _is_number(v) else (1, 0.0, v))
    index = {name: i for i, name in enumerate(classes)}
    return Table(x, torch.tensor([index[v] for v in values]), classes, features, target)


def _table(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """A CSV file's header (names stripped, Excel's byte-order mark gone) and its rows that hold
    anything, each with its line number."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            lines = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"cannot read {path} as a CSV table ({type(err).__name__}: {err})") from None
    rows = [(n, row) for n, row in enumerate(lines[1:], 2) if any(v.strip() for v in row)]
    if not rows:
        raise DataError(f"{path} holds no rows under a header: give a header line and one row per example")
    header = [name.strip() for name in lines[0]]
    for n, row in rows:
        if len(row) != len(header):
            raise DataError(f"{path} line {n} holds {len(row)} values under {len(header)} columns")
    return header, rows


def table_columns(path: Path, names: list[str]) -> torch.Tensor:
    """A CSV file's columns ``names`` as numbers [N, len(names)], read by name."""
    header, rows = _table(path)
    return _columns(path, header, rows, names)


def _columns(path: Path, header: list[str], rows: list[tuple[int, list[str]]], names: list[str]) -> torch.Tensor:
    """The named columns of a table's rows as numbers [N, len(names)], in the order of ``names``."""
    missing = [c for c in names if c not in header]
    if missing:
        raise DataError(f"{path} lacks the column(s) {', '.join(missing)} the run reads")
    where = [header.index(c) for c in names]
    return torch.tensor([[_number(row[i], path, n, header[i]) for i in where] for n, row in rows], dtype=torch.float32)


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
