"""Declared outliers (bnn_zoo.data.shifted.outliers): each kind is what its definition says, drawn from
the epoch's generator (seeded, reproducible, a stream apart from augmentation's), in the share of a
minibatch its section gives; a bad section is refused by its key; what each kind covers of the
scoreboard's OOD sets."""
import math

import pytest
import torch

from bnn_zoo.core.errors import DataError
from bnn_zoo.data.config import DataConfig
from bnn_zoo.data.shifted import outliers as made
from bnn_zoo.data.shifted.augment import Augment, AugmentConfig
from bnn_zoo.data.shifted.ood_sets import OOD_SETS
from bnn_zoo.data.shifted.outliers import COVERS, KINDS, Outliers, OutliersConfig, covered, problem

MEAN, STD = 0.1307, 0.3081
SIDE = 28


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _digits(n: int, seed: int = 1) -> torch.Tensor:
    """[n, 1, 28, 28] pixels: random strokes of ink on black, each image unlike the others."""
    ink = torch.rand(n, 1, SIDE, SIDE, generator=_g(seed))
    return torch.where(ink > 0.8, ink, torch.zeros_like(ink))


def _ramp(across: bool, n: int = 1) -> torch.Tensor:
    """[n, 1, 28, 28]: each pixel's centre in affine_grid's coordinates, mapped to 0..1 ((u + 1) / 2),
    across the columns or down the rows."""
    at = (torch.arange(SIDE, dtype=torch.float32) + 0.5) / SIDE
    image = at.expand(SIDE, SIDE) if across else at[:, None].expand(SIDE, SIDE)
    return image.expand(n, 1, SIDE, SIDE).clone()


def _noise_kind(image: torch.Tensor) -> str:
    """Which of the four noises an image is, by its values alone."""
    values = image.flatten()
    if ((values == 0) | (values == 1)).all():
        return "bernoulli"
    if ((values == 0) | (values >= made.BLOBS[2])).all():
        return "blobs"
    return "gaussian" if (values == 0).any() and (values == 1).any() else "uniform"


def test_noise_draws_its_four_kinds_with_even_odds_each_of_its_stated_distribution():
    out = made.noise(torch.zeros(4, 1, SIDE, SIDE), None, 2000, _g())
    kinds = [_noise_kind(image) for image in out]
    by = {kind: out[[k == kind for k in kinds]].flatten() for kind in made.NOISES}
    for kind, values in by.items():  # 500 of each expected, sd about 19
        assert abs(len(values) / SIDE ** 2 - 500) < 4 * math.sqrt(2000 * 0.25 * 0.75), kind
    uniform, gaussian, bernoulli, blobs = (by[k] for k in made.NOISES)
    assert uniform.mean() == pytest.approx(0.5, abs=2e-3) and uniform.var() == pytest.approx(1 / 12, abs=1e-3)
    below = 0.5 * math.erfc(0.5 / made.NOISE_SD / math.sqrt(2))  # N(0.5, sd) under 0: clipped to 0
    assert (gaussian == 0).float().mean() == pytest.approx(below, abs=3e-3)
    assert (gaussian == 1).float().mean() == pytest.approx(below, abs=3e-3)
    assert gaussian.mean() == pytest.approx(0.5, abs=3e-3)
    inside = gaussian[(gaussian > 0) & (gaussian < 1)]  # the unclipped part: the Normal truncated at 0 and 1
    z = 0.5 / made.NOISE_SD  # its bounds, in sds
    density, mass = math.exp(-z * z / 2) / math.sqrt(2 * math.pi), math.erf(z / math.sqrt(2))
    assert inside.std() == pytest.approx(made.NOISE_SD * math.sqrt(1 - 2 * z * density / mass), abs=3e-3)
    assert bernoulli.mean() == pytest.approx(0.5, abs=3e-3)
    lit = blobs[blobs > 0]
    assert lit.min() >= made.BLOBS[2] and 0.2 < (blobs > 0).float().mean() < 0.9
    def neighbours(kind: str) -> float:  # the correlation of a pixel with the next across
        images = out[[k == kind for k in kinds]][:, 0]
        return torch.corrcoef(torch.stack([images[:, :, :-1].flatten(), images[:, :, 1:].flatten()]))[0, 1].item()

    assert neighbours("blobs") > 0.3 and abs(neighbours("uniform")) < 0.02  # blobs hang together, pixels do not


