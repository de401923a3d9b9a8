"""Evaluate a trained classifier run: accuracy, calibration and refusals on its test set, and how
well the uncertainty tells out-of-distribution sets (notMNIST, white noise, FashionMNIST) from it,
for the Bayesian network and its deterministic twin. The figures are dataclasses (``Evaluation``, a
``PosteriorResult`` per posterior: ``InDistribution``, ``Cost``, its ``Rule``, an ``OODResult`` per
OOD set); eval.json is their ``to_dict()``.

Usage: python -m bnn_zoo.evaluate RUN_DIR [--samples 100] [--ood notmnist noise] [--rule quantile --threshold 0.3]
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyro
import torch

from . import cli
from .abstention import Rule, risk_coverage, uncertainty
from .trained import Trained, load
from .config import pick_device
from .conformal import ConformalSets
from .cost import Cost as Measure
from .data import load_torchvision, normalize
from .errors import ConfigError, DataError
from .likelihoods import Categorical
from .metrics import detection, expected_calibration_error
from .ood import OOD_SETS, ood_images
from .ladder import posteriors, sampled_probs
from .sampling import seeded
from .files import check_writable, write_atomic

DEFAULT_OOD = {"mnist": ("notmnist", "noise", "fashion_mnist"), "fashion_mnist": ("mnist", "notmnist", "noise")}


@dataclass
class InDistribution:
    """Figures on the test set under a rule: fractions of its inputs, NLL in nats per input."""

    accuracy: float  # forced: the argmax of the mean prediction, never refusing
    nll: float  # of the mean prediction
    ece: float
    refused: float
    refused_by_gate: float  # refused by the rule's epistemic gate alone
    accuracy_accepted: float  # NaN where every input was refused
    multiple: float  # set-valued answers
    aurc: float  # area under the risk-coverage curve
    risk_at_95: float  # error rate among the accepted inputs at 95% coverage
    risk_at_99: float
    set_coverage: float | None = None  # of the certified conformal sets (None: the run has none)
    set_size: float | None = None  # their mean size
    augrc: float | None = None  # area under the generalized risk-coverage curve (None: an older eval.json)


@dataclass
class Detection:
    """How well a score tells an OOD set from the test set (``bnn_zoo.metrics.detection``)."""

    auroc: float
    aupr: float
    fpr95: float


@dataclass
class OODResult:
    """One OOD set against the test set: refusals, mean entropy (bits), detection figures."""

    refused: float  # under the posterior's rule
    refused_by_quantile_rule: float  # under the quantile rule, Rule()
    mean_entropy: float
    by_entropy: Detection
    by_mutual_information: Detection | None = None  # None: one deterministic prediction

    @property
    def best_auroc(self) -> float:
        """AUROC by mutual information where the posterior is sampled, else by entropy."""
        return (self.by_mutual_information or self.by_entropy).auroc

    def to_dict(self) -> dict:
        values = asdict(self)
        return values if self.by_mutual_information else {k: v for k, v in values.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> "OODResult":
        mi = d.get("by_mutual_information")
        return cls(**{**d, "by_entropy": Detection(**d["by_entropy"]), "by_mutual_information": mi and Detection(**mi)})


@dataclass
class Cost:
    """What predicting the test set cost: seconds, peak MB (None where unreadable), numbers stored."""

    predict_seconds: float
    predict_peak_mb: float | None
    parameters: int


@dataclass
class PosteriorResult:
    """One posterior's figures: on the test set, and per OOD set's name."""

    posterior: str  # its label, e.g. "mean-field VI" (bnn_zoo.ladder)
    rule: Rule
    cost: Cost
    test: InDistribution
    ood: dict[str, OODResult] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"posterior": self.posterior, "rule": self.rule.to_dict(), "cost": asdict(self.cost),
                "test": asdict(self.test), "ood": {name: o.to_dict() for name, o in self.ood.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "PosteriorResult":
        return cls(d["posterior"], Rule.from_dict(d["rule"]), Cost(**d["cost"]), InDistribution(**d["test"]),
                   {name: OODResult.from_dict(o) for name, o in d["ood"].items()})


@dataclass
class Evaluation:
    """``evaluate_run``'s result: a ``PosteriorResult`` per posterior the run holds (bnn_zoo.ladder's
    names), and the OOD sets skipped (name: why). eval.json is ``to_dict()``.

    Usage: ``Evaluation.from_dict(json.loads(Path("runs/lenet/eval.json").read_text())).posteriors[BAYES].test``
    """

    run_dir: str
    num_samples: int
    seed: int
    rule: str  # which rules: "calibrated" (each posterior's certified one) or "quantile"
    test_size: int
    skipped: dict[str, str]
    posteriors: dict[str, PosteriorResult]

    def to_dict(self) -> dict:
        return {**asdict(self), "posteriors": {part: r.to_dict() for part, r in self.posteriors.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Evaluation":
        return cls(**{**d, "posteriors": {part: PosteriorResult.from_dict(r) for part, r in d["posteriors"].items()}})


def in_distribution(probs: torch.Tensor, labels: torch.Tensor, rule: Rule,
                    sets: ConformalSets | None = None) -> InDistribution:
    """Forced accuracy, NLL (nats), ECE, refusals (and those by the gate alone), accuracy on the
    accepted inputs, set-valued answers, the selective risks, and the conformal ``sets``' coverage
    and mean size over every input (their guarantee is over all of them, refused or not)."""
    decision = rule(probs)
    labels = labels.to(probs.device)
    accepted = ~decision.refused
    correct = decision.prediction == labels
    forced = Categorical().metrics(probs, labels)
    return InDistribution(
        accuracy=forced["accuracy"], nll=forced["nll"],
        ece=expected_calibration_error(decision.mean_probs, labels),
        refused=decision.refused.float().mean().item(),
        refused_by_gate=decision.refused_by_gate.float().mean().item(),
        accuracy_accepted=correct[accepted].float().mean().item() if accepted.any() else float("nan"),
        multiple=decision.multiple.float().mean().item(),
        **selective_risks(probs, labels, rule.quantile),
        **(dict(zip(("set_coverage", "set_size"), sets.coverage_and_size(probs, labels))) if sets else {}))


def selective_risks(probs: torch.Tensor, labels: torch.Tensor, quantile: float = 0.5) -> dict:
    """Accepting inputs in order of their top quantile probability: the area under the
    risk-coverage curve (AURC), under the generalized one (AUGRC, Traub et al. 2024: the share of
    all inputs accepted and wrong, averaged over the coverages), and the error rate among accepted
    inputs at 95% and 99% coverage."""
    _, coverage, risk = risk_coverage(probs, labels, quantile)
    at = {c: float(risk[max(0, math.ceil(c * len(risk)) - 1)]) for c in (0.95, 0.99)}
    return {"aurc": risk.mean().item(), "augrc": (risk * coverage).mean().item(), "risk_at_95": at[0.95],
            "risk_at_99": at[0.99]}


def ood_result(in_probs: torch.Tensor, ood_probs: torch.Tensor, rule: Rule) -> OODResult:
    """Refusals (under ``rule`` and under the quantile rule), mean entropy, and detection
    figures by entropy and mutual information, for one OOD set against the test set."""
    in_u, ood_u = uncertainty(in_probs, rule.quantile), uncertainty(ood_probs, rule.quantile)
    sampled = in_probs.shape[0] > 1  # mutual information is zero for a single deterministic softmax
    return OODResult(
        refused=rule(ood_probs).refused.float().mean().item(),
        refused_by_quantile_rule=Rule()(ood_probs).refused.float().mean().item(),
        mean_entropy=ood_u["entropy"].mean().item(),
        by_entropy=Detection(**detection(in_u["entropy"], ood_u["entropy"])),
        by_mutual_information=Detection(**detection(in_u["mutual_information"], ood_u["mutual_information"]))
        if sampled else None)


def load_for_evaluation(run_dir: str | Path, device: str, data_root: str | None,
                        test_size: int | None) -> tuple[Trained, str | None, torch.Tensor, torch.Tensor]:
    """A trained classifier run, its data root, and its test set (uint8 images, labels)."""
    trained = load(run_dir, pick_device(device))
    cfg = trained.config
    if not isinstance(trained.model.likelihood, Categorical):
        raise ConfigError(f"evaluation is for classifiers; {cfg.arch} runs report their figures in "
                          "metrics.json")
    root = data_root or cfg.data.root
    images, labels = load_torchvision(cfg.data.name, root, train=False, download=cfg.data.download)
    return trained, root, images[:test_size], labels[:test_size]


@pyro.settings.context(module_local_params=True)
def evaluate_run(run_dir: str | Path, num_samples: int = 100, seed: int = 0, rule: str = "calibrated",
                 quantile: float = 0.5, threshold: float = 0.2, ood: tuple[str, ...] | None = None,
                 ood_size: int | dict[str, int] = 10000, test_size: int | None = None, data_root: str | None = None,
                 device: str = "auto") -> Evaluation:
    """Every figure of ``eval.json``, for each posterior the run holds (the BNN, its twin, HMC; see
    ``bnn_zoo.ladder``) under its rule (``Trained.rules_for``), with what predicting the test set
    cost (seconds, peak MB, numbers stored). ``ood_size``: images per OOD set, or a size per set's name."""
    trained, root, images, labels = load_for_evaluation(run_dir, device, data_root, test_size)
    rules = trained.rules_for(rule, quantile, threshold)
    ood = DEFAULT_OOD[trained.config.data.name] if ood is None else ood
    with seeded(seed, trained.device):
        results, skipped = _evaluate(trained, rules, normalize(images).to(trained.device), labels, ood, ood_size,
                                     num_samples, root, seed)
    return Evaluation(str(run_dir), num_samples, seed, rule, len(labels), skipped, results)


