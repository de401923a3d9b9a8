"""``python -m bnn_zoo.train [CONFIG] [key=value ...]``: train a Bayesian network and its twin
(``bnn_zoo.cli.train``)."""
import sys

from .cli.train import main, train  # noqa: F401 - train: the documented function

if __name__ == "__main__":
    sys.exit(main())
