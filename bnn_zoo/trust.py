"""``python -m bnn_zoo.trust NAME``: trust a network by name (``bnn_zoo.cli.trust``)."""
import sys

from .cli.trust import main

if __name__ == "__main__":
    sys.exit(main())
