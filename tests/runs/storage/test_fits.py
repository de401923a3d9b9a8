"""A run's posteriors fitted after training are bound to the twin they were fitted around: a resume
adds to what a run holds and fits again what its new epochs made stale, nothing is deleted unless
train.drop_posteriors asks, and a fit of other twin weights (or a forged state) is refused by name."""
import json
import shutil

import pytest
import torch
from conftest import NO_MNIST, SHARED_DATA, tiny_config

from bnn_zoo import load
from bnn_zoo.abstain.density import last_linear
from bnn_zoo.cli.train import train
from bnn_zoo.core.errors import CheckpointError, ConfigError
from bnn_zoo.runs.storage.checkpoint import CALIBRATION, FITTED, save_atomic
from bnn_zoo.runs.storage.fits import stored_fits, twin_digest
from bnn_zoo.runs.training.resume import config_for_run
from bnn_zoo.runs.storage.trained import posteriors

HELD = ["laplace_last_layer", "swag"]


@pytest.fixture(scope="module")
def fitted_run(tmp_path_factory):
    """A tiny mnist_mlp run (one epoch) holding last-layer Laplace and SWAG, certified."""
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    run_dir = tmp_path_factory.mktemp("fitted") / "run"
    train(tiny_config("mnist_mlp", **{"run_dir": str(run_dir), "data.root": str(SHARED_DATA), "model.hidden": "[16]",
                                      "train.epochs": 1, "train.posteriors": "[laplace_last_layer,swag]",
                                      "abstention.samples": 4}))
    return run_dir


@pytest.fixture
def run(fitted_run, tmp_path):
    """A copy of the fitted run, for a test to change."""
    shutil.copytree(fitted_run, tmp_path / "run")
    return tmp_path / "run"


def states(run_dir) -> dict:
    return torch.load(run_dir / FITTED, weights_only=True)["posteriors"]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def resume(run_dir, *overrides):
    return train(config_for_run(None, [f"resume={run_dir}", "train.progress=false", *overrides]))


def test_a_resume_reads_fitted_pt_once(run, monkeypatch):
    """Issue 48: a resume read the run's fitted.pt twice (the kinds it holds, then the fits)."""
    from bnn_zoo.cli import train as command
    from bnn_zoo.runs.storage import fits

    seen = []  # each read of the file, and its rewrite: reads after that read what was written
    read, write = fits.read, command.write_fits
    monkeypatch.setattr(fits, "read", lambda path, *a, **k: seen.append(("read", path)) or read(path, *a, **k))
    monkeypatch.setattr(command, "write_fits", lambda path, *a: seen.append(("write", path)) or write(path, *a))
    resume(run, "train.posteriors=[laplace_kfac]")
    assert seen[:seen.index(("write", run / FITTED))].count(("read", run / FITTED)) == 1


def test_a_resume_adds_a_kind_and_keeps_the_fits_and_certificates_the_run_holds(run, capsys):
    """Issue 40, 1: train.posteriors=[laplace_kfac] on a run holding two kinds rewrote fitted.pt with
    K-FAC alone, their certificates gone."""
    before = states(run)
    metrics = resume(run, "train.posteriors=[laplace_kfac]")
    after = states(run)
    assert list(after) == [*HELD, "laplace_kfac"]
    assert all(same(before[name], after[name]) for name in HELD)  # kept as they were: not fitted again
    printed = capsys.readouterr().out
    assert "laplace_kfac: fitted around" in printed and "swag: fitted" not in printed
    assert set(metrics["fitted"]) == {*HELD, "laplace_kfac"}
    certified = json.loads((run / CALIBRATION).read_text())
    assert {*HELD, "laplace_kfac"} <= set(certified)
    trained = load(run)
    assert trained.config.train.posteriors == [*HELD, "laplace_kfac"] and {*HELD, "laplace_kfac"} <= set(trained.sets)


