"""``python -m bnn_zoo.evaluate RUN_OR_NAME``: every figure of a trained classifier
(``bnn_zoo.cli.evaluate``)."""
import sys

from .cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
