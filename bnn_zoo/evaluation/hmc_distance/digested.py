"""Arrays in one ``.npz`` file with a SHA-256 digest of them all: the one reader and writer of the
files this room keeps (an HMC reference, a kept chain). Read by numpy without pickle, so a file
decodes to arrays and nothing else; one that numpy cannot read, or whose digest differs from its
arrays, is refused in one line that says what to do.

Usage::

    write_digested(path, {"recipe": np.frombuffer(b"{}", np.uint8), "test.predictive": probs})
    arrays = read_digested(path, "HMC reference", "build it again (scripts/hmc_reference.py)")
"""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from ...core.errors import CheckpointError
from ...runs.storage.files import write_atomic

DIGEST = "digest"  # the array that holds the others' digest


def array_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of each array's name, dtype, shape and bytes, in the order of their names."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name} {a.dtype.str} {a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def write_digested(path: Path, arrays: dict[str, np.ndarray], compressed: bool = True) -> None:
    """``arrays`` and their digest in one .npz file at ``path``, written whole or not at all."""
    arrays = {**arrays, DIGEST: np.frombuffer(array_digest(arrays).encode(), np.uint8)}
    save = np.savez_compressed if compressed else np.savez
    write_atomic(Path(path), lambda f: save(f, **arrays))


def read_digested(path: Path, what: str, fix: str) -> dict[str, np.ndarray]:
    """The arrays of the .npz at ``path`` but the digest; a CheckpointError, in one line naming ``what``
    the file should be and ending in ``fix``, for a file numpy cannot read without pickle or whose
    digest differs."""
    try:
        with np.load(path, allow_pickle=False) as found:
            arrays = {name: found[name] for name in found.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path} is no {what} numpy can read ({why}): {fix}") from None
    stored = arrays.pop(DIGEST, np.zeros(0, np.uint8)).tobytes().decode(errors="replace")
    if stored != array_digest(arrays):
        raise CheckpointError(f"{path} is not the {what} its digest describes (altered or damaged): {fix}")
    return arrays
