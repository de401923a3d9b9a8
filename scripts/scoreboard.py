"""The out-of-distribution scoreboard: for each trained classifier run and every posterior it holds
(its Bayesian network or ensemble, its twin with and without temperature scaling, MC dropout or
deep ensemble, HMC: bnn_zoo.posterior), one table (markdown and JSON) and plots. In distribution:
accuracy, NLL, ECE, refused, accuracy on accepted, AURC, AUGRC, risk at 95% and 99% coverage, the
certified conformal sets' coverage and size, and sets calibrated on validation at 90, 95 and 99%.
Per OOD set (the far ones, and the near ones that bnn_zoo.data.ood_sets builds from MNIST test digits and the
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from _child import provenance

from bnn_zoo.cli import options as cli
from bnn_zoo.cli.evaluate import ood_name
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.data.ood_sets import NEAR, font_files
from bnn_zoo.data.own import OWN_DATA
from bnn_zoo.evaluation import plots
from bnn_zoo.evaluation.evaluate import (
    DEFAULT_OOD,
    Evaluation,
    InDistribution,
    OODResult,
    PosteriorResult,
    default_ood,
    evaluate_run,
)
from bnn_zoo.evaluation.split_fits import TARGETS
from bnn_zoo.posterior import BAYES, KINDS, TWIN
from bnn_zoo.runs.checkpoint import MEMBERS
from bnn_zoo.runs.files import check_writable, make_folder, read_json, write_atomic
from bnn_zoo.runs.loading import load

# (header, shown in percent, the figure): the in-distribution columns, then those per OOD set
IN_DISTRIBUTION: list[tuple[str, bool, Callable[[InDistribution], float]]] = [
    ("accuracy", True, lambda t: t.accuracy), ("NLL", False, lambda t: t.nll), ("ECE", False, lambda t: t.ece),
    ("refused", True, lambda t: t.refused), ("acc. accepted", True, lambda t: t.accuracy_accepted),
    ("AURC", False, lambda t: t.aurc), ("AUGRC", False, lambda t: t.augrc), ("risk @95%", False, lambda t: t.risk_at_95),
    ("risk @99%", False, lambda t: t.risk_at_99), ("set coverage", True, lambda t: t.set_coverage),
    ("set size", False, lambda t: t.set_size),
    *((f"{header} @{target:.0%}", percent, lambda t, target=target, name=name: getattr(t.set_figures(target), name, None))
      for target in TARGETS for header, percent, name in (("sets: coverage", True, "coverage"), ("size", False, "size")))]
PER_SET: list[tuple[str, bool, Callable[[OODResult], float | None]]] = [
    ("refused", True, lambda o: o.refused), ("refused in a stream", True, lambda o: o.refused_in_stream),
    ("refused, quantile rule", True, lambda o: o.refused_by_quantile_rule),
    ("AUROC H", False, lambda o: o.by_entropy.auroc), ("AUPR H", False, lambda o: o.by_entropy.aupr),
    ("FPR95 H", False, lambda o: o.by_entropy.fpr95),
    ("AUROC MI", False, lambda o: o.by_mutual_information and o.by_mutual_information.auroc),
    ("AUPR MI", False, lambda o: o.by_mutual_information and o.by_mutual_information.aupr),
    ("FPR95 MI", False, lambda o: o.by_mutual_information and o.by_mutual_information.fpr95),
    ("AUROC density", False, lambda o: o.by_feature_density and o.by_feature_density.auroc),
    ("handled (overlaid)", True, lambda o: o.handled)]
ALARM_WITHIN = 50  # inputs: the shift table counts the corruptions the alarm caught this soon
# Near sets for a FashionMNIST run: the ones that are not digits themselves.
NEAR_FOR = {"mnist": NEAR, "fashion_mnist": ("letters", "constant", "scribbles", "blank")}


@dataclass
class ScoredRun:
    """One run's evaluation on its far and near OOD sets, with each posterior's training seconds."""

    evaluation: Evaluation
    far: list[str]
    near: list[str]  # the near sets measured (one the machine cannot build is skipped)
    train_seconds: dict[str, float]  # per posterior; none for a shipped posterior
    letter_fonts: list[str] | None = None  # the fonts the letters set was drawn in

    @property
    def sets(self) -> list[str]:
        """The OOD sets measured, far then near."""
        return [n for n in self.far + self.near if n not in self.evaluation.skipped]

    def near_refused(self, result: PosteriorResult) -> float | None:
        """A posterior's mean refused over the near sets (overlaid digits: refused, or answered with
        a set holding both), None where there are none."""
        return _mean([o.refused if o.handled is None else o.handled for o in (result.ood[n] for n in self.near)])

    def near_refused_in_stream(self, result: PosteriorResult) -> float | None:
        """A posterior's mean refused over the near sets, each answered as one stream with the
        after-alarm rule acting (``OODResult.refused_in_stream``), None where not measured."""
        return _mean([o.refused_in_stream for n in self.near if (o := result.ood[n]).refused_in_stream is not None])

    def near_density_auroc(self, result: PosteriorResult) -> float | None:
        """A posterior's mean AUROC by the feature density over the near sets, None without one."""
        return _mean([o.by_feature_density.auroc for n in self.near if (o := result.ood[n]).by_feature_density])

    def near_auroc(self, result: PosteriorResult) -> float | None:
        """A posterior's mean AUROC (``OODResult.best_auroc``) over the near sets."""
        return _mean([result.ood[n].best_auroc for n in self.near])

    def to_dict(self) -> dict:
        near = {part: {"refused": self.near_refused(r), "refused_in_stream": self.near_refused_in_stream(r),
                       "auroc": self.near_auroc(r),
                       "density_auroc": self.near_density_auroc(r)}
                for part, r in self.evaluation.posteriors.items()}
        return {**self.evaluation.to_dict(), "far": self.far, "near": self.near, "letter_fonts": self.letter_fonts,
                "train_seconds": self.train_seconds, "near_means": near,
                "shift_means": {part: shift_summary(r, self.evaluation.seen_in_training)
                                for part, r in self.evaluation.posteriors.items() if r.shift}}


