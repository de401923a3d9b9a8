import pytest
import torch
from PIL import Image

from bnn_zoo.images import load_image


def test_load_image_converts_to_white_on_black(tmp_path):
    dark_on_light = Image.new("L", (64, 64), 255)
    dark_on_light.paste(0, (20, 20, 44, 44))
    dark_on_light.convert("RGB").save(tmp_path / "paper.jpg")
    pixels = load_image(tmp_path / "paper.jpg")
    assert pixels.shape == (28, 28) and pixels.dtype == torch.uint8
    assert pixels[0, 0] < 20 and pixels[14, 14] > 235
    assert load_image(tmp_path / "paper.jpg", invert="no")[0, 0] > 235
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable image"):
        load_image(tmp_path / "empty.png")
    with pytest.raises(ValueError, match="no such file"):
        load_image(tmp_path / "missing.png")
