"""Each input answered from the reading the posterior is surer of (bnn_zoo.posterior.reading): as
given, or remade as MNIST's digits were made."""
import torch

from bnn_zoo.data.images import remade
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.posterior.base import Posterior
from bnn_zoo.posterior.reading import SurerReading, remade_inputs


class Centred(Posterior):
    """Sure (probability 0.99 on class 1) of an input whose ink's centre of mass lies within a pixel
    of MNIST's, unsure (uniform) of any other: a posterior that reads centred digits only."""

    name, title, label, stochastic = "centred", "centred", "centred", False

    def predict(self, x, num_samples=100, chunk_size=10, batch_size=500):
        ink = (x[:, 0] - x[:, 0].amin((1, 2), keepdim=True)).clamp_min(0)
        at = torch.arange(28, dtype=x.dtype)
        cy = (ink.sum(2) * at).sum(1) / ink.sum((1, 2))
        cx = (ink.sum(1) * at).sum(1) / ink.sum((1, 2))
        sure = ((cy - 14).abs() <= 1) & ((cx - 14).abs() <= 1)
        probs = torch.full((len(x), 10), 0.1)
        probs[sure] = torch.full((10,), 0.01 / 9).index_fill(0, torch.tensor([1]), 0.99)
        return probs[None]

    def chunks(self, x, num_samples, chunk_size):
        yield from ()

    @property
    def parameters_stored(self):
        return 0


def test_each_input_is_answered_from_the_reading_the_posterior_is_surer_of(shared_data):
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    digits = images[:20]
    moved = torch.zeros_like(digits)
    moved[:, 4:, 4:] = digits[:, :24, :24]  # 4 pixels down and right
    x = normalize(torch.cat([digits, moved]))
    plain, surer = Centred(), SurerReading(Centred())
    given, answered = plain.predict(x), surer.predict(x)
    again = plain.predict(remade_inputs(x))
    off = given[0, :, 1] < 0.5  # the moved digits, as given: unsure
    assert off[20:].all() and not off[:20].any()
    assert torch.equal(answered[0, off], again[0, off]) and (answered[0, off, 1] == 0.99).all()  # read remade
    assert torch.equal(answered[0, ~off], given[0, ~off])  # already sure as given: as given
    assert (surer.label, surer.stochastic, surer.name) == ("centred", False, "centred")


def test_the_inputs_remade_are_the_images_remade_as_the_network_reads_them(shared_data):
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    brightened = (images[:50].float() * 0.6 + 90).round().to(torch.uint8)
    assert torch.allclose(remade_inputs(normalize(brightened)), normalize(remade(brightened)), atol=1e-6)
