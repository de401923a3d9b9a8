"""What the page answers: the models it offers, loaded on first use, and one image's answer from
the Bayesian posterior and its twin under the run's certified rule or the knobs a person set. The
inputs the page answered are one stream per model and posterior (``Trained.stream``): its shift
alarm watches them, and from the input that sounds it on the certified rule's answers are held to
the after-alarm rule, until a person starts a new stream (``new_stream``). Not acting on the alarm
(``act_on_alarm=False``), a new stream starts after it sounds.

Usage: ``Answerer("lenet").answer("lenet", pixels)  # {"text": "7", "samples": ..., "twin": ...}``
"""
from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field

import pyro
import torch

from ..abstain.after_alarm import Stream, StreamDecision
from ..abstain.conformal import ConformalSets
from ..abstain.rule import SIGNALS, Rule, uncertainty
from ..core.errors import UserError
from ..core.networks.likelihoods import Categorical
from ..core.inference.predictive import seeded
from ..data.inputs import class_names, pixel_inputs
from ..data.sets import profile_of
from ..evaluation.refusals import why_refused
from ..evaluation.set_answers import answering_sets, no_rule_line, set_decision
from ..posterior import Posterior
from ..runs.plans.checks import pick_device
from ..runs.storage.loading import load, shipped_names
from ..runs.storage.trained import Trained, gate_density, posteriors

MAX_PAGE_SAMPLES = 1000  # per answer on the page: it answers while a person watches


