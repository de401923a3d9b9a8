import numpy as np
import pytest
import torch
from PIL import Image

from bnn_zoo.evaluation.figures import plots


def _png(path):
    with Image.open(path) as img:
        pixels = np.asarray(img.convert("L"))
    return img.size, pixels


def test_refusal_curves_draw_the_rates_given(tmp_path):
    thresholds = torch.linspace(0, 1, 11)
    curves = {"MNIST, Bayesian": (thresholds, thresholds ** 2), "MNIST, deterministic": (thresholds, thresholds / 2)}
    fig = plots.refusal_curves(curves, tmp_path / "r.png", 0.2)
    lines = fig.axes[0].lines
    assert np.allclose(lines[0].get_ydata(), (thresholds ** 2).numpy())
    assert np.allclose(lines[1].get_ydata(), (thresholds / 2).numpy()) and lines[1].get_linestyle() == "--"
    size, pixels = _png(tmp_path / "r.png")
    assert size == (7 * 110, int(4.5 * 110)) and pixels.std() > 10  # the figure's size, not a blank image


def test_training_curve_shows_loss_kl_and_validation(tmp_path):
    history = [{"epoch": e, "loss": 10.0 / e, "kl": 8.0 / e, "data_fit": 2.0 / e, "val/accuracy": 0.9 + e / 100,
                "val/nll": 0.3 / e} for e in (1, 2, 3)]
    metrics = {"bayes": {"history": history}, "twin": {"history": [{"epoch": 1, "loss": 1.0}]}}
    fig = plots.training_curve(metrics, tmp_path / "t.png")
    loss_ax, val_ax = fig.axes
    assert [line.get_label() for line in loss_ax.lines] == [
        "Bayesian: loss", "Bayesian: KL part", "Bayesian: data-fit part", "deterministic: loss"]
    assert np.allclose(loss_ax.lines[1].get_ydata(), [8.0, 4.0, 8 / 3])
    assert np.allclose(val_ax.lines[0].get_ydata(), [0.91, 0.92, 0.93])


def test_toy_predictive_draws_each_posterior_s_bands(tmp_path):
    grid = torch.linspace(-1, 1, 5)
    loc = torch.stack([grid, grid + 1.0])  # two samples: mean grid + 0.5, epistemic sd 0.707
    samples = torch.stack([loc, torch.full_like(loc, 0.1)], -1)
    fig = plots.toy_predictive([(grid, {"VI": samples, "HMC": samples * 2}, None, grid)],
                               torch.tensor([0.0]), torch.tensor([0.5]), tmp_path / "p.png", "toy")
    ax, ax_sd = fig.axes
    means = {line.get_label(): line.get_ydata() for line in ax.lines}
    assert np.allclose(means["VI: mean"], (grid + 0.5).numpy())
    assert np.allclose(means["HMC: mean"], (2 * grid + 1).numpy())
    sds = {line.get_label(): line.get_ydata() for line in ax_sd.lines}
    assert np.allclose(sds["VI: epistemic sd"], np.sqrt(0.5)) and np.allclose(sds["HMC: epistemic sd"], np.sqrt(2))


def test_variance_parts_split_the_predictive():
    samples = torch.tensor([[[1.0, 0.3]], [[3.0, 0.4]]])
    parts = plots.variance_parts(samples)
    assert parts["mean"].item() == pytest.approx(2.0)
    assert parts["epistemic"].item() == pytest.approx(np.sqrt(2.0))
    assert parts["aleatoric"].item() == pytest.approx(np.sqrt((0.09 + 0.16) / 2))
    assert parts["total"].item() == pytest.approx(np.sqrt(2.0 + 0.125))


def test_training_curve_leaves_out_what_it_has_not_and_counts_whole_epochs(tmp_path):
    toy = {"bayes": {"history": [{"epoch": 1, "loss": 2.0, "kl": 1.0, "data_fit": 1.0}]}}  # one epoch, no validation
    fig = plots.training_curve(toy, tmp_path / "t.png")
    assert len(fig.axes) == 1  # no empty validation panel
    (loss_ax,) = fig.axes
    assert loss_ax.lines[0].get_marker() == "o"  # one epoch shows as a point
    ticks = loss_ax.xaxis.get_major_locator().tick_values(0.96, 1.04)
    assert all(float(t).is_integer() for t in ticks)


def test_weight_posteriors_draw_a_short_run_s_sds_all_near_their_start(tmp_path):
    """Issue 47 (the docs' commands, run on a one-epoch run): scripts/weight_posteriors.py and
    prune.py stopped on "Too many bins for data range": every sd within 6e-8 of its start, 0.01, a
    range float32 cannot cut into 100 bins."""
    scale = torch.linspace(0.010059862, 0.010059915, 6)
    loc = torch.tensor([-0.2, -0.1, 0.0, 0.05, 0.1, 0.2])
    fig = plots.weight_posteriors({"features.0.bias": (loc, scale)}, tmp_path / "w.png")
    counts = [sum(patch.get_height() for patch in ax.patches) for ax in fig.axes]
    assert counts == [6, 6, 6]  # every weight in each histogram
    assert (tmp_path / "w.png").stat().st_size > 1000
