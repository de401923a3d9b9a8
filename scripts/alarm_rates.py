"""The shift alarm's rates (``bnn_zoo.abstain.shift``) for a shipped posterior or a run: how often it
sounds on streams of test inputs (MNIST, FashionMNIST), where the guarantee holds (false alarms, against its alpha,
with a 95% upper bound), and how soon it sounds on each of MNIST-C's corruptions (the median input
of the first alarm over random orders of the corrupted images, and the share of orders in which it
sounds within 50 inputs), and where it sounds on windows of the test set in its stored order (MNIST's
test digits come writer group by writer group: the first and last 1,000, digits 4,000-5,000 and
5,000-6,000, the last 5,000 and the whole set, each a stream of its own). The figures are
``bnn_zoo.evaluation.alarm_rates``'s.

Usage: python scripts/alarm_rates.py lenet [--posteriors bayes twin] [--streams 200] [--length 1000]
           [--orders 20] [--alpha 0.01] [--json alarm_rates.json]
"""
import argparse
import json
import sys

from bnn_zoo.cli import options as cli
from bnn_zoo.evaluation.alarm_rates import rates, report
from bnn_zoo.posterior import KINDS
from bnn_zoo.runs.storage.files import write_atomic


def false_alarm_rate(text: str) -> float:
    """--alpha, checked before any work: a rate in (0, 1)."""
    try:
        alpha = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < alpha < 1:
        raise argparse.ArgumentTypeError(f"a false-alarm rate lies in (0, 1), got {text}")
    return alpha


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("name", help="a shipped posterior (lenet, mnist_mlp, lenet_fashion) or a run directory")
    parser.add_argument("--posteriors", nargs="+", default=None, choices=list(KINDS), help="default: bayes and twin")
    parser.add_argument("--streams", type=cli.count, default=200)
    parser.add_argument("--length", type=cli.count, default=1000,
                        help="inputs of a stream, each test input at most once (at most the test set's size; default 1000)")
    parser.add_argument("--orders", type=cli.count, default=20)
    parser.add_argument("--alpha", type=false_alarm_rate, default=0.01)
    parser.add_argument("--samples", type=cli.posterior_samples, default=100)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", default=None, help="also write the figures to this file (its folder checked first)")
    args = parser.parse_args(argv)

    def command() -> int:
        output = args.json and cli.output_file("--json", args.json)  # before the work, not after it
        found = rates(args.name, args.posteriors, args.streams, args.length, args.orders, args.alpha, args.samples,
                      args.data_root)
        print(report(args.name, found))
        if output:
            write_atomic(output, json.dumps(found, indent=2))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
