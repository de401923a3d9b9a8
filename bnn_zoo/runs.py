"""A run directory belongs to one run: a lock while a process trains into it, a refusal to start a
new run where another one lives (unless told to replace it), and files written whole.

Usage::

    with claim(run_dir, overwrite=False, resuming=False):
        write_atomic(run_dir / "config.yaml", text)
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from .checkpoint import CALIBRATION, CHECKPOINT, HMC_SAMPLES, MEMBERS, TWIN_CHECKPOINT
from .errors import ConfigError

LOCK = ".lock"
# Everything a run writes into its directory (bnn_zoo.train, bnn_zoo.calibrate, bnn_zoo.evaluate);
# MEMBERS is the folder of an ensemble's other members.
RUN_FILES = ("config.yaml", CHECKPOINT, TWIN_CHECKPOINT, HMC_SAMPLES, CALIBRATION, "metrics.json",
             "eval.json", "training.png", "predictive.png", MEMBERS)


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path`` and rename it over ``path``: readers see the old
    file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def existing_run(run_dir: Path) -> list[str]:
    """The run files already in ``run_dir``."""
    return [name for name in RUN_FILES if (run_dir / name).exists()]


@contextmanager
def claim(run_dir: Path, overwrite: bool = False, resuming: bool = False):
    """Hold ``run_dir`` for one training process. A new run (not ``resuming``) stops when the folder
    holds another run's files, unless ``overwrite`` (then ``remove_run_files`` once the new run is
    ready to write). A second process that claims the folder meanwhile stops at once. The lock goes
    with the process, even a killed one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK, "a+") as lock:
        if not _lock(lock):
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise ConfigError(f"run directory {run_dir} is in use by {holder}: wait for it to finish, or "
                              "train into another folder (run_dir=DIR)")
        lock.seek(0), lock.truncate()
        lock.write(f"process {os.getpid()}"), lock.flush()
        found = existing_run(run_dir)
        if found and not resuming and not overwrite:
            raise ConfigError(f"run directory {run_dir} holds a run already ({', '.join(found)}): continue "
                              f"it with resume={run_dir}, replace it with overwrite=true, or choose "
                              "another run_dir=DIR")
        yield


def remove_run_files(run_dir: Path) -> None:
    """Delete the run files in ``run_dir`` (a run replaced with overwrite=true)."""
    for name in existing_run(run_dir):
        path = run_dir / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _lock(f) -> bool:
    """An exclusive lock on the open file, False when another process holds it."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; a run directory is still checked for old runs
        return True
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
