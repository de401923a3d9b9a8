"""Declared augmentation (bnn_zoo.data.shifted.augment): each transform does what its key says, with each
example's own draw from the epoch's generator, on pixels, and a bad section is refused by its key."""
import math

import pytest
import torch
import torch.nn.functional as F

from bnn_zoo.core.errors import DataError
from bnn_zoo.data.shifted.augment import COVERS, Augment, AugmentConfig, _blurred, _dilated, covered, problem
from bnn_zoo.data.config import DataConfig
from bnn_zoo.data.shifted.corruptions import CORRUPTIONS

MEAN, STD = 0.1307, 0.3081


def _pixels(images: torch.Tensor) -> torch.Tensor:
    return (images - MEAN) / STD  # pixels in 0..1 as a run's network sees them


def _back(x: torch.Tensor) -> torch.Tensor:
    return x * STD + MEAN


def _blob(n: int = 8, row: float = 13.5, col: float = 13.5, sd: float = 1.5, long: float = 1.0) -> torch.Tensor:
    """[n, 1, 28, 28] pixels: a Gaussian blob at (row, col), ``long`` times longer across than down."""
    at = torch.arange(28, dtype=torch.float64)
    r, c = torch.meshgrid(at, at, indexing="ij")
    blob = torch.exp(-0.5 * (((r - row) / sd) ** 2 + ((c - col) / (sd * long)) ** 2))
    return blob.float().expand(n, 1, 28, 28).clone()


def _moments(pixels: torch.Tensor):
    """Each image's centre of mass (row, col) and covariance of its ink."""
    at = torch.arange(28, dtype=torch.float64)
    w = pixels[:, 0].double()
    mass = w.sum((1, 2))
    row = (w.sum(2) * at).sum(1) / mass
    col = (w.sum(1) * at).sum(1) / mass
    dr, dc = at[None, :, None] - row[:, None, None], at[None, None, :] - col[:, None, None]
    cov = torch.stack([(w * dr * dr).sum((1, 2)), (w * dr * dc).sum((1, 2)), (w * dc * dc).sum((1, 2))], 1) / mass[:, None]
    return row, col, cov


def _draws(epoch: int, n: int, count: int) -> torch.Tensor:
    """The first ``count`` uniform draws of [n] each from an augmentation's epoch generator (seed 0)."""
    g = Augment(AugmentConfig(rotate=1.0), MEAN, STD, seed=0).generator(epoch)
    return torch.stack([torch.rand(n, generator=g) for _ in range(count)])


def test_translate_moves_each_image_by_its_own_drawn_share_of_its_side():
    augment = Augment(AugmentConfig(translate=0.1), MEAN, STD)
    out = _back(augment(_pixels(_blob()), augment.generator(3)))
    across, down = (_draws(3, 8, 2) * 2 - 1) * 0.1  # uniform in [-0.1, 0.1], drawn across then down
    row, col, _ = _moments(out)
    assert torch.allclose(col - 13.5, across.double() * 28, atol=0.02)  # pixels: a share of the side of 28
    assert torch.allclose(row - 13.5, down.double() * 28, atol=0.02)
    assert not torch.allclose(col, col[0].expand(8))  # each example its own draw


def test_rotate_turns_and_scale_resizes_each_image_about_its_centre():
    rotated = Augment(AugmentConfig(rotate=30.0), MEAN, STD)
    out = _back(rotated(_pixels(_blob(long=2.5)), rotated.generator(0)))
    angle = (_draws(0, 8, 1)[0] * 2 - 1) * 30  # degrees, either way
    _, _, cov = _moments(out)
    axis = 0.5 * torch.atan2(2 * cov[:, 1], cov[:, 2] - cov[:, 0]) * 180 / math.pi  # the long axis, from across
    assert torch.allclose(axis.abs(), angle.double().abs(), atol=0.5)
    scaled = Augment(AugmentConfig(scale=[0.6, 1.2]), MEAN, STD)
    out = _back(scaled(_pixels(_blob(sd=2.0)), scaled.generator(0)))
    size = 0.6 + 0.6 * _draws(0, 8, 1)[0]
    _, _, cov = _moments(out)
    assert torch.allclose(cov[:, 0].sqrt(), 2.0 * size.double(), rtol=0.03)  # its spread, times the drawn size


def test_the_stroke_blends_toward_a_3x3_dilation_or_erosion_by_its_drawn_share():
    x = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    assert torch.equal(_dilated(x), F.max_pool2d(x, 3, 1, 1)) and torch.equal(-_dilated(-x), -F.max_pool2d(-x, 3, 1, 1))
    augment = Augment(AugmentConfig(stroke=1.0), MEAN, STD)
    out = _back(augment(_pixels(x), augment.generator(1)))
    share = (_draws(1, 6, 1)[0] * 2 - 1)[:, None, None, None]
    grown, shrunk = F.max_pool2d(x, 3, 1, 1), -F.max_pool2d(-x, 3, 1, 1)
    expected = torch.where(share > 0, x + share * (grown - x), x - share * (shrunk - x))
    assert torch.allclose(out, expected, atol=1e-5)


def test_ink_dims_and_background_raises_as_their_formulas_say():
    x = torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    augment = Augment(AugmentConfig(ink=[0.4, 0.9], background=0.5), MEAN, STD)
    out = _back(augment(_pixels(x), augment.generator(2)))
    ink, level = _draws(2, 5, 2)
    ink, level = (0.4 + 0.5 * ink)[:, None, None, None], (0.5 * level)[:, None, None, None]
    assert torch.allclose(out, level + (1 - level) * ink * x, atol=1e-5)


