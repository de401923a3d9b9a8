"""Helpers the tests of several folders share: IDX files written, small file systems mounted, the
scripts loaded as modules.

Usage: ``from helpers import load_script, tmpfs, write_idx``
"""
import gzip
import importlib.util
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"


def first_by_default(values) -> list:
    """Parameters for ``pytest.mark.parametrize``: the first value in the default suite, the others
    marked ``slow`` (left out of ``python -m pytest``, run by ``-m slow`` and CI)."""
    return [pytest.param(value, marks=() if i == 0 else pytest.mark.slow) for i, value in enumerate(values)]


def these_by_default(values, kept) -> list:
    """Parameters for ``pytest.mark.parametrize``: ``kept`` in the default suite, the others ``slow``."""
    return [pytest.param(value, marks=() if value in kept else pytest.mark.slow) for value in values]


def write_idx(path, tensor: torch.Tensor, gz: bool = False):
    header = bytes([0, 0, 0x08, tensor.dim()]) + b"".join(
        s.to_bytes(4, "big") for s in tensor.shape)
    raw = header + tensor.to(torch.uint8).numpy().tobytes()
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(raw)


@contextmanager
def tmpfs(folder, size: str = "2m", readonly: bool = False):
    """A small tmpfs mounted at ``folder`` (a full disk, a read-only folder); skips without the
    right to mount (root in most sandboxes and CI machines)."""
    folder.mkdir(exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the full-disk and read-only cases are not run")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def remount_readonly(folder) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)


def fill(folder) -> None:
    """Leave no free byte on the file system of ``folder``."""
    try:
        with open(folder / "filler", "wb", buffering=0) as f:
            while True:
                f.write(bytes(1 << 12))
    except OSError:  # No space left on device: full
        pass


def load_script(name: str):
    if str(SCRIPTS_DIR) not in sys.path:  # as `python scripts/NAME.py` has it: the scripts import _child
        sys.path.insert(0, str(SCRIPTS_DIR))
    path = SCRIPTS_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
