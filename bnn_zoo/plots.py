"""Plots a run writes: the training curve, and the toy model's posterior predictive.

Usage: ``training_curve(metrics, "runs/x/training.png")``
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def training_curve(metrics: dict, path: Path) -> None:
    """Loss per example by epoch for the BNN (with its KL part) and the twin; validation figures."""
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(11, 4))
    for label, part in (("Bayesian", "bayes"), ("deterministic", "twin")):
        hist = metrics.get(part, {}).get("history", [])
        if not hist:
            continue
        epochs = [h["epoch"] for h in hist]
        ax_loss.plot(epochs, [h["loss"] for h in hist], label=f"{label}: loss")
        parts = [h for h in hist if "kl" in h]
        if parts:
            ax_loss.plot([h["epoch"] for h in parts], [h["kl"] for h in parts], "--",
                         label="Bayesian: KL part")
            ax_loss.plot([h["epoch"] for h in parts], [h["data_fit"] for h in parts], ":",
                         label="Bayesian: data-fit part")
        evals = [h for h in hist if "val/nll" in h]
        key = "val/accuracy" if evals and "val/accuracy" in evals[0] else "val/nll"
        if evals:
            ax_val.plot([h["epoch"] for h in evals], [h[key] for h in evals], "o-", label=label)
            ax_val.set_ylabel(key)
    ax_loss.set(xlabel="epoch", ylabel="nats per training example",
                title="training loss (negative ELBO / N for the BNN)")
    ax_loss.set_yscale("symlog", linthresh=0.01)  # log-like, yet a toy NLL may be negative
    ax_loss.legend()
    ax_val.set(xlabel="epoch", title="validation")
    if ax_val.lines:
        ax_val.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def toy_predictive(grid: torch.Tensor, samples: torch.Tensor, noise_scale: float,
                   train_x: torch.Tensor, train_y: torch.Tensor, twin: torch.Tensor | None,
                   truth: torch.Tensor, path: Path, title: str) -> None:
    """Posterior predictive mean with its 95% band (function spread, and with observation noise)."""
    samples = samples.cpu()
    noisy = samples + noise_scale * torch.randn_like(samples)
    lo, hi = _np(torch.quantile(samples, torch.tensor([0.025, 0.975]), dim=0))
    nlo, nhi = _np(torch.quantile(noisy, torch.tensor([0.025, 0.975]), dim=0))
    grid = _np(grid)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.fill_between(grid, nlo, nhi, color="tab:blue", alpha=0.15, label="95% predictive (with noise)")
    ax.fill_between(grid, lo, hi, color="tab:blue", alpha=0.35, label="95% of the function")
    ax.plot(grid, _np(samples.mean(0)), color="tab:blue", label="posterior predictive mean")
    ax.plot(grid, _np(truth), "k--", lw=1, label="true function")
    if twin is not None:
        ax.plot(grid, _np(twin), color="tab:red", label="deterministic twin")
    ax.scatter(_np(train_x), _np(train_y), color="black", zorder=5, label="training points")
    span = float(train_y.max() - train_y.min())
    ax.set_ylim(float(train_y.min()) - 2 * span, float(train_y.max()) + 2 * span)
    ax.set(xlabel="x", ylabel="y", title=title)
    ax.legend(loc="lower center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sample_histograms(images: torch.Tensor, probs: torch.Tensor, quantile: float, threshold: float,
                      titles: list[str], path: Path) -> None:
    """For each input: the image beside histograms of each class's sampled probabilities, the
    quantile marked and the threshold drawn; ``titles`` say Correct / Wrong / Refused."""
    n, classes = probs.shape[1], probs.shape[2]
    fig, axes = plt.subplots(n, classes + 1, figsize=(1.5 * (classes + 1), 1.6 * n), squeeze=False)
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
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def mean_prob_bars(images: torch.Tensor, bayes: torch.Tensor, twin: torch.Tensor | None,
                   threshold: float, path: Path) -> None:
    """Mean class probabilities, Bayesian vs deterministic, for a few (OOD) images."""
    n, classes = bayes.shape
    fig, axes = plt.subplots(n, 2, figsize=(8, 1.7 * n), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 4]})
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
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def refusal_curves(curves: dict[str, tuple[torch.Tensor, torch.Tensor]], path: Path,
                   threshold: float) -> None:
    """Refusal rate against threshold; ``curves`` maps a label to (thresholds, refusal rates)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (thresholds, rates) in curves.items():
        ax.plot(_np(thresholds), _np(rates), ls="--" if "deterministic" in label else "-",
                label=label)
    ax.axvline(threshold, color="gray", lw=1)
    ax.set(xlabel="threshold on the quantile probability", ylabel="fraction refused",
           title="refusals against threshold", ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def risk_coverage(curves: dict[str, tuple[torch.Tensor, torch.Tensor]], path: Path) -> None:
    """Error rate among accepted inputs against the fraction accepted."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for label, (coverage, risk) in curves.items():
        ax.plot(_np(coverage), _np(risk), label=label)
    ax.set(xlabel="coverage (fraction accepted)", ylabel="risk (error among accepted)",
           title="risk-coverage on MNIST test")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reliability(curves: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]], path: Path) -> None:
    """Reliability diagram: accuracy against confidence per bin; (confidence, accuracy, count)."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="gray", lw=1, ls=":")
    for label, (conf, acc, count) in curves.items():
        keep = count > 0
        ax.plot(_np(conf[keep]), _np(acc[keep]), "o-", label=label)
    ax.set(xlabel="confidence (max mean probability)", ylabel="accuracy",
           title="reliability on MNIST test", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
