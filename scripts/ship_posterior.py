"""Ship a trained run inside the package: its posterior (config, guide means and scales in half
precision, prior buffers, certified abstention rules) to bnn_zoo/shipped/NAME.pt and its twin to
NAME_twin.pt, so that ``bnn_zoo.load(NAME)`` and ``python -m bnn_zoo.predict NAME IMAGE`` work right
after install. Prints each file's size and how far half precision moves the test figures.

Usage: python scripts/ship_posterior.py runs/lenet lenet [--samples 100] [--test-size 10000]
"""
import sys

import pyro

from bnn_zoo.cli import options as cli
from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.evaluation.evaluate import InDistribution, in_distribution, load_for_evaluation
from bnn_zoo.runs.storage.loading import load, ship
from bnn_zoo.runs.storage.trained import gate_density, posteriors, sampled_probs


@pyro.settings.context(module_local_params=True)
def compare(run_dir: str, name: str, samples: int, test_size: int | None,
            seed: int = 0) -> dict[str, dict[str, InDistribution]]:
    """Test figures of the run and of its shipped copy ({"run" or "shipped": {posterior: figures}}),
    on the same posterior draws' seed."""
    trained, _, x, labels = load_for_evaluation(run_dir, "cpu", None, test_size)
    figures = {}
    for label, source in (("run", trained), ("shipped", load(name))):
        with seeded(seed):
            sampled = sampled_probs(source, x, samples)
        rules, rungs = source.rules_for(), posteriors(source)
        figures[label] = {part: in_distribution(p, labels, rules[part], gate=gate_density(rules[part], source, part, rungs[part], x))
                          for part, p in sampled.items()}
    return figures


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("run_dir")
    parser.add_argument("name")
    cli.add_sampling_options(parser)
    parser.add_argument("--test-size", type=int, default=None)
    args = parser.parse_args(argv)

    def command() -> int:
        for path in ship(args.run_dir, args.name):
            print(f"{path}: {path.stat().st_size / 2 ** 20:.2f} MiB")
        compared = compare(args.run_dir, args.name, args.samples, args.test_size, args.seed)
        for part in compared["run"]:
            run, shipped = compared["run"][part], compared["shipped"][part]
            for name, a, b in (("accuracy", run.accuracy, shipped.accuracy), ("nll", run.nll, shipped.nll),
                               ("refused", run.refused, shipped.refused),
                               ("accuracy_accepted", run.accuracy_accepted, shipped.accuracy_accepted)):
                print(f"{part} {name}: run {a:.4f}, shipped {b:.4f}, difference {b - a:+.4f}")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
