"""Evaluate a trained classifier run: accuracy, calibration and refusals on its test set, and how
well the uncertainty tells out-of-distribution sets (notMNIST, white noise, FashionMNIST) from it,
for the Bayesian network and its deterministic twin.

Usage: python -m bnn_zoo.evaluate RUN_DIR [--samples 100] [--ood notmnist noise] [--coverage 0.97]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyro
import torch

from . import cli
from .abstention import abstain, calibrate_threshold, uncertainty
from .checkpoint import Trained, load
from .config import pick_device
from .data import load_notmnist, load_torchvision, normalize, validation_split, white_noise
from .errors import ConfigError, DataError
from .likelihoods import Categorical
from .metrics import detection, expected_calibration_error
from .predict import predict

OOD_SETS = ("notmnist", "noise", "fashion_mnist")


def ood_images(name: str, root: str | None, size: int, seed: int = 0) -> torch.Tensor:
    """An out-of-distribution set as uint8 images [n, 28, 28] (at most ``size``)."""
    if name == "notmnist":
        return load_notmnist(root)[:size]
    if name == "noise":
        return white_noise(size, seed)
    if name == "fashion_mnist":
        return load_torchvision("fashion_mnist", root, train=False, download=False)[0][:size]
    raise ValueError(f"unknown out-of-distribution set {name!r}; choose from {', '.join(OOD_SETS)}")


def in_distribution(probs: torch.Tensor, labels: torch.Tensor, quantile: float, threshold: float) -> dict:
    """Forced accuracy, NLL (nats), ECE, refusals and accuracy on the accepted inputs."""
    decision = abstain(probs, quantile, threshold)
    labels = labels.to(probs.device)
    accepted = ~decision.refused
    correct = decision.prediction == labels
    return {
        **Categorical().metrics(probs, labels),  # forced accuracy and NLL of the mean
        "ece": expected_calibration_error(decision.mean_probs, labels),
        "refused": decision.refused.float().mean().item(),
        "accuracy_accepted": correct[accepted].float().mean().item() if accepted.any() else float("nan"),
        "multiple": decision.multiple.float().mean().item(),
    }


def ood_rows(name: str, in_probs: torch.Tensor, ood_probs: torch.Tensor, quantile: float,
             threshold: float) -> dict:
    """Refusals, mean entropy, and detection figures for one OOD set against the test set."""
    in_u, ood_u = uncertainty(in_probs, quantile), uncertainty(ood_probs, quantile)
    rows = {f"ood/refused_{name}": abstain(ood_probs, quantile, threshold).refused.float().mean().item(),
            f"ood/entropy_{name}": ood_u["entropy"].mean().item()}
    scores = {"": "entropy"}
    if in_probs.shape[0] > 1:  # mutual information is zero for a single deterministic softmax
        scores["_mi"] = "mutual_information"
    for suffix, key in scores.items():
        for metric, value in detection(in_u[key], ood_u[key]).items():
            rows[f"ood/{metric}{suffix}_{name}"] = value
    return rows


def sampled_probs(trained: Trained, x: torch.Tensor, num_samples: int) -> dict[str, torch.Tensor]:
    """Sampled probabilities [S, N, C] of the BNN, and [1, N, C] of the twin when there is one."""
    out = {"bayes": predict(trained.model, trained.guide, x, num_samples)}
    if trained.twin is not None:
        with torch.no_grad():
            out["twin"] = torch.cat([trained.twin(xb) for xb in x.split(1000)])[None]
    return out


def load_for_evaluation(run_dir: str | Path, device: str, data_root: str | None, test_size: int | None,
                        seed: int) -> tuple[Trained, str | None, torch.Tensor, torch.Tensor]:
    """A trained classifier run, its data root, and its test set (uint8 images, labels); seeds Pyro."""
    trained = load(run_dir, pick_device(device))
    cfg = trained.config
    if not isinstance(trained.model.likelihood, Categorical):
        raise ConfigError(f"evaluation is for classifiers; {cfg.arch} runs report their figures in "
                          "metrics.json")
    root = data_root or cfg.data.root
    pyro.set_rng_seed(seed)
    images, labels = load_torchvision(cfg.data.name, root, train=False, download=cfg.data.download)
    return trained, root, images[:test_size], labels[:test_size]


def calibrated_thresholds(trained: Trained, root: str | None, num_samples: int, quantile: float,
                          coverage: float) -> dict[str, float]:
    """Per model, the threshold that accepts ``coverage`` of the run's validation split."""
    cfg = trained.config
    if not cfg.data.val_size:
        raise ConfigError("this run holds no validation split (data.val_size=0) to calibrate on")
    images, labels = load_torchvision(cfg.data.name, root, train=True, download=cfg.data.download)
    _, val = validation_split(len(images), cfg.data.val_size)
    x = normalize(images[val]).to(trained.device)
    return {part: calibrate_threshold(probs, labels[val].to(probs.device), quantile, coverage=coverage)
            for part, probs in sampled_probs(trained, x, num_samples).items()}


