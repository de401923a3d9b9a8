"""``python -m bnn_zoo.calibrate``: the old name of ``python -m bnn_zoo.certify``, which it runs
after a one-line notice (certifying a risk bound is not probability calibration)."""
import sys

from .cli.certify import main
from .core.errors import say_once

if __name__ == "__main__":
    say_once("note: python -m bnn_zoo.calibrate is now python -m bnn_zoo.certify")
    sys.exit(main())
