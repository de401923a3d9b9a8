"""The errors a user can cause: each says what was wrong and how to fix it, and every command
line turns it into one line on stderr and exit code 2 (``bnn_zoo.cli.options.run``).

Usage: ``raise ConfigError("bad config key 'train.lr': must be positive, got -1")``
"""
from __future__ import annotations

import re
from typing import Any


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