def shift_summary(result: PosteriorResult, seen: tuple[str, ...] = ()) -> dict:
    """A posterior's figures over the corruptions not ``seen`` in training (its run's augmentation
    covers those: their mean refused and answered wrong are given apart): mean refused, mean and worst
    share answered wrong (and where), on how many at most 1% is answered wrong, on how many the alarm
    sounded within ``ALARM_WITHIN`` inputs (None: no alarm reference), and the mean refused and
    answered wrong by the certified rule alone, the after-alarm rule not acting (None: no alarm reference)."""
    shift = {name: r for name, r in result.shift.items() if name not in seen}
    apart = [r for name, r in result.shift.items() if name in seen]
    worst = max(shift, key=lambda c: shift[c].wrong)
    alarms = [r.alarm for r in shift.values()]
    split = [r.by_alarm for r in shift.values()]
    alone = None if None in split else {"refused_alone": _mean([b.refused_alone for b in split]),
                                        "wrong_alone": _mean([b.wrong_alone for b in split])}
    return {"corruptions": len(shift), "refused": _mean([r.refused for r in shift.values()]),
            **(alone or {"refused_alone": None, "wrong_alone": None}),
            "wrong": _mean([r.wrong for r in shift.values()]), "worst": worst, "worst_wrong": shift[worst].wrong,
            "at_most_1pct_wrong": sum(r.wrong <= 0.01 for r in shift.values()),
            "alarm_within": None if None in alarms else sum(
                a.alarm_at is not None and a.alarm_at <= ALARM_WITHIN for a in alarms),
            "clean_alarm_at": result.test.alarm and result.test.alarm.alarm_at,
            "seen_in_training": {"corruptions": [name for name in result.shift if name in seen],
                                 "refused": _mean([r.refused for r in apart]), "wrong": _mean([r.wrong for r in apart])}}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


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


def _cell(value, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.2f}%" if percent else f"{value:.4f}"


