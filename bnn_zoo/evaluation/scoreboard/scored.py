"""A run scored for the scoreboard (scripts/scoreboard.py): its evaluation on its far and near OOD
sets (``score``: the near ones those of its data, ``NEAR_FOR``) with each posterior's training
seconds (``training_seconds``, from metrics.json), as a ``ScoredRun`` (its JSON by ``to_dict``); the
means over the near sets, a posterior's figures under shift over the corruptions
(``shift_summary``), and the rows and OOD sets of the ladder over every run (``ladder_rows``,
``all_sets``), which the tables and plots read.

Usage: ``run = score("lenet", 100, 10000, 2000, training_seconds("lenet"), shift_size=500)``
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...core.errors import ConfigError
from ...data.own import OWN_DATA
from ...data.shifted.ood_sets import NEAR, font_files
from ...posterior import KINDS
from ...runs.storage.checkpoint import MEMBERS
from ...runs.storage.files import read_json
from ...runs.storage.loading import load
from ..evaluate import DEFAULT_OOD, default_ood, evaluate_run
from ..results import Evaluation, PosteriorResult

ALARM_WITHIN = 50  # inputs: the shift table counts the corruptions the alarm caught this soon


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

    @property
    def unseen_near(self) -> list[str]:
        """The near sets that no outlier kind of the run's training covers: the near means are over
        these alone; a covered one (``Evaluation.ood_seen_in_training``) is reported apart."""
        return [n for n in self.near if n not in self.evaluation.ood_seen_in_training]

    def near_refused(self, result: PosteriorResult) -> float | None:
        """A posterior's mean refused over the near sets not seen in training (overlaid digits:
        refused, or answered with a set holding both), None where there are none."""
        return _mean([o.refused if o.handled is None else o.handled for o in (result.ood[n] for n in self.unseen_near)])

    def near_refused_in_stream(self, result: PosteriorResult) -> float | None:
        """A posterior's mean refused over the near sets not seen in training, each answered as one
        stream with the after-alarm rule acting (``OODResult.refused_in_stream``), None where not measured."""
        return _mean([o.refused_in_stream for n in self.unseen_near if (o := result.ood[n]).refused_in_stream is not None])

    def near_density_auroc(self, result: PosteriorResult) -> float | None:
        """A posterior's mean AUROC by the feature density over the near sets not seen in training,
        None without one."""
        return _mean([o.by_feature_density.auroc for n in self.unseen_near if (o := result.ood[n]).by_feature_density])

    def near_auroc(self, result: PosteriorResult) -> float | None:
        """A posterior's mean AUROC (``PosteriorResult.auroc``: by its rule's signal) over the near sets not seen in training."""
        return _mean([result.auroc(n) for n in self.unseen_near])

    def to_dict(self) -> dict:
        """The evaluation's JSON, with the sets, fonts, training seconds and the means over the near
        sets and the corruptions."""
        near = {part: {"refused": self.near_refused(r), "refused_in_stream": self.near_refused_in_stream(r),
                       "auroc": self.near_auroc(r),
                       "density_auroc": self.near_density_auroc(r)}
                for part, r in self.evaluation.posteriors.items()}
        return {**self.evaluation.to_dict(), "far": self.far, "near": self.near, "near_unseen": self.unseen_near,
                "letter_fonts": self.letter_fonts,
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


def ladder_rows(runs: dict[str, ScoredRun]) -> dict[str, tuple[ScoredRun, str, PosteriorResult]]:
    """{"run: posterior": (the run, the posterior's name, its result)} over every run and posterior."""
    return {f"{Path(name).name}: {r.posterior}": (run, part, r)
            for name, run in runs.items() for part, r in run.evaluation.posteriors.items()}


def all_sets(runs: dict[str, ScoredRun]) -> list[str]:
    """Every OOD set measured on any run, in the order they were first met."""
    return list(dict.fromkeys(n for run in runs.values() for n in run.sets))


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
    """``run_dir`` evaluated (``evaluate_run``, given ``kwargs``) on its far sets, ``ood_size`` images
    each, and its near sets, ``near_size`` each (one the machine cannot build is left out)."""
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
    no metrics.json. A damaged metrics.json is refused in one line naming it."""
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
