"""Plots a run and the reports write: the training curve, the toy model's posterior predictive,
sampled probabilities, refusals, risk-coverage, reliability, pruning and weight posteriors.

Figures are drawn with matplotlib's object API (``Figure``) and saved as PNG: no pyplot, no
backend chosen, nothing global changed for the caller's own plots. Each function returns its
Figure, whose axes hold exactly the data drawn.

Usage: ``training_curve(metrics, "runs/x/training.png")``
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...runs.storage.files import write_atomic

POSTERIOR_COLORS = ("tab:blue", "tab:green", "tab:purple", "tab:orange")


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _save(fig: Figure, path: Path, dpi: int = 110) -> Figure:
    """Lay out and write the figure whole: to a temporary name, then renamed over ``path``."""
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    return fig


def training_curve(metrics: dict, path: Path) -> Figure:
    """Loss per example by epoch for the BNN (with its KL part) and the twin; validation figures
    where the run has them (a toy run has none: its panel is left out). Epochs are whole numbers,
    and each epoch a marker, so a one-epoch run shows its point."""
    histories = {label: metrics.get(part, {}).get("history", []) for label, part in
                 (("Bayesian", "bayes"), ("deterministic", "twin"))}
    validated = any("val/nll" in h for hist in histories.values() for h in hist)
    fig = Figure(figsize=(11 if validated else 6, 4))
    ax_loss, *ax_val = fig.subplots(1, 2 if validated else 1, squeeze=False)[0]
    for label, hist in histories.items():
        if not hist:
            continue
        ax_loss.plot([h["epoch"] for h in hist], [h["loss"] for h in hist], "o-", ms=3, label=f"{label}: loss")
        parts = [h for h in hist if "kl" in h]
        if parts:
            ax_loss.plot([h["epoch"] for h in parts], [h["kl"] for h in parts], "o--", ms=3, label="Bayesian: KL part")
            ax_loss.plot([h["epoch"] for h in parts], [h["data_fit"] for h in parts], "o:", ms=3,
                         label="Bayesian: data-fit part")
        evals = [h for h in hist if "val/nll" in h]
        if evals and ax_val:
            key = "val/accuracy" if "val/accuracy" in evals[0] else "val/nll"
            ax_val[0].plot([h["epoch"] for h in evals], [h[key] for h in evals], "o-", label=label)
            ax_val[0].set(xlabel="epoch", ylabel=key, title="validation")
    ax_loss.set(xlabel="epoch", ylabel="nats per training example",
                title="training loss (negative ELBO / N for the BNN)")
    ax_loss.set_yscale("symlog", linthresh=0.01)  # log-like, yet a toy NLL may be negative
    for ax in (ax_loss, *ax_val):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if ax.lines:
            ax.legend()
    return _save(fig, path, 120)


def variance_parts(samples: torch.Tensor) -> dict[str, torch.Tensor]:
    """Split a regression predictive [S, N, 2] (mean, noise scale per sample) into its mean and
    standard deviations: epistemic (spread of the mean over posterior samples), aleatoric (root of
    the expected noise variance) and total (root of their sum of squares)."""
    loc, scale = samples.unbind(-1)
    epistemic = loc.std(0) if len(loc) > 1 else torch.zeros_like(loc[0])
    aleatoric = scale.pow(2).mean(0).sqrt()
    return {"mean": loc.mean(0), "epistemic": epistemic, "aleatoric": aleatoric,
            "total": (epistemic ** 2 + aleatoric ** 2).sqrt()}


def toy_predictive(panels: list[tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None, torch.Tensor]],
                   train_x: torch.Tensor, train_y: torch.Tensor, path: Path, title: str) -> Figure:
    """One column per x range: each posterior's predictive mean with +-2 sd bands, epistemic inside
    total (epistemic plus aleatoric), the twin's mean and its +-2 noise-sd band, the true function;
    below, each posterior's epistemic sd (and the aleatoric sd) against x on a log scale.

    ``panels``: (grid [G], {posterior label: samples [S, G, 2]}, twin outputs [G, 2] or None, truth [G]).
    """
    fig = Figure(figsize=(7 * len(panels), 7.5))
    axes = fig.subplots(2, len(panels), squeeze=False, gridspec_kw={"height_ratios": [2, 1]})
    for (grid, posteriors, twin, truth), ax, ax_sd in zip(panels, axes[0], axes[1]):
        g, lo, hi = _np(grid), float(train_y.min()), float(train_y.max())
        for (label, samples), color in zip(posteriors.items(), POSTERIOR_COLORS):
            parts = {k: _np(v) for k, v in variance_parts(samples.cpu()).items()}
            mean = parts["mean"]
            ax.fill_between(g, mean - 2 * parts["total"], mean + 2 * parts["total"], color=color, alpha=0.12,
                            label=f"{label}: +-2 sd, total")
            ax.fill_between(g, mean - 2 * parts["epistemic"], mean + 2 * parts["epistemic"], color=color,
                            alpha=0.3, label=f"{label}: +-2 sd, epistemic")
            ax.plot(g, mean, color=color, label=f"{label}: mean")
            ax_sd.plot(g, parts["epistemic"], color=color, label=f"{label}: epistemic sd")
            lo, hi = min(lo, np.min(mean - 2 * parts["total"])), max(hi, np.max(mean + 2 * parts["total"]))
        ax_sd.plot(g, parts["aleatoric"], color="gray", ls=":", label="aleatoric sd")
        if twin is not None:
            t_mean, t_sd = _np(twin[:, 0]), _np(twin[:, 1])
            ax.plot(g, t_mean, color="tab:red", label="deterministic twin")
            ax.fill_between(g, t_mean - 2 * t_sd, t_mean + 2 * t_sd, color="tab:red", alpha=0.12,
                            label="twin +-2 sd (its noise only)")
        ax.plot(g, _np(truth), "k--", lw=1, label="true function")
        ax.scatter(_np(train_x), _np(train_y), color="black", s=12, zorder=5, label="training points")
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))  # the truth may leave the axes
        ax.set(xlabel="x", ylabel="y", title=f"{title}, x in [{g[0]:g}, {g[-1]:g}]")
        ax_sd.axvspan(float(train_x.min()), float(train_x.max()), color="grey", alpha=0.15,
                      label="observed x range")
        ax_sd.set(xlabel="x", ylabel="standard deviation", yscale="log")
        ax_sd.legend(fontsize=8)
    axes[0][0].legend(loc="lower center", fontsize=7)
    return _save(fig, path, 120)


def sample_histograms(images: torch.Tensor, probs: torch.Tensor, quantile: float, threshold: float,
                      titles: list[str], path: Path) -> Figure:
    """For each input: the image beside histograms of each class's sampled probabilities, the
    quantile marked and the threshold drawn; ``titles`` say Correct / Wrong / Refused."""
    n, classes = probs.shape[1], probs.shape[2]
    fig = Figure(figsize=(1.5 * (classes + 1), 1.6 * n))
    axes = fig.subplots(n, classes + 1, squeeze=False)
    q = torch.quantile(probs.float(), quantile, dim=0)
    bins = torch.linspace(0, 1, 21)
    for i in range(n):
        axes[i, 0].imshow(_np(images[i]), cmap="gray")
        axes[i, 0].set_title(titles[i], fontsize=9)
        axes[i, 0].axis("off")
        for c in range(classes):
            ax = axes[i, c + 1]
            accepted = bool(q[i, c] >= threshold)
            ax.hist(_np(probs[:, i, c]), bins=_np(bins), color="tab:green" if accepted else "tab:gray")
            ax.axvline(threshold, color="tab:red", lw=1)
            ax.axvline(float(q[i, c]), color="black", ls="--", lw=1)
            ax.set_xlim(0, 1)
            ax.set_yticks([])
            ax.tick_params(labelsize=6)
            if i == 0:
                ax.set_title(f"class {c}", fontsize=8)
    fig.suptitle(f"sampled class probabilities: dashed = {quantile:g}-quantile, "
                 f"red = threshold {threshold:g}, green = accepted", fontsize=10)
    return _save(fig, path, 100)


def mean_prob_bars(images: torch.Tensor, bayes: torch.Tensor, twin: torch.Tensor | None,
                   threshold: float, path: Path) -> Figure:
    """Mean class probabilities, Bayesian vs deterministic, for a few (OOD) images."""
    n, classes = bayes.shape
    fig = Figure(figsize=(8, 1.7 * n))
    axes = fig.subplots(n, 2, squeeze=False, gridspec_kw={"width_ratios": [1, 4]})
    ticks = np.arange(classes)
    for i in range(n):
        axes[i, 0].imshow(_np(images[i]), cmap="gray")
        axes[i, 0].axis("off")
        ax = axes[i, 1]
        ax.bar(ticks - 0.2, _np(bayes[i]), 0.4, label="Bayesian (mean of samples)")
        if twin is not None:
            ax.bar(ticks + 0.2, _np(twin[i]), 0.4, label="deterministic")
        ax.axhline(threshold, color="tab:red", lw=1)
        ax.set_ylim(0, 1)
        ax.set_xticks(ticks)
    axes[0, 1].legend(fontsize=8)
    return _save(fig, path, 100)


def refusal_curves(curves: dict[str, tuple[torch.Tensor, torch.Tensor]], path: Path,
                   threshold: float) -> Figure:
    """Refusal rate against threshold; ``curves`` maps a label to (thresholds, refusal rates)."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for label, (thresholds, rates) in curves.items():
        ax.plot(_np(thresholds), _np(rates), ls="--" if "deterministic" in label else "-", label=label)
    ax.axvline(threshold, color="gray", lw=1)
    ax.set(xlabel="threshold on the quantile probability", ylabel="fraction refused",
           title="refusals against threshold", ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)
    return _save(fig, path)


