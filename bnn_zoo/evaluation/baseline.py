"""What a fit must beat: the answer that ignores the inputs, from the training split alone. A
regression's is the training targets' mean with their sd (RMSE and Gaussian NLL on the test
split); a classifier's is always the majority class, with the training class frequencies as its
probabilities (accuracy and NLL). A phase whose test RMSE is not below the baseline's by more than
two standard errors of the baseline's over the test examples (whose accuracy is not above it by
more) is no better than it, as far as the test split can tell: a network that learns nothing can
beat the training mean by a little on a few test rows (its own constant lies nearer their mean).
Training says so, with advice for the data it trained on (``advice``), and metrics.json holds the
baseline and, under its ``no_better``, a flag per phase.

Usage::

    for line in mark_no_better(metrics, splits, ["cat", "dog"], "folder"):  # metrics["baseline"]["no_better"]["bayes"]
        print(line)
"""
from __future__ import annotations

import math

import torch

from ..core.networks.likelihoods import Categorical, Gaussian
from ..data.sets import TOY_FUNCTIONS, Splits

# What to check first where a fit is no better than its baseline, by the kind of your own data it trained on
CHECK = {"csv": "check that the table's columns carry the target (data.target names the column to predict)",
         "tensors": "check that the file's x carries its y (each y the answer for its row of x)",
         "folder": "check that each class's subfolder holds that class's images"}


def baseline(splits: Splits, classes: list[str] | None) -> dict:
    """The baseline's test figures (a regression's ``test/rmse`` and ``test/nll``; with ``classes``, a
    classifier's names of its classes, ``test/accuracy`` and ``test/nll``), what it predicts in
    words, and ``margin``: two standard errors of its RMSE or accuracy over the test examples."""
    train, test = splits.train.y.cpu(), splits.test.y.cpu()
    n = len(test)
    if classes:
        counts = torch.bincount(train, minlength=len(classes)).double()
        figures = Categorical().metrics((counts / counts.sum()).float().expand(1, n, -1), test)
        majority, right = int(counts.argmax()), figures["accuracy"]
        return {"predicts": f"always {classes[majority]!r}", "majority": classes[majority],
                **{f"test/{k}": v for k, v in figures.items()}, "margin": 2 * math.sqrt(right * (1 - right) / n)}
    mean, sd = float(train.mean()), float(train.std()) if len(train) > 1 else 1.0
    figures = Gaussian().metrics(torch.tensor([mean, sd]).expand(1, n, 2), test.float())
    squared = (test.double() - mean) ** 2  # the RMSE's standard error: the MSE's, over twice the RMSE
    spread = float(squared.std()) / math.sqrt(n) / (2 * figures["rmse"]) if n > 1 and figures["rmse"] > 0 else 0.0
    return {"predicts": f"{mean:.4g} with sd {sd:.4g}", "mean": mean, "sd": sd,
            **{f"test/{k}": v for k, v in figures.items()}, "margin": 2 * spread}


def no_better(figures: dict, base: dict) -> bool:
    """Whether a phase's test ``figures`` fail to beat the baseline ``base`` by its margin: an RMSE
    not below the baseline's by more, an accuracy not above it by more."""
    if "test/rmse" in base:
        return figures["test/rmse"] > base["test/rmse"] - base["margin"]
    return figures["test/accuracy"] < base["test/accuracy"] + base["margin"]


def advice(data: str) -> str:
    """What to try where a fit to ``data`` (its data.name) is no better than its baseline: check your
    own data's inputs carry the target (``CHECK``), then train longer or at another rate; a toy curve's
    inputs carry it, and a wider network may follow it."""
    train = "train longer (train.epochs) or at another rate (train.lr)"
    if data in TOY_FUNCTIONS:
        return f"{train.replace(' or ', ', ')}, or give the network more units (model.hidden, for example [100, 100])"
    return f"{CHECK[data]}, then {train}" if data in CHECK else train


def mark_no_better(metrics: dict, splits: Splits, classes: list[str] | None, data: str) -> list[str]:
    """Put the baseline (``classes``: a classifier's names of its classes, None for a regression) in
    ``metrics`` (metrics.json's content), with ``no_better``: for each phase with test figures (bayes,
    twin, hmc, an ensemble's mixtures), whether it is no better than it; returns the warning lines
    to log (none where every phase beats it), with the ``advice`` for ``data`` (the run's data.name)."""
    base = metrics["baseline"] = baseline(splits, classes)
    phases = {part: metrics[part] for part in ("bayes", "twin", "hmc") if part in metrics}
    phases.update({f"ensemble {part}": figures for part, figures in metrics.get("ensemble", {}).items()})
    figure = "test/rmse" if "test/rmse" in base else "test/accuracy"
    base["no_better"] = {name: no_better(figures, base) for name, figures in phases.items() if figure in figures}
    worse = [f"{name} ({figure.removeprefix('test/')} {phases[name][figure]:.4f})"
             for name, flagged in base["no_better"].items() if flagged]
    if not worse:
        return []
    what = "predicting the training mean" if figure == "test/rmse" else "answering the training split's majority class"
    return [f"warning: {' and '.join(worse)} {'is' if len(worse) == 1 else 'are'} no better than {what} "
            f"({base['predicts']}: test {figure.removeprefix('test/')} {base[figure]:.4f} +- {base['margin']:.4f}, two "
            f"standard errors over these {len(splits.test)} test examples; NLL {base['test/nll']:.4f}): {advice(data)}"]
