"""The errors a user can cause: each says what was wrong and how to fix it, and every command
line turns it into one line on stderr and exit code 2 (``bnn_zoo.cli.options.run``).

Usage: ``raise ConfigError("bad config key 'train.lr': must be positive, got -1")``
"""


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
