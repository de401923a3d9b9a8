"""Which networks by name (``arch: package.module:factory``, with its ``model.kwargs``) this user
lets a stored config build. Building one imports its module and calls the factory with those
arguments, which runs code, and a checkpoint is data: so a network a checkpoint names is built only
once that name with those arguments is trusted here. Training with them (the user gave them)
trusts them; ones from elsewhere are trusted by ``python -m bnn_zoo.trust NAME [--kwargs JSON]``.
A trusted name is not a trusted file: the module is whatever ``NAME`` imports where the command
runs (the folder a command starts in comes first). The list is a file, one JSON entry a line, in
``$BNN_ZOO_HOME`` (default ``~/.config/bnn_zoo``), refused where others may write it.

Usage: python -m bnn_zoo.trust mynets:small_cnn --kwargs '{"width": 16}'
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Callable

from . import cli
from .errors import CheckpointError, ConfigError, StorageError
from .files import make_folder, write_atomic

HOME_ENV = "BNN_ZOO_HOME"


def trust_file() -> Path:
    """Where the trusted networks are listed."""
    home = os.environ.get(HOME_ENV)
    if not home:
        try:
            home = Path.home() / ".config" / "bnn_zoo"
        except RuntimeError:
            raise ConfigError(f"no home folder to keep the trusted networks in: set {HOME_ENV}=DIR") from None
    return Path(home) / "trusted_networks"


def _entry(arch: str, kwargs: dict) -> str:
    return json.dumps({"arch": arch, "kwargs": kwargs}, sort_keys=True)


def trusted() -> list[str]:
    """The trusted entries; a list others may write is refused, as ssh refuses its keys."""
    path = trust_file()
    for place in (path.parent, path):
        if place.exists():
            info = place.stat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise CheckpointError(f"{place} is not yours alone to write: make it so (chmod go-w {place}) "
                                      "before bnn-zoo trusts the networks it lists")
    return path.read_text().splitlines() if path.is_file() else []


def trust(arch: str, kwargs: dict) -> None:
    """Trust the network by name ``arch`` built with ``kwargs`` (kept once)."""
    entries, entry = trusted(), _entry(arch, kwargs)
    if entry not in entries:
        make_folder(trust_file().parent)
        write_atomic(trust_file(), "\n".join([*entries, entry]) + "\n")


def trust_given(arch: str, kwargs: dict, log: Callable[[str], None]) -> None:
    """What training does with the network it was given: trust it (nothing for a registered recipe),
    or say why it could not, without stopping."""
    if ":" in arch:
        try:
            trust(arch, kwargs)
        except (ConfigError, CheckpointError, StorageError) as err:
            log(f"warning: {arch} is not recorded as trusted ({err}); loading its runs will ask for it")


def check_trusted(config: dict, source: str | Path) -> None:
    """Refuse a stored config (from ``source``) with an interpolation (bnn-zoo stores configs
    resolved: one is an edit) or naming a network by name with arguments not trusted here."""
    def strings(value):
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, (list, tuple)):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    if any("${" in s for s in strings(config)):
        raise CheckpointError(f"{source} holds a config with an interpolation (${{...}}), which bnn-zoo never "
                              "writes: the file was edited; use the run it came from")
    arch = str(config.get("arch"))
    kwargs = dict((config.get("model") or {}).get("kwargs") or {})
    if ":" in arch and _entry(arch, kwargs) not in trusted():
        given = f" --kwargs '{json.dumps(kwargs, sort_keys=True)}'" if kwargs else ""
        raise CheckpointError(f"{source} names the network {arch} (kwargs {kwargs}), which runs code when it is "
                              f"built; if you trust it: python -m bnn_zoo.trust {arch}{given}")


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.trust", __doc__)
    parser.add_argument("name", nargs="?", metavar="package.module:factory",
                        help="the network to trust (none: list the trusted ones)")
    parser.add_argument("--kwargs", default="{}", help="its model.kwargs as JSON (default {})")
    args = parser.parse_args(argv)

    def command() -> int:
        if args.name is not None:
            if ":" not in args.name:
                raise ConfigError(f"{args.name} is not a network by name (package.module:factory)")
            try:
                kwargs = json.loads(args.kwargs)
            except json.JSONDecodeError as err:
                raise ConfigError(f"--kwargs {args.kwargs} is not JSON ({err.msg}); e.g. --kwargs '{{\"width\": 16}}'") from None
            if not isinstance(kwargs, dict):
                raise ConfigError(f"--kwargs must be a JSON object of keyword arguments, not {args.kwargs}")
            trust(args.name, kwargs)
        print("\n".join(trusted()) or f"no trusted networks ({trust_file()})")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
