"""A shipped config trained with its step captured and compiled reaches what Pyro's step reaches:
test accuracy, NLL and the AUROC of notMNIST and FashionMNIST against MNIST (by mutual
information), each with ``train.capture=compile`` and ``train.capture=eager`` over --seeds seeds,
so the difference between the modes can be read against the spread between seeds.

The compiled step draws the same numbers as Pyro's step but rounds differently (fused float32
arithmetic), so two runs of one seed drift apart over the epochs as two seeds would, only slower;
``tests/core/fast/test_captured_step.py`` checks the step itself against Pyro's to float tolerance.

Usage: python scripts/capture_parity.py [--arch mnist_mlp] [--seeds 0 1] [--out runs/parity]
           [--json parity.json] [--override train.epochs=10 ...]
"""
import json
import statistics
import sys
from pathlib import Path

from bnn_zoo.cli import options as cli
from bnn_zoo.cli.train import train
from bnn_zoo.evaluation.evaluate import evaluate_run
from bnn_zoo.runs.plans.config import load_config

MODES = ("compile", "eager")
FIGURES = ("accuracy", "nll", "auroc notmnist", "auroc fashion_mnist")


def figures(run_dir: Path, data_root: str | None, samples: int, ood_size: int) -> dict:
    """The Bayesian network's test figures and OOD AUROCs, from evaluate_run."""
    evaluation = evaluate_run(run_dir, num_samples=samples, rule="quantile", ood=("notmnist", "fashion_mnist"),
                              data_root=data_root, ood_size=ood_size)
    bayes = evaluation.posteriors["bayes"]
    return {"accuracy": bayes.test.accuracy, "nll": bayes.test.nll,
            **{f"auroc {name}": r.by_mutual_information.auroc for name, r in bayes.ood.items()}}


def parity(arch: str, seeds: list[int], out: Path, data_root: str | None, samples: int, ood_size: int,
           overrides: tuple[str, ...] = ()) -> dict:
    results: dict = {mode: {} for mode in MODES}
    for seed in seeds:
        for mode in MODES:
            run_dir = out / f"{arch}_{mode}_seed{seed}"
            run_overrides = [f"seed={seed}", f"train.capture={mode}", f"run_dir={run_dir}", "overwrite=true",
                         "train.twin=false", "abstention.certify=false", "train.progress=false",
                         *([f"data.root={data_root}"] if data_root else []), *overrides]
            metrics = train(load_config(arch, run_overrides))
            results[mode][seed] = {**figures(run_dir, data_root, samples, ood_size),
                                   "seconds_per_epoch": metrics["bayes"]["seconds_per_epoch"]}
    return results


def report(results: dict, arch: str) -> str:
    lines = [f"{arch}: test figures of the Bayesian network (each seed: compile / eager); mean over seeds",
             f"{'figure':<22}" + "".join(f"{f'seed {s}':>22}" for s in results["eager"]) + f"{'mean':>22}"]
    for figure in (*FIGURES, "seconds_per_epoch"):
        cells = [f"{results['compile'][s][figure]:.4f} / {results['eager'][s][figure]:.4f}" for s in results["eager"]]
        means = [statistics.mean(r[figure] for r in results[mode].values()) for mode in MODES]
        lines.append(f"{figure:<22}" + "".join(f"{c:>22}" for c in cells) + f"{f'{means[0]:.4f} / {means[1]:.4f}':>22}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("--arch", default="mnist_mlp", help="a shipped config with MNIST (mnist_mlp, lenet)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--samples", type=int, default=100, help="posterior samples per test input")
    parser.add_argument("--ood-size", type=int, default=10000, help="images of each OOD set")
    parser.add_argument("--out", default="runs/parity", help="where the runs are written")
    parser.add_argument("--data-root", default=None, help="the data folder (default $BNN_ZOO_DATA, then ./data)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides of every run, e.g. train.epochs=10")
    args = parser.parse_args(argv)

    def command() -> int:
        results = parity(args.arch, args.seeds, Path(args.out), args.data_root, args.samples, args.ood_size,
                         tuple(args.override))
        print(report(results, args.arch))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
