"""Each input answered from the posterior over two readings of it (bnn_zoo.posterior.reading): as
given and remade as MNIST's digits were made, their predictive samples pooled."""
import torch

from bnn_zoo.abstain.rule import Rule
from bnn_zoo.data.images import remade
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.posterior.base import Posterior
from bnn_zoo.posterior.reading import BothReadings, remade_inputs


class Centred(Posterior):
    """Sure (probability 0.99 on class 1) of an input whose ink's centre of mass lies within a pixel
    of MNIST's, unsure (uniform) of any other: a posterior that reads centred digits only. Its one
    prediction comes through ``chunks``, as a kind's does."""

    name, title, label, stochastic = "centred", "centred", "centred", False

    @staticmethod
    def probs(x):
        ink = (x[:, 0] - x[:, 0].amin((1, 2), keepdim=True)).clamp_min(0)
        at = torch.arange(28, dtype=x.dtype)
        cy = (ink.sum(2) * at).sum(1) / ink.sum((1, 2))
        cx = (ink.sum(1) * at).sum(1) / ink.sum((1, 2))
        sure = ((cy - 14).abs() <= 1) & ((cx - 14).abs() <= 1)
        probs = torch.full((len(x), 10), 0.1)
        probs[sure] = torch.full((10,), 0.01 / 9).index_fill(0, torch.tensor([1]), 0.99)
        return probs[None]

    def chunks(self, x, num_samples, chunk_size):
        yield 1, self.probs

    @property
    def parameters_stored(self):
        return 0


def _digits_and_moved(shared_data) -> torch.Tensor:
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    digits = images[:20]
    moved = torch.zeros_like(digits)
    moved[:, 4:, 4:] = digits[:, :24, :24]  # 4 pixels down and right
    return normalize(torch.cat([digits, moved]))


def test_both_readings_pool_the_predictions_as_given_and_remade(shared_data):
    x = _digits_and_moved(shared_data)
    plain, both = Centred(), BothReadings(Centred())
    pooled = both.predict(x)
    assert torch.equal(pooled, torch.cat([plain.predict(x), plain.predict(remade_inputs(x))]))
    assert both.rows(100) == 2 and pooled.shape == (2, 40, 10)
    # the chunks (what a mixture of such posteriors runs) give the same pool, each batch remade alone
    assert torch.equal(Posterior.predict(both, x, batch_size=7), pooled)
    assert (both.label, both.stochastic, both.name) == ("centred", False, "centred")


def test_an_input_only_one_reading_is_sure_of_is_refused_where_the_surer_reading_answered_it(shared_data):
    x = _digits_and_moved(shared_data)
    plain, both = Centred(), BothReadings(Centred())
    given, again = plain.predict(x), plain.predict(remade_inputs(x))
    rule = Rule(quantile=0.5, threshold=0.9)
    one_way = rule(given).refused != rule(again).refused  # the moved digits: only their remade reading is sure
    assert one_way[20:].all() and not one_way[:20].any()
    surer = torch.where((again[0, :, 1] > given[0, :, 1])[None, :, None], again, given)  # the old reading
    assert not rule(surer).refused.any()  # the surer reading answered every one of them
    decision = rule(both.predict(x))
    assert decision.refused[one_way].all()  # the pool: split between the readings, refused
    assert not decision.refused[~one_way].any() and (decision.prediction[~one_way] == 1).all()


def test_the_inputs_remade_are_the_images_remade_as_the_network_reads_them(shared_data):
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    brightened = (images[:50].float() * 0.6 + 90).round().to(torch.uint8)
    assert torch.allclose(remade_inputs(normalize(brightened)), normalize(remade(brightened)), atol=1e-6)
    assert remade_inputs(normalize(brightened).double()).dtype == torch.float64


def test_the_remade_reading_stays_on_its_inputs_device(shared_data, monkeypatch):
    """Issue 48: the remade reading moved a GPU batch to the CPU and back. No tensor leaves its device
    on the way (a move to the CPU, or through numpy, fails here), and the result is the same."""
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    x = normalize(images[:20])
    expected = remade_inputs(x)

    def refused(*args, **kwargs):
        raise AssertionError("a tensor left its device")

    monkeypatch.setattr(torch.Tensor, "cpu", refused)
    monkeypatch.setattr(torch.Tensor, "numpy", refused)
    assert torch.equal(remade_inputs(x), expected)
