"""Which networks by name (``arch: package.module:factory``) this user lets a stored config build.
Building one imports its module and calls the factory, which runs code, and a checkpoint is data:
so a network a checkpoint names is built only once its name is trusted here. Training with a name
(typed by the user) trusts it; one from elsewhere is trusted by
``python -m bnn_zoo.trust NAME``. The list is a text file, a name a line, in ``$BNN_ZOO_HOME``
(default ``~/.config/bnn_zoo``).

Usage: python -m bnn_zoo.trust mynets:small_cnn        # then load, predict, evaluate its runs
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from . import cli
from .errors import CheckpointError, ConfigError
from .files import make_folder, write_atomic

HOME_ENV = "BNN_ZOO_HOME"


def trust_file() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".config" / "bnn_zoo") / "trusted_networks"


def trusted_names() -> list[str]:
    path = trust_file()
    return path.read_text().split() if path.is_file() else []


def trust(name: str) -> None:
    """Add the network by name ``name`` to the trusted ones (kept once; a registered recipe needs none)."""
    names = trusted_names()
    if ":" in name and name not in names:
        make_folder(trust_file().parent)
        write_atomic(trust_file(), "\n".join([*names, name]) + "\n")


def check_trusted(config: dict, source: str | Path) -> None:
    """Refuse a stored config (from ``source``) that names a network by name not trusted here."""
    arch = str(config.get("arch"))
    if ":" in arch and arch not in trusted_names():
        kwargs = (config.get("model") or {}).get("kwargs") or {}
        raise CheckpointError(f"{source} names the network {arch} (kwargs {kwargs}), which runs code when it is "
                              f"built; if you trust it: python -m bnn_zoo.trust {arch}")


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.trust", __doc__)
    parser.add_argument("names", nargs="*", metavar="package.module:factory",
                        help="the networks to trust (none: list the trusted ones)")
    args = parser.parse_args(argv)

    def command() -> int:
        for name in args.names:
            if ":" not in name:
                raise ConfigError(f"{name} is not a network by name (package.module:factory)")
            trust(name)
        print("\n".join(trusted_names()) or f"no trusted networks ({trust_file()})")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
