"""A person's image file as the networks see their inputs: MNIST's 28x28, white on black.

Reads what people send: any format Pillow opens, EXIF orientation applied, transparency composited
on the background that contrasts with the ink, 16-bit and floating-point pixels scaled to 0..255.

Usage: ``pixels = load_image("digit.jpg")  # uint8 [28, 28]``
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch

# Larger images are refused before they are decoded (a 48 KB PNG can hold 20000 x 20000 pixels).
MAX_PIXELS = 25_000_000


def load_image(path: str | Path, invert: str = "auto") -> torch.Tensor:
    """An image file as MNIST's format: grayscale uint8 [28, 28], white on black.

    ``invert``: "auto" inverts images whose border is light (dark ink on paper), "yes", "no".
    Raises ValueError with the reason when the file cannot be read as an image.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                width, height = img.size
                if width * height > MAX_PIXELS:
                    raise ValueError(f"{width} x {height} pixels is too large (at most {MAX_PIXELS:,}); "
                                     "scale it down first")
                gray = _grayscale(ImageOps.exif_transpose(img))
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ValueError(f"too large to decode safely ({err}); scale it down first") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise ValueError(f"not a readable image ({err.__class__.__name__})") from None
    pixels = _resized(gray)
    border = torch.cat([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]]).float().mean()
    if invert == "yes" or (invert == "auto" and border > 127):
        pixels = 255 - pixels
    return pixels


def _grayscale(img) -> torch.Tensor:
    """Luminance 0..255 as float [H, W]: transparent pixels take the background that contrasts with
    the ink (a dark digit drawn on nothing gets white paper), wide pixel types are scaled."""
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        values = _floats(img if img.mode == "F" else img.convert("F")).clamp_min(0)
        if img.mode.startswith("I;16"):
            return values * (255.0 / 65535)  # 16 bits, whatever the picture's brightest pixel
        top = float(values.max()) if values.numel() else 0.0
        if img.mode == "F" and top <= 1.0:
            return values.clamp_max(1) * 255  # floats in 0..1
        # 32-bit integers or floats: 0..255 as they are, else 16-bit range, else the image's own
        return values if top <= 255 else values * (255.0 / (65535.0 if top <= 65535 else top))
    if "A" in img.getbands() or "transparency" in img.info:
        rgba = img.convert("RGBA")
        luminance, alpha = _floats(rgba.convert("L")), _floats(rgba.getchannel("A")) / 255
        ink = (luminance * alpha).sum() / alpha.sum().clamp_min(1e-6)
        background = 255.0 if ink < 128 else 0.0
        return luminance * alpha + background * (1 - alpha)
    return _floats(img.convert("L"))


def _floats(img) -> torch.Tensor:
    """A one-band image (L or F) as float32 [H, W]."""
    width, height = img.size
    dtype = torch.float32 if img.mode == "F" else torch.uint8
    return torch.frombuffer(bytearray(img.tobytes()), dtype=dtype).reshape(height, width).float()


def _resized(gray: torch.Tensor):
    """[H, W] floats to 28 x 28 uint8, with Pillow's bilinear filter (antialiased when shrinking)."""
    from PIL import Image

    img = Image.frombytes("F", (gray.shape[1], gray.shape[0]), gray.contiguous().numpy().tobytes())
    small = img.resize((28, 28), Image.BILINEAR)
    return _floats(small).round().clamp(0, 255).to(torch.uint8)
