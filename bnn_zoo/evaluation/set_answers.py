"""Where no abstention rule is certified (a validation split too small for the risk asked), a
posterior answers with its conformal set instead of the uncertified quantile rule: the set holds the
classes its coverage guarantee allows, and a set of every class names none, an "I don't know".
predict, the page and evaluate answer so and say why in one line, with the risk the validation
inputs do certify and how many inputs the sets need to be smaller than every class.

Usage::

    sets = answering_sets(trained, "bayes", samples=100)     # None: a certified rule answers
    decision = set_decision(sets.answer(probs), probs)       # a Decision, as a rule's
    print(no_rule_line(trained.calibration["bayes"], "bayes", "runs/cancer"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..abstain.conformal import ConformalSets, fewest_inputs, percent
from ..abstain.rule import Decision
from ..runs.storage.trained import Trained

SET_ANSWER = "conformal_set"  # what refuses an input whose set holds every class (Decision.signal)


def answering_sets(trained: Trained, part: str, samples: int, rule: str = "calibrated") -> ConformalSets | None:
    """The conformal sets that answer for ``part`` where its calibration certified no rule; None
    where a rule answers (one is certified, the quantile rule was asked for, the run holds no
    calibration or no sets, or they were certified at another number of posterior ``samples``)."""
    if rule != "calibrated" or "rule" in trained.calibration.get(part, {"rule": None}):
        return None
    sets = trained.sets.get(part)
    return sets if sets is not None and sets.certified_at(samples) else None


def set_decision(in_sets: list[list[int]], probs: torch.Tensor) -> Decision:
    """Each input's set (``ConformalSets.answer``'s classes) as its answer, a Decision as a rule's:
    the set's classes accepted, ranked by their mean probability; an input whose set holds every
    class refused, by SET_ANSWER."""
    mean = probs.mean(0)
    member = torch.zeros(mean.shape, dtype=torch.bool, device=mean.device)
    for i, classes in enumerate(in_sets):
        member[i, classes] = True
    return Decision(mean, member, mean, member.all(1), SET_ANSWER)


@dataclass(frozen=True)
class SetAnswer:
    """A posterior's conformal sets called as a rule is (``Rule.__call__``), for the code that
    scores a rule's answers (``bnn_zoo.evaluation.evaluate``): each input's set its answer (``set_decision``)."""

    sets: ConformalSets
    seed: int = 0
    quantile: float = 0.5  # of the uncertainties reported beside the answers, as the quantile rule's

    def __call__(self, probs: torch.Tensor, density: torch.Tensor | None = None) -> Decision:
        return set_decision(self.sets.answer(probs, self.seed), probs)


def certify_advice(entry: dict, run_dir: str) -> str | None:
    """What the validation inputs of a calibration.json ``entry`` certify, and what the risk asked
    needs; None where the entry does not say (one written before it did)."""
    if "smallest_risk" not in entry:
        return None
    n, delta, smallest = entry["sets"]["n"], entry["delta"], entry["smallest_risk"]
    said = (f"the smallest risk these {n} validation inputs certify at delta {delta:g} is {smallest:g}, which "
            f"python -m bnn_zoo.certify {run_dir} --risk {smallest:g} certifies" if smallest is not None else
            f"these {n} validation inputs certify no risk below 1")
    if "inputs_needed" in entry:
        said += (f"; risk {entry['risk']:g} needs at least {entry['inputs_needed']} validation inputs accepted with "
                 "no error")
    return said


def sets_advice(sets: dict, run_dir: str) -> str | None:
    """Where sets (as calibration.json holds them) hold every class because they were calibrated
    on too few inputs: how many they need, or the coverage these allow; None where they need no more."""
    if sets["threshold"] is not None:
        return None
    alpha = math.ceil(100 / (sets["n"] + 1)) / 100  # the least alpha, in whole percents, these inputs allow
    return (f"smaller ones need at least {fewest_inputs(sets['alpha'])} validation inputs, these are {sets['n']}, "
            f"or a lower coverage: python -m bnn_zoo.certify {run_dir} --alpha {alpha:g} for {percent(1 - alpha)} sets")


def no_rule_line(entry: dict, part: str, run_dir: str) -> str:
    """The line predict, the page and evaluate say where ``part``'s calibration.json ``entry`` holds
    no rule and its sets answer."""
    sets, advice = entry["sets"], certify_advice(entry, run_dir)
    too_few = sets_advice(sets, run_dir)
    return (f"no rule is certified for {part}, so each answer is its {percent(1 - sets['alpha'])} conformal set" +
            (f": {advice}" if advice else "") + (f". Its sets hold every class: {too_few}" if too_few else ""))
