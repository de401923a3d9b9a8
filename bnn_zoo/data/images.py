"""Image files as the networks see them: ``decode``, the one reader of every image file bnn-zoo
opens (the raster formats of FORMATS only: EXIF orientation applied, transparency composited on the
background that contrasts with the ink, 16-bit and floating-point pixels scaled to 0..255), and
``load_image``, a person's digit as MNIST's 28x28, white on black: the ink fitted into 20x20 and
centred by its centre of mass, as MNIST's digits were (a drawing in a corner of a canvas reads as
the digit it is; a 28x28 image is taken as it is).

``remade`` reads a batch of 28x28 images as MNIST's digits were made (their background brought
to black and their brightest ink to white, the ink fitted into 20x20 and centred by its mass), at
once on the tensor: what a run with ``data.remade`` answers beside each input as given.

Usage: ``pixels = load_image("digit.jpg")  # uint8 [28, 28]``; ``decode("cat.png", channels=3)``;
``pixel_count("cat.png")  # from its header``; ``remade(images)  # uint8 [N, 28, 28]``
"""
from __future__ import annotations

import re
import struct
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

# The formats read: Pillow's plugin name, the name people know. Only raster formats Pillow decodes
# itself: no other plugin sees a file (Pillow renders EPS by running Ghostscript, an outside program).
FORMATS = {"PNG": "PNG", "JPEG": "JPEG", "GIF": "GIF", "BMP": "BMP", "TIFF": "TIFF", "WEBP": "WebP",
           "PPM": "PGM/PPM"}  # Pillow's PPM plugin reads PBM, PGM and PPM
SEND = f"send {', '.join(list(FORMATS.values())[:-1])} or {list(FORMATS.values())[-1]}"
# Larger images are refused before they are decoded (a 48 KB PNG can hold 20000 x 20000 pixels).
MAX_PIXELS = 25_000_000
# Where the ink's box ends when a picture is centred: fainter pixels (a photo's paper, JPEG's
# ripples) do not stretch it.
INK_FLOOR = 32


def decode(source: str | Path | BinaryIO, channels: int = 1) -> torch.Tensor:
    """An image file (a path, or a binary file object such as io.BytesIO) as floats [channels, H,
    W] in 0..255, gray (1 channel) or RGB (3): the one decoder of every image bnn-zoo reads (a
    person's digit, a folder of your own images, an OOD folder, an upload to the page).

    Only the raster formats of FORMATS are decoded, an image of more than MAX_PIXELS is refused
    before it is, EXIF orientation is applied, transparent pixels take the background that
    contrasts with the ink (a dark digit drawn on nothing gets white paper), 16-bit and
    floating-point pixels are scaled to 0..255. Raises ValueError with the reason when the file
    cannot be read as such an image, whatever the decoder raised (a malformed file fails in many ways).

    Usage: ``values = decode("cat.png", channels=3)  # float32 [3, H, W]``
    """
    from PIL import ImageOps

    with _opened(source) as img:
        return _values(ImageOps.exif_transpose(img), channels)


def pixel_count(source: str | Path | BinaryIO) -> int:
    """How many pixels ``decode`` would decode (width x height), read from the file's header alone,
    with ``decode``'s refusals: what a bound on the memory of decodes in flight weighs first."""
    with _opened(source) as img:
        return img.width * img.height


