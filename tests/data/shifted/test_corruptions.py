"""MNIST-C's corruptions (bnn_zoo.data.shifted.corruptions): each one what its definition says, seeded."""
import pytest
import torch

from bnn_zoo.data.shifted.corruptions import CORRUPTIONS, corrupt


def square(n: int = 4, side: int = 8) -> torch.Tensor:
    """n images of a white square (rows and columns 10..17) on black."""
    x = torch.zeros(n, 28, 28, dtype=torch.uint8)
    x[:, 10:10 + side, 10:10 + side] = 255
    return x


def centre_of_mass(x: torch.Tensor) -> torch.Tensor:
    """[N, 2]: each image's (row, column) centre of its ink."""
    w = x.double()
    r = torch.arange(28, dtype=torch.float64)
    total = w.sum((1, 2))
    return torch.stack([(w.sum(2) * r).sum(1) / total, (w.sum(1) * r).sum(1) / total], 1)


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_every_corruption_is_seeded_and_keeps_mnist_s_format(name):
    x = square(6)
    a, b, c = corrupt(x, name, 0), corrupt(x, name, 0), corrupt(x, name, 1)
    assert a.dtype == torch.uint8 and a.shape == x.shape and torch.equal(a, b)
    deterministic = ("scale", "brightness", "stripe", "canny_edges")
    assert torch.equal(a, c) == (name in deterministic), name  # the others draw from their seed
    assert not torch.equal(a, x), name


def test_the_pixel_corruptions_do_what_they_say():
    x = square()
    assert torch.equal(corrupt(x, "brightness"), torch.where(x > 0, 255, 128).to(torch.uint8))  # value + 0.5
    striped = corrupt(x, "stripe")
    assert torch.equal(striped[:, :, :7], 255 - x[:, :, :7]) and torch.equal(striped[:, :, 7:21], x[:, :, 7:21])
    hit = (corrupt(torch.full((50, 28, 28), 128, dtype=torch.uint8), "impulse_noise") != 128).float().mean()
    assert abs(hit - 0.17) < 0.01  # severity 4: 17% of the pixels salt or pepper
    shot = corrupt(torch.full((200, 28, 28), 255, dtype=torch.uint8), "shot_noise").double() / 255
    poisson = torch.distributions.Poisson(3.0).log_prob(torch.arange(3.0)).exp()
    expected = (torch.arange(3.0) * poisson).sum() / 3 + (1 - poisson.sum())  # E[min(N, 3)] / 3, N ~ Poisson(3)
    assert abs(float(shot.mean()) - float(expected)) < 0.005  # severity 5: 3 photons for full ink
    edges = corrupt(x, "canny_edges")[0] > 0
    assert edges[10:18, 10:18].sum() == edges.sum() > 20 and not edges[12:16, 12:16].any()  # the outline alone


def test_the_geometric_corruptions_move_the_ink_as_defined():
    x = square()
    moved = centre_of_mass(corrupt(x, "translate")) - centre_of_mass(x)
    assert torch.allclose(moved.abs(), torch.full_like(moved, 3.0), atol=1e-9)  # 3 pixels along each axis
    assert torch.allclose(centre_of_mass(corrupt(x, "scale")), centre_of_mass(x), atol=0.05)  # about its centre
    dark = (corrupt(x, "scale")[0] > 127).nonzero()
    assert (dark.amax(0) - dark.amin(0) + 1).tolist() in ([5, 5], [6, 6])  # 70% of its 8 pixels a side
    dot = torch.zeros(1, 28, 28, dtype=torch.uint8)
    dot[0, 13:15, 21:23] = 255  # 8 columns right of the centre, on its row
    turned = centre_of_mass(corrupt(dot.repeat(8, 1, 1), "rotate")) - torch.tensor([13.5, 13.5], dtype=torch.float64)
    angle = torch.atan2(turned[:, 0], turned[:, 1]).abs()
    assert torch.allclose(angle, torch.full((8,), 0.4, dtype=torch.float64), atol=0.02)  # 0.4 rad, either way


def test_lines_across_the_digit_and_fog_over_it():
    blank = torch.zeros(20, 28, 28, dtype=torch.uint8)
    dotted = corrupt(blank, "dotted_line") > 0
    assert not dotted[:, :, 0:2].any() and dotted[:, :, 2:4].any()  # dashes of 2 with gaps of 2
    assert corrupt(blank, "zigzag").bool().flatten(1).any(1).all()
    x = square()
    fogged, ink = corrupt(x, "fog").double() / 255, x.double() / 255
    assert (fogged >= ink / 4 - 0.003).all() and (fogged <= (ink + 3) / 4 + 0.003).all()  # (x + 3 plasma) / (1 + 3)
    assert float(fogged[:, :10, :10].amin()) < 0.1 < float(fogged[:, :10, :10].amax())  # a cloud, not a wash


def test_an_unknown_corruption_or_other_images_are_refused():
    with pytest.raises(ValueError, match="unknown corruption 'blur'; choose one of shot_noise"):
        corrupt(square(), "blur")
    with pytest.raises(ValueError, match=r"expected uint8 images \[N, 28, 28\]"):
        corrupt(square().float(), "rotate")
