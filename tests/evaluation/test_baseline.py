"""A fit no better than ignoring its inputs says so (bnn_zoo.evaluation.baseline): the baseline's figures, and
training's warning and flags on a table whose target is noise, none on one with a plain signal."""
import csv
import json
import math

import pytest
import torch
from conftest import tiny_config

from bnn_zoo.cli.train import train
from bnn_zoo.data.sets import Splits, TensorSet
from bnn_zoo.evaluation.baseline import baseline, mark_no_better


def targets(train_y: torch.Tensor, test_y: torch.Tensor) -> Splits:
    """Splits that hold these targets (the baseline reads nothing else)."""
    inputs = lambda y: torch.zeros(len(y), 1)  # noqa: E731
    return Splits(TensorSet(inputs(train_y), train_y), None, TensorSet(inputs(test_y), test_y))


def test_a_regression_s_baseline_is_the_training_mean_with_the_training_sd():
    seen, test = torch.tensor([1.0, 2.0, 3.0, 6.0]), torch.tensor([0.0, 4.0, 3.0, 5.0])
    base = baseline(targets(seen, test), None)
    assert (base["mean"], base["sd"]) == pytest.approx((3.0, float(seen.std())))
    assert base["test/rmse"] == pytest.approx(math.sqrt((9 + 1 + 0 + 4) / 4))
    assert base["test/nll"] == pytest.approx(-torch.distributions.Normal(3.0, seen.std()).log_prob(test).mean().item())
    squared = (test - 3.0) ** 2  # two standard errors of the RMSE: the MSE's over twice the RMSE
    assert base["margin"] == pytest.approx(2 * float(squared.std()) / 2 / (2 * base["test/rmse"]))


def test_a_classifier_s_baseline_answers_the_majority_class_with_the_training_frequencies():
    base = baseline(targets(torch.tensor([0, 1, 1, 1, 2]), torch.tensor([1, 0, 2, 1])), ["cat", "dog", "eel"])
    assert base["majority"] == "dog" and base["predicts"] == "always 'dog'" and base["test/accuracy"] == 0.5
    assert base["test/nll"] == pytest.approx(-(2 * math.log(0.6) + math.log(0.2) + math.log(0.2)) / 4)
    assert base["margin"] == pytest.approx(2 * math.sqrt(0.5 * 0.5 / 4))


def test_each_phase_no_better_than_the_baseline_is_flagged_and_said_in_one_line():
    """A phase must beat the baseline by two standard errors of its figure on the test split: on
    100 test examples half of one class, an accuracy above 0.6."""
    metrics = {"bayes": {"test/accuracy": 0.58}, "twin": {"test/accuracy": 0.75},
               "ensemble": {"bayes": {"label": "ensemble", "test/accuracy": 0.25}}}
    test = torch.tensor([1, 0] * 50)
    lines = mark_no_better(metrics, targets(torch.tensor([0, 1, 1, 1, 2]), test), ["cat", "dog", "eel"], "csv")
    assert metrics["baseline"]["no_better"] == {"bayes": True, "twin": False, "ensemble bayes": True}
    assert metrics["baseline"]["test/accuracy"] == 0.5 and metrics["baseline"]["margin"] == pytest.approx(0.1)
    assert lines == ["warning: bayes (accuracy 0.5800) and ensemble bayes (accuracy 0.2500) are no better than "
                     "answering the training split's majority class (always 'dog': test accuracy 0.5000 +- 0.1000, two "
                     "standard errors over these 100 test examples; NLL 1.0601): check that the table's columns "
                     "carry the target (data.target names the column to predict), then train longer "
                     "(train.epochs) or at another rate (train.lr)"]
    assert mark_no_better({"bayes": {"test/accuracy": 0.75}}, targets(torch.tensor([0, 1]), test), ["cat", "dog"],
                          "csv") == []


