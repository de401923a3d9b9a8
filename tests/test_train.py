import json
import os
import subprocess
import sys

import pyro
import pytest
import torch
from conftest import SHARED_DATA, ZOO, example_batch, tiny_config
from pyro.infer import TraceMeanField_ELBO

from bnn_zoo import build, load, make_net, make_prior, predict
from bnn_zoo.checkpoint import CHECKPOINT
from bnn_zoo.config import ConfigError, config_names
from bnn_zoo.data import toy_data
from bnn_zoo.plots import variance_parts
from bnn_zoo.train import (
    LoggedTraceMeanField_ELBO,
    TrainingError,
    config_for_run,
    kl_estimators,
    main,
    pick_device,
    train,
)
from bnn_zoo.zoo import PRIORS

RUN_FILES = ["config.yaml", "checkpoint.pt", "twin.pt", "metrics.json", "training.png"]


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """The shipped toy config, trained once for the tests of this module."""
    run_dir = tmp_path_factory.mktemp("toy")
    metrics = train(config_for_run("toy_mlp", [f"run_dir={run_dir}", "train.progress=false",
                                               "train.test_samples=50"]))
    return run_dir, metrics


def test_toy_run_writes_its_directory(toy_run):
    run_dir, metrics = toy_run
    for name in [*RUN_FILES, "predictive.png"]:
        assert (run_dir / name).is_file(), name
    assert metrics == json.loads((run_dir / "metrics.json").read_text())
    epochs = metrics["config"]["train"]["epochs"]
    assert len(metrics["bayes"]["history"]) == len(metrics["twin"]["history"]) == epochs
    assert all(h["kl"] > 0 and h["loss"] == pytest.approx(h["kl"] + h["data_fit"])
               for h in metrics["bayes"]["history"])


def test_toy_fit_passes_near_the_training_points(toy_run):
    trained = load(toy_run[0])
    points = toy_data("polynomial")
    parts = variance_parts(predict(trained.model, trained.guide, points.x, 200))
    assert ((parts["mean"] - points.y).abs() < 2 * parts["total"]).all()  # inside the 95% band
    assert (parts["mean"] - points.y).abs().max() < 0.75
    assert (trained.twin(points.x)[:, 0] - points.y).abs().max() < 0.5


def test_toy_predictive_spread_grows_away_from_the_data(toy_run):
    trained = load(toy_run[0])
    inside = predict(trained.model, trained.guide, torch.linspace(-2, 2, 41).unsqueeze(-1), 200)
    far = predict(trained.model, trained.guide, torch.tensor([[-5.0], [5.0]]), 200)
    epistemic = lambda samples: variance_parts(samples)["epistemic"]  # noqa: E731
    assert epistemic(far).min() > 3 * epistemic(inside).mean()


def _cli(*args, env_data=True):
    env = dict(os.environ, **({"BNN_ZOO_DATA": str(SHARED_DATA)} if env_data else {}))
    return subprocess.run([sys.executable, "-m", "bnn_zoo.train", *args], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", config_names())
def test_cli_smoke_run_of_every_config(name, tmp_path):
    cfg = config_for_run(name, [])
    tiny = ["train.epochs=2", "train.eval_every=1", "train.val_samples=2", "train.test_samples=3"]
    if cfg.arch != "toy_mlp":
        if not (SHARED_DATA / "MNIST" / "raw").is_dir():
            pytest.skip(f"no MNIST under {SHARED_DATA}")
        tiny += ["data.train_limit=300", "data.val_size=100", "data.test_limit=100"]
    result = _cli(name, *tiny, f"run_dir={tmp_path}", "train.progress=false")
    assert result.returncode == 0, result.stderr
    for file in RUN_FILES:
        assert (tmp_path / file).is_file()
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert len(metrics["bayes"]["history"]) == 2 and "seconds_per_epoch" in metrics["twin"]
    assert ("test/accuracy" in metrics["bayes"]) == (cfg.arch != "toy_mlp")


def test_cli_errors_are_one_clear_line(capsys, tmp_path):
    assert main(["toy_mlp", "train.epoch=3"]) == 2
    assert "error: bad config key 'train.epoch'" in capsys.readouterr().err
    assert main(["lenet", f"data.root={tmp_path}", "data.download=false",
                 f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert "MNIST not found" in err and "data.root=DIR" in err
    assert main([f"resume={tmp_path / 'nothing'}"]) == 2
    assert "config.yaml does not exist" in capsys.readouterr().err


def test_resume_continues_where_the_run_stopped(tmp_path):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **{"train.epochs": 20,
                                                           "train.eval_every": 10}))
    first = json.loads((tmp_path / "metrics.json").read_text())["bayes"]["history"]
    metrics = train(config_for_run(None, [f"resume={tmp_path}", "train.epochs=30"]))
    history = metrics["bayes"]["history"]
    assert [h["epoch"] for h in history] == list(range(1, 31))
    assert history[:20] == first
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["epoch"] == 30


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **{"train.epochs": 10,
                                                           "train.eval_every": 5}))
    good = load(tmp_path)

    def explode(self, model_trace, guide_trace):
        nan = torch.tensor(float("nan"))
        return nan, nan + 0 * sum(s["log_prob_sum"] for s in model_trace.nodes.values()
                                  if s["type"] == "sample" and s["is_observed"])

    monkeypatch.setattr(LoggedTraceMeanField_ELBO, "_differentiable_loss_particle", explode)
    with pytest.raises(TrainingError, match="loss became nan in epoch 11.*last good checkpoint"):
        train(config_for_run(None, [f"resume={tmp_path}", "train.epochs=20"]))
    kept = load(tmp_path)
    assert kept.epoch == 10
    x = torch.linspace(-2, 2, 5).unsqueeze(-1)
    assert torch.equal(kept.guide.median()["net.layers.1.weight"],
                       good.guide.median()["net.layers.1.weight"])
    assert torch.isfinite(predict(kept.model, kept.guide, x, 3)).all()


def test_device_choice():
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="not a device"):
        pick_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            pick_device("cuda")


@pytest.mark.parametrize("kind", PRIORS)
@pytest.mark.parametrize("arch", ZOO)
def test_lean_mean_field_elbo_equals_pyros(arch, kind):
    """The training ELBO skips the log-densities Pyro's TraceMeanField_ELBO computes and discards;
    on the same draws it gives the same loss and gradients, and says which KL terms are closed-form."""
    model, guide = build(arch, num_data=500, prior=make_prior(kind))
    x, y = example_batch(arch)
    guide(x, y)
    results = []
    for elbo in (LoggedTraceMeanField_ELBO(), TraceMeanField_ELBO()):
        pyro.set_rng_seed(5)
        guide.zero_grad()
        loss = elbo.differentiable_loss(model, guide, x, y)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in guide.parameters()]))
    (lean, lean_grads), (pyros, pyro_grads) = results
    assert torch.allclose(lean, pyros, rtol=1e-5)
    # the same terms summed in another order: equal up to float32 rounding
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-5 * b.abs().max().item())
               for a, b in zip(lean_grads, pyro_grads))
    found = kl_estimators("meanfield", model, guide, x, y)
    assert len(found["closed_form" if kind == "gaussian" else "monte_carlo"]) == len(
        dict(make_net(arch).named_parameters()))
    assert kl_estimators("trace", model, guide, x, y)["closed_form"] == []
