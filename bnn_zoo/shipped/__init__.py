"""Trained posteriors that ship with the package: ``bnn_zoo.load(NAME)``; written by
``python scripts/ship_posterior.py RUN_DIR NAME``. And an image to ask each about, as a 28x28 PNG:
``EXAMPLE``, the first test image of MNIST (a 7), and ``FASHION_EXAMPLE``, the first Sneaker of
FashionMNIST's test set (its image 9; ``python scripts/export_pngs.py fashion_mnist DIR --per-class 1
--test-per-class 1`` writes it as DIR/test/Sneaker/9.png).

Usage: ``python -m bnn_zoo.predict lenet bnn_zoo/shipped/seven.png``, or from Python
``normalize(load_image(EXAMPLE)[None])`` (``bnn_zoo.data.images.load_image``, ``bnn_zoo.data.normalize``)
"""
from pathlib import Path

EXAMPLE = Path(__file__).with_name("seven.png")
FASHION_EXAMPLE = Path(__file__).with_name("sneaker.png")
