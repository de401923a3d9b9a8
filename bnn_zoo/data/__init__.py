"""Data sets as whole tensors: MNIST, FashionMNIST and the toy curves (``sets``), your own folder of
images, tensor file or CSV table (``own``, through one reader per kind: ``images``, ``folders``,
``csv_tables``), inputs as a run's network reads them (``inputs``), out-of-distribution sets and
MNIST-C's corruptions.

Usage: ``x = bnn_zoo.data.normalize(uint8_images)  # [N, 1, 28, 28] as the MNIST networks read it``
"""
from .sets import MNIST_MEAN, MNIST_STD, load_torchvision, normalize

__all__ = ["MNIST_MEAN", "MNIST_STD", "load_torchvision", "normalize"]
