"""The errors a user can cause: each says what was wrong and how to fix it, and every command
line turns it into one line on stderr and exit code 2 (``bnn_zoo.cli.options.run``); and the
notices of names an earlier bnn-zoo used, each said once (``say_once``).

Usage: ``raise ConfigError("bad value for train.lr: must be a positive number, got -1")``
"""
from __future__ import annotations

import re
import sys
import warnings
from typing import Any, Optional

_SAID: set = set()  # the notices this process has given (a warning's: with the place it pointed at)


class UserError(Exception):
    """An input the user can fix: a config, a file, a data set, an argument."""


class ConfigError(UserError, ValueError):
    """A config file, name or override that cannot be used."""


class DataError(UserError, RuntimeError):
    """A data set that is missing or unreadable; the message says where to put it."""


class CheckpointError(UserError, RuntimeError):
    """A run directory or checkpoint that cannot be loaded; the message says why."""


class TrainingError(UserError, RuntimeError):
    """Training cannot go on (a non-finite loss); the last good checkpoint is kept."""


class InstallError(UserError, RuntimeError):
    """Installed packages that do not work together (a torchvision built for another torch); the
    message says which, and the command that installs a pair that does."""


class StorageError(UserError, RuntimeError):
    """A file or folder that cannot be written or read as asked (read-only, full, a planted link,
    damaged); the message names it, and what was there before is intact."""


def show(value: Any) -> str:
    """A user's value as a message quotes it, cut to 60 characters."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:60] + "..."


def short_quotes(text: str) -> str:
    """``text`` with each value it quotes ('...') shortened as _show does."""
    return re.sub(r"'([^']*)'", lambda quoted: show(quoted.group(1)), text)


def say(err: Exception) -> None:
    """Say a user's mistake as every command line does, one line on stderr (``error: ...``), and
    mark it said: a command that stops on it ends with exit code 2 and says nothing more. A rank of
    a torchrun run says another rank's mistake nowhere (``said_elsewhere``): they share one terminal."""
    if not getattr(err, "said", False):
        print(f"error: {err}", file=sys.stderr, flush=True)
    err.said = True


def said_elsewhere(err: Exception) -> Exception:
    """``err``, marked as said by another process of the same command (another rank of the run)."""
    err.said = True
    return err


def say_once(notice: str, category: Optional[type[Warning]] = None) -> None:
    """Give ``notice`` (a renamed name: "note: X is now Y") once: a line on stderr the first time this
    process asks; or a warning of ``category`` (a DeprecationWarning for a name of the library)
    pointing at the caller's caller, the first time each place in the code asks. Once a place, not
    once a process: ``from bnn_zoo import X`` has the import system probe the module's ``__getattr__``
    before the import reads it (one place, one warning), and a warning filtered away at one use (a
    test's filter, a tool's probe) would otherwise have silenced the name everywhere after it."""
    key = notice if category is None else (notice, *_place(3))
    if key in _SAID:
        return
    _SAID.add(key)
    if category is None:
        print(notice, file=sys.stderr)
    else:
        warnings.warn(notice, category, stacklevel=3)


def _place(stacklevel: int) -> tuple[str, int]:
    """The file and line ``warnings.warn(stacklevel=...)`` called from the caller points at: frames of
    the import system are passed over, as warnings passes over them."""
    frame = sys._getframe(1)
    for _ in range(stacklevel - 1):
        frame = frame.f_back
        while frame is not None and "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is None:
            return "sys", 1
    return frame.f_code.co_filename, frame.f_lineno