def _evaluate(trained: Trained, rules: dict, x: torch.Tensor, labels: torch.Tensor, ood: tuple[str, ...],
              ood_size: int | dict[str, int], num_samples: int, root: str | None,
              seed: int) -> tuple[dict[str, PosteriorResult], dict[str, str]]:
    """evaluate_run's figures per posterior, and the OOD sets skipped (missing data) with why."""
    in_probs, results = {}, {}
    for part, posterior in posteriors(trained).items():
        with Measure(trained.device) as measured:
            in_probs[part] = posterior.predict(x, num_samples)
        cost = Cost(measured.seconds, measured.peak_mb, posterior.parameters_stored)
        results[part] = PosteriorResult(posterior.label, rules[part], cost,
                                        in_distribution(in_probs[part], labels, rules[part], trained.sets.get(part)))
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
            results[part].ood[name] = ood_result(in_probs[part], probs, rules[part])
    return results, skipped


def _flat(d: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} as {"a/b": 1}."""
    flat = {}
    for key, value in d.items():
        flat.update(_flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def table(evaluation: Evaluation) -> str:
    """Every figure as a text table, a row per figure (named by its path in eval.json's posteriors,
    e.g. ood/notmnist/by_entropy/auroc), a column per posterior."""
    rows = {part: _flat(r.to_dict()) for part, r in evaluation.posteriors.items()}
    keys = list(dict.fromkeys(k for row in rows.values() for k in row))
    width = max(len(k) for k in keys)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{p:>9}" for p in rows)]
    for key in keys:
        cells = [row.get(key) for row in rows.values()]
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
        evaluation = evaluate_run(args.run_dir, args.samples, args.seed, args.rule, args.quantile, args.threshold,
                                  args.ood and tuple(args.ood), args.ood_size, args.test_size, args.data_root,
                                  args.device)
        write_atomic(output, json.dumps(evaluation.to_dict(), indent=2))
        print(table(evaluation))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
