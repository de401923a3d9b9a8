"""Trained posteriors that ship with the package: ``bnn_zoo.load(NAME)``; written by
``python scripts/ship_posterior.py RUN_DIR NAME``."""
