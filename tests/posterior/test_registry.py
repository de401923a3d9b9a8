"""A posterior is one class registered by name: a toy kind defined in this file, with no edit to the
package, is fitted by training, saved, loaded, certified, answers predict and scores on the
scoreboard; a run holding a kind this process does not register is refused by name."""
import json

import pyro
import pytest
import torch
from conftest import NO_MNIST, SHARED_DATA, splits_of, tiny_config
from helpers import load_script
from PIL import Image

from bnn_zoo import load
from bnn_zoo.abstain.rule import uncertainty
from bnn_zoo.cli.predict import main as predict_main
from bnn_zoo.cli.train import train
from bnn_zoo.core.errors import CheckpointError
from bnn_zoo.core.inference.inputs import evaluating
from bnn_zoo.core.inference.predictive import sample_chunks
from bnn_zoo.data.images import load_image
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.posterior import KINDS, TWIN, Posterior, fitted_kinds, register
from bnn_zoo.posterior.base import count
from bnn_zoo.runs.storage.checkpoint import FITTED
from bnn_zoo.runs.storage.trained import posteriors


class Jittered(Posterior):
    """The twin's logits plus Gaussian noise whose scale is fitted: a tenth of the logits' sd over
    the training inputs."""

    name, title, fitted = "jittered", "jittered twin", True

    def __init__(self, twin, scale: float):
        self.twin, self.scale, self.networks = twin, scale, (twin,)
        self.label = f"twin jittered by {scale:.3g}"

    @classmethod
    def fit(cls, twin, x, y, x_held, y_held):
        with torch.no_grad(), evaluating(twin):
            return cls(twin, 0.1 * twin.net(x).std().item())

    def state(self):
        return {"scale": self.scale}

    @classmethod
    def from_state(cls, twin, state):
        return cls(twin, state["scale"])

    def chunks(self, x, num_samples, chunk_size):
        with evaluating(self.twin):
            for _, n in sample_chunks(num_samples, chunk_size):
                yield n, lambda xb, n=n: self.twin.likelihood.predictive(
                    self.twin.net(xb) + self.scale * torch.randn(n, len(xb), 10))

    @property
    def parameters_stored(self):
        return count(self.twin) + 1


@pytest.fixture
def jittered():
    register(Jittered)
    yield Jittered
    del KINDS[Jittered.name]


def test_a_kind_registered_here_trains_saves_loads_certifies_answers_and_scores(jittered, tmp_path, capsys):
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    assert "jittered" in fitted_kinds()
    run_dir = tmp_path / "run"
    cfg = tiny_config("mnist_mlp", **{"run_dir": str(run_dir), "data.root": str(SHARED_DATA), "model.hidden": "[16]",
                                      "train.epochs": 1, "train.posteriors": "[jittered]", "abstention.samples": 8})
    metrics = train(cfg)
    trained = load(run_dir)
    splits = splits_of(cfg)
    with torch.no_grad():
        expected = 0.1 * trained.twin.net(splits.train.x).std().item()
    posterior = posteriors(trained)["jittered"]
    assert isinstance(posterior, Jittered) and posterior.scale == pytest.approx(expected, rel=1e-5)
    assert torch.load(run_dir / FITTED)["posteriors"] == {"jittered": {"scale": posterior.scale}}
    assert metrics["ensemble"]["jittered"]["label"] == posterior.label
    # certified on every validation input (it fits nothing there), with the samples abstention.samples asks
    certified = json.loads((run_dir / "calibration.json").read_text())["jittered"]
    assert certified["sets"]["samples"] == 8 and certified["sets"]["n"] == 128
    assert trained.sets["jittered"].to_dict() == certified["sets"]

    capsys.readouterr()  # training's log
    png = tmp_path / "digit.png"
    Image.fromarray(load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)[0][0].numpy()).save(png)
    assert predict_main([str(run_dir), str(png), "--posterior", "jittered", "--samples", "8", "--json"]) == 0
    answered = json.loads(capsys.readouterr().out)["answers"][0]["uncertainty_bits"]
    pyro.set_rng_seed(0)  # predict's default seed: its draws are the ones drawn here
    drawn = uncertainty(posterior.predict(normalize(load_image(png)[None]), 8))
    assert answered["entropy"] == pytest.approx(drawn["entropy"].item(), abs=1e-5)

    out = tmp_path / "board"
    assert load_script("scoreboard").main([str(run_dir), "--out", str(out), "--samples", "4", "--test-size", "50",
                                           "--ood-size", "20", "--near-size", "10"]) == 0
    printed = capsys.readouterr().out
    board = json.loads((out / "scoreboard.json").read_text())["runs"][str(run_dir)]
    assert board["posteriors"]["jittered"]["posterior"] == posterior.label
    assert f"| run: {posterior.label} |" in printed
    written = json.loads((run_dir / "metrics.json").read_text())
    twin_seconds = written[TWIN]["seconds_per_epoch"] * len(written[TWIN]["history"])
    fit_seconds = written["fitted"]["jittered"][0]["seconds"]
    assert board["train_seconds"]["jittered"] == pytest.approx(twin_seconds + fit_seconds)

    del KINDS["jittered"]  # another process, which never registered it
    try:
        with pytest.raises(CheckpointError, match=r"holds the posterior jittered, which no kind registered here reads"):
            load(run_dir)
    finally:
        register(Jittered)