def risk_coverage(curves: dict[str, tuple[torch.Tensor, torch.Tensor]], path: Path) -> Figure:
    """Error rate among accepted inputs against the fraction accepted."""
    fig = Figure(figsize=(6, 4.5))
    ax = fig.subplots()
    for label, (coverage, risk) in curves.items():
        ax.plot(_np(coverage), _np(risk), label=label)
    ax.set(xlabel="coverage (fraction accepted)", ylabel="risk (error among accepted)",
           title="risk-coverage on MNIST test")
    ax.legend(fontsize=8)
    return _save(fig, path)


def reliability(curves: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]], path: Path) -> Figure:
    """Reliability diagram: accuracy against confidence per bin; (confidence, accuracy, count)."""
    fig = Figure(figsize=(5.5, 5))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], color="gray", lw=1, ls=":")
    for label, (conf, acc, count) in curves.items():
        keep = count > 0
        ax.plot(_np(conf[keep]), _np(acc[keep]), "o-", label=label)
    ax.set(xlabel="confidence (max mean probability)", ylabel="accuracy",
           title="reliability on MNIST test", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    return _save(fig, path)


def pruning_curves(rows: dict[str, list[dict]], path: Path, title: str) -> Figure:
    """Accuracy and refusal rates against the fraction of weights pruned, one line per ranking."""
    fig = Figure(figsize=(12, 4.5))
    ax_acc, ax_ref = fig.subplots(1, 2)
    for i, (label, points) in enumerate(rows.items()):
        pruned = [100 * p["pruned"] for p in points]
        ax_acc.plot(pruned, [100 * p["accuracy"] for p in points], "o-", color=f"C{i}", label=label)
        ax_ref.plot(pruned, [100 * p["refused_mnist"] for p in points], "o-", color=f"C{i}",
                    label=f"MNIST, {label}")
        ax_ref.plot(pruned, [100 * p["refused_notmnist"] for p in points], "s--", color=f"C{i}",
                    label=f"notMNIST, {label}")
    ax_acc.set(xlabel="weights pruned (%)", ylabel="MNIST test accuracy (%)", title=title)
    ax_ref.set(xlabel="weights pruned (%)", ylabel="refused (%)", title="refusals (median prob < 0.2)")
    for ax in (ax_acc, ax_ref):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path, 120)


