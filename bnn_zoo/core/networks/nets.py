"""Plain PyTorch networks of the zoo. They know nothing of Pyro: ``bnn_zoo.bayesian`` puts priors
on their weights, and the same classes are the deterministic twins.

Usage: ``net = LeNet5(); logits = net(torch.zeros(8, 1, 28, 28))``
"""
from __future__ import annotations

import torch
from torch import nn


def _dropout(p: float) -> list[nn.Module]:
    return [nn.Dropout(p)] if p else []  # none at 0, so the layers' names stay those of a plain net


class ImageTooSmall(ValueError):
    """Images smaller than a network takes: ``least`` is the smallest side it takes."""

    def __init__(self, message: str, least: int):
        super().__init__(message)
        self.least = least


class MLP(nn.Module):
    """Fully connected ReLU network; flattens image inputs. ``dropout``: rate after each hidden layer."""

    def __init__(self, in_features: int, hidden: list[int], out_features: int, dropout: float = 0.0):
        super().__init__()
        widths = [in_features, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(), *_dropout(dropout)]
        layers.append(nn.Linear(widths[-1], out_features))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class LeNet5(nn.Module):
    """LeNet-5 for square images (1x28x28 unless given): conv 6@5x5 (padded), pool, conv 16@5x5,
    pool, 120-84-classes. ``dropout``: rate after each hidden fully connected layer."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.0, in_channels: int = 1, size: int = 28):
        super().__init__()
        side = (size // 2 - 4) // 2  # after the padded conv, a pool, the 5x5 conv and a pool
        if side < 1:
            raise ImageTooSmall(f"LeNet-5 takes images of at least 12x12, got {size}x{size}", 12)
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.classifier = nn.Sequential(
            nn.Linear(16 * side * side, 120), nn.ReLU(), *_dropout(dropout), nn.Linear(120, 84), nn.ReLU(),
            *_dropout(dropout), nn.Linear(84, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
