"""Files written whole and only where meant: every writer of bnn-zoo goes through ``write_atomic``,
which writes a temporary file beside the target (never through a symbolic link someone planted),
syncs it and renames it over the target, so readers see the old file or the new one and a failed
write (a full disk, a read-only folder) leaves the old one intact and says so in one line.

Usage::

    write_atomic(run_dir / "metrics.json", json.dumps(metrics))
    write_atomic(run_dir / "checkpoint.pt", lambda f: torch.save(state, f))
    check_writable(run_dir)        # before a long piece of work that ends in a write
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Union

from ...core.errors import StorageError

Content = Union[str, bytes, Callable[[BinaryIO], None]]  # text, bytes, or a function that writes a file
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Windows has no symbolic links to follow by accident
PROBE_BYTES = 1 << 20  # check_writable writes this much: a nearly full disk fails the check, not the work


def write_atomic(path: str | Path, content: Content) -> None:
    """Write ``content`` to ``path`` whole: to a temporary file of a name of its own beside it
    (``.NAME.XXXXXXXX.tmp``, created afresh, so never through a link and never another writer's),
    synced, then renamed over ``path``. A symbolic link at ``path`` itself is refused."""
    path = Path(path)
    try:
        link = path.is_symlink()
    except OSError as err:  # a name too long, say
        raise StorageError(f"cannot write {path} ({_reason(err)})") from None
    if link:
        raise StorageError(f"{path} is a symbolic link; bnn-zoo writes only files it makes: remove the link "
                           "or write elsewhere")
    tmp = None
    try:
        f, tmp = _create(path.parent, f".{path.name}.")
        with f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode() if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        _discard(tmp)
        kept = f"{path.name} keeps its previous content" if path.exists() else "nothing was written"
        raise StorageError(f"cannot write {path} ({_reason(err)}); {kept}") from None
    except BaseException:
        _discard(tmp)
        raise


def _create(folder: Path, prefix: str) -> tuple[BinaryIO, Path]:
    """A new file of a random name in ``folder``, opened for writing (``tempfile.mkstemp``: O_EXCL, so
    nothing planted there is followed or reused), readable as a written file is (0644)."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    os.fchmod(fd, 0o644)
    return os.fdopen(fd, "wb"), Path(name)


def _discard(tmp: Path | None) -> None:
    """Remove a temporary file this process made, if it is still there."""
    if tmp is not None:
        with contextlib.suppress(OSError):
            tmp.unlink()


def open_lock(path: Path):
    """``path`` opened for reading and writing, created if missing; a symbolic link is refused (a
    lock file must not truncate a file elsewhere)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise StorageError(f"{path} is a symbolic link; bnn-zoo writes only files it makes: remove it") from None
        raise StorageError(f"cannot open {path} ({_reason(err)})") from None
    return os.fdopen(fd, "r+")


def check_writable(folder: str | Path, size: int = PROBE_BYTES) -> None:
    """Fail now, in one line, if ``folder`` cannot take a file of ``size`` bytes (read-only, full,
    missing, a dangling link, a name too long), instead of after the work that would write it."""
    folder = Path(folder)
    _refuse_dangling(folder)
    probe = None
    try:
        f, probe = _create(folder, ".bnn_zoo_probe.")
        with f:
            f.write(bytes(size))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise StorageError(f"cannot write into {folder} ({_reason(err)}): make it writable, free space, or "
                           "choose another folder") from None
    finally:
        _discard(probe)


def _refuse_dangling(folder: Path) -> None:
    try:
        dangling = folder.is_symlink() and not folder.exists()
    except OSError as err:  # a name too long, say
        raise StorageError(f"cannot use folder {folder} ({_reason(err)})") from None
    if dangling:
        raise StorageError(f"{folder} is a symbolic link to {os.readlink(folder)}, which does not exist: "
                           "create its target or choose another folder")


def make_folder(folder: str | Path) -> Path:
    """``folder`` and its parents, created where missing; one line on why not."""
    folder = Path(folder)
    _refuse_dangling(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StorageError(f"cannot create folder {folder} ({_reason(err)})") from None
    return folder


def read_json(path: str | Path, what: str, fix: str) -> object:
    """A JSON file bnn-zoo wrote; a missing, truncated, mangled or absurdly nested one is one line
    naming ``path`` (``what`` it should be, ``fix``: how to get a good one)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StorageError(f"no {what} at {path}: {fix}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err).splitlines()[0][:200]
        raise StorageError(f"{path} is not a readable {what} ({reason}): {fix}") from None


def _reason(err: OSError) -> str:
    return err.strerror or err.__class__.__name__