def weight_posteriors(loc_scale: dict[str, tuple[torch.Tensor, torch.Tensor]], path: Path,
                      title: str = "weight posteriors") -> Figure:
    """One row per parameter tensor: histograms of the posterior means, sds and log10 SNR."""
    fig = Figure(figsize=(13, 1.9 * len(loc_scale) + 0.6))
    axes = fig.subplots(len(loc_scale), 3, squeeze=False)
    for (name, (loc, scale)), (ax_mu, ax_sd, ax_snr) in zip(loc_scale.items(), axes):
        # in double precision: a short run's sds, all near their start, span less than float32 can cut into 100 bins
        loc, scale = _np(loc).ravel().astype(np.float64), _np(scale).ravel().astype(np.float64)
        ax_mu.hist(loc, bins=100, color="tab:blue")
        ax_sd.hist(scale, bins=100, color="tab:orange")
        ax_snr.hist(np.log10(np.abs(loc) / scale + 1e-12), bins=100, color="tab:green")
        ax_mu.set_ylabel(f"{name}\n({loc.size} weights)", fontsize=8)
    for ax, label in zip(axes[-1], ("posterior mean mu", "posterior sd sigma", "log10 SNR |mu|/sigma")):
        ax.set_xlabel(label)
    fig.suptitle(title)
    return _save(fig, path, 100)