def test_a_resume_that_trains_the_twin_on_fits_again_what_it_made_stale(run, capsys):
    """Issue 40, 2: train.epochs=2 'train.posteriors=[]' trained the twin on and served the fits of
    its first epoch. And a fit of other twin weights than the run's (a resume stopped between the
    twin's checkpoint and the fits) is refused by name, never served."""
    before, old = states(run), (run / FITTED).read_bytes()
    resume(run, "train.epochs=2", "train.posteriors=[]")
    printed = capsys.readouterr().out
    for name in HELD:
        assert f"{name}: fitted again (fitted around the twin of epoch 1, which has trained on to epoch 2)" in printed
    trained = load(run)
    assert trained.twin_epoch == 2 and set(trained.fitted) == set(HELD)
    records = torch.load(run / FITTED, weights_only=True)["fits"]
    assert all(records[name]["twin"] == twin_digest(trained) and records[name]["twin_epoch"] == 2 for name in HELD)
    laplace, layer = posteriors(trained)["laplace_last_layer"], last_linear(trained.twin.net)
    assert torch.equal(laplace.mean, torch.cat([layer.weight, layer.bias[:, None]], 1).flatten().detach())
    assert not torch.equal(laplace.mean, before["laplace_last_layer"]["mean"])  # around the new twin's weights

    (run / FITTED).write_bytes(old)  # the fits of epoch 1 beside the twin of epoch 2
    with pytest.raises(CheckpointError) as refused:
        load(run)
    message = str(refused.value)
    assert "laplace_last_layer: fitted around the twin of epoch 1, which has trained on to epoch 2" in message
    assert f"resume={run} 'train.drop_posteriors=[laplace_last_layer,swag]'" in message and "\n" not in message


def test_a_fit_that_does_not_say_which_twin_it_was_fitted_around_is_refused(run):
    stored = torch.load(run / FITTED, weights_only=True)
    del stored["fits"]  # as bnn-zoo wrote fitted.pt before fits were bound to their twin
    save_atomic(stored, run / FITTED)
    with pytest.raises(CheckpointError, match="swag: it does not say which twin it was fitted around"):
        load(run)


def test_drop_posteriors_deletes_the_named_kinds_and_their_certificates_and_nothing_else(run, capsys):
    before = states(run)
    resume(run, "train.drop_posteriors=[swag]")
    assert "swag: dropped from" in capsys.readouterr().out
    assert list(states(run)) == ["laplace_last_layer"]
    assert same(states(run)["laplace_last_layer"], before["laplace_last_layer"])
    certified = json.loads((run / CALIBRATION).read_text())
    assert "swag" not in certified and "laplace_last_layer" in certified
    trained = load(run)
    assert trained.config.train.posteriors == ["laplace_last_layer"] and trained.config.train.drop_posteriors == []
    assert "swag" not in posteriors(trained) and "swag" not in trained.sets


@pytest.mark.slow  # two resumes; CI runs it under -m slow
def test_dropping_every_fitted_kind_takes_the_file_away(run):
    resume(run, "train.drop_posteriors=[swag,laplace_last_layer]", "abstention.certify=false")
    assert not (run / FITTED).exists() and not set(HELD) & set(posteriors(load(run)))
    resume(run, "train.posteriors=[swag]", "abstention.certify=false")  # and a later resume fits one afresh
    assert list(states(run)) == ["swag"]


def test_a_drop_names_a_kind_the_run_holds(run):
    with pytest.raises(ConfigError, match="holds no laplace_kfac to drop \\(it holds laplace_last_layer, swag\\)"):
        resume(run, "train.drop_posteriors=[laplace_kfac]")
    with pytest.raises(ConfigError, match="laplace_kfac is also asked for in train.posteriors; drop it or fit it"):
        resume(run, "train.drop_posteriors=[laplace_kfac]", "train.posteriors=[laplace_kfac]")