def _patches(image: torch.Tensor) -> list[tuple]:
    """An image's 4 x 4 grid of 7 x 7 patches, each as a tuple of its pixels."""
    side = SIDE // made.GRID
    return [tuple(image[0, r * side:(r + 1) * side, c * side:(c + 1) * side].flatten().tolist())
            for r in range(made.GRID) for c in range(made.GRID)]


def test_scrambled_is_a_digit_s_patches_in_an_order_of_its_own():
    digit = _digits(1)
    out = made.scrambled(digit, torch.tensor([3]), 50, _g())
    source = _patches(digit[0])
    orders = set()
    for image in out:
        patches = _patches(image)
        assert sorted(patches) == sorted(source)  # the same patches: the same multiset of pixels
        orders.add(tuple(source.index(p) for p in patches))
    assert len(orders) == 50 and tuple(range(16)) not in orders
    assert torch.equal(out.flatten(1).sort(1).values, digit.flatten(1).sort(1).values.expand(50, -1))


def test_mixed_is_the_max_the_mean_or_a_half_each_of_two_digits_of_different_classes():
    digits, labels = _digits(6), torch.tensor([0, 0, 1, 1, 2, 2])
    out = made.mixed(digits, labels, 300, _g())
    left = torch.arange(SIDE) < SIDE // 2
    ways = {}
    for image in out:
        found = [(way, i, j) for i in range(6) for j in range(6) for way, mix in (
            ("max", torch.maximum(digits[i], digits[j])), ("mean", (digits[i] + digits[j]) / 2),
            ("halves", torch.where(left, digits[i], digits[j]))) if torch.allclose(image, mix)]
        assert found and all(labels[i] != labels[j] for _, i, j in found)
        ways[found[0][0]] = ways.get(found[0][0], 0) + 1
    assert set(ways) == set(made.MIXES) and min(ways.values()) > 60  # a third each, about
    assert made.mixed(digits, torch.zeros(6, dtype=torch.long), 4, _g()).shape == (4, 1, SIDE, SIDE)  # one class: any


def test_cut_blows_a_crop_about_the_ink_up_to_the_whole_image():
    for across in (True, False):  # on a ramp each output pixel says where it read: a crop scaled by 1 / size
        out = made.cut(_ramp(across), None, 40, _g())
        steps = (out[:, 0, :, 1:] - out[:, 0, :, :-1]) if across else (out[:, 0, 1:] - out[:, 0, :-1])
        size = steps * SIDE  # each step is size / 28 of the ramp's
        assert torch.allclose(size, size[:, :1, :1].expand_as(size), atol=1e-4)  # one scale all over each crop
        assert made.CUT[0] - 1e-4 <= size.min() and size.max() <= made.CUT[1] + 1e-4
        assert out.min() >= 1 / (2 * SIDE) - 1e-4 and out.max() <= 1 - 1 / (2 * SIDE) + 1e-4  # read inside the image
    dot = torch.zeros(1, 1, SIDE, SIDE)
    dot[0, 0, 2:5, 22:25] = 1.0  # the only ink, near a corner: every crop holds it, blown up
    out = made.cut(dot, None, 30, _g())
    assert (out.flatten(1).max(1).values > 0.5).all() and (out.flatten(1).mean(1) > dot.mean() * 3).all()


