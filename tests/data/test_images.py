import io

import numpy as np
import pytest
import torch
from PIL import Image

from bnn_zoo.data.images import FORMATS, load_image


def test_load_image_converts_to_white_on_black(tmp_path):
    dark_on_light = Image.new("L", (64, 64), 255)
    dark_on_light.paste(0, (20, 20, 44, 44))
    dark_on_light.convert("RGB").save(tmp_path / "paper.jpg")
    pixels = load_image(tmp_path / "paper.jpg")
    assert pixels.shape == (28, 28) and pixels.dtype == torch.uint8
    assert pixels[0, 0] < 20 and pixels[14, 14] > 235
    assert load_image(tmp_path / "paper.jpg", invert="no", centre=False)[0, 0] > 235
    assert load_image(tmp_path / "paper.jpg", invert="no")[14, 14] < 20  # the dark square, not inverted
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable image"):
        load_image(tmp_path / "empty.png")
    with pytest.raises(ValueError, match="no such file"):
        load_image(tmp_path / "missing.png")


def test_a_drawing_anywhere_on_the_canvas_reads_as_mnist_draws_its_digits(seven, tmp_path):
    canvas = Image.new("L", (400, 400))
    canvas.paste(seven.resize((80, 80)), (300, 10))  # small, in the top right corner
    canvas.save(tmp_path / "corner.png")
    seven.save(tmp_path / "middle.png")
    corner, middle = load_image(tmp_path / "corner.png"), load_image(tmp_path / "middle.png")
    ink = corner.nonzero().float()
    assert 19 <= (ink.max(0).values - ink.min(0).values + 1).max() <= 21  # fitted into 20x20
    plain = load_image(tmp_path / "corner.png", centre=False)
    assert plain[:, :20].sum() == 0  # without centring it stays in its corner
    distance = lambda a, b: (a.int() - b.int()).abs().float().mean()  # noqa: E731
    assert distance(corner, middle) < distance(plain, middle) / 3  # centred: the same digit, wherever drawn


def test_images_of_28_by_28_come_out_unchanged(shared_data, tmp_path):
    from bnn_zoo.data.sets import load_torchvision

    images = load_torchvision("mnist", str(shared_data), train=False, download=False)[0][:200]
    for i, digit in enumerate(images):
        Image.fromarray(digit.numpy()).save(tmp_path / f"{i}.png")
        assert torch.equal(load_image(tmp_path / f"{i}.png"), digit)


@pytest.fixture
def seven():
    """A digit drawn white on black at 112 x 112, and what load_image makes of it."""
    pixels = torch.zeros(112, 112, dtype=torch.uint8)
    pixels[20:30, 25:90] = 255  # the bar
    for row in range(30, 95):  # the stem, slanting left
        col = 85 - (row - 30) // 2
        pixels[row, col - 5:col + 5] = 255
    return Image.fromarray(pixels.numpy(), "L")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.int() - b.int()).abs().max() <= 2


@pytest.mark.parametrize("kind", ["alpha_dark_ink", "alpha_light_ink", "float_0_1", "float_0_255", "sixteen_bit",
                                  "exif_rotated", "palette_transparent"])
def test_images_people_send_read_as_the_same_digit(kind, seven, tmp_path):
    seven.save(tmp_path / "plain.png")
    expected = load_image(tmp_path / "plain.png")
    array = np.asarray(seven)
    if kind.startswith("alpha"):  # the digit drawn in the alpha channel; colour of the ink only
        ink = 0 if kind == "alpha_dark_ink" else 255
        img = Image.new("RGBA", seven.size, (ink, ink, ink, 0))
        img.putalpha(seven)
        path = tmp_path / "alpha.png"
    elif kind.startswith("float"):
        scale = 1 / 255 if kind == "float_0_1" else 1.0
        img, path = Image.fromarray(array.astype(np.float32) * scale, "F"), tmp_path / "float.tif"
    elif kind == "sixteen_bit":
        img, path = Image.fromarray(array.astype(np.uint16) * 257), tmp_path / "deep.png"
    elif kind == "exif_rotated":  # stored on its side as cameras do; the EXIF tag turns it upright
        img, path = seven.rotate(90, expand=True).convert("RGB"), tmp_path / "photo.jpg"
        exif = Image.Exif()
        exif[0x0112] = 6
        img.save(path, exif=exif.tobytes(), quality=100)
    else:  # a palette image whose background entry is transparent
        img = seven.convert("P")
        img.info["transparency"] = 0
        path = tmp_path / "palette.png"
        img.save(path, transparency=0)
    if not path.exists():
        img.save(path)
    assert _same(load_image(path), expected), kind


def test_a_dark_sixteen_bit_image_stays_dark(tmp_path):
    deep = np.zeros((28, 28), dtype=np.uint16)
    deep[10:18, 10:18] = 200  # 200 of 65535: barely above black
    Image.fromarray(deep).save(tmp_path / "dark.png")
    assert load_image(tmp_path / "dark.png", invert="no").max() <= 1


def test_a_huge_image_is_refused_before_it_is_decoded(tmp_path):
    Image.new("1", (20000, 20000)).save(tmp_path / "bomb.png")  # a few KB on disk, 400 million pixels
    assert (tmp_path / "bomb.png").stat().st_size < 100_000
    with pytest.raises(ValueError, match="too large.*scale it down"):
        load_image(tmp_path / "bomb.png")


EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 28 28\nnewpath 4 4 moveto 24 24 lineto stroke\nshowpage\n"
SEND = "send PNG, JPEG, GIF, BMP, TIFF, WebP or PGM/PPM"


@pytest.mark.parametrize("name, save", [
    ("digit.png", {}), ("digit.jpg", {"quality": 100}), ("digit.gif", {}), ("digit.bmp", {}), ("digit.tif", {}),
    ("digit.webp", {"lossless": True}), ("digit.pgm", {}), ("colour.ppm", {}), ("bits.pbm", {}),
])
def test_every_format_read_decodes_the_same_digit(name, save, seven, tmp_path):
    seven.save(tmp_path / "plain.png")
    mode = {"colour.ppm": "RGB", "bits.pbm": "1"}.get(name, "L")
    seven.convert(mode).save(tmp_path / name, **save)
    with Image.open(tmp_path / name) as img:
        assert img.format in FORMATS  # the formats load_image reads, each one tested
    assert _same(load_image(tmp_path / name), load_image(tmp_path / "plain.png")), name


def test_formats_decoded_by_an_outside_program_are_refused(tmp_path):
    (tmp_path / "digit.eps").write_bytes(EPS)  # Pillow would run Ghostscript to render it
    with pytest.raises(ValueError) as refused:
        load_image(tmp_path / "digit.eps")
    assert str(refused.value) == f"not an image format bnn-zoo reads (EPS); {SEND}"
    with pytest.raises(ValueError, match=r"\(EPS\)"):
        load_image(io.BytesIO(EPS))  # what the server reads
    (tmp_path / "doc.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
    with pytest.raises(ValueError) as refused:
        load_image(tmp_path / "doc.pdf")
    assert str(refused.value) == f"not a readable image; {SEND}"


def test_non_finite_pixels_are_refused(tmp_path):
    pixels = np.zeros((28, 28), dtype=np.float32)
    pixels[10:18, 12:16] = 1.0
    pixels[0, 0], pixels[5, 5] = np.nan, np.inf  # once blanked the whole image: its maximum was NaN
    Image.fromarray(pixels, "F").save(tmp_path / "float.tif")
    with pytest.raises(ValueError) as refused:
        load_image(tmp_path / "float.tif")
    assert str(refused.value).startswith("holds 2 non-finite pixels (NaN or inf)")


def test_remade_gives_mnist_s_digits_back_as_centred_places_them(shared_data):
    """remade reads a batch as MNIST's digits were made, as ``centred`` places one picture's ink:
    MNIST's own test digits whose ink reaches white come back as that places them, pixel for pixel
    (the others are brightened to white first)."""
    from bnn_zoo.data.images import INK_FLOOR, centred, remade
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    digits = images[:300][images[:300].flatten(1).max(1).values == 255]
    assert len(digits) > 250
    placed = torch.stack([centred(Image.fromarray(d.numpy(), "L"), floor=INK_FLOOR) for d in digits])
    assert torch.equal(remade(digits), placed)
    assert (remade(digits).float() - digits.float()).abs().mean() < 0.5  # MNIST's digits were made so


def test_remade_puts_a_moved_a_brightened_and_a_shrunken_digit_where_mnist_put_it(shared_data):
    from bnn_zoo.data.images import remade
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    digits = images[:100]
    moved = torch.zeros_like(digits)
    moved[:, 3:, :25] = digits[:, :25, 3:]  # 3 pixels down and 3 left, none of the ink cut off
    kept = (digits[:, 25:].sum((1, 2)) == 0) & (digits[:, :, :3].sum((1, 2)) == 0)
    assert kept.sum() >= 50 and torch.equal(remade(moved)[kept], remade(digits)[kept])
    bright = (digits.float() * 0.5 + 120).round().to(torch.uint8)  # a grey page, faint ink
    assert (remade(bright).float() - remade(digits).float()).abs().mean() < 2  # rounding apart
    small = torch.nn.functional.interpolate(digits[:, None].float(), scale_factor=0.5, mode="bilinear",
                                            antialias=True)[:, 0]
    shrunk = torch.zeros_like(digits)
    shrunk[:, 7:21, 7:21] = small.round().to(torch.uint8)
    came, back = (shrunk.float() - digits.float()).abs().mean(), (remade(shrunk).float() - remade(digits).float()).abs().mean()
    assert back < 0.6 * came  # grown back to MNIST's size (blurred by the halving)
    assert torch.equal(remade(torch.zeros(2, 28, 28, dtype=torch.uint8)), torch.zeros(2, 28, 28, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"remade reads images \[N, 28, 28\], got shape \(2, 32, 32\)"):
        remade(torch.zeros(2, 32, 32, dtype=torch.uint8))


def test_a_decoder_s_failure_of_any_kind_is_one_line(tmp_path):
    """Issue 47: a TIFF whose StripOffsets tag is typed SRATIONAL made Pillow's decoder raise a
    TypeError, which went past the reader as a traceback."""
    from helpers import malformed_tiff

    from bnn_zoo.data.images import decode

    path = tmp_path / "bad.tif"
    path.write_bytes(malformed_tiff())
    with pytest.raises(ValueError) as refused:
        decode(path)
    assert str(refused.value) == "not a readable image (TypeError)"
    with pytest.raises(ValueError, match=r"^not a readable image \(TypeError\)$"):
        load_image(io.BytesIO(path.read_bytes()))