def test_a_resume_holds_what_the_run_holds_and_what_it_asks_less_what_it_drops(run):
    from bnn_zoo.runs.storage.checkpoint import read
    from bnn_zoo.runs.training.resume import posteriors_kept

    stored = read(run / "checkpoint.pt")
    stored["config"]["train"]["posteriors"] = ["laplace_last_layer"]  # swag held by fitted.pt alone
    for asked, dropped, kept in ((["laplace_kfac"], [], [*HELD, "laplace_kfac"]),
                                 ([], ["swag"], ["laplace_last_layer"]),
                                 (["swag", "laplace_kfac"], ["laplace_last_layer"], ["swag", "laplace_kfac"])):
        cfg = config_for_run(None, [f"resume={run}", f"train.posteriors=[{','.join(asked)}]",
                                    f"train.drop_posteriors=[{','.join(dropped)}]"])
        assert list(posteriors_kept(cfg, stored, run / FITTED, stored_fits(run / FITTED)).train.posteriors) == kept
    for asked in ("laplace_kfac,swag", "swag"):  # issue 47: a kind the run holds, asked for and dropped, went silently
        with pytest.raises(ConfigError, match="swag is also asked for in train.posteriors; drop it or fit it, not both"):
            config_for_run(None, [f"resume={run}", f"train.posteriors=[{asked}]", "train.drop_posteriors=[swag]"])


def test_drop_posteriors_is_for_a_resume():
    from bnn_zoo.runs.plans.config import load_config

    with pytest.raises(ConfigError, match="'train.drop_posteriors': it deletes fitted posteriors a run holds"):
        load_config("mnist_mlp", ["train.drop_posteriors=[swag]"])


def forge(run_dir, name: str, change) -> None:
    """Rewrite ``name``'s state in the run's fitted.pt with ``change`` applied, its digest written afresh
    (as a forger would: the file passes the integrity check)."""
    stored = torch.load(run_dir / FITTED, weights_only=True)
    stored["posteriors"][name] = change(dict(stored["posteriors"][name]))
    save_atomic(stored, run_dir / FITTED)


@pytest.mark.parametrize("name, change, message", [
    ("swag", lambda s: {k: v for k, v in s.items() if k != "mean"}, "its 'mean' is nothing, not a tensor of floats"),
    ("swag", lambda s: {**s, "mean": s["mean"][:3]}, r"its 'mean' has shape \[3\], not \[\d+\]"),
    ("swag", lambda s: {**s, "deviations": s["deviations"][:1]}, "its 'deviations' hold 1 moment"),
    ("swag", lambda s: {**s, "variance": -s["variance"]}, "its 'variance' holds numbers below 0"),
    ("swag", lambda s: {**s, "scale": "half"}, "its 'scale' is 'half', not a positive number"),
    ("swag", lambda s: "a string", "its 'deviations' is nothing, not a tensor of floats"),
    ("laplace_last_layer", lambda s: {**s, "factor": s["factor"].T.contiguous()}, "its .factor. is no Cholesky factor"),
    ("laplace_last_layer", lambda s: {**s, "factor": s["factor"].long()}, "its 'factor' is a Tensor of torch.int64"),
    ("laplace_last_layer", lambda s: {**s, "prior_precision": float("nan")}, "its 'prior_precision' is nan"),
    ("laplace_last_layer", lambda s: {**s, "mean": s["mean"] * float("inf")}, "its 'mean' holds NaN or inf"),
])
def test_a_forged_state_is_refused_by_name_in_one_line(run, name, change, message):
    forge(run, name, change)
    with pytest.raises(CheckpointError, match=f"{name}: its state is not one bnn-zoo wrote \\({message}") as refused:
        load(run)
    assert "\n" not in str(refused.value)


def test_a_forged_list_of_posteriors_is_refused_by_name(run):
    stored = torch.load(run / FITTED, weights_only=True)
    stored["posteriors"] = {1: stored["posteriors"]["swag"]}
    save_atomic(stored, run / FITTED)
    with pytest.raises(CheckpointError, match="names a posterior fitted after training by something other than a word"):
        load(run)
