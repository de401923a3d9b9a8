"""Refusals of a trained classifier on MNIST test against notMNIST letters, Bayesian vs
deterministic: a table, its JSON and plots (histograms of sampled probabilities, mean-probability
bars, refusals against threshold, risk-coverage, reliability).

Usage: python scripts/reject_notmnist.py runs/lenet [--samples 100] [--threshold 0.2]
"""
import sys

from bnn_zoo.cli.rejection import script_main


def main(argv=None) -> int:
    return script_main("notmnist", argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