def _displacements(strength: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each pixel of 20 warped ramps read from, less where it is (affine_grid's units, across and
    down), and whether it read between the outer pixels' centres (where a ramp's bilinear reading is
    exact: a blank white image stays white there), the same draws for each."""
    moved = [2 * made.warped(_ramp(across), None, 20, _g(seed), strength)[:, 0] - 2 * _ramp(across)[0, 0]
             for across in (True, False)]
    white = made.warped(torch.ones(1, 1, SIDE, SIDE), None, 20, _g(seed), strength)[:, 0]
    return torch.stack(moved, -1), white > 1 - 1e-5


def test_warped_moves_each_point_by_its_own_elastic_field_up_to_its_strength():
    still = _digits(3)
    unmoved = made.warped(still, None, 3, _g(), strength=0.0)
    assert torch.allclose(unmoved, still[made._picked(still, 3, _g())], atol=1e-5)
    moved, inside = _displacements(made.WARP)
    reach = moved.norm(dim=-1)[inside]
    assert inside.float().mean() > 0.3  # most reads fall inside the image: the figures below are of many
    assert (moved[inside].abs() <= made.WARP + 1e-4).all()  # each way, at most the strength,
    assert moved[inside].abs().max() > 0.8 * made.WARP  # and nearly that somewhere
    assert reach.mean() > 0.25 * made.WARP  # far past reading: 3.5 pixels of 28 on average, at the least
    fields = moved.flatten(1, 2)[:, :10]
    assert not torch.allclose(fields[0], fields[1])  # a field each


def test_a_section_makes_its_kinds_shares_of_a_minibatch_normalized_alike_for_a_seed_and_epoch():
    config = OutliersConfig(noise=0.25, mixed=0.125, warped=0.01)
    assert config.counts(128) == {"noise": 32, "mixed": 16, "warped": 1}
    assert config.active == ["noise", "mixed", "warped"]
    outliers = Outliers(config, MEAN, STD, seed=3)
    x, y = (_digits(128) - MEAN) / STD, torch.arange(128) % 10
    out = outliers(x, y, outliers.generator(2))
    assert out.shape == (49, 1, SIDE, SIDE)
    pixels = out * STD + MEAN
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6
    g = outliers.generator(2)  # made kind by kind, in their order, from the one generator
    by_hand = torch.cat([made.noise(x * STD + MEAN, y, 32, g), made.mixed(x * STD + MEAN, y, 16, g),
                         made.warped(x * STD + MEAN, y, 1, g)])
    assert torch.allclose(pixels, by_hand, atol=1e-5)
    assert torch.equal(outliers(x, y, outliers.generator(2)), out)  # seeded: the same again
    assert not torch.equal(outliers(x, y, outliers.generator(3)), out)  # another epoch
    augment = Augment(AugmentConfig(rotate=1.0), MEAN, STD, seed=3)  # a stream apart from augmentation's
    assert not torch.equal(torch.rand(8, generator=augment.generator(2)),
                           torch.rand(8, generator=outliers.generator(2)))
    other = Outliers(config, MEAN, STD, seed=4)  # another member of an ensemble: draws of its own
    assert not torch.equal(other(x, y, other.generator(2)), out)


def test_a_run_makes_outliers_only_where_its_section_turns_a_kind_on_with_its_data_s_statistics():
    assert Outliers.of(OutliersConfig(weight=2.0), DataConfig(name="mnist"), 0) is None
    found = Outliers.of(OutliersConfig(noise=0.1), DataConfig(name="mnist"), 3)
    assert found.seed == 3 and found.mean.flatten().tolist() == pytest.approx([MEAN])
    rows = DataConfig(name="tensors", path="x.pt", input_shape=[4], classes=["a", "b"], mean=[0.0] * 4, std=[1.0] * 4,
                      digest="d")
    with pytest.raises(DataError, match=r"makes images \[channels, height, width\], and this run's inputs are of "
                                        r"shape \[4\]: leave it out"):
        Outliers.of(OutliersConfig(noise=0.1), rows, 0)


@pytest.mark.parametrize("section, said", [
    (OutliersConfig(noise=0.0), "bad value for outliers.noise: a share of a minibatch, above 0 and at most 1"),
    (OutliersConfig(mixed=1.5), "bad value for outliers.mixed: a share of a minibatch, above 0 and at most 1"),
    (OutliersConfig(cut=0.1, weight=0.0),
     "bad value for outliers.weight: the term's weight, above 0 and at most 10, got 0"),
])
def test_a_bad_section_is_refused_by_its_key(section, said):
    assert problem(section).startswith(said)
    assert problem(OutliersConfig(noise=0.25, scrambled=0.1, weight=0.5)) is None


def test_what_a_section_covers_of_the_ood_sets_is_what_its_kinds_make_the_same_way():
    assert covered(OutliersConfig(noise=0.1, mixed=0.1, cut=0.1)) == ("noise", "overlaid")
    assert covered(None) == () and covered(OutliersConfig(scrambled=0.1, cut=0.1, warped=0.1)) == ()
    assert set(COVERS) == set(KINDS) == set(made.MAKERS)
    assert {name for names in COVERS.values() for name in names} <= set(OOD_SETS)
    assert OutliersConfig(noise=0.25, cut=0.1).describe() == "noise 0.25, cut 0.1, weight 0.5"


@pytest.mark.cuda
def test_a_cuda_batch_gets_the_cpu_s_outliers_on_its_device():
    outliers = Outliers(OutliersConfig(noise=0.25, scrambled=0.125, mixed=0.125, cut=0.125, warped=0.125), MEAN, STD, 3)
    x, y = (_digits(128) - MEAN) / STD, torch.arange(128) % 10
    on_cpu = outliers(x, y, outliers.generator(5))
    on_gpu = outliers(x.cuda(), y.cuda(), outliers.generator(5))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