def test_blur_spreads_a_point_by_its_drawn_sd_and_noise_stays_in_the_pixels_range():
    point = torch.zeros(4, 1, 28, 28)
    point[:, :, 14, 14] = 1
    sd = torch.tensor([0.0, 0.5, 1.0, 1.5])
    out = _blurred(point, sd, 5)  # 5: the widest's reach
    _, _, cov = _moments(out)
    assert torch.allclose(out.sum((1, 2, 3)), torch.ones(4), atol=1e-5) and torch.equal(out[0], point[0])
    taps = torch.arange(-5, 6, dtype=torch.float64)  # the Gaussian sampled at whole pixels, truncated at its own 3 sd
    kernels = torch.exp(-0.5 * (taps / sd[1:, None].double()) ** 2) * (taps.abs() <= torch.ceil(3 * sd[1:, None]))
    variance = (kernels * taps ** 2).sum(1) / kernels.sum(1)
    assert torch.allclose(cov[1:, 0], variance, rtol=1e-4) and torch.allclose(cov[1:, 2], variance, rtol=1e-4)
    noisy = Augment(AugmentConfig(noise=0.3), MEAN, STD)
    out = _back(noisy(_pixels(torch.full((8, 1, 28, 28), 0.5)), noisy.generator(0)))
    assert out.min() >= -1e-6 and out.max() <= 1 + 1e-6
    spread = (out - 0.5).std((1, 2, 3))
    assert torch.allclose(spread, 0.3 * _draws(0, 8, 1)[0], atol=0.03)  # each image its own sd


def test_p_leaves_the_other_examples_as_they_are_and_an_epoch_draws_alike_wherever_it_runs():
    x = _pixels(torch.rand(400, 1, 28, 28, generator=torch.Generator().manual_seed(2)))
    augment = Augment(AugmentConfig(rotate=20.0, p=0.3), MEAN, STD, seed=5)
    out = augment(x, augment.generator(4))
    untouched = (out == x).flatten(1).all(1)
    assert 0.6 < untouched.float().mean() < 0.8
    assert torch.equal(augment(x, augment.generator(4)), out)  # a resumed epoch, another rank: the same
    assert not torch.equal(augment(x, augment.generator(5)), out)
    other = Augment(augment.config, MEAN, STD, seed=6)  # another member of an ensemble: draws of its own
    assert not torch.equal(other(x, other.generator(4)), out)


def test_a_run_augments_only_where_its_section_turns_something_on_with_its_data_s_statistics():
    assert Augment.of(AugmentConfig(), DataConfig(name="mnist"), 0) is None
    found = Augment.of(AugmentConfig(rotate=5.0), DataConfig(name="mnist"), 3)
    assert found.seed == 3 and found.mean.flatten().tolist() == pytest.approx([MEAN])
    own = DataConfig(name="folder", path="x", input_shape=[3, 8, 8], classes=["a", "b"], mean=[0.1, 0.2, 0.3],
                     std=[0.5, 0.5, 0.5], digest="d")
    assert Augment.of(AugmentConfig(rotate=5.0), own, 0).std.flatten().tolist() == [0.5, 0.5, 0.5]
    rows = DataConfig(name="tensors", path="x.pt", input_shape=[4], classes=["a", "b"], mean=[0.0] * 4, std=[1.0] * 4,
                      digest="d")
    with pytest.raises(DataError, match=r"^the augment section transforms images \[channels, height, width\], and this "
                                        r"run's inputs are of shape \[4\] \(rows of tensors: a table, not images\): "
                                        r"leave it out$"):
        Augment.of(AugmentConfig(rotate=5.0), rows, 0)


@pytest.mark.parametrize("section, said", [
    (AugmentConfig(translate=0.7), "bad value for augment.translate: a share of the image's side, from 0 to 0.5"),
    (AugmentConfig(rotate=-1.0), "bad value for augment.rotate: degrees, from 0 to 180 (null: off), got -1.0"),
    (AugmentConfig(scale=[1.2, 0.8]), "bad value for augment.scale: a range [low, high] with 0.1 <= low <= high"),
    (AugmentConfig(ink=[0.5]), "bad value for augment.ink: a range [low, high]"),
    (AugmentConfig(blur=4.0), "bad value for augment.blur: a Gaussian's sd in pixels, from 0 to 3"),
    (AugmentConfig(p=1.5), "bad value for augment.p: the share of examples augmented, from 0 to 1, got 1.5"),
])
def test_a_bad_section_is_refused_by_its_key(section, said):
    assert problem(section).startswith(said)
    assert problem(AugmentConfig(translate=0.1, scale=[0.7, 1.1], noise=0.2)) is None


def test_what_a_section_covers_of_mnist_c_is_what_its_transforms_show():
    assert covered(AugmentConfig(translate=0.1, stroke=1.0, background=0.3)) == ("translate", "brightness")
    assert covered(None) == () and covered(AugmentConfig()) == ()
    assert set(COVERS) == set(AugmentConfig().__dataclass_fields__) - {"p"}
    assert {name for names in COVERS.values() for name in names} <= set(CORRUPTIONS)
    assert AugmentConfig(translate=0.1, scale=[0.7, 1.1], p=0.8).describe() == "translate 0.1, scale 0.7..1.1, p 0.8"