@pytest.mark.parametrize("data, said", [
    ("polynomial", "): train longer (train.epochs), at another rate (train.lr), or give the network more units "
                   "(model.hidden, for example [100, 100])"),
    ("sinusoid", "): train longer (train.epochs), at another rate (train.lr), or give the network more units "
                 "(model.hidden, for example [100, 100])"),
    ("tensors", "): check that the file's x carries its y (each y the answer for its row of x), then train longer "
                "(train.epochs) or at another rate (train.lr)"),
    ("csv", "): check that the table's columns carry the target (data.target names the column to predict), then "
            "train longer (train.epochs) or at another rate (train.lr)"),
])
def test_a_regression_no_better_than_the_training_mean_is_advised_for_its_data(data, said):
    """The toy curve's warning advised a table's columns (data.target), which a toy run has none of:
    a toy curve's inputs carry its target, your own tensors' x must carry their y, a table's columns."""
    metrics = {"bayes": {"test/rmse": 2.0}}
    lines = mark_no_better(metrics, targets(torch.tensor([1.0, 2.0, 3.0, 6.0]), torch.tensor([0.0, 4.0, 3.0, 5.0])),
                           None, data)
    assert len(lines) == 1 and lines[0].startswith("warning: bayes (rmse 2.0000) is no better than predicting the "
                                                   "training mean (3 with sd 2.16: test rmse 1.8708")
    assert lines[0].endswith(said) and lines[0].count("data.target") == (data == "csv")


def table(path, target):
    """A CSV of 150 rows: four features drawn at random, and the target ``target(features, noise)``."""
    g = torch.Generator().manual_seed(0)
    x, noise = torch.randn(150, 4, generator=g), torch.randn(150, generator=g)
    with open(path, "w", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(["a", "b", "c", "d", "y"])
        rows.writerows([*(f"{v:.5f}" for v in r), f"{t:.5f}"] for r, t in zip(x.tolist(), target(x, noise).tolist()))
    return path


def fit(path, run_dir):
    return train(tiny_config("toy_mlp", **{"run_dir": str(run_dir), "data.name": "csv", "data.path": str(path),
                                           "model.hidden": "[32]", "train.epochs": 150, "train.eval_every": 50,
                                           "train.lr": 0.01}))


@pytest.mark.slow
def test_a_fit_to_a_target_of_noise_says_it_is_no_better_than_the_training_mean(tmp_path, capsys):
    """A target independent of the features: no network beats the training mean on the test rows,
    and training says so, in its log and in metrics.json."""
    metrics = fit(table(tmp_path / "noise.csv", lambda x, noise: noise), tmp_path / "run")
    base = metrics["baseline"]
    assert base["no_better"] == {"bayes": True, "twin": True}
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["baseline"] == base
    log = capsys.readouterr().out
    bayes, twin = metrics["bayes"]["test/rmse"], metrics["twin"]["test/rmse"]
    assert (f"warning: bayes (rmse {bayes:.4f}) and twin (rmse {twin:.4f}) "
            f"are no better than predicting the training mean ({base['mean']:.4g} with sd {base['sd']:.4g}: test rmse "
            f"{base['test/rmse']:.4f} +- {base['margin']:.4f}, two standard errors over these 30 test examples; NLL "
            f"{base['test/nll']:.4f}): check that the table's columns carry the target (data.target names the column "
            "to predict), then train longer") in log


@pytest.mark.slow
def test_a_fit_to_a_plain_signal_says_nothing(tmp_path, capsys):
    signal = table(tmp_path / "signal.csv", lambda x, noise: 2 * x[:, 0] - x[:, 1] + 0.1 * noise)
    metrics = fit(signal, tmp_path / "run")
    assert metrics["baseline"]["no_better"] == {"bayes": False, "twin": False}
    assert metrics["bayes"]["test/rmse"] < 0.5 * metrics["baseline"]["test/rmse"]
    assert "no better than" not in capsys.readouterr().out
