"""``python -m bnn_zoo.evaluate RUN_DIR``: every figure of a trained classifier run (or a shipped
posterior), for each posterior it holds, as a table and eval.json (``bnn_zoo.evaluation.evaluate``).

Usage: python -m bnn_zoo.evaluate RUN_DIR [--samples 100] [--ood notmnist noise] [--shift rotate fog]
           [--rule quantile --threshold 0.3] [--no-act-on-alarm]

Each corrupted set is answered as one stream in a seeded order: from the input that sounds its shift
alarm on, by the after-alarm rule (bnn_zoo.abstain.after_alarm); eval.json's shift/NAME/by_alarm
counts the wrong answers before and after the alarm, and what the certified rule alone refuses.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.errors import ConfigError
from ..data.corruptions import CORRUPTIONS
from ..data.ood_sets import OOD_SETS
from ..evaluation.evaluate import evaluate_run, table
from ..runs.files import check_writable, write_atomic
from ..runs.loading import is_shipped, shadowed
from . import options as cli


def ood_name(text: str) -> str:
    """An --ood entry: a named set, or NAME=FOLDER of images."""
    name, _, folder = text.partition("=")
    if name not in OOD_SETS and not (folder and name):
        raise argparse.ArgumentTypeError(f"{text!r} is neither an OOD set ({', '.join(OOD_SETS)}) nor NAME=FOLDER")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.evaluate", __doc__)
    parser.add_argument("run_dir", help="a trained classifier run's directory (python -m bnn_zoo.train ...), or a shipped "
                                        "posterior's name: lenet, mnist_mlp, lenet_fashion")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    cli.add_data_options(parser)
    parser.add_argument("--output", default=None, help="JSON file (default RUN_DIR/eval.json; for a shipped name, ./NAME_eval.json)")
    parser.add_argument("--ood", nargs="*", default=None, type=ood_name,
                        help=f"OOD sets: {', '.join(OOD_SETS)}, or NAME=FOLDER of images (default: notmnist noise "
                             "fashion_mnist; a FashionMNIST run: mnist notmnist noise; and the run's data.ood)")
    parser.add_argument("--shift", nargs="*", default=None, choices=CORRUPTIONS, metavar="CORRUPTION",
                        help="MNIST-C's corruptions of the test set to score under (default: all fifteen for MNIST "
                             f"and FashionMNIST runs; --shift alone: none): {', '.join(CORRUPTIONS)}")
    parser.add_argument("--shift-size", type=cli.count, default=500,
                        help="test images per corruption, and the inputs the shift alarm watches per set (default 500)")
    cli.add_alarm_option(parser)
    args = parser.parse_args(argv)

    def command() -> int:
        cli.note(shadowed(args.run_dir))
        shipped = is_shipped(args.run_dir)  # its figures go beside you
        output = Path(args.output or (f"{args.run_dir}_eval.json" if shipped else Path(args.run_dir) / "eval.json"))
        if not output.parent.is_dir():  # found out before the work, not after
            raise ConfigError(f"--output {output}: folder {output.parent} does not exist; create it or "
                              "write elsewhere")
        if output.is_symlink() or output.is_dir():
            raise ConfigError(f"--output {output} is a {'symbolic link' if output.is_symlink() else 'folder'}; "
                              "give the path of a file to write")
        check_writable(output.parent)
        evaluation = evaluate_run(args.run_dir, args.samples, args.seed, args.rule, args.quantile, args.threshold,
                                  args.ood and tuple(args.ood), args.ood_size, args.test_size, args.data_root,
                                  args.device, args.shift and tuple(args.shift), args.shift_size, args.act_on_alarm)
        write_atomic(output, json.dumps(evaluation.to_dict(), indent=2))
        print(table(evaluation))
        cli.note(f"wrote every figure to {output}")
        for result in evaluation.posteriors.values():
            cli.note(result.note)  # where no rule is certified: the sets answered, and what would certify one
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
