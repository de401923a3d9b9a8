"""Prune a trained classifier's posterior by signal-to-noise ratio |mu| / sigma, and by |mu| alone:
test accuracy, NLL and MNIST / notMNIST refusals at each pruned fraction, as a table, JSON and
plots (the curves, and per-layer histograms of the posterior means, sds and SNRs).

Usage: python scripts/prune.py runs/mnist_mlp [--levels 0 0.5 0.95] [--samples 100] [--out DIR]
"""
import json
import sys
from pathlib import Path

import pyro

from bnn_zoo import predict
from bnn_zoo.abstain.rule import Rule
from bnn_zoo.cli import options as cli
from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.core.networks.pruning import SCORES, posterior_loc_scale, prune_masks
from bnn_zoo.data.inputs import pixel_inputs
from bnn_zoo.data.shifted.ood_sets import ood_images
from bnn_zoo.evaluation.figures import plots
from bnn_zoo.evaluation.evaluate import in_distribution, load_for_evaluation
from bnn_zoo.runs.storage.files import write_atomic

LEVELS = [0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99]
COLUMNS = {"accuracy": "accuracy", "nll": "NLL", "refused_mnist": "refused MNIST",
           "refused_notmnist": "refused notMNIST"}


@pyro.settings.context(module_local_params=True)
def prune_report(run_dir, levels=LEVELS, num_samples=100, quantile=0.5, threshold=0.2, test_size=None,
                 ood_size=10000, data_root=None, device="auto", seed=0, out_dir=None) -> dict:
    trained, root, x, labels = load_for_evaluation(run_dir, device, data_root, test_size)
    x, labels = x.to(trained.device), labels.to(trained.device)
    letters = pixel_inputs(trained.data, ood_images("notmnist", root, ood_size)).to(trained.device)
    rows = {by: [] for by in SCORES}
    for by in SCORES:
        for level in levels:
            keep = prune_masks(trained.guide, level, by)
            with seeded(seed, trained.device):  # the same posterior draws at every level: only pruning differs
                probs = predict(trained.model, trained.guide, x, num_samples, keep=keep)
                ood = predict(trained.model, trained.guide, letters, num_samples, keep=keep)
            mnist = in_distribution(probs, labels, Rule(quantile, threshold))
            rows[by].append({"pruned": level, "accuracy": mnist.accuracy, "nll": mnist.nll,
                             "refused_mnist": mnist.refused, "accuracy_accepted": mnist.accuracy_accepted,
                             "refused_notmnist": Rule(quantile, threshold)(ood).refused.float().mean().item()})
    result = {"run_dir": str(run_dir), "num_samples": num_samples, "quantile": quantile,
              "threshold": threshold, "test_size": len(labels), "ood_size": len(letters),
              "weights": sum(loc.numel() for loc, _ in posterior_loc_scale(trained.guide).values()), **rows}
    out_dir = Path(out_dir or Path(run_dir) / "prune")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "prune.json", json.dumps(result, indent=2))
    plots.pruning_curves({"SNR |mu|/sigma": rows["snr"], "|mu|": rows["magnitude"]}, out_dir / "pruning.png",
                         f"{trained.config.arch}: pruning the posterior ({num_samples} samples)")
    plots.weight_posteriors(posterior_loc_scale(trained.guide), out_dir / "weight_posteriors.png")
    return result


def table(result: dict) -> str:
    width = 17
    groups = {"snr": "pruned by SNR |mu|/sigma", "magnitude": "pruned by |mu|"}
    lines = [f"{'':>7} |" + " |".join(f"{groups[by]:^{width * len(COLUMNS)}}" for by in SCORES),
             f"{'pruned':>7} |" + " |".join("".join(f"{name:>{width}}" for name in COLUMNS.values())
                                           for _ in SCORES)]
    for i, level in enumerate(r["pruned"] for r in result["snr"]):
        cells = ["".join(f"{row[k]:>{width}.4f}" if k == "nll" else f"{100 * row[k]:>{width - 1}.2f}%"
                         for k in COLUMNS) for row in (result[by][i] for by in SCORES)]
        lines.append(f"{100 * level:>6g}% |" + " |".join(cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("run_dir", help="a trained classifier run (python -m bnn_zoo.train ...)")
    parser.add_argument("--levels", type=float, nargs="+", default=LEVELS, help="fractions to prune")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser, calibrated=False)  # pruning changes the posterior the rule was certified on
    cli.add_data_options(parser)
    parser.add_argument("--out", default=None, help="output folder (default RUN_DIR/prune)")
    args = parser.parse_args(argv)

    def command() -> int:
        print(table(prune_report(args.run_dir, args.levels, args.samples, args.quantile, args.threshold,
                                 args.test_size, args.ood_size, args.data_root, args.device, args.seed, args.out)))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
