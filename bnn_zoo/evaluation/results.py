"""The figures ``bnn_zoo.evaluation.evaluate`` measures, as dataclasses: an ``Evaluation`` holds a
``PosteriorResult`` per posterior (``InDistribution`` on the test set with its conformal sets'
``SetFigures``, ``Cost``, its ``Rule``, an ``OODResult`` per OOD set, a ``ShiftResult`` per
corruption with its ``BeforeAfter`` the alarm, and where each set's stream sounded the shift alarm, an
``AlarmResult``). The scoreboard, the reports
and the page read these; eval.json is their ``to_dict()``, read back by ``from_dict``.

Usage: ``Evaluation.from_dict(json.loads(Path("runs/lenet/eval.json").read_text())).posteriors["bayes"].test``
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..abstain.rule import Rule


def _without_none(values: dict) -> dict:
    return {k: v for k, v in values.items() if v is not None}


@dataclass
class AlarmResult:
    """The shift alarm (``bnn_zoo.abstain.shift``) on a stream of one set's inputs."""

    stream: int  # inputs it watched
    alarm_at: int | None  # the input at which it sounded (None: it did not)
    alpha: float  # its false-alarm rate over a whole stream like the certifying inputs

    @classmethod
    def read(cls, d: dict | None) -> "AlarmResult | None":
        return d and cls(**d)


@dataclass
class BeforeAfter:
    """A set answered as one stream (``bnn_zoo.abstain.after_alarm.Stream``), split at the input its
    shift alarm sounded at: counts of the inputs before it and from it on, and of those answered
    wrong or refused as answered (from the alarm on by the after-alarm rule, where it was
    ``acting``) and by the rule alone; and the shares of all inputs the rule alone refuses and
    answers wrong (the after-alarm rule not acting)."""

    acting: bool
    before: int  # inputs before the alarm: all of them where it did not sound
    wrong_before: int
    after: int  # inputs from the one that sounded it on
    wrong_after: int
    refused_after: int
    wrong_after_alone: int  # the rule alone, on the same inputs
    refused_after_alone: int
    refused_alone: float  # of all inputs
    wrong_alone: float

    @property
    def wrong_before_rate(self) -> float | None:
        """Per input before the alarm, the share answered wrong (None: there were none)."""
        return self.wrong_before / self.before if self.before else None

    @property
    def wrong_after_rate(self) -> float | None:
        """Per input from the alarm on, the share answered wrong (None: it did not sound)."""
        return self.wrong_after / self.after if self.after else None

    def to_dict(self) -> dict:
        return {**asdict(self), "wrong_before_rate": self.wrong_before_rate, "wrong_after_rate": self.wrong_after_rate}

    @classmethod
    def read(cls, d: dict | None) -> "BeforeAfter | None":
        return d and cls(**{k: v for k, v in d.items() if not k.endswith("_rate")})


@dataclass
class ShiftResult:
    """The test set under one corruption (``bnn_zoo.data.shifted.corruptions``): fractions of its inputs, as
    answered by one stream of them (after its alarm, by the after-alarm rule where it acts)."""

    refused: float
    accuracy_accepted: float  # NaN where every input was refused
    wrong: float  # answered and wrong: what a user pays for
    accuracy: float  # forced: the argmax of the mean prediction, never refusing
    alarm: AlarmResult | None = None  # None: the run holds no alarm reference
    by_alarm: BeforeAfter | None = None  # before and after the alarm (None: no alarm reference)
    images: int | None = None  # how many corrupted images these figures are of (None: an older eval.json)

    def to_dict(self) -> dict:
        return _without_none({**asdict(self), "by_alarm": self.by_alarm and self.by_alarm.to_dict()})

    @classmethod
    def from_dict(cls, d: dict) -> "ShiftResult":
        return cls(**{**d, "alarm": AlarmResult.read(d.get("alarm")), "by_alarm": BeforeAfter.read(d.get("by_alarm"))})


@dataclass
class SetFigures:
    """Conformal sets calibrated on validation for one coverage target, measured on the test set."""

    target: float  # 1 - alpha: the coverage they promise
    coverage: float  # the share of test inputs whose set holds the true class
    size: float  # the mean number of classes in a set


