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

from _board_runs import ScoredRun, all_sets, ladder_rows
from _board_tables import markdown
from _child import provenance

from bnn_zoo.cli import options as cli
from bnn_zoo.cli.evaluate import ood_name
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.data.shifted.ood_sets import NEAR, font_files
from bnn_zoo.data.own import OWN_DATA
from bnn_zoo.evaluation.figures import plots
from bnn_zoo.evaluation.evaluate import DEFAULT_OOD, default_ood, evaluate_run
from bnn_zoo.posterior import BAYES, KINDS, TWIN
from bnn_zoo.runs.storage.checkpoint import MEMBERS
from bnn_zoo.runs.storage.files import check_writable, make_folder, read_json, write_atomic
from bnn_zoo.runs.storage.loading import load

# Near sets for a FashionMNIST run: the ones that are not digits themselves.
NEAR_FOR = {"mnist": NEAR, "fashion_mnist": ("letters", "constant", "scribbles", "blank")}


def ood_sets(run_dir: str, folders: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """A run's far OOD sets (with the NAME=FOLDER ones given) and near ones: for your own data,
    the folders alone."""
    cfg = load(run_dir).config
    if cfg.data.name not in (*DEFAULT_OOD, *OWN_DATA):
        raise ValueError(f"{run_dir} is not a classifier run (data {cfg.data.name!r})")
    return [*default_ood(cfg), *folders], list(NEAR_FOR.get(cfg.data.name, ()))


def score(run_dir: str, samples: int, ood_size: int, near_size: int, train_seconds: dict[str, float],
          folders: tuple[str, ...] = (), **kwargs) -> ScoredRun:
    entries, near = ood_sets(run_dir, folders)
    far = [e.partition("=")[0] for e in entries]
    sizes = {**dict.fromkeys(far, ood_size), **dict.fromkeys(near, near_size)}
    evaluation = evaluate_run(run_dir, samples, ood=tuple(entries + near), ood_size=sizes, **kwargs)
    near = [n for n in near if n not in evaluation.skipped]
    fonts = [Path(f).name for f in font_files()] if "letters" in near else None  # letters are drawn in them
    return ScoredRun(evaluation, far, near, train_seconds, fonts)


def training_seconds(run_dir: str) -> dict[str, float]:
    """Seconds each posterior took to obtain (``Posterior.training_seconds`` of each registered
    kind), from metrics.json and the ensemble members'; nothing for a shipped posterior, which has
    no metrics.json."""
    runs = [Path(run_dir), *sorted(Path(run_dir, MEMBERS).glob("*"))]
    paths = [r / "metrics.json" for r in runs if (r / "metrics.json").is_file()]
    fix = "train the run again, or delete the file to leave its training time out"
    metrics = [read_json(path, "metrics file bnn-zoo wrote", fix) for path in paths]
    try:
        seconds = {name: kind.training_seconds(metrics) for name, kind in KINDS.items()}
    except (KeyError, TypeError, AttributeError) as err:
        raise ConfigError(f"{' or '.join(map(str, paths))} lacks the training times the scoreboard reads "
                          f"({err.__class__.__name__}: {err}); {fix}") from None
    return {name: s for name, s in seconds.items() if s is not None}


def plot_ladder(runs: dict[str, ScoredRun], out: Path) -> None:
    sets, rows = all_sets(runs), {}
    for label, (_, _, r) in ladder_rows(runs).items():
        shown = [n for n in sets if n in r.ood]
        rows[label] = {"auroc": {n: r.ood[n].best_auroc for n in shown}, "risk": 1 - r.test.accuracy_accepted,
                       "refused": sum(r.ood[n].refused for n in shown) / max(1, len(shown))}
    plots.ladder(rows, sets, out / "ladder.png")


def plot(runs: dict[str, ScoredRun], out: Path) -> None:
    for name, run in runs.items():
        results = run.evaluation.posteriors
        rows = {"Bayesian, certified rule": {}, "Bayesian, quantile rule": {}, "twin, certified rule": {}}
        for ood in run.sets:
            bayes = results[BAYES].ood[ood]
            rows["Bayesian, certified rule"][ood] = {"refused": bayes.refused, "auroc": max(
                d.auroc for d in (bayes.by_entropy, bayes.by_mutual_information) if d)}
            rows["Bayesian, quantile rule"][ood] = {"refused": bayes.refused_by_quantile_rule}
            if TWIN in results:
                twin = results[TWIN].ood[ood]
                rows["twin, certified rule"][ood] = {"refused": twin.refused, "auroc": twin.by_entropy.auroc}
        plots.scoreboard(rows, run.sets, out / f"scoreboard_{Path(name).name}.png")


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
        plot(runs, out)
        plot_ladder(runs, out)
        print(table)
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
