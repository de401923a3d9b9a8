"""Trained posteriors that ship with the package: ``bnn_zoo.load(NAME)``; written by
``python scripts/ship_posterior.py RUN_DIR NAME``. And a digit to ask them about: ``EXAMPLE``, the
first test image of MNIST (a 7), as a 28x28 PNG.

Usage: ``python -m bnn_zoo.predict lenet bnn_zoo/shipped/seven.png``, or from Python
``normalize(load_image(EXAMPLE)[None])`` (``bnn_zoo.data.images.load_image``, ``bnn_zoo.data.normalize``)
"""
from pathlib import Path

EXAMPLE = Path(__file__).with_name("seven.png")