@pytest.mark.slow
def test_a_trained_run_gets_a_kind_fitted_on_resume_without_a_new_epoch(jittered, tmp_path):
    """``train resume=RUN train.posteriors=[...]``: the kind is fitted around the trained twin, the
    weights stay, and the run is certified again, each posterior's rule and sets."""
    from bnn_zoo.runs.training.resume import config_for_run

    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    run_dir = tmp_path / "run"
    train(tiny_config("mnist_mlp", **{"run_dir": str(run_dir), "data.root": str(SHARED_DATA), "model.hidden": "[16]",
                                      "train.epochs": 1, "abstention.samples": 8}))
    before = load(run_dir)
    assert "jittered" not in posteriors(before) and not (run_dir / FITTED).exists()
    metrics = train(config_for_run(None, [f"resume={run_dir}", "train.posteriors=[jittered]"]))
    after = load(run_dir)
    assert len(metrics["bayes"]["history"]) == 1  # no new epoch
    assert all(torch.equal(v, after.guide.state_dict()[k]) for k, v in before.guide.state_dict().items())
    assert isinstance(posteriors(after)["jittered"], Jittered) and "jittered" in after.sets
    for part in ("jittered", "bayes"):  # an alarm watches a certified rule (a tiny run may certify none: its sets answer)
        assert (after.alarm(part) is None) == ("rule" not in after.calibration[part]), part


class PriorTaking(Jittered):
    """Jittered, told the run's prior when fitted (as SG-MCMC is): it keeps what it was given."""

    name, takes_prior, given = "prior_taking", True, []

    @classmethod
    def fit(cls, twin, x, y, x_held, y_held, prior=None):
        cls.given.append(prior)
        return super().fit(twin, x, y, x_held, y_held)


def test_a_kind_that_takes_the_prior_is_fitted_with_the_run_s(tmp_path):
    from bnn_zoo.core.networks.priors import FanInPrior

    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    register(PriorTaking)
    try:
        train(tiny_config("mnist_mlp", **{"run_dir": str(tmp_path / "run"), "data.root": str(SHARED_DATA),
                                          "model.hidden": "[16]", "model.prior": "fan_in", "model.prior_scale": 3.0,
                                          "train.epochs": 1, "train.posteriors": "[prior_taking]",
                                          "abstention.samples": 8}))
    finally:
        del KINDS[PriorTaking.name]
    prior, = PriorTaking.given
    assert isinstance(prior, FanInPrior) and prior.hyperparameters == {"scale": 3.0}
