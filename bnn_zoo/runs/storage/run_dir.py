"""A run directory and the one run it holds: its layout (``Run``), a lock while a process trains
into it, a refusal to start a new run where another one lives (unless told to replace it), a mark
that says which files are the run's (a replaced run takes only those with it), and files written
whole (``bnn_zoo.runs.storage.files``).

Usage::

    run = Run("runs/lenet")
    with run.claim(overwrite=False, resuming=False):
        run.start(cfg, fresh=True)       # the old run's own files go (overwrite=true), the config is written
        ...                              # run.checkpoint, run.twin_checkpoint, run.member(1), ...
    trained = run.load("cpu")            # what bnn_zoo.load(run_dir) returns
"""
from __future__ import annotations

import contextlib
import os
from contextlib import contextmanager
from pathlib import Path

from ...core.errors import ConfigError, StorageError
from .checkpoint import CALIBRATION, CHECKPOINT, DENSITIES, FITTED, HMC_SAMPLES, MEMBERS, TWIN_CHECKPOINT
from .files import check_writable, make_folder, open_lock, write_atomic
from .loading import load, member_dirs
from .trained import Trained

LOCK = ".lock"
MARK = ".bnn_zoo_run"  # written when a run starts: the run files beside it are that run's
# Everything a run writes into its directory (bnn_zoo.cli.train, bnn_zoo.cli.certify, bnn_zoo.evaluation.evaluate);
# an ensemble's other members are runs of their own in MEMBERS/1, MEMBERS/2, ...
RUN_FILES = ("config.yaml", CHECKPOINT, TWIN_CHECKPOINT, HMC_SAMPLES, FITTED, CALIBRATION, DENSITIES, "metrics.json",
             "eval.json", "training.png", "predictive.png")


class Run:
    """A run directory: where each of its files lives, and the one process that writes them."""

    def __init__(self, folder: str | Path):
        self.dir = Path(folder)

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r})"

    checkpoint = property(lambda self: self.dir / CHECKPOINT, doc="the Bayesian network's checkpoint")
    twin_checkpoint = property(lambda self: self.dir / TWIN_CHECKPOINT, doc="the deterministic twin's")
    hmc_samples = property(lambda self: self.dir / HMC_SAMPLES, doc="NUTS's weight samples (infer=nuts)")
    fitted = property(lambda self: self.dir / FITTED, doc="the posteriors fitted after training (bnn_zoo.runs.storage.fits)")
    calibration = property(lambda self: self.dir / CALIBRATION, doc="the certified abstention rules")
    config_file = property(lambda self: self.dir / "config.yaml", doc="the resolved config, for people")
    metrics = property(lambda self: self.dir / "metrics.json", doc="training's figures")

    def member(self, i: int) -> "Run":
        """Ensemble member ``i`` (1, 2, ...; member 0 is this run), a run of its own in MEMBERS/i,
        inside this run's folder (a symbolic link there, to another run's member say, is refused)."""
        folder = member_dirs(self.dir, i + 1)[-1]
        for path in (folder.parent, folder):
            if path.is_symlink():
                raise StorageError(f"{path} is a symbolic link; an ensemble's members live in its own folder: "
                                   "remove the link")
        return Run(folder)

    def claim(self, overwrite: bool = False, resuming: bool = False):
        """``claim`` this run's directory (a context manager)."""
        return claim(self.dir, overwrite, resuming)

    def start(self, config_text: str, fresh: bool) -> None:
        """Inside ``claim``: a fresh run takes the old run's own files away (overwrite=true; only now
        that the new one is ready to write); either way the folder is marked and the config written."""
        if fresh:
            remove_run_files(self.dir)
        mark(self.dir)
        write_atomic(self.config_file, config_text)

    def write_metrics(self, text: str) -> None:
        write_atomic(self.metrics, text)

    def load(self, device="cpu", fitted: bool = True) -> Trained:
        """The trained run: ``bnn_zoo.load(run_dir)`` (``fitted=False``: without its posteriors
        fitted after training)."""
        return load(self.dir, device, fitted)


def owned(run_dir: Path) -> bool:
    """Whether a bnn-zoo run wrote ``run_dir``'s run files: it left its mark there (runs written
    before the mark existed: a checkpoint)."""
    return (run_dir / MARK).is_file() or (run_dir / CHECKPOINT).is_file()