@contextmanager
def _opened(source: str | Path | BinaryIO):
    """The image file opened by Pillow (a format of FORMATS, at most MAX_PIXELS), and whatever
    fails while it is read, opened or decoded, as a ValueError that says why in a line."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source, formats=list(FORMATS)) as img:
                if img.width * img.height > MAX_PIXELS:
                    raise ValueError(_too_large(img.width * img.height))
                yield img
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:  # Pillow's own bound, past ours
        size = re.search(r"\((\d+) pixels\)", str(err))
        raise ValueError(_too_large(int(size.group(1))) if size else "too large to decode safely; scale it down first") from None
    except UnidentifiedImageError:
        refused = _other_format(source)
        raise ValueError(f"not an image format bnn-zoo reads ({refused}); {SEND}" if refused else
                         f"not a readable image; {SEND}") from None
    except ValueError:
        raise  # ours, and Pillow's own, say why in a line
    except Exception as err:  # noqa: BLE001 - any failure of a decoder (a malformed tag: TypeError) is the file's
        raise ValueError(f"not a readable image ({err.__class__.__name__})") from None


def _too_large(pixels: int) -> str:
    return f"{pixels:,} pixels is too large (at most {MAX_PIXELS:,}); scale it down first"


def load_image(path: str | Path | BinaryIO, invert: str = "auto", centre: bool = True) -> torch.Tensor:
    """An image file (a path, or a binary file object such as io.BytesIO) as MNIST's format:
    grayscale uint8 [28, 28], white on black.

    ``invert``: "auto" inverts images whose border is light (dark ink on paper), "yes", "no".
    ``centre``: fit the ink (the pixels brighter than INK_FLOOR) into 20x20 and centre it by its
    mass in 28x28, as MNIST's digits were; False: the whole image resized to 28x28. An image of
    28x28 is taken as it is, already in MNIST's format. Raises ``decode``'s ValueError.
    """
    gray = decode(path, 1)[0]
    pixels = _resized(gray)
    border = torch.cat([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]]).float().mean()
    flip = invert == "yes" or (invert == "auto" and border > 127)
    if centre and gray.shape != (28, 28):  # at the image's own resolution, not after shrinking it
        from PIL import Image

        ink = (255 - gray if flip else gray).round().clamp(0, 255).to(torch.uint8)
        return centred(Image.fromarray(ink.numpy(), "L"), floor=INK_FLOOR)
    return 255 - pixels if flip else pixels


def centred(glyph, floor: int = 0) -> torch.Tensor:
    """A white-on-black PIL image (mode L), its ink fitted into 20x20 and centred by its centre of
    mass in 28x28, as MNIST's digits were. The ink's box holds the pixels brighter than ``floor``."""
    from PIL import Image

    box = (glyph.point(lambda v: 255 if v > floor else 0) if floor else glyph).getbbox()
    if box is None:
        return torch.zeros(28, 28, dtype=torch.uint8)
    glyph = glyph.crop(box)
    scale = 20 / max(glyph.size)
    glyph = glyph.resize((max(1, round(glyph.width * scale)), max(1, round(glyph.height * scale))),
                         Image.LANCZOS)
    small = torch.frombuffer(bytearray(glyph.tobytes()), dtype=torch.uint8).view(glyph.height, glyph.width).float()
    ys, xs = torch.meshgrid(torch.arange(glyph.height), torch.arange(glyph.width), indexing="ij")
    mass = small.sum().clamp_min(1)
    cy, cx = float((ys * small).sum() / mass), float((xs * small).sum() / mass)
    top, left = round(14 - cy), round(14 - cx)
    top, left = min(max(top, 0), 28 - glyph.height), min(max(left, 0), 28 - glyph.width)
    out = torch.zeros(28, 28)
    out[top:top + glyph.height, left:left + glyph.width] = small
    return out.clamp(0, 255).to(torch.uint8)


def remade(images: torch.Tensor) -> torch.Tensor:
    """uint8 (or 0..255 float) images [N, 28, 28] remade as MNIST's digits were, uint8 [N, 28, 28]:
    each image's background (its median pixel) to black and its brightest pixel to white, then its
    ink (the pixels brighter than INK_FLOOR) fitted into 20x20 and centred by its mass in 28x28,
    as ``centred`` places a picture's ink (bilinear, on the whole batch at once). An image with no
    ink becomes black. MNIST's own digits come back as they are."""
    if images.dim() != 3 or tuple(images.shape[1:]) != (28, 28):
        raise ValueError(f"remade reads images [N, 28, 28], got shape {tuple(images.shape)}")
    n, side = len(images), 28
    flat = images.float().flatten(1)
    background, top = flat.median(1).values[:, None], flat.max(1).values[:, None]
    x = ((flat - background) / (top - background).clamp_min(1) * 255).clamp(0, 255).round().view(n, side, side)
    ink, at = x > INK_FLOOR, torch.arange(side, device=images.device)
    rows, cols = ink.any(2), ink.any(1)
    first = lambda hit: torch.where(hit, at, side).min(1).values  # noqa: E731
    last = lambda hit: torch.where(hit, at, -1).max(1).values  # noqa: E731
    top_row, left = first(rows), first(cols)
    height, width = (last(rows) - top_row + 1).clamp_min(1).float(), (last(cols) - left + 1).clamp_min(1).float()
    inside = ((at[:, None] >= top_row[:, None, None]) & (at[:, None] <= last(rows)[:, None, None])
              & (at >= left[:, None, None]) & (at <= last(cols)[:, None, None]))
    glyph = x * inside  # the ink's box alone, as centred crops it
    scale = 20 / torch.maximum(height, width)
    mass = glyph.sum((1, 2)).clamp_min(1)
    # the centre of mass within the scaled box, in its pixels' coordinates; the box placed so that
    # it lands on pixel 14, kept inside the frame (as centred does)
    cy = ((glyph.sum(2) * at).sum(1) / mass - top_row + 0.5) * scale - 0.5
    cx = ((glyph.sum(1) * at).sum(1) / mass - left + 0.5) * scale - 0.5
    y0 = (14 - cy).round().clamp(min=torch.zeros_like(cy), max=side - (height * scale).round())
    x0 = (14 - cx).round().clamp(min=torch.zeros_like(cx), max=side - (width * scale).round())
    centres = at.float() + 0.5  # each output pixel's centre, sampled from the glyph in the input's pixels
    ys = (top_row[:, None] + (centres - y0[:, None]) / scale[:, None]) / side * 2 - 1
    xs = (left[:, None] + (centres - x0[:, None]) / scale[:, None]) / side * 2 - 1
    grid = torch.stack(torch.broadcast_tensors(xs[:, None, :], ys[:, :, None]), -1)
    out = torch.nn.functional.grid_sample(glyph[:, None], grid, mode="bilinear", padding_mode="zeros",
                                          align_corners=False)[:, 0]
    out[~rows.any(1)] = 0
    return out.round().clamp(0, 255).to(torch.uint8)


