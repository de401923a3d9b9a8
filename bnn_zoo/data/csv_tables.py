"""CSV tables as tensors: numeric feature columns read by name, a target column of classes or
numbers, each bad cell named by its line in the file and its column.

Usage: ``table = read_csv(Path("flowers.csv"), "species", categorical=True)  # table.x, .y, .classes``
"""
from __future__ import annotations

import csv
import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..core.errors import DataError

# data.target=null: the one column of such a name (in any case) is the target, else the last column
TARGET_NAMES = ("target", "label", "class", "y")
ZIP, PICKLE, TEXT = "a zip archive", "a pickle", "text"  # what a file's first bytes say it is (file_kind)
# What marks a missing value in a cell: pandas' default na_values (read_csv), as spreadsheets and
# R write them. A target holding one is refused, not read as a class of that name ("none" is one).
MISSING = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                     "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


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
    """A table with a header row: numeric feature columns and the column ``target`` (None: the one
    of TARGET_NAMES, else the last; ``Table.target`` names the one read). A classifier's classes
    are the target's values, in numeric or text order; where every one is a number, a class per
    value ("1" for 1, 1.0 and 01). ``classes`` and ``features``: the training table's, which a
    test table's values must be among and whose columns it is read by."""
    header, rows = _table(path)
    target = column_name(target) if target is not None else _default_target(path, header)
    if target not in header:
        raise DataError(f"{path} has no column {target!r} (data.target); its columns: {', '.join(header)}")
    features = [column_name(f) for f in features] if features else [h for h in header if h != target]
    if not features:
        raise DataError(f"{path} holds the column {target!r} alone: give feature columns beside it, separated by commas")
    x, column = _columns(path, header, rows, features), header.index(target)
    labels = [(n, row[column].strip()) for n, row in rows]
    missing = next(((n, label) for n, label in labels if label in MISSING), None)
    if missing is not None:
        n, label = missing
        held = "is empty" if not label else f"holds {label!r}, which marks a missing value"
        raise DataError(f"{path} line {n}: the target {target!r} {held}; fill or drop the row"
                        + (", or name that class otherwise" if label and categorical else ""))
    if not categorical:
        return Table(x, torch.tensor([_number(v, path, n, target) for n, v in labels]), None, features, target)
    y, classes = _classes(path, target, labels, classes)
    return Table(x, y, classes, features, target)


def column_name(name: str) -> str:
    """A column's name as it is compared: stripped, in Unicode's composed form (NFC: an é typed as
    e and a combining accent is the é of one code point), so names that print alike match."""
    return unicodedata.normalize("NFC", name.strip())


def _default_target(path: Path, header: list[str]) -> str:
    named = [h for h in header if h.lower() in TARGET_NAMES]
    if len(named) > 1:  # the last column would be a guess among guesses
        raise DataError(f"{path}: the columns {' and '.join(map(repr, named))} could each be the target: "
                        "name it, data.target=NAME")
    return named[0] if named else header[-1]


def _classes(path: Path, target: str, labels: list[tuple[int, str]],
             classes: Optional[list[str]]) -> tuple[torch.Tensor, list[str]]:
    """A classifier's labels as indices of its classes (``classes``: the training table's). Labels
    are numbers where every training label is one: written any way, a value is one class."""
    numeric = all(map(is_number, classes if classes is not None else (v for _, v in labels)))
    if numeric:
        labels = [(n, _named(v) if is_number(v) else v) for n, v in labels]
    elif classes is None:
        _one_spelling(path, target, labels)
    if classes is None:
        classes = sorted({v for _, v in labels}, key=lambda v: (0, float(v), v) if is_number(v) else (1, 0.0, v))
    index = {name: i for i, name in enumerate(classes)}
    unknown = next(((n, v) for n, v in labels if v not in index), None)
    if unknown is not None:
        raise DataError(f"{path} line {unknown[0]}: column {target!r} holds {unknown[1]!r}, not one of the "
                        f"training classes {classes}")
    return torch.tensor([index[v] for _, v in labels]), classes


def _one_spelling(path: Path, target: str, labels: list[tuple[int, str]]) -> None:
    """Refuses one number written two ways among text labels ("1" and "1.0" beside "none"): codes
    such as "01" and "1" may be two classes, or one; only the table's author knows."""
    first: dict[str, tuple[int, str]] = {}
    for n, v in labels:
        if is_number(v):
            m, seen = first.setdefault(_named(v), (n, v))
            if seen != v:
                raise DataError(f"{path} line {n}: column {target!r} holds {v!r} where line {m} holds {seen!r}: one "
                                "number written two ways among text labels; write each class one way")


def _named(text: str) -> str:
    """A number's class name: "1" for 1, 1.0, 01 and 1e0; "2.5" for 2.50."""
    value = float(text)
    return str(int(value)) if value.is_integer() else repr(value)


def file_kind(path: Path) -> str:
    """What a file is by its first bytes: ZIP (a .npz, or a .pt of torch.save), PICKLE (a .pt of
    an older torch), TEXT, or else "binary data"."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"PK\x03\x04"):
        return ZIP
    if head.startswith(b"\x80"):
        return PICKLE
    return "binary data" if b"\x00" in head else TEXT


def _table(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """A CSV file's header (names as ``column_name`` compares them, Excel's byte-order mark gone)
    and its rows that hold anything, each with its line in the file (where it begins: a quoted cell
    may span lines)."""
    try:
        kind = file_kind(path)
        if kind == TEXT:
            with open(path, newline="", encoding="utf-8-sig") as f:
                reader, records, line = csv.reader(f), [], 1
                for record in reader:
                    records.append((line, record))
                    line = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"cannot read {path} as a CSV table ({type(err).__name__}: {err})") from None
    if kind in (ZIP, PICKLE):
        raise DataError(f"{path} is {kind}, a .pt or .npz tensor file perhaps, not a CSV table: data.name=csv "
                        "reads tables, data.name=tensors tensor files")
    if kind != TEXT:
        raise DataError(f"{path} is {kind}, not a CSV table: save it as text (UTF-8), a header line and a line per row")
    records = [(n, record) for n, record in records if any(v.strip() for v in record)]
    if len(records) < 2:
        raise DataError(f"{path} holds no rows under a header: give a header line and one row per example")
    (line, names), rows = records[0], records[1:]
    header = [column_name(name) for name in names]
    first: dict[str, int] = {}
    for i, name in enumerate(header, 1):  # a column read by name must be the only one of its name
        if not name:
            raise DataError(f"{path} line {line}: column {i} has no name; name every column in the header")
        if first.setdefault(name, i) != i:
            raise DataError(f"{path} line {line}: columns {first[name]} and {i} are both named {name!r}; "
                            "give each column its own name")
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
    at = {name: i for i, name in enumerate(header)}  # a lookup per name, not a search of the header
    names = [column_name(name) for name in names]
    missing = [c for c in names if c not in at]
    if missing:
        raise DataError(f"{path} lacks the column(s) {', '.join(missing)} the run reads")
    where = [at[c] for c in names]
    return torch.tensor([[_number(row[i], path, n, header[i]) for i in where] for n, row in rows], dtype=torch.float32)


def is_number(text: str) -> bool:
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
