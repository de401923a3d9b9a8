"""Evaluate a trained classifier run: accuracy, calibration and refusals on its test set, and how
well the uncertainty tells out-of-distribution sets (notMNIST, white noise, FashionMNIST) from it,
for the Bayesian network and its deterministic twin.

Usage: python -m bnn_zoo.evaluate RUN_DIR [--samples 100] [--ood notmnist noise] [--rule quantile --threshold 0.3]
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pyro
import torch

from . import cli
from .abstention import Rule, risk_coverage, uncertainty
from .checkpoint import PARTS
from .trained import Trained, load
from .config import pick_device
from .cost import Cost
from .data import load_torchvision, normalize
from .errors import ConfigError, DataError
from .likelihoods import Categorical
from .metrics import detection, expected_calibration_error
from .ood import OOD_SETS, ood_images
from .ladder import posteriors, sampled_probs
from .files import check_writable, write_atomic

DEFAULT_OOD = {"mnist": ("notmnist", "noise", "fashion_mnist"), "fashion_mnist": ("mnist", "notmnist", "noise")}


def in_distribution(probs: torch.Tensor, labels: torch.Tensor, rule: Rule) -> dict:
    """Forced accuracy, NLL (nats), ECE, refusals (and those by the gate alone), accuracy on the
    accepted inputs, set-valued answers."""
    decision = rule(probs)
    labels = labels.to(probs.device)
    accepted = ~decision.refused
    correct = decision.prediction == labels
    return {
        **Categorical().metrics(probs, labels),  # forced accuracy and NLL of the mean
        "ece": expected_calibration_error(decision.mean_probs, labels),
        "refused": decision.refused.float().mean().item(),
        "refused_by_gate": decision.refused_by_gate.float().mean().item(),
        "accuracy_accepted": correct[accepted].float().mean().item() if accepted.any() else float("nan"),
        "multiple": decision.multiple.float().mean().item(),
        **selective_risks(probs, labels, rule.quantile),
    }


def selective_risks(probs: torch.Tensor, labels: torch.Tensor, quantile: float = 0.5) -> dict:
    """Accepting inputs in order of their top quantile probability: the area under the
    risk-coverage curve (AURC) and the error rate among accepted inputs at 95% and 99% coverage."""
    _, coverage, risk = risk_coverage(probs, labels, quantile)
    at = {c: float(risk[max(0, math.ceil(c * len(risk)) - 1)]) for c in (0.95, 0.99)}
    return {"aurc": risk.mean().item(), "risk_at_95": at[0.95], "risk_at_99": at[0.99]}


def ood_rows(name: str, in_probs: torch.Tensor, ood_probs: torch.Tensor, rule: Rule) -> dict:
    """Refusals (under ``rule`` and under the seed's quantile rule), mean entropy, and detection
    figures by entropy and mutual information, for one OOD set against the test set."""
    in_u, ood_u = uncertainty(in_probs, rule.quantile), uncertainty(ood_probs, rule.quantile)
    rows = {f"ood/refused_{name}": rule(ood_probs).refused.float().mean().item(),
            f"ood/refused_quantile_rule_{name}": Rule()(ood_probs).refused.float().mean().item(),
            f"ood/entropy_{name}": ood_u["entropy"].mean().item()}
    scores = {"": "entropy"}
    if in_probs.shape[0] > 1:  # mutual information is zero for a single deterministic softmax
        scores["_mi"] = "mutual_information"
    for suffix, key in scores.items():
        for metric, value in detection(in_u[key], ood_u[key]).items():
            rows[f"ood/{metric}{suffix}_{name}"] = value
    return rows


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


@pyro.settings.context(module_local_params=True)
def evaluate_run(run_dir: str | Path, num_samples: int = 100, seed: int = 0, rule: str = "calibrated",
                 quantile: float = 0.5, threshold: float = 0.2, ood: tuple[str, ...] | None = None,
                 ood_size: int | dict[str, int] = 10000, test_size: int | None = None, data_root: str | None = None,
                 device: str = "auto") -> dict:
    """Every figure of ``eval.json``, for each posterior the run holds (the BNN, its twin, HMC; see
    ``bnn_zoo.ladder``) under its rule (``Trained.rules_for``), with what predicting the test set
    cost (seconds, peak MB, numbers stored). ``ood_size``: images per OOD set, or a size per set's name."""
    trained, root, images, labels = load_for_evaluation(run_dir, device, data_root, test_size, seed)
    rules = trained.rules_for(rule, quantile, threshold)
    ood = DEFAULT_OOD[trained.config.data.name] if ood is None else ood
    x = normalize(images).to(trained.device)
    in_probs, results = {}, {}
    for part, posterior in posteriors(trained).items():
        with Cost(trained.device) as cost:
            in_probs[part] = posterior.predict(x, num_samples)
        results[part] = {"posterior": posterior.label, "cost/predict_seconds": cost.seconds,
                         "cost/predict_peak_mb": cost.peak_mb, "cost/parameters": posterior.parameters_stored,
                         **{f"rule/{k}": v for k, v in rules[part].to_dict().items()},
                         **{f"test/{k}": v for k, v in in_distribution(in_probs[part], labels, rules[part]).items()}}
    skipped = {}
    for name in ood:
        try:
            size = ood_size[name] if isinstance(ood_size, dict) else ood_size
            x = normalize(ood_images(name, root, size, seed)).to(trained.device)
        except DataError as err:
            skipped[name] = str(err)
            print(f"skipping {name}: {err}", file=sys.stderr)
            continue
        for part, probs in sampled_probs(trained, x, num_samples).items():
            results[part].update(ood_rows(name, in_probs[part], probs, rules[part]))
    return {"run_dir": str(run_dir), "num_samples": num_samples, "seed": seed, "rule": rule,
            "test_size": len(labels), "skipped": skipped, **results}


def table(results: dict) -> str:
    """The figures as a text table, one row per metric, a column per model."""
    parts = [p for p in PARTS if p in results]
    keys = list(dict.fromkeys(k for p in parts for k in results[p]))
    width = max(len(k) for k in keys)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{p:>9}" for p in parts)]
    for key in keys:
        cells = [results[p].get(key) for p in parts]
        lines.append(f"{key:<{width}}  " + "  ".join(f"{c:>9.4f}" if isinstance(c, float) else f"{'n/a' if c is None else str(c):>9}"
                                                      for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.evaluate", __doc__)
    parser.add_argument("run_dir")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    cli.add_data_options(parser)
    parser.add_argument("--output", default=None, help="JSON file (default RUN_DIR/eval.json)")
    parser.add_argument("--ood", nargs="*", default=None, choices=OOD_SETS,
                        help="OOD sets (default: notmnist noise fashion_mnist; for a FashionMNIST run "
                             "mnist notmnist noise)")
    args = parser.parse_args(argv)

    def command() -> int:
        output = Path(args.output or Path(args.run_dir) / "eval.json")
        if not output.parent.is_dir():  # found out before the work, not after
            raise ConfigError(f"--output {output}: folder {output.parent} does not exist; create it or "
                              "write elsewhere")
        if output.is_symlink() or output.is_dir():
            raise ConfigError(f"--output {output} is a {'symbolic link' if output.is_symlink() else 'folder'}; "
                              "give the path of a file to write")
        check_writable(output.parent)
        results = evaluate_run(args.run_dir, args.samples, args.seed, args.rule, args.quantile, args.threshold,
                               args.ood and tuple(args.ood), args.ood_size, args.test_size, args.data_root, args.device)
        write_atomic(output, json.dumps(results, indent=2))
        print(table(results))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
