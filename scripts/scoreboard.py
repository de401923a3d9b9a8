"""The out-of-distribution scoreboard: for each trained classifier run and every posterior it holds
(its Bayesian network or ensemble, its twin with and without temperature scaling, MC dropout or
deep ensemble, HMC: bnn_zoo.posterior), one table (markdown and JSON) and plots. In distribution:
accuracy, NLL, ECE, refused, accuracy on accepted, AURC, AUGRC, risk at 95% and 99% coverage, the
certified conformal sets' coverage and size, and sets calibrated on validation at 90, 95 and 99%.
Per OOD set (the far ones, and the near ones that bnn_zoo.data.shifted.ood_sets builds from MNIST test digits and the
machine's fonts): refused under the run's certified rule and under the quantile rule, AUROC / AUPR
/ FPR95 by entropy and by mutual information, AUROC by the feature density, and for overlaid digits
the share refused or answered with a set holding both. Then the ladder: one row per posterior with
its AUROC per set and its cost (training minutes, seconds and peak MB to predict the test set,
numbers stored), the feature density's AUROC per set, and ladder.png. Then shift: per posterior,
under MNIST-C's corruptions of the test set, the mean refused, the inputs answered wrong (mean and
worst), and where the shift alarm sounds; per corruption each posterior's figures; and per
corruption, each set answered as one stream, the wrong answers before and after the alarm and the
refusals with the after-alarm rule acting and not (--no-act-on-alarm: the certified rule alone).

Usage: python scripts/scoreboard.py mnist_mlp lenet lenet_fashion [--out scoreboard] [--samples 100]
           [--ood-size 10000] [--near-size 2000] [--shift-size 500]   # shipped posteriors, or run directories
"""
import json
import sys
from pathlib import Path

from bnn_zoo.bench.provenance import provenance
from bnn_zoo.cli import options as cli
from bnn_zoo.cli.evaluate import ood_name
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.evaluation.scoreboard.plots import draw_ladder, draw_runs
from bnn_zoo.evaluation.scoreboard.scored import score, training_seconds
from bnn_zoo.evaluation.scoreboard.tables import markdown
from bnn_zoo.runs.storage.files import check_writable, make_folder, write_atomic


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR_OR_NAME")
    parser.add_argument("--out", default="scoreboard", help="output folder (default ./scoreboard)")
    cli.add_sampling_options(parser)
    cli.add_data_options(parser)
    parser.add_argument("--near-size", type=cli.count, default=2000, help="images per near-OOD set (default 2000)")
    parser.add_argument("--shift-size", type=cli.count, default=500,
                        help="test images per corruption, and the inputs each set's shift alarm watches (default 500)")
    parser.add_argument("--ood", nargs="*", default=[], type=ood_name, metavar="NAME=FOLDER",
                        help="more far OOD sets, folders of images (a run on your own data has these alone)")
    cli.add_alarm_option(parser)
    args = parser.parse_args(argv)

    def command() -> int:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is a file; give a folder for the scoreboard's files")
        check_writable(make_folder(out))  # before the work, not after
        # read first: a damaged metrics.json is named now, not after the evaluation
        seconds = {run: training_seconds(run) for run in args.runs}
        runs = {run: score(run, args.samples, args.ood_size, args.near_size, seconds[run], tuple(args.ood), seed=args.seed,
                           test_size=args.test_size, data_root=args.data_root, device=args.device,
                           shift_size=args.shift_size, act_on_alarm=args.act_on_alarm)
                for run in args.runs}
        write_atomic(out / "scoreboard.json", json.dumps({**provenance(), "runs": {name: run.to_dict() for name, run in runs.items()}},
                                                        indent=2))
        table = markdown(runs)
        write_atomic(out / "scoreboard.md", table + "\n")
        draw_runs(runs, out)
        draw_ladder(runs, out)
        print(table)
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
