"""``python -m bnn_zoo.serve [RUN_OR_NAME]``: the local page (``bnn_zoo.cli.serve``)."""
import sys

from .cli.serve import main

if __name__ == "__main__":
    sys.exit(main())
