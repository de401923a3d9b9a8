"""What a shipped posterior may hold: no folder of the machine that built it. A run's config names
where it trained and read its data; shipped, those names are of no use on a user's machine and
would be read before theirs (``portable``); anything else that still names a folder is refused
(``check_portable``), and a file shipped before is rewritten without them (``make_portable``).

Usage: ``state["config"] = portable(state["config"]); check_portable(state, run_dir)``
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator

from ...core.errors import CheckpointError
from .checkpoint import read, save_atomic

# The keys of a config that name folders of the machine a run trained on, which a shipped posterior
# holds null (its data is the user's: --data-root, $BNN_ZOO_DATA or ./data); your own data's files
# and folders (data.path, data.test_path, data.ood) it holds by their names alone (prices.csv).
NULLED = ("run_dir", "resume", "data.root")


def portable(config: dict) -> dict:
    """A run's stored config as a shipped posterior holds it: its NULLED keys null, its own data's
    files and folders by their names, the rest as it was."""
    config = {key: dict(value) if isinstance(value, dict) else value for key, value in config.items()}
    for key in NULLED:
        *section, name = key.split(".")
        held = config.get(section[0]) if section else config
        if isinstance(held, dict) and name in held:
            held[name] = None
    data = config.get("data")
    if isinstance(data, dict):
        data.update({key: _file_name(data[key]) for key in ("path", "test_path") if key in data})
        if isinstance(data.get("ood"), dict):
            data["ood"] = {name: _file_name(folder) for name, folder in data["ood"].items()}
    return config


def _file_name(path):
    """A file's or folder's name without the folders above it (written with / or \\); None stays None."""
    return PureWindowsPath(path).name if isinstance(path, str) else path


def machine_paths(value, where: str = "") -> Iterator[tuple[str, str]]:
    """(where, path) for each absolute path (/..., C:\\..., ~...) among the strings of ``value``
    (nested dicts, lists and tuples): a folder of the machine that wrote it."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from machine_paths(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from machine_paths(item, f"{where}[{i}]")
    elif isinstance(value, str) and (PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute()
                                     or value.startswith("~")):
        yield where, value


def check_portable(state: dict, source: str | Path) -> None:
    """Refuse to ship a state that still names a folder of this machine (where ``portable`` cannot
    tell what it means: a network's keyword argument, say)."""
    found = next(machine_paths(state), None)
    if found is not None:
        raise CheckpointError(f"{source} holds the path {found[1]} under {found[0]}: a shipped posterior carries no "
                              "folder of the machine that built it; train it without that path, then ship it")


def make_portable(path: Path) -> bool:
    """Rewrite the shipped file ``path`` with its config ``portable`` (weights, calibration and the
    rest as they were; the file's digest written anew over them); returns whether it changed."""
    state = read(path)
    changed = "config" in state and portable(state["config"]) != state["config"]
    if changed:
        state["config"] = portable(state["config"])
    check_portable(state, path)
    if changed:
        save_atomic(state, path)
    return changed