def _other_format(path: str | Path | BinaryIO) -> str | None:
    """The format Pillow would take a file for among those not read (EPS, ...), by its first bytes
    alone, as Pillow identifies formats: no plugin opens the file. None when no format claims it."""
    from PIL import Image

    Image.init()
    prefix = _first_bytes(path)
    for name, (_, accept) in Image.OPEN.items():
        if name in FORMATS or accept is None:
            continue
        try:
            claims = accept(prefix)
        except (struct.error, IndexError, TypeError, SyntaxError):  # as Pillow: a prefix too short to check
            continue
        if claims and not isinstance(claims, str):  # a str is Pillow's "needs a missing library"
            return name
    return None


def _first_bytes(path: str | Path | BinaryIO) -> bytes:
    """A file's first 16 bytes, read again; b"" from a pipe, which Pillow has read to its end."""
    if isinstance(path, (str, Path)):
        if not Path(path).is_file():
            return b""
        with open(path, "rb") as fp:
            return fp.read(16)
    if not path.seekable():
        return b""
    path.seek(0)
    return path.read(16)


WIDE = ("I", "I;16", "I;16B", "I;16L", "F")  # Pillow's modes of 16- and 32-bit pixels, one band


def _values(img, channels: int) -> torch.Tensor:
    """The pixels as floats [channels, H, W] in 0..255: transparency composited on the background
    that contrasts with the ink, wide pixel types scaled."""
    if img.mode in WIDE:
        return _wide(img).expand(channels, -1, -1)
    mode = "L" if channels == 1 else "RGB"
    if "A" not in img.getbands() and "transparency" not in img.info:
        return _floats(img.convert(mode))
    rgba = img.convert("RGBA")
    luminance, alpha = _floats(rgba.convert("L"))[0], _floats(rgba.getchannel("A"))[0] / 255
    ink = (luminance * alpha).sum() / alpha.sum().clamp_min(1e-6)
    background = 255.0 if ink < 128 else 0.0
    return _floats(rgba.convert(mode)) * alpha + background * (1 - alpha)


def _wide(img) -> torch.Tensor:
    """A 16- or 32-bit one-band image as floats [H, W] in 0..255."""
    values = _floats(img if img.mode == "F" else img.convert("F"))[0]
    broken = int((~values.isfinite()).sum())
    if broken:
        raise ValueError(f"holds {broken} non-finite pixels (NaN or inf); every pixel must be a number "
                         "(floats 0..1 or 0..255)")
    values = values.clamp_min(0)
    if img.mode.startswith("I;16"):
        return values * (255.0 / 65535)  # 16 bits, whatever the picture's brightest pixel
    top = float(values.max()) if values.numel() else 0.0
    if img.mode == "F" and top <= 1.0:
        return values.clamp_max(1) * 255  # floats in 0..1
    # 32-bit integers or floats: 0..255 as they are, else 16-bit range, else the image's own
    return values if top <= 255 else values * (255.0 / (65535.0 if top <= 65535 else top))


def _floats(img) -> torch.Tensor:
    """An image of mode L, F or RGB as float32 [bands, H, W]."""
    return torch.from_numpy(np.asarray(img, dtype=np.float32).copy()).reshape(img.height, img.width, -1).permute(2, 0, 1)


def _resized(gray: torch.Tensor):
    """[H, W] floats to 28 x 28 uint8, with Pillow's bilinear filter (antialiased when shrinking)."""
    from PIL import Image

    img = Image.frombytes("F", (gray.shape[1], gray.shape[0]), gray.contiguous().numpy().tobytes())
    small = img.resize((28, 28), Image.BILINEAR)
    return _floats(small)[0].round().clamp(0, 255).to(torch.uint8)
