"""Trust a network by name, so that stored runs naming it (with these keyword arguments) are built
here: ``bnn_zoo.runs.storage.trust_list`` says why a stored config's network needs it. Without NAME: list the
trusted networks.

Usage: python -m bnn_zoo.trust mynets:small_cnn --kwargs '{"width": 16}'
"""
from __future__ import annotations

import json
import sys

from ..core.errors import ConfigError
from ..runs.storage.trust_list import trust, trust_file, trusted
from . import options as cli


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
