"""``python -m bnn_zoo.evaluate RUN_DIR``: a trained classifier run's (or a shipped posterior's)
figures, for each posterior it holds (``bnn_zoo.evaluation.evaluate``): a summary on screen, every
figure in eval.json. By default the questions a user asks first, in about a minute on two CPU cores;
--full measures the whole board.

Usage: python -m bnn_zoo.evaluate RUN_DIR [--full] [--samples 100] [--ood notmnist noise] [--shift rotate fog]
           [--rule quantile --threshold 0.3] [--no-act-on-alarm]

By default: 2,000 test images, 1,000 of each OOD set, no corruptions. --full: every test image,
10,000 of each OOD set, MNIST-C's fifteen corruptions of 500 images, and each posterior's feature
density and sets at 90/95/99% fitted on the run's own splits (for a 2-epoch mnist_mlp on two busy
CPU cores 269 s and 365 lines where the default took 33 to 38 s and 28 lines; LeNet and ensembles
take longer). --test-size, --ood-size and --shift set their part of either.

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
from ..data.shifted.corruptions import CORRUPTIONS
from ..data.shifted.ood_sets import OOD_SETS, ood_entry_problem
from ..runs.storage.files import check_writable, write_atomic
from ..runs.storage.loading import is_shipped, run_folder, shadowed
from . import options as cli


# The default board's sizes (what a user asks first, in about a minute on two CPU cores), and --full's OOD size
QUICK_TEST, QUICK_OOD, FULL_OOD = 2000, 1000, 10000


def ood_name(text: str) -> str:
    """An --ood entry: a named set, or NAME=FOLDER of images (``ood_entry_problem``)."""
    if (problem := ood_entry_problem(text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.evaluate", __doc__)
    parser.add_argument("run_dir", help="a trained classifier run's directory (python -m bnn_zoo.train ...), or a shipped "
                                        "posterior's name: lenet, mnist_mlp, lenet_fashion")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    cli.add_data_options(parser, sizes=f"{QUICK_TEST:,} test images and {QUICK_OOD:,} of each OOD set; --full: all "
                                       f"and {FULL_OOD:,}")
    parser.add_argument("--full", action="store_true",
                        help="the whole board, 7x the default's time (a 2-epoch mnist_mlp on two busy cores: 269 s, not "
                             "33-38 s; longer for LeNet and ensembles): every test image, 10,000 of each "
                             "OOD set, MNIST-C's fifteen corruptions, the feature densities and sets at 90/95/99%%, "
                             "and every figure printed")
    parser.add_argument("--output", default=None, help="JSON file (default RUN_DIR/eval.json; for a shipped name, ./NAME_eval.json)")
    parser.add_argument("--ood", nargs="*", default=None, type=ood_name,
                        help=f"OOD sets: {', '.join(OOD_SETS)}, or NAME=FOLDER of images, NAME none of those "
                             "(default: notmnist noise fashion_mnist; a FashionMNIST run: mnist notmnist noise; and "
                             "the run's data.ood)")
    parser.add_argument("--shift", nargs="*", default=None, choices=CORRUPTIONS, metavar="CORRUPTION",
                        help="MNIST-C's corruptions of the test set to score under (default: none; with --full all "
                             f"fifteen for MNIST and FashionMNIST runs; --shift alone: none): {', '.join(CORRUPTIONS)}")
    parser.add_argument("--shift-size", type=cli.count, default=500,
                        help="test images per corruption, and the inputs the shift alarm watches per set (default 500)")
    cli.add_alarm_option(parser)
    args = parser.parse_args(argv)

    def command() -> int:
        from ..evaluation.evaluate import evaluate_run  # here: a torchvision of another torch is said in a line
        from ..evaluation.summary import summary, table

        cli.note(shadowed(args.run_dir))
        shipped = is_shipped(args.run_dir)  # its figures go beside you
        run = None if shipped else run_folder(args.run_dir)  # a missing run is the run's mistake, not --output's
        output = Path(args.output or (f"{args.run_dir}_eval.json" if shipped else run / "eval.json"))
        if not output.parent.is_dir():  # found out before the work, not after
            raise ConfigError(f"--output {output}: folder {output.parent} does not exist; create it or "
                              "write elsewhere")
        if output.is_symlink() or output.is_dir():
            raise ConfigError(f"--output {output} is a {'symbolic link' if output.is_symlink() else 'folder'}; "
                              "give the path of a file to write")
        check_writable(output.parent)
        full = args.full
        test_size = args.test_size or (None if full else QUICK_TEST)
        shift = (None if full else ()) if args.shift is None else tuple(args.shift)  # None: the run's default
        evaluation = evaluate_run(args.run_dir, args.samples, args.seed, args.rule, args.quantile, args.threshold,
                                  args.ood and tuple(args.ood), args.ood_size or (FULL_OOD if full else QUICK_OOD),
                                  test_size, args.data_root, args.device, shift, args.shift_size, args.act_on_alarm,
                                  references=full)
        write_atomic(output, json.dumps(evaluation.to_dict(), indent=2))
        print(f"{table(evaluation)}\n\n{summary(evaluation)}" if full else summary(evaluation))
        cli.note(f"wrote every figure to {output}" + ("" if full else "; --full measures the whole board (see --help)"))
        for result in evaluation.posteriors.values():
            cli.note(result.note)  # where no rule is certified: the sets answered, and what would certify one
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
