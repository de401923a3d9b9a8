import pytest
import torch
from helpers import write_idx
from PIL import Image

from bnn_zoo.core.errors import DataError
from bnn_zoo.data.shifted.ood_sets import NEAR, centred, font_files, load_notmnist, ood_images, overlaid_digits, white_noise
from bnn_zoo.data.sets import load_torchvision


@pytest.mark.parametrize("name", NEAR)
def test_near_sets_are_seeded_mnist_shaped_images(name, shared_data):
    images = ood_images(name, str(shared_data), 40, seed=3)
    assert images.dtype == torch.uint8 and images.shape == ((1 if name == "blank" else 40), 28, 28)
    assert torch.equal(images, ood_images(name, str(shared_data), 40, seed=3))
    if name not in ("blank", "constant"):
        assert not torch.equal(images, ood_images(name, str(shared_data), 40, seed=4))
        assert (images.flatten(1).float().std(1) > 10).all()  # every image holds a drawing


def test_transformed_digits_are_what_they_say(shared_data):
    digits, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    rotated = ood_images("rotated", str(shared_data), 30)
    back = torch.rot90(rotated, -1, dims=(1, 2))
    found = [(digits == b).flatten(1).all(1).nonzero()[0, 0] for b in back]  # each is a test digit, turned
    assert not torch.isin(labels[torch.stack(found)], torch.tensor([0, 1, 8])).any()
    inverted = ood_images("inverted", str(shared_data), 30)
    assert all((digits == 255 - image).flatten(1).all(1).any() for image in inverted)
    overlaid, pairs = overlaid_digits(str(shared_data), 30)
    assert torch.equal(overlaid, ood_images("overlaid", str(shared_data), 30))
    for image, pair in zip(overlaid, pairs):  # the pixelwise maximum of two digits of the classes it names
        covered = (digits <= image).flatten(1).all(1) & (digits.flatten(1).float().sum(1) > 0)
        parts = covered.nonzero()[:, 0]
        assert any(labels[a] == pair[0] and labels[b] == pair[1] and torch.equal(torch.maximum(digits[a], digits[b]), image)
                   for a in parts for b in parts)


def test_constant_images_and_the_blank_one(shared_data):
    constant = ood_images("constant", str(shared_data), 50)
    assert (constant.flatten(1) == constant[:, :1, :1].flatten(1)).all()  # one level per image
    assert constant[0].max() == 0 and len(constant.flatten(1)[:, 0].unique()) > 30
    assert ood_images("blank", None, 5).sum() == 0


def test_letters_are_centred_like_digits():
    assert font_files(), "matplotlib ships DejaVu Sans, so at least one font"
    letters = ood_images("letters", None, 60)
    mass = letters.float()
    rows = (mass.sum(2) * torch.arange(28)).sum(1) / mass.sum((1, 2))
    cols = (mass.sum(1) * torch.arange(28)).sum(1) / mass.sum((1, 2))
    assert ((rows - 14).abs() < 1.5).all() and ((cols - 14).abs() < 1.5).all()
    for letter in letters:  # the longer side fitted to 20 pixels (a pixel more for the resampling's edge)
        lit = (letter > 0).nonzero()
        extent = (lit.max(0).values - lit.min(0).values + 1).max()
        assert 19 <= extent <= 21


def test_a_drawing_is_fitted_into_20_by_20():
    from PIL import Image, ImageDraw

    canvas = Image.new("L", (200, 100))
    ImageDraw.Draw(canvas).rectangle((10, 10, 110, 60), fill=255)  # 101 x 51
    image = centred(canvas)
    rows, cols = image.nonzero()[:, 0], image.nonzero()[:, 1]
    assert cols.max() - cols.min() + 1 == 20 and rows.max() - rows.min() + 1 == 10
    assert ood_images("blank", None, 1).shape == (1, 28, 28)


def test_unknown_sets_are_named():
    with pytest.raises(ValueError, match="unknown out-of-distribution set 'digits'.*letters"):
        ood_images("digits", None, 5)


def test_notmnist_from_idx_layout(tmp_path):
    raw = tmp_path / "notMNIST" / "raw"
    raw.mkdir(parents=True)
    letters = torch.randint(0, 256, (4, 28, 28), dtype=torch.uint8)
    write_idx(raw / "t10k-images-idx3-ubyte.gz", letters, gz=True)
    assert torch.equal(load_notmnist(str(tmp_path)), letters)


def test_notmnist_from_png_folders(tmp_path):
    for letter in "AB":
        (tmp_path / letter).mkdir()
        Image.new("L", (28, 28), 200).save(tmp_path / letter / "x.png")
    Image.new("L", (56, 56), 10).save(tmp_path / "A" / "big.png")  # resized to 28x28
    images = load_notmnist(str(tmp_path))
    assert images.shape == (3, 28, 28) and images.dtype == torch.uint8
    assert images[:, 0, 0].tolist() == [10, 200, 200] and images.amin() == 10  # A/big.png, A/x.png, B/x.png, exact
    (tmp_path / "B" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"cannot read the image .*B/broken.png \(not a readable image; send PNG"):
        load_notmnist(str(tmp_path))
    (tmp_path / "B" / "cut.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # a PNG cut short
    with pytest.raises(DataError, match=r"cannot read 2 images in .*, the first .*B/broken.png"):
        load_notmnist(str(tmp_path))
    assert torch.equal(load_notmnist(str(tmp_path), skip_unreadable=True), images)


def test_notmnist_missing_says_where_it_looked(tmp_path):
    with pytest.raises(DataError, match="notMNIST not found under .*data.root"):
        load_notmnist(str(tmp_path))


def test_white_noise_is_seeded_in_mnist_range():
    a, b = white_noise(10, seed=3), white_noise(10, seed=3)
    assert torch.equal(a, b) and a.shape == (10, 28, 28) and a.dtype == torch.uint8
    assert not torch.equal(a, white_noise(10, seed=4))
    assert a.min() == 0 and a.max() == 255