def member_runs(run_dir: Path) -> list[Path]:
    """The ensemble members' run directories inside ``run_dir`` (MEMBERS/N that a run wrote)."""
    folder = run_dir / MEMBERS
    real = folder.is_dir() and not folder.is_symlink()  # a linked members folder is not this run's
    folders = [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()] if real else []
    return sorted((p for p in folders if p.name.isdigit() and owned(p)), key=lambda p: int(p.name))


def existing_run(run_dir: Path) -> list[str]:
    """The run files already in ``run_dir`` (with MEMBERS where it holds members' runs)."""
    present = [name for name in RUN_FILES if (run_dir / name).exists() or (run_dir / name).is_symlink()]
    return present + ([MEMBERS] if member_runs(run_dir) else [])


def mark(run_dir: Path) -> None:
    """Say that the run files in ``run_dir`` are a run's from now on (``remove_run_files`` then
    takes them with the run)."""
    write_atomic(run_dir / MARK, "This folder is a bnn-zoo run directory: python -m bnn_zoo.train wrote "
                                 "its run files (overwrite=true replaces only those).\n")


@contextmanager
def claim(run_dir: Path, overwrite: bool = False, resuming: bool = False):
    """Hold ``run_dir`` for one training process. A new run (not ``resuming``) stops when the folder
    holds another run's files, unless ``overwrite`` (then ``remove_run_files`` once the new run is
    ready to write); files of a run's names that no run wrote stop it either way. A second process
    that claims the folder meanwhile stops at once. The lock goes with the process, even a killed
    one; a run that stops before writing anything (missing data, say) takes the lock file it made
    away, and the folder where it made that too. A folder that cannot be written stops it before any work."""
    created, locked_before = not run_dir.exists(), (run_dir / LOCK).exists()
    make_folder(run_dir)
    check_writable(run_dir)
    with open_lock(run_dir / LOCK) as lock:
        if not _lock(lock) or not _still_there(lock, run_dir / LOCK):
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise ConfigError(f"run directory {run_dir} is in use by {holder}: wait for it to finish, or "
                              "train into another folder (run_dir=DIR)")
        lock.seek(0), lock.truncate()
        lock.write(f"process {os.getpid()}"), lock.flush()
        present = existing_run(run_dir)
        if present and not owned(run_dir):
            raise ConfigError(f"run directory {run_dir} holds {', '.join(present)}, which no bnn-zoo run wrote "
                              "there: move them away, or choose another run_dir=DIR")
        if present and not resuming and not overwrite:
            raise ConfigError(f"run directory {run_dir} holds a run already ({', '.join(present)}): continue "
                              f"it with resume={run_dir}, replace it with overwrite=true, or choose "
                              "another run_dir=DIR")
        try:
            yield
        finally:
            if not owned(run_dir) and not existing_run(run_dir):  # it stopped before writing: no trace
                if not locked_before:
                    (run_dir / LOCK).unlink(missing_ok=True)
                if created:
                    _remove_if_empty(run_dir)


def remove_run_files(run_dir: Path) -> None:
    """Delete the run's own files in ``run_dir`` and its members' (a run replaced with
    overwrite=true); anything else a person put there stays."""
    if not owned(run_dir):
        return
    for member in member_runs(run_dir):
        remove_run_files(member)
        for name in (LOCK, MARK):
            (member / name).unlink(missing_ok=True)
        _remove_if_empty(member)
    _remove_if_empty(run_dir / MEMBERS)
    for name in RUN_FILES:
        path = run_dir / name
        if path.is_symlink() or path.is_file():  # a folder of a run file's name is a person's, not the run's
            path.unlink()
        for tmp in run_dir.glob(f".{name}.*.tmp"):  # left by a write a kill interrupted
            tmp.unlink()
    (run_dir / MARK).unlink(missing_ok=True)


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # missing, or it holds someone's files
        folder.rmdir()


def _still_there(lock, path: Path) -> bool:
    """Whether the locked file is still the one at ``path`` (a run that stopped before writing takes
    its lock file away: a process that opened it just before holds a lock on nothing)."""
    try:
        return os.fstat(lock.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


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
