"""The declared augmentation works on a whole minibatch at once (bnn_zoo.data.shifted.augment); here it
is held against its definition, one image at a time, and a CUDA batch against the CPU's."""
import math

import pytest
import torch
import torch.nn.functional as F

from bnn_zoo.data.shifted.augment import Augment, AugmentConfig, _grid_terms

MEAN, STD = 0.1307, 0.3081
EVERY = AugmentConfig(translate=0.12, scale=[0.65, 1.15], rotate=25.0, shear=25.0, stroke=1.0, blur=1.5,
                      ink=[0.4, 1.0], background=0.5, noise=0.2, p=0.7)
RECIPE = AugmentConfig(translate=0.12, scale=[0.65, 1.15], rotate=25.0, shear=25.0, stroke=1.0, ink=[0.4, 1.0],
                       background=0.5, p=0.8)  # configs/lenet.yaml's
ALONE = [AugmentConfig(translate=0.2), AugmentConfig(scale=[0.5, 1.5]), AugmentConfig(rotate=90.0),
         AugmentConfig(shear=40.0), AugmentConfig(stroke=1.0), AugmentConfig(blur=3.0), AugmentConfig(ink=[0.1, 0.9]),
         AugmentConfig(background=1.0), AugmentConfig(noise=0.5)]


def _one_by_one(config: AugmentConfig, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The augmentation as its definition reads, an image at a time: the minibatch's draws (each
    example its own, each transform's for the whole minibatch in turn, in the declared order: angle,
    shear, size, move across, move down, stroke, blur, ink, background, noise's sd, its normals,
    whether augmented), then each image alone through the transforms on, in pixels."""
    c, n = config, len(x)

    def uniform(key: str, low: float, high: float) -> torch.Tensor:
        on = getattr(c, key) is not None
        return low + (high - low) * torch.rand(n, generator=generator) if on else None

    affine = any(getattr(c, key) is not None for key in ("translate", "scale", "rotate", "shear"))
    angle, shear = (uniform(key, -(getattr(c, key) or 0), getattr(c, key) or 0) for key in ("rotate", "shear"))
    size = uniform("scale", *(c.scale or (1, 1)))
    across, down = (uniform("translate", -(c.translate or 0), c.translate or 0) for _ in range(2))
    stroke = uniform("stroke", -(c.stroke or 0), c.stroke or 0)
    blur, ink = uniform("blur", 0.0, c.blur or 0), uniform("ink", *(c.ink or (1, 1)))
    background, noise = uniform("background", 0.0, c.background or 0), uniform("noise", 0.0, c.noise or 0)
    normals = torch.randn(x.shape, generator=generator) if c.noise is not None else None
    chosen = torch.rand(n, generator=generator) < c.p
    images = []
    for i in range(n):
        image = x[i:i + 1] * STD + MEAN
        if affine:  # rotated, sheared along the rows, resized, then moved (a share of the side; -1..1 is 2)
            a = math.radians(angle[i]) if angle is not None else 0.0
            s = math.tan(math.radians(shear[i])) if shear is not None else 0.0
            turn = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
            forward = turn @ torch.tensor([[1.0, s], [0.0, 1.0]]) * (size[i] if size is not None else 1.0)
            move = 2 * torch.tensor([[across[i]], [down[i]]]) if across is not None else torch.zeros(2, 1)
            inverse = torch.linalg.inv(forward)
            theta = torch.cat([inverse, -inverse @ move], 1)[None]
            image = F.grid_sample(image, F.affine_grid(theta, list(image.shape), align_corners=False),
                                  align_corners=False)
        if stroke is not None:
            target = F.max_pool2d(image, 3, 1, 1) if stroke[i] >= 0 else -F.max_pool2d(-image, 3, 1, 1)
            image = image + stroke[i].abs() * (target - image)
        if blur is not None:  # a Gaussian of its sd, truncated at 3 sd (at least a pixel), edges repeated
            sd, reach = float(blur[i]), max(1, math.ceil(3 * float(blur[i])))
            taps = torch.arange(-reach, reach + 1, dtype=torch.float32)
            kernel = torch.exp(-0.5 * (taps / max(sd, 1e-3)) ** 2)
            kernel = kernel / kernel.sum()
            image = F.conv2d(F.pad(image, (reach,) * 4, mode="replicate"), (kernel[:, None] * kernel)[None, None])
        if ink is not None:
            image = image * ink[i]
        if background is not None:
            image = background[i] + (1 - background[i]) * image
        if normals is not None:
            image = (image + noise[i] * normals[i]).clamp(0, 1)
        images.append((image[0] - MEAN) / STD if chosen[i] else x[i])
    return torch.stack(images)


def _digits(n: int, seed: int = 0) -> torch.Tensor:
    """[n, 1, 28, 28] normalized images: strokes of ink (blurred bars) at random places on black."""
    g = torch.Generator().manual_seed(seed)
    ink = (torch.rand(n, 1, 28, 28, generator=g) > 0.85).float()
    ink = F.avg_pool2d(F.max_pool2d(ink, 3, 1, 1), 3, 1, 1)
    return (ink - MEAN) / STD


@pytest.mark.parametrize("config", [EVERY, RECIPE, *ALONE, AugmentConfig(rotate=30.0, noise=0.3, p=0.0)],
                         ids=lambda c: c.describe())
def test_the_batch_is_augmented_as_each_image_would_be_alone_from_the_same_draws(config):
    x = _digits(64)
    batched, alone = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    out = Augment(config, MEAN, STD)(x, batched)
    expected = _one_by_one(config, x, alone)
    assert torch.allclose(out, expected, rtol=0, atol=1e-4)  # normalized values, float32 rounding
    assert torch.equal(batched.get_state(), alone.get_state())  # the same draws, no more, no fewer
    assert not torch.allclose(expected, x) if config.p > 0 else torch.equal(out, x)


def test_the_grid_s_two_terms_make_affine_grid_s_grid_for_the_whole_batch():
    theta = torch.randn(16, 2, 3, generator=torch.Generator().manual_seed(3))
    rows, columns = _grid_terms(theta, 20, 28)
    expected = F.affine_grid(theta, [16, 3, 20, 28], align_corners=False)
    assert torch.allclose((rows + columns).permute(0, 2, 3, 1), expected, rtol=0, atol=2e-6)


def test_nothing_on_the_batch_s_device_is_read_on_the_host():
    """Each step's augmentation reads no value of the batch's device on the host (on a GPU, a wait
    for it): the draws are the CPU's. A batch on the meta device, which holds no values, goes through
    every transform."""
    augment = Augment(EVERY, MEAN, STD)
    out = augment(torch.zeros(8, 1, 28, 28, device="meta"), augment.generator(0))
    assert out.device.type == "meta" and out.shape == (8, 1, 28, 28)


@pytest.mark.cuda
def test_a_cuda_batch_gets_the_cpu_s_draws_and_the_cpu_s_images():
    x = _digits(256, seed=4)
    for config in (EVERY, RECIPE):
        augment = Augment(config, MEAN, STD, seed=3)
        on_cpu = augment(x, augment.generator(7))
        on_gpu = augment(x.cuda(), augment.generator(7))
        assert on_gpu.device.type == "cuda"
        assert torch.allclose(on_gpu.cpu(), on_cpu, rtol=0, atol=1e-4)