def markdown(runs: dict[str, ScoredRun]) -> str:
    lines = ["| run | model | rule | " + " | ".join(header for header, _, _ in IN_DISTRIBUTION) +
             " | near-OOD refused (mean; overlaid: or both in the set) | near-OOD refused, each set one stream (mean) |",
             "|" + " --- |" * (len(IN_DISTRIBUTION) + 5)]
    for name, run in runs.items():
        for r in run.evaluation.posteriors.values():
            short = {"mutual_information": "MI", "entropy": "H", "feature_density": "-log density"}
            rule = f"q>={r.rule.threshold}" + (f", {short[r.rule.signal]}<={r.rule.cut:.3g}" if r.rule.signal else "")
            cells = [_cell(figure(r.test), percent) for _, percent, figure in IN_DISTRIBUTION]
            lines.append(f"| {name} | {r.posterior} | {rule} | " + " | ".join(cells) +
                         f" | {_cell(run.near_refused(r), True)} | {_cell(run.near_refused_in_stream(r), True)} |")
    for name, run in runs.items():
        fonts = f" (letters drawn in {len(run.letter_fonts)} fonts)" if run.letter_fonts else ""
        lines += ["", f"**{name}**: out-of-distribution sets against its test set{fonts}", "",
                  "| set | model | " + " | ".join(header for header, _, _ in PER_SET) + " |",
                  "|" + " --- |" * (len(PER_SET) + 2)]
        for ood in run.sets:
            for r in run.evaluation.posteriors.values():
                lines.append(f"| {ood}{' (near)' if ood in run.near else ''} | {r.posterior} | " + " | ".join(
                    _cell(figure(r.ood[ood]), percent) for _, percent, figure in PER_SET) + " |")
    return "\n".join(lines + ["", ladder_table(runs), "", density_table(runs), "", shift_table(runs)])


def shift_table(runs: dict[str, ScoredRun]) -> str:
    """Under shift: a row per posterior over the corruptions (``shift_summary``), then per run a row
    per corruption with each posterior's refused / wrong / the input its alarm sounded at."""
    rows = {label: (run, r) for label, (run, _, r) in ladder_rows(runs).items() if r.shift}
    if not rows:
        return ""
    lines = ["| posterior | corruptions not seen in training | refused (mean; the certified rule alone) | answered "
             "wrong (mean; the certified rule alone) | worst wrong | at most 1% wrong on | "
             f"alarm within {ALARM_WITHIN} on | alarm on clean test | seen in training: refused / wrong (mean) |",
             "|" + " --- |" * 9]
    for label, (run, r) in rows.items():
        s = shift_summary(r, run.evaluation.seen_in_training)
        clean = "n/a" if r.test.alarm is None else "none" if s["clean_alarm_at"] is None else f"at {s['clean_alarm_at']}"
        within = "n/a" if s["alarm_within"] is None else f"{s['alarm_within']} of {s['corruptions']}"
        seen = s["seen_in_training"]
        apart = (f"{len(seen['corruptions'])}: {_cell(seen['refused'], True)} / {_cell(seen['wrong'], True)}"
                 if seen["corruptions"] else "none")
        lines.append(f"| {label} | {s['corruptions']} | {_cell(s['refused'], True)} "
                     f"({_cell(s['refused_alone'], True)}) | {_cell(s['wrong'], True)} "
                     f"({_cell(s['wrong_alone'], True)}) | "
                     f"{_cell(s['worst_wrong'], True)} ({s['worst']}) | {s['at_most_1pct_wrong']} of {s['corruptions']} | "
                     f"{within} | {clean} | {apart} |")
    for name, run in runs.items():
        results = {part: r for part, r in run.evaluation.posteriors.items() if r.shift}
        if not results:
            continue
        first = next(iter(results.values()))
        stream = f" of {first.test.alarm.stream}" if first.test.alarm else ""
        lines += ["", f"**{name}** under shift: refused / answered wrong / the input{stream} its alarm sounded at",
                  "", "| corruption | " + " | ".join(r.posterior for r in results.values()) + " |",
                  "|" + " --- |" * (len(results) + 1)]
        for corruption in first.shift:
            cells = []
            for r in results.values():
                c = r.shift[corruption]
                at = "n/a" if c.alarm is None else "none" if c.alarm.alarm_at is None else str(c.alarm.alarm_at)
                cells.append(f"{_cell(c.refused, True)} / {_cell(c.wrong, True)} / {at}")
            seen = " (seen in training)" if corruption in run.evaluation.seen_in_training else ""
            lines.append(f"| {corruption}{seen} | " + " | ".join(cells) + " |")
        lines += before_after_table(name, results)
    return "\n".join(lines)


