"""``python -m bnn_zoo.certify RUN_DIR``: certify a run's abstention rules and sets on its
validation split (``bnn_zoo.cli.certify``)."""
import sys

from .cli.certify import main

if __name__ == "__main__":
    sys.exit(main())
