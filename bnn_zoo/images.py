"""A person's image file as the networks see their inputs: MNIST's 28x28, white on black.

Usage: ``pixels = load_image("digit.jpg")  # uint8 [28, 28]``
"""
from __future__ import annotations

from pathlib import Path

import torch


def load_image(path: str | Path, invert: str = "auto") -> torch.Tensor:
    """A PNG/JPEG file as MNIST's format: grayscale uint8 [28, 28], white on black.

    ``invert``: "auto" inverts images whose border is light (dark ink on paper), "yes", "no".
    Raises ValueError with the reason when the file cannot be read as an image.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img = img.convert("L").resize((28, 28), Image.BILINEAR)
            pixels = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(28, 28)
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"not a readable image ({err.__class__.__name__})") from None
    border = torch.cat([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]]).float().mean()
    if invert == "yes" or (invert == "auto" and border > 127):
        pixels = 255 - pixels
    return pixels