@pyro.settings.context(module_local_params=True)
def evaluate_run(run_dir: str | Path, num_samples: int = 100, seed: int = 0, quantile: float = 0.5,
                 threshold: float = 0.2, ood: tuple[str, ...] = OOD_SETS, ood_size: int = 10000,
                 test_size: int | None = None, data_root: str | None = None, device: str = "auto",
                 coverage: float | None = None) -> dict:
    """Every figure of ``eval.json``, for the BNN and the deterministic twin.

    With ``coverage``, each model's threshold is calibrated on the run's validation split to
    accept that fraction of it, instead of the fixed ``threshold``.
    """
    trained, root, images, labels = load_for_evaluation(run_dir, device, data_root, test_size, seed)
    in_probs = sampled_probs(trained, normalize(images).to(trained.device), num_samples)
    thresholds = (calibrated_thresholds(trained, root, num_samples, quantile, coverage) if coverage
                  else dict.fromkeys(in_probs, threshold))
    results = {part: {"threshold": thresholds[part],
                      **{f"test/{k}": v for k, v in in_distribution(p, labels, quantile, thresholds[part]).items()}}
               for part, p in in_probs.items()}
    skipped = {}
    for name in ood:
        try:
            x = normalize(ood_images(name, root, ood_size, seed)).to(trained.device)
        except DataError as err:
            skipped[name] = str(err)
            print(f"skipping {name}: {err}", file=sys.stderr)
            continue
        for part, probs in sampled_probs(trained, x, num_samples).items():
            results[part].update(ood_rows(name, in_probs[part], probs, quantile, thresholds[part]))
    return {"run_dir": str(run_dir), "num_samples": num_samples, "seed": seed, "quantile": quantile,
            "threshold": "calibrated" if coverage else threshold, "coverage": coverage,
            "test_size": len(labels), "skipped": skipped, **results}


def table(results: dict) -> str:
    """The figures as a text table, one row per metric, a column per model."""
    parts = [p for p in ("bayes", "twin") if p in results]
    keys = list(dict.fromkeys(k for p in parts for k in results[p]))
    width = max(len(k) for k in keys)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{p:>9}" for p in parts)]
    for key in keys:
        cells = [results[p].get(key) for p in parts]
        lines.append(f"{key:<{width}}  " + "  ".join(f"{c:>9.4f}" if c is not None else f"{'n/a':>9}"
                                                      for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.evaluate", __doc__)
    parser.add_argument("run_dir")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    cli.add_data_options(parser)
    parser.add_argument("--coverage", type=float, default=None,
                        help="calibrate each model's threshold to accept this fraction of the run's "
                             "validation split (instead of --threshold)")
    parser.add_argument("--output", default=None, help="JSON file (default RUN_DIR/eval.json)")
    parser.add_argument("--ood", nargs="*", default=list(OOD_SETS), choices=OOD_SETS)
    args = parser.parse_args(argv)

    def command() -> int:
        results = evaluate_run(args.run_dir, args.samples, args.seed, args.quantile, args.threshold,
                               tuple(args.ood), args.ood_size, args.test_size, args.data_root, args.device,
                               args.coverage)
        Path(args.output or Path(args.run_dir) / "eval.json").write_text(json.dumps(results, indent=2))
        print(table(results))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