@dataclass
class InDistribution:
    """Figures on the test set under a rule: fractions of its inputs, NLL in nats per input."""

    accuracy: float  # forced: the argmax of the mean prediction, never refusing
    nll: float  # of the mean prediction
    ece: float
    refused: float
    refused_by_gate: float  # refused by the rule's epistemic gate alone
    accuracy_accepted: float  # NaN where every input was refused
    multiple: float  # set-valued answers
    aurc: float  # area under the risk-coverage curve
    risk_at_95: float  # error rate among the accepted inputs at 95% coverage
    risk_at_99: float
    set_coverage: float | None = None  # of the certified conformal sets (None: the run has none)
    set_size: float | None = None  # their mean size
    augrc: float | None = None  # area under the generalized risk-coverage curve (None: an older eval.json)
    sets_by_target: list[SetFigures] | None = None  # sets at 90/95/99% (None: measured without validation)
    alarm: AlarmResult | None = None  # the shift alarm on a stream of test inputs (None: no reference)

    def set_figures(self, target: float) -> SetFigures | None:
        """The sets measured at coverage ``target`` (0.9, 0.95, 0.99), None where not measured."""
        return next((s for s in self.sets_by_target or () if abs(s.target - target) < 1e-9), None)

    def to_dict(self) -> dict:
        return _without_none(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> "InDistribution":
        sets = d.get("sets_by_target")
        return cls(**{**d, "sets_by_target": sets and [SetFigures(**s) for s in sets],
                      "alarm": AlarmResult.read(d.get("alarm"))})


@dataclass
class Detection:
    """How well a score tells an OOD set from the test set (``bnn_zoo.abstain.metrics.detection``)."""

    auroc: float
    aupr: float
    fpr95: float


@dataclass
class OODResult:
    """One OOD set against the test set: refusals, mean entropy (bits), detection figures by each
    signal a rule can gate on (AUROC, AUPR and the FPR at 95% TPR: ``Detection``)."""

    refused: float  # under the posterior's rule
    refused_by_quantile_rule: float  # under the quantile rule, Rule()
    mean_entropy: float
    by_entropy: Detection
    by_mutual_information: Detection | None = None  # None: one deterministic prediction
    by_feature_density: Detection | None = None  # None: no point network to read features from
    # By 1 - the mean prediction's largest probability (the maximum softmax probability baseline;
    # None: an older eval.json)
    by_max_prob: Detection | None = None
    # Overlaid digits: the share refused, or answered with a set holding both digits (None: other sets)
    handled: float | None = None
    alarm: AlarmResult | None = None  # the shift alarm on a stream of its inputs (None: no reference)
    # Refused where the whole set is answered as one stream in a seeded order, the after-alarm rule
    # acting from the input that sounds the alarm on (as predict answers a folder of them)
    refused_in_stream: float | None = None
    images: int | None = None  # how many of the set's images these figures are of (None: an older eval.json)

    def auroc(self, signal: str | None = None) -> float:
        """AUROC by ``signal``, the one a rule gates on (mutual_information, entropy, feature_density),
        where measured; else by mutual information where the posterior is sampled, else by entropy."""
        return (getattr(self, f"by_{signal}", None) or self.by_mutual_information or self.by_entropy).auroc

    def to_dict(self) -> dict:
        return _without_none(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> "OODResult":
        detections = {k: Detection(**d[k]) for k in ("by_entropy", "by_mutual_information", "by_feature_density",
                                                     "by_max_prob") if d.get(k)}
        return cls(**{**d, **detections, "alarm": AlarmResult.read(d.get("alarm"))})


@dataclass
class Cost:
    """What predicting the test set cost: seconds, peak MB (None where unreadable), numbers stored."""

    predict_seconds: float
    predict_peak_mb: float | None
    parameters: int


@dataclass
class PosteriorResult:
    """One posterior's figures: on the test set, per OOD set's name and per corruption's."""

    posterior: str  # its label, e.g. "mean-field VI" (bnn_zoo.posterior)
    rule: Rule
    cost: Cost
    test: InDistribution
    ood: dict[str, OODResult] = field(default_factory=dict)
    shift: dict[str, ShiftResult] = field(default_factory=dict)
    # Where no rule is certified: why, and that each answer (the figures of refusals) is its conformal set
    note: str | None = None

    def auroc(self, name: str) -> float:
        """Its AUROC on OOD set ``name`` by the signal its rule gates on (``OODResult.auroc``)."""
        return self.ood[name].auroc(self.rule.signal)

    def to_dict(self) -> dict:
        return _without_none({"posterior": self.posterior, "rule": self.rule.to_dict(), "cost": asdict(self.cost),
                              "test": self.test.to_dict(), "ood": {name: o.to_dict() for name, o in self.ood.items()},
                              "shift": {name: r.to_dict() for name, r in self.shift.items()} or None,
                              "note": self.note})

    @classmethod
    def from_dict(cls, d: dict) -> "PosteriorResult":
        return cls(d["posterior"], Rule.from_dict(d["rule"]), Cost(**d["cost"]), InDistribution.from_dict(d["test"]),
                   {name: OODResult.from_dict(o) for name, o in d["ood"].items()},
                   {name: ShiftResult.from_dict(r) for name, r in d.get("shift", {}).items()}, d.get("note"))


@dataclass
class Evaluation:
    """``evaluate_run``'s result: a ``PosteriorResult`` per posterior the run holds (bnn_zoo.posterior's
    names), and the OOD sets skipped (name: why). eval.json is ``to_dict()``.

    Usage: ``Evaluation.from_dict(json.loads(Path("runs/lenet/eval.json").read_text())).posteriors[BAYES].test``
    """

    run_dir: str
    num_samples: int
    seed: int
    rule: str  # which rules: "calibrated" (each posterior's certified one) or "quantile"
    test_size: int
    skipped: dict[str, str]
    posteriors: dict[str, PosteriorResult]
    # The corruptions the run's declared augmentation showed it in training (bnn_zoo.data.shifted.augment.covered):
    # reported apart, as seen in training, not as a shift
    seen_in_training: tuple[str, ...] = ()
    # The OOD sets the run's declared outliers showed it in training, made the same way
    # (bnn_zoo.data.shifted.outliers.covered): reported apart, as seen in training, not as unfamiliar
    ood_seen_in_training: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {**asdict(self), "posteriors": {part: r.to_dict() for part, r in self.posteriors.items()},
                "seen_in_training": list(self.seen_in_training),  # as JSON holds them
                "ood_seen_in_training": list(self.ood_seen_in_training)}

    @classmethod
    def from_dict(cls, d: dict) -> "Evaluation":
        return cls(**{**d, "posteriors": {part: PosteriorResult.from_dict(r) for part, r in d["posteriors"].items()},
                      "seen_in_training": tuple(d.get("seen_in_training", ())),
                      "ood_seen_in_training": tuple(d.get("ood_seen_in_training", ()))})
