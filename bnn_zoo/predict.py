"""``python -m bnn_zoo.predict RUN_OR_NAME FILE ...``: answers, or "I don't know" (``bnn_zoo.cli.predict``).
``bnn_zoo.predict``, the function, is ``bnn_zoo.core.inference.predictive.predict``: this module is the command alone."""
import sys

from .cli.predict import main

if __name__ == "__main__":
    sys.exit(main())