def scoreboard(rows: dict[str, dict[str, dict]], sets: list[str], path: Path) -> Figure:
    """Per OOD set: the fraction refused (top) and the AUROC of telling it from the test set
    (bottom), one bar per model; ``rows[model][set]`` holds ``refused`` and ``auroc``."""
    fig = Figure(figsize=(max(8.0, 0.9 * len(sets)), 7.5))
    axes = fig.subplots(2, 1, sharex=True)
    width = 0.8 / max(1, len(rows))
    ticks = np.arange(len(sets))
    for k, (model, by_set) in enumerate(rows.items()):
        for ax, key in zip(axes, ("refused", "auroc")):
            values = [by_set.get(s, {}).get(key, np.nan) for s in sets]
            ax.bar(ticks + (k - (len(rows) - 1) / 2) * width, values, width, label=model)
    for ax, label in zip(axes, ("fraction refused", "AUROC against the test set")):
        ax.set(ylabel=label, ylim=(0, 1.02))
        ax.grid(axis="y", alpha=0.3)
    axes[1].set_xticks(ticks, sets, rotation=30, ha="right", fontsize=8)
    axes[1].set_ylim(0.4, 1.005)
    axes[0].legend(fontsize=7)
    fig.suptitle("out-of-distribution sets: refused under each rule, and separated by the best score")
    return _save(fig, path, 110)


def ladder(rows: dict[str, dict], sets: list[str], path: Path) -> Figure:
    """The ladder of posteriors: AUROC per OOD set per posterior (a heat map with its numbers), and
    each posterior's mean OOD refusal against its error rate among the test inputs it accepts.
    ``rows[posterior]`` holds ``auroc`` ({set: value}), ``risk`` and ``refused``."""
    names = list(rows)
    fig = Figure(figsize=(max(10.0, 0.8 * len(sets) + 6), 1.0 + 0.55 * max(4, len(names))))
    heat, scatter = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(2, len(sets)) / 2.5, 2]})
    values = np.array([[rows[n]["auroc"].get(s, np.nan) for s in sets] for n in names], dtype=float)
    image = heat.imshow(values, cmap="viridis", vmin=0.5, vmax=1.0, aspect="auto")
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            heat.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7,
                      color="black" if v > 0.8 else "white")
    heat.set_xticks(range(len(sets)), sets, rotation=30, ha="right", fontsize=8)
    heat.set_yticks(range(len(names)), names, fontsize=8)
    heat.set_title("AUROC against the test set", fontsize=10)
    fig.colorbar(image, ax=heat, fraction=0.03)
    for k, n in enumerate(names):
        scatter.scatter(100 * rows[n]["risk"], 100 * rows[n]["refused"], s=40, label=n,
                        color=f"C{k % 10}")
    scatter.set(xlabel="errors among accepted test inputs (%)", ylabel="OOD inputs refused, mean over sets (%)",
                ylim=(0, 102))
    scatter.grid(alpha=0.3)
    scatter.legend(fontsize=7)
    scatter.set_title("refusal against in-distribution risk, certified rules", fontsize=10)
    return _save(fig, path, 110)