class BadRequest(UserError):
    """What a person sent cannot be answered; the message says why (HTTP ``status``)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Model:
    """A loaded classifier: its Bayesian posterior and twin, their rules, its class names."""

    name: str
    trained: Trained
    bayes: Posterior
    twin: Posterior | None
    classes: list[str]
    # Each posterior's stream of the inputs answered so far (its alarm None: its run holds no reference)
    streams: dict[str, Stream] = field(default_factory=dict)
    last_input: bytes | None = None  # the digest of the last input the streams took: a re-ask is not a new input

    def decide(self, pixels: torch.Tensor, asked: dict[str, tuple], new_stream: bool = False
               ) -> dict[str, tuple[StreamDecision, dict | None]]:
        """Each posterior's decision for this input as its stream answers it, by posterior, from
        ``asked``: its sampled predictions, gate scores and answer (a rule, which its stream tells from
        its certified one, or its sets); and its
        alarm's figures and line. ``new_stream``: this input starts a new stream. Not acting on the
        alarm, a stream whose alarm sounded starts a new one with the next input."""
        if new_stream:
            self.streams, self.last_input = {part: s.restarted() for part, s in self.streams.items()}, None
        digest = hashlib.sha256(pixels.cpu().numpy().tobytes()).digest()
        fresh, self.last_input = digest != self.last_input, digest
        decided = {}
        for part, (probs, gate, answer) in asked.items():
            stream = self.streams[part]
            answered = stream.decide(probs, gate, again=not fresh, rule=answer, inputs=pixels[None])
            decided[part] = answered, stream.to_dict()
            if fresh and not stream.act and stream.alarm is not None and stream.alarm.alarmed:
                self.streams[part] = stream.restarted()
        return decided

    def defaults(self) -> dict:
        rule = self.trained.rules_for()["bayes"]
        return {"name": self.name, "posterior": self.bayes.label, "classes": self.classes,
                "samples": self.trained.config.abstention.samples, "rule": rule.to_dict()}


class Answerer:
    """Loads the models on first use and answers one image at a time: Pyro's effect handlers are
    process-wide, so concurrent requests take turns; each gets its own result."""

    def __init__(self, default: str, device: str = "auto", act_on_alarm: bool = True):
        self.device, self.act_on_alarm = pick_device(device), act_on_alarm
        self.names = list(dict.fromkeys([default, *shipped_names()]))
        self.default = default
        self._models: dict[str, Model] = {}
        self._lock = threading.RLock()  # taken by model() on its own and again inside answer()

    def model(self, name: str) -> Model:
        """The model ``name``, loaded on first use under the same lock as the answers (loading runs
        Pyro code too, and two first requests must not load it twice)."""
        if name not in self.names:
            raise BadRequest(f"unknown model {name!r}; choose from {', '.join(self.names)}")
        with self._lock, pyro.settings.context(module_local_params=True):
            if name not in self._models:
                trained = load(name, self.device)
                if not isinstance(trained.model.likelihood, Categorical):
                    raise UserError(f"{name} is a regression run; the page classifies images")
                trained.rules_for()  # a calibration of other weights is refused here, with the command that re-certifies
                found = profile_of(trained.data)
                if found is not None and found.input_shape != [1, 28, 28]:
                    raise UserError(f"{name} reads inputs of shape {found.input_shape}; the page draws 28x28 gray "
                                    "images: answer its inputs with python -m bnn_zoo.predict")
                held = posteriors(trained)
                streams = {part: trained.stream(part, self.act_on_alarm) for part in ("bayes", "twin") if part in held}
                self._models[name] = Model(name, trained, held["bayes"], held.get("twin"),
                                           class_names(trained.config.data), streams)
            return self._models[name]

    def answer(self, name: str, pixels: torch.Tensor, threshold: float | None = None,
               quantile: float | None = None, samples: int | float | None = None, seed: int = 0,
               new_stream: bool = False) -> dict:
        """The Bayesian answer and the twin's for uint8 pixels [28, 28], with the model's certified
        rule where a knob is left out (its gate is kept whatever the knobs), as the model's streams
        answer it (``new_stream``: it starts new ones)."""
        started = time.perf_counter()
        with self._lock, pyro.settings.context(module_local_params=True):  # settings are process-wide too
            model = self.model(name)
            certified = model.trained.rules_for()
            knobs = {"threshold": certified["bayes"].threshold if threshold is None else threshold,
                     "quantile": certified["bayes"].quantile if quantile is None else quantile}
            samples = model.trained.config.abstention.samples if samples is None else samples
            fewest = 1 + len(model.trained.members)  # an ensemble draws each member at least once
            whole = float(samples).is_integer()  # the page reads samples as a number: 1.5 is no count of draws
            if not whole or not fewest <= samples <= MAX_PAGE_SAMPLES:
                raise BadRequest(f"samples must be a whole number from {fewest} to {MAX_PAGE_SAMPLES}, got "
                                 f"{int(samples) if whole else samples}"
                                 + (f" ({name} is an ensemble of {fewest} members: a sample of each at least)"
                                    if fewest > 1 else ""))
            samples = int(samples)
            try:
                rules = {part: Rule(knobs["quantile"], knobs["threshold"], r.signal, r.cut)
                         for part, r in certified.items()}
            except ValueError as err:
                raise BadRequest(str(err)) from None
            x = pixel_inputs(model.trained.data, pixels[None]).to(model.trained.device)
            with seeded(seed, model.trained.device):  # the same drawing gets the same answer, as with predict --seed
                probs = model.bayes.predict(x, samples)
                twin = model.twin.predict(x, samples) if model.twin is not None else None
            gates = {part: gate_density(rules[part], model.trained, part, rung, x)
                     for part, rung in (("bayes", model.bayes), ("twin", model.twin)) if rung is not None}
            untouched = threshold is None and quantile is None  # the run's own rule, or its sets where it has none
            by_sets = {part: answering_sets(model.trained, part, len(drawn)) if untouched else None
                       for part, drawn in (("bayes", probs), ("twin", twin)) if drawn is not None}
            sets = model.trained.sets.get("bayes")  # shown where the certified rule and sample count answer
            certified_knobs = untouched and by_sets["bayes"] is None and sets and sets.certified_at(samples)
            in_set = sets.answer(probs, seed)[0] if certified_knobs else None
            drawn = {part: p for part, p in (("bayes", probs), ("twin", twin)) if p is not None}
            decided = model.decide(pixels, {part: (p, gates[part], _answer(rules[part], by_sets[part],
                                                                            seed)) for part, p in drawn.items()},
                                   new_stream)
        response = {"model": name, "posterior": model.bayes.label, "classes": model.classes,
                    **_judged(probs, rules["bayes"], model.classes, gates["bayes"], by_sets["bayes"], seed,
                              *decided["bayes"], model.streams["bayes"].after_alarm),
                    "samples": probs[:, 0].cpu().tolist(), "pixels": pixels.tolist()}
        if in_set is not None and response["answer"] is not None:  # refused, or answered with its certified set
            response["set"] = {"classes": [model.classes[c] for c in in_set], "coverage": 1 - sets.alpha}
        if twin is not None:
            response["twin"] = {"posterior": model.twin.label,
                                **_judged(twin, rules["twin"], model.classes, gates["twin"], by_sets["twin"], seed,
                                          *decided["twin"], model.streams["twin"].after_alarm),
                                "probs": twin.mean(0)[0].cpu().tolist()}
        for part, answered in (("bayes", response), ("twin", response.get("twin"))):
            if by_sets.get(part) is not None:  # no rule is certified: the set answered
                answered["note"] = no_rule_line(model.trained.calibration[part], part, name)
        response["seconds"] = round(time.perf_counter() - started, 4)
        return response


def _answer(rule: Rule, sets: ConformalSets | None, seed: int):
    """What answers a posterior on the page: the knobs' rule (its stream tells whether that is its
    certified one, which the after-alarm rule follows), or its sets where no rule is certified."""
    if sets is not None:
        return lambda probs, density: set_decision([sets.answer(probs, seed)[0]], probs)
    return rule


def _judged(probs: torch.Tensor, rule: Rule, classes: list[str], gate: torch.Tensor | None = None,
            sets: ConformalSets | None = None, seed: int = 0, answered: StreamDecision | None = None,
            shift: dict | None = None, after_alarm: Rule | None = None) -> dict:
    """One input's decision as its stream ``answered`` it (``rule``'s, or its conformal set as its
    answer where ``sets`` are given, no rule being certified; from the alarm on the after-alarm rule's
    where it acts; ``gate``: the density scores a density gate reads), with the words the page shows
    and the stream's alarm (``shift``)."""
    in_set = sets.answer(probs, seed)[0] if sets is not None else None
    if answered is None:  # outside a stream: the rule's decision, or the set's
        decided = rule(probs, gate) if sets is None else set_decision([in_set], probs)
        answered = StreamDecision(decided, decided, torch.zeros(1, dtype=torch.bool, device=probs.device), 1)
    held = answered.decision is not answered.ordinary and bool(answered.after_alarm[0])  # the after-alarm rule decided
    shown = after_alarm if held else rule
    ruled = answered.decision if held else rule(probs, gate)  # its quantiles are what the page plots, whichever answers
    scores = uncertainty(probs, rule.quantile)
    described = answered.describe(0)
    names = [classes[c] for c in described["accepted"]]
    if described["answer"] is None:
        text = "I don't know"
    else:
        text = " or ".join(names) if len(names) > 1 else names[0]
    reasons = why_refused(described["refused_by"], rule, {k: float(scores[k][0]) for k in SIGNALS},
                          None if gate is None else float(gate[0]), None if sets is None else 1 - sets.alpha, after_alarm)
    judged = {**described, "text": text, "why": "; ".join(reasons), "rule": shown.to_dict(),
              "quantiles": ruled.quantile_probs[0].cpu().tolist(),
              "uncertainty_bits": {k: round(float(scores[k][0]), 6) for k in SIGNALS}}
    if in_set is not None:
        judged["set"] = {"classes": [classes[c] for c in in_set], "coverage": 1 - sets.alpha}
    if shift is not None:
        judged["shift"] = shift
    return judged