def before_after_table(name: str, results: dict[str, PosteriorResult]) -> list[str]:
    """Per corruption, each set answered as one stream: the inputs answered wrong before the alarm
    and from it on (counts, and per input), then refused with the after-alarm rule acting (and by the
    certified rule alone); none where the run holds no alarm reference."""
    results = {part: r for part, r in results.items() if all(c.by_alarm for c in r.shift.values())}
    if not results:
        return []
    lines = ["", f"**{name}** before and after the alarm: wrong before it / wrong from it on (per input) / refused "
                 "(by the certified rule alone)", "",
             "| corruption | " + " | ".join(r.posterior for r in results.values()) + " |",
             "|" + " --- |" * (len(results) + 1)]
    for corruption in next(iter(results.values())).shift:
        cells = []
        for r in results.values():
            b, refused = r.shift[corruption].by_alarm, r.shift[corruption].refused
            cells.append(f"{b.wrong_before} of {b.before} ({_cell(b.wrong_before_rate, True)}) / {b.wrong_after} of "
                         f"{b.after} ({_cell(b.wrong_after_rate, True)}) / {_cell(refused, True)} "
                         f"({_cell(b.refused_alone, True)})")
        lines.append(f"| {corruption} | " + " | ".join(cells) + " |")
    return lines


def ladder_rows(runs: dict[str, ScoredRun]) -> dict[str, tuple[ScoredRun, str, PosteriorResult]]:
    """{"run: posterior": (the run, the posterior's name, its result)} over every run and posterior."""
    return {f"{Path(name).name}: {r.posterior}": (run, part, r)
            for name, run in runs.items() for part, r in run.evaluation.posteriors.items()}


def all_sets(runs: dict[str, ScoredRun]) -> list[str]:
    return list(dict.fromkeys(n for run in runs.values() for n in run.sets))


def ladder_table(runs: dict[str, ScoredRun]) -> str:
    """The ladder: per posterior, accuracy, NLL, AUROC per OOD set (mutual information where it is
    sampled, else entropy), the mean over the near sets, and the cost columns."""
    sets = all_sets(runs)
    lines = ["| posterior | accuracy | NLL | " + " | ".join(f"AUROC {n}" for n in sets) +
             " | near AUROC (mean) | training min | predict s | predict MB | numbers stored |",
             "|" + " --- |" * (len(sets) + 8)]
    for label, (run, part, r) in ladder_rows(runs).items():
        aurocs = [_cell(r.ood[n].best_auroc, False) if n in r.ood else "" for n in sets]
        seconds, mb = run.train_seconds.get(part), r.cost.predict_peak_mb
        lines.append(f"| {label} | {_cell(r.test.accuracy, True)} | {r.test.nll:.4f} | " + " | ".join(aurocs) +
                     f" | {_cell(run.near_auroc(r), False)}"
                     f" | {'n/a' if seconds is None else f'{seconds / 60:.1f}'} | {r.cost.predict_seconds:.1f}"
                     f" | {'n/a' if mb is None else f'{mb:.0f}'} | {r.cost.parameters:,} |")
    return "\n".join(lines)


def density_table(runs: dict[str, ScoredRun]) -> str:
    """The third signal on the ladder: per posterior with a point network (a guide at its mean, a
    twin), the AUROC of its feature density (bnn_zoo.abstain.density) per OOD set and over the near sets."""
    sets = all_sets(runs)
    lines = ["| posterior | " + " | ".join(f"density AUROC {n}" for n in sets) + " | near (mean) |",
             "|" + " --- |" * (len(sets) + 2)]
    for label, (run, _, r) in ladder_rows(runs).items():
        cells = [_cell(r.ood[n].by_feature_density.auroc, False) if n in r.ood and r.ood[n].by_feature_density
                 else "n/a" for n in sets]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_cell(run.near_density_auroc(r), False)} |")
    return "\n".join(lines)


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
