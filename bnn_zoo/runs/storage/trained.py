"""A trained run as one object (``Trained``: its model, guide, twin, HMC samples, posteriors fitted
after training, ensemble members, certified rules and sets), and the posteriors it holds by the
registry's kinds (``posteriors``). ``bnn_zoo.runs.storage.loading.load`` builds one from a run directory or
a shipped name.

Usage: ``trained = bnn_zoo.load("runs/lenet"); posteriors(trained)["bayes"].predict(x)``
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from omegaconf import DictConfig

from ...abstain.after_alarm import Stream
from ...abstain.conformal import ConformalSets
from ...abstain.rule import DENSITY, Decision, Rule
from ...abstain.shift import ALPHA, ShiftAlarm
from ...core.networks.bnn import BayesianNet
from ...core.errors import CheckpointError
from ...core.networks.twin import Twin
from ...data.config import DataConfig
from ...data.own import ROWS
from ...posterior import KINDS, Posterior
from ...posterior.reading import BothReadings
from .checkpoint import digest


@dataclass
class Trained:
    model: BayesianNet
    guide: torch.nn.Module
    config: DictConfig
    twin: Optional[Twin] = None  # the deterministic twin, when the run trained one
    epoch: int = 0
    samples: Optional[dict] = None  # HMC weight samples {site: [S, *shape]}, when infer=nuts
    # What calibration.json certified: read through ``rules`` and ``sets``, which refuse it where it
    # certified other weights than the run holds
    _rules: dict = field(default_factory=dict)
    _sets: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)  # calibration.json's content
    # The twin's temperature (bnn_zoo.abstain.temperature), fitted on validation where calibration.json holds one
    temperature: Optional[float] = None
    # The feature densities a certified density gate reads, by posterior (RUN_DIR/density.pt)
    densities: dict = field(default_factory=dict)
    members: list = field(default_factory=list)  # an ensemble's other members (train.members), each a Trained
    # The states of the posteriors fitted after training, by kind: one a member (bnn_zoo.posterior.base)
    fitted: dict = field(default_factory=dict)
    run: Optional[str] = None  # the run id its checkpoints share
    twin_epoch: Optional[int] = None  # the epochs its twin trained (None: no twin, or a shipped one)
    run_dir: Optional[str] = None  # the folder it was loaded from (None: a shipped posterior)
    # Why the calibration cannot be used (it certified other weights), with the command that
    # re-certifies; None where it can, or where there is none.
    calibration_problem: Optional[str] = None
    # Its typed data section (``Plan.data``): the config's, with the keys its config holds beside it
    # (your own data's normalization and columns: what its inputs are read with)
    data: Optional[DataConfig] = None

    @property
    def rules(self) -> dict[str, Rule]:
        """The abstention rule of each posterior ("bayes", "twin", "hmc"; see bnn_zoo.posterior): certified
        on validation where the run holds calibration.json, else the quantile rule, Rule(); a
        CheckpointError where its calibration certified other weights than the run holds now."""
        if self.calibration_problem:
            raise CheckpointError(self.calibration_problem)
        return self._rules

    @property
    def sets(self) -> dict[str, ConformalSets]:
        """Each posterior's conformal prediction sets, where calibration.json holds them; a
        CheckpointError where it certified other weights than the run holds now."""
        if self.calibration_problem:
            raise CheckpointError(self.calibration_problem)
        return self._sets

    @property
    def device(self) -> torch.device:
        """Where the run was loaded (its prior and noise tensors live there)."""
        return self.model.device

    def alarm(self, part: str, alpha: float = ALPHA) -> Optional[ShiftAlarm]:
        """A fresh shift alarm for ``part``'s inputs (``bnn_zoo.abstain.shift``: its rule's and its
        after-alarm rule's refusals against their rates on the validation inputs they were certified on,
        and repeated inputs); None where calibration.json certified no rule for it, or certified other
        weights (``rules`` says so)."""
        entry = {} if self.calibration_problem else self.calibration.get(part, {})
        return ShiftAlarm.of(entry, alpha) if "rule" in entry else None

    def after_alarm(self, part: str) -> tuple[Optional[Rule], Optional[str]]:
        """``part``'s after-alarm rule (``bnn_zoo.abstain.after_alarm``), or None and why there is none
        (no certified rule, none certified after the alarm, or a calibration written before it existed)."""
        entry = self.calibration.get(part, {}) if not self.calibration_problem else {}
        if "rule" not in entry:
            return None, f"no rule is certified for {part}, so none is after the alarm"
        if "after_alarm" not in entry:
            again = ("this shipped posterior's file predates it" if self.run_dir is None else
                     f"python -m bnn_zoo.certify {self.run_dir} adds one")
            return None, f"its calibration predates the after-alarm rule ({again})"
        after = entry["after_alarm"]
        if "rule" not in after:
            return None, f"no after-alarm rule is certified for {part} ({after.get('error')})"
        return Rule.from_dict(after["rule"]), None

    def stream(self, part: str = "bayes", act: bool = True, alpha: float = ALPHA) -> Stream:
        """A stream of ``part``'s inputs (``bnn_zoo.abstain.after_alarm.Stream``): answered by its
        certified rule, watched by its shift alarm, and from the input that sounds the alarm on held to
        its after-alarm rule, unless ``act`` is False. A caller answering with another rule or with
        conformal sets gives it to ``decide``; the stream decides whether it is the certified one."""
        after, why_not = self.after_alarm(part)
        return Stream(self._certified(part), self.alarm(part, alpha), after, act, why_not, relabel_advice(self.config))

    def _certified(self, part: str) -> Rule | Callable[..., Decision]:
        """``part``'s certified rule; where calibration.json certified other weights, a rule that says
        so when it is asked to answer (a caller's own rule, ``--rule quantile``, still answers)."""
        if not self.calibration_problem:
            return self.rules.get(part, Rule())

        def stale(probs, density=None):
            raise CheckpointError(self.calibration_problem)
        return stale

    def rules_for(self, rule: str = "calibrated", quantile: float = 0.5, threshold: float = 0.2) -> dict[str, Rule]:
        """Each model's rule: the run's certified one (``calibrated``; the quantile rule where the run
        holds none; a CheckpointError where its calibration certified other weights) or the
        quantile rule with the given knobs (``quantile``)."""
        if rule == "calibrated":
            return {part: self.rules.get(part, Rule()) for part in KINDS}
        if rule == "quantile":
            return {part: Rule(quantile, threshold) for part in KINDS}
        raise ValueError(f"rule must be calibrated or quantile, got {rule!r}")


def relabel_advice(config: DictConfig) -> str:
    """What a person can do once a stream stopped looking like the certifying inputs: certify a run on
    labelled inputs like the stream's (certification reads a run's validation split)."""
    how = "data.path=TABLE.csv" if config.data.name in ROWS else "data.name=folder data.path=DIR, a folder per class"
    return (f"to answer inputs like these under a guarantee, train and certify a run on labelled ones like them "
            f"(python -m bnn_zoo.train {config.arch} {how}: its validation split certifies it)")


def posteriors(trained: Trained) -> dict[str, Posterior]:
    """The posteriors a trained run holds, by the registry's kinds (``bnn_zoo.posterior.KINDS``, in
    its order): its guide (or the mixture of its ensemble's), its twin (MC dropout, the deep
    ensemble), the twin temperature-scaled where certification fitted a temperature, HMC's samples,
    and the kinds fitted after training (Laplace, SWAG, ...) where it fitted them; with
    ``data.remade``, each answering from both readings of an input, as given and remade (``BothReadings``)."""
    found = {name: kind.of_run(trained) for name, kind in KINDS.items()}
    read = BothReadings if trained.config.data.get("remade") else (lambda posterior: posterior)
    return {name: read(posterior) for name, posterior in found.items() if posterior is not None}


def gate_density(rule: Rule, trained: Trained, part: str, posterior: Posterior, x: torch.Tensor) -> torch.Tensor | None:
    """[N]: the feature density scores ``rule`` (``part``'s) gates ``x`` on, None where its gate
    reads the probabilities alone (``rule(probs, gate_density(...))`` either way)."""
    if rule.signal != DENSITY:
        return None
    if part not in trained.densities:
        raise CheckpointError(f"the {part} rule gates on a feature density this run does not hold (density.pt): "
                              "certify it again with python -m bnn_zoo.certify RUN_DIR --twin-signal feature_density")
    return trained.densities[part].score(posterior.features(x))


def sampled_probs(trained: Trained, x: torch.Tensor, num_samples: int) -> dict[str, torch.Tensor]:
    """Each posterior's sampled predictions on ``x``: [num_samples, N, C] ([1, N, C] for a point
    estimate, [K, N, C] for a deep ensemble of K twins)."""
    return {part: posterior.predict(x, num_samples) for part, posterior in posteriors(trained).items()}


def weights_digest(trained: Trained) -> str:
    """A digest of every weight a run's posteriors answer with (guide, model, twin, HMC samples,
    the posteriors fitted after training, ensemble members): a calibration certifies these and no
    others (a run that fitted none digests as runs did before there were any)."""
    weights = {"model": trained.model.state_dict(), "guide": trained.guide.state_dict(),
               "twin": trained.twin.state_dict() if trained.twin is not None else None,
               "samples": trained.samples, "members": [weights_digest(m) for m in trained.members]}
    return digest({**weights, "fitted": trained.fitted} if trained.fitted else weights)


def certified_weights(trained: Trained) -> dict:
    """What calibration.json records of the weights it certified."""
    return {"digest": weights_digest(trained), "run": trained.run, "epoch": trained.epoch,
            "members": 1 + len(trained.members)}
