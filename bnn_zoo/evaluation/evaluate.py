"""Evaluate a trained classifier run: accuracy, calibration, refusals and conformal sets on its test
set, and how well the uncertainty (entropy, mutual information, the feature density of
``bnn_zoo.abstain.density``) tells out-of-distribution sets (notMNIST, white noise, FashionMNIST, the near
ones of ``bnn_zoo.data.shifted.ood_sets``) from it, what the rule answers under MNIST-C's corruptions
(``bnn_zoo.evaluation.under_shift``), and where the shift alarm sounds on each set, for every posterior the
run holds. The figures are the dataclasses of ``bnn_zoo.evaluation.results``; eval.json is their ``to_dict()``.

Usage: python -m bnn_zoo.evaluate RUN_DIR [--samples 100] [--ood notmnist noise] [--shift rotate fog] [--rule quantile]
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pyro
import torch
from tqdm.auto import tqdm

from ..abstain.conformal import ConformalSets
from ..abstain.metrics import detection, expected_calibration_error
from ..abstain.rule import Rule, risk_coverage, uncertainty
from ..core.errors import ConfigError, DataError
from ..core.networks.likelihoods import Categorical
from ..core.inference.predictive import seeded
from ..data.folders import image_files
from ..data.inputs import image_inputs, pixel_inputs
from ..data.shifted.ood_sets import ood_entry_problem, ood_images, overlaid_digits
from ..data.sets import run_data_root, run_split
from ..runs.plans.checks import pick_device
from ..runs.training.cost import Cost as Measure
from ..runs.storage.loading import load
from ..runs.storage.trained import Trained, gate_density, posteriors
from .results import Cost, Detection, Evaluation, InDistribution, OODResult, PosteriorResult, SetFigures
from .set_answers import SetAnswer, answering_sets, no_rule_line
from .split_fits import References, fit_references
from .under_shift import (STREAM, alarm_result, corrupted_sets, default_shift, seen_as_outliers, seen_in_training,
                          streamed)

DEFAULT_OOD = {"mnist": ("notmnist", "noise", "fashion_mnist"), "fashion_mnist": ("mnist", "notmnist", "noise")}


def in_distribution(probs: torch.Tensor, labels: torch.Tensor, rule: Rule | SetAnswer,
                    sets: ConformalSets | None = None, by_target: dict[float, ConformalSets] | None = None,
                    gate: torch.Tensor | None = None) -> InDistribution:
    """Forced accuracy, NLL (nats), ECE, refusals (and those by the gate alone; answered by a
    ``SetAnswer``, the sets of every class), accuracy on the accepted inputs, set-valued answers,
    the selective risks, and the conformal ``sets``' coverage and mean size over every input (their
    guarantee is over all of them, refused or not), and those of the sets ``by_target`` coverage.
    ``gate``: the density scores a density gate reads."""
    decision = rule(probs, gate)
    labels = labels.to(probs.device)
    accepted = ~decision.refused
    correct = decision.prediction == labels
    forced = Categorical().metrics(probs, labels)
    return InDistribution(
        accuracy=forced["accuracy"], nll=forced["nll"],
        ece=expected_calibration_error(decision.mean_probs, labels),
        refused=decision.refused.float().mean().item(),
        refused_by_gate=decision.refused_by_gate.float().mean().item(),
        accuracy_accepted=correct[accepted].float().mean().item() if accepted.any() else float("nan"),
        multiple=decision.multiple.float().mean().item(),
        **selective_risks(probs, labels, rule.quantile),
        **(dict(zip(("set_coverage", "set_size"), sets.coverage_and_size(probs, labels))) if sets else {}),
        sets_by_target=by_target and [SetFigures(t, *s.coverage_and_size(probs, labels)) for t, s in by_target.items()])


def selective_risks(probs: torch.Tensor, labels: torch.Tensor, quantile: float = 0.5) -> dict:
    """Accepting inputs in order of their top quantile probability: the area under the
    risk-coverage curve (AURC), under the generalized one (AUGRC, Traub et al. 2024: the share of
    all inputs accepted and wrong, averaged over the coverages), and the error rate among accepted
    inputs at 95% and 99% coverage."""
    _, coverage, risk = risk_coverage(probs, labels, quantile)
    at = {c: float(risk[max(0, math.ceil(c * len(risk)) - 1)]) for c in (0.95, 0.99)}
    return {"aurc": risk.mean().item(), "augrc": (risk * coverage).mean().item(), "risk_at_95": at[0.95],
            "risk_at_99": at[0.99]}


def ood_result(in_probs: torch.Tensor, ood_probs: torch.Tensor, rule: Rule | SetAnswer,
               in_density: torch.Tensor | None = None,
               ood_density: torch.Tensor | None = None, gate: torch.Tensor | None = None) -> OODResult:
    """Refusals (under ``rule`` and under the quantile rule), mean entropy, and detection figures
    (AUROC, AUPR, FPR at 95% TPR) by entropy, mutual information, the largest mean probability
    (the maximum softmax probability baseline) and (given both sets' scores) the feature density,
    for one OOD set against the test set."""
    in_u, ood_u = uncertainty(in_probs, rule.quantile), uncertainty(ood_probs, rule.quantile)
    sampled = in_probs.shape[0] > 1  # mutual information is zero for a single deterministic softmax
    return OODResult(
        refused=rule(ood_probs, gate).refused.float().mean().item(),
        refused_by_quantile_rule=Rule()(ood_probs).refused.float().mean().item(),
        mean_entropy=ood_u["entropy"].mean().item(),
        by_entropy=Detection(**detection(in_u["entropy"], ood_u["entropy"])),
        by_mutual_information=Detection(**detection(in_u["mutual_information"], ood_u["mutual_information"]))
        if sampled else None,
        by_feature_density=None if in_density is None else Detection(**detection(in_density, ood_density)),
        by_max_prob=Detection(**detection(1 - in_u["max_prob"], 1 - ood_u["max_prob"])),
        images=ood_probs.shape[1])


def handled_overlaid(probs: torch.Tensor, pairs: torch.Tensor, rule: Rule | SetAnswer, sets: ConformalSets | None,
                     seed: int = 0, gate: torch.Tensor | None = None) -> float:
    """The share of overlaid digits (``pairs`` [N, 2], their two classes) refused, or answered with
    a set holding both: the certified conformal set where the posterior has one, else the rule's."""
    decision = rule(probs, gate)
    answer = (decision.accepted if sets is None else
              sets.predict(probs, torch.Generator(device=probs.device).manual_seed(seed), nonempty=True))
    both = answer.gather(1, pairs.to(answer.device)).all(1)
    return (decision.refused | both).float().mean().item()


def load_for_evaluation(run_dir: str | Path, device: str, data_root: str | None,
                        test_size: int | None) -> tuple[Trained, str | None, torch.Tensor, torch.Tensor]:
    """A trained classifier run, its data root (``data_root``, else $BNN_ZOO_DATA, else the run's:
    ``run_data_root``), and its test set (normalized inputs, labels)."""
    trained = load(run_dir, pick_device(device))
    cfg = trained.config
    if not isinstance(trained.model.likelihood, Categorical):
        raise ConfigError(f"evaluation is for classifiers; {cfg.arch} runs report their figures in "
                          "metrics.json")
    root = run_data_root(data_root, cfg.data.root)
    x, labels = run_split(cfg.data, "test", root, test_size)
    return trained, root, x, labels


@pyro.settings.context(module_local_params=True)
def evaluate_run(run_dir: str | Path, num_samples: int = 100, seed: int = 0, rule: str = "calibrated",
                 quantile: float = 0.5, threshold: float = 0.2, ood: tuple[str, ...] | None = None,
                 ood_size: int | dict[str, int] = 10000, test_size: int | None = None, data_root: str | None = None,
                 device: str = "auto", shift: tuple[str, ...] | None = None, shift_size: int = STREAM,
                 act_on_alarm: bool = True, references: bool = True) -> Evaluation:
    """Every figure of ``eval.json``, for each posterior the run holds (the BNN, its twin, HMC; see
    ``bnn_zoo.posterior``) under its rule (``Trained.rules_for``), with what predicting the test set
    cost (seconds, peak MB, numbers stored). ``ood_size``: images per OOD set, or a size per set's name;
    ``shift``: corruptions (default: all fifteen for MNIST and FashionMNIST runs) of ``shift_size``
    test images, each answered as one stream (``under_shift.streamed``: from the input that sounds
    its alarm on, by the after-alarm rule, unless not ``act_on_alarm``), the length of each set's
    stream the shift alarm watches too; ``references``: also fit each rung's feature density and its
    sets at 90/95/99% on the run's own splits (``split_fits``: as costly as the test set's predictions)."""
    if isinstance(ood, str):  # its letters would be read as the entries
        raise ConfigError(f"ood is a sequence of entries, not one string: give ood=({ood!r},)")
    if (problem := next(filter(None, map(ood_entry_problem, ood or ())), None)) is not None:
        raise ConfigError(f"bad ood entry {problem}")
    trained, root, x, labels = load_for_evaluation(run_dir, device, data_root, test_size)
    rules = trained.rules_for(rule, quantile, threshold)
    ood = default_ood(trained.config) if ood is None else ood
    names = [entry.partition("=")[0] for entry in ood]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice:  # its figures would overwrite each other's
        raise ConfigError(f"the OOD set name {twice!r} is given twice (sets: {', '.join(names)}; the run's data.ood and "
                          "--ood): give each folder a name of its own")
    by_sets = {part: answering_sets(trained, part, rung.rows(num_samples), rule)  # where no rule is certified
               for part, rung in posteriors(trained).items()}
    shift = default_shift(trained.config.data) if shift is None else shift
    with seeded(seed, trained.device):
        results, skipped = _evaluate(trained, rules, by_sets, x.to(trained.device), labels, ood, ood_size,
                                     num_samples, root, seed, shift, shift_size, act_on_alarm, references)
    for part, sets in by_sets.items():
        if sets is not None and part in results:
            results[part].note = no_rule_line(trained.calibration[part], part, str(run_dir))
    return Evaluation(str(run_dir), num_samples, seed, rule, len(labels), skipped, results,
                      seen_in_training(trained.config), seen_as_outliers(trained.config))


def _evaluate(trained: Trained, rules: dict, by_sets: dict, x: torch.Tensor, labels: torch.Tensor,
              ood: tuple[str, ...], ood_size: int | dict[str, int], num_samples: int, root: str | None,
              seed: int, shift: tuple[str, ...] = (), shift_size: int = STREAM, act_on_alarm: bool = True,
              references: bool = True) -> tuple[dict[str, PosteriorResult], dict[str, str]]:
    """evaluate_run's figures per posterior, each under its rule or, where ``by_sets`` holds its sets
    (no rule certified), with each input's set as its answer (a corrupted set as one stream); and the
    OOD sets skipped (missing data) with why."""
    rungs = posteriors(trained)
    answer = {part: rules[part] if by_sets.get(part) is None else SetAnswer(by_sets[part], seed) for part in rungs}
    progress = tqdm(total=len(rungs) * (1 + references + len(ood) + len(shift)), desc="evaluate", unit="set", leave=False)
    in_probs, costs = {}, {}
    for part, posterior in rungs.items():
        with Measure(trained.device) as measured:
            in_probs[part] = posterior.predict(x, num_samples)
        costs[part] = Cost(measured.seconds, measured.peak_mb, posterior.parameters_stored)
        progress.update()
    refs = References()
    if references:
        with seeded(seed + 1, trained.device):  # a stream of their own: the test's and OOD sets' draws stay as they were
            refs = fit_references(trained, rungs, num_samples, seed, root)
        progress.update(len(rungs))
    density = {part: d.score(rungs[part].features(x)) for part, d in refs.density.items()}
    results = {part: PosteriorResult(posterior.label, rules[part], costs[part], in_distribution(
        in_probs[part], labels, answer[part], trained.sets.get(part), refs.sets.get(part),
        gate_density(rules[part], trained, part, posterior, x))) for part, posterior in rungs.items()}
    for part, result in results.items():
        result.test.alarm = alarm_result(trained, part, in_probs[part], shift_size, seed,
                                         gate_density(rules[part], trained, part, rungs[part], x), x)
    skipped = {}


    for entry in ood:
        name = entry.partition("=")[0]  # NAME=FOLDER: its figures go under NAME
        try:
            size = ood_size[name] if isinstance(ood_size, dict) else ood_size
            x, pairs = ood_inputs(trained.data, entry, root, size, seed)
            x = x.to(trained.device)
        except DataError as err:
            skipped[name] = str(err)
            progress.write(f"skipping {name}: {err}", file=sys.stderr)
            progress.update(len(rungs))
            continue
        for part, posterior in rungs.items():
            progress.update()
            probs, gate = posterior.predict(x, num_samples), gate_density(rules[part], trained, part, posterior, x)
            scores = (density[part], refs.density[part].score(posterior.features(x))) if part in density else (None, None)
            results[part].ood[name] = result = ood_result(in_probs[part], probs, answer[part], *scores, gate)
            unlabelled = torch.full((probs.shape[1],), -1, dtype=torch.long)  # refusals need no labels
            stream = trained.stream(part, act_on_alarm)  # the alarm's one run on the set
            answered = streamed(stream, probs, unlabelled, gate, seed, answer[part], x)
            result.refused_in_stream, result.alarm = answered.refused, answered.alarm
            if pairs is not None:
                result.handled = handled_overlaid(probs, pairs, answer[part], trained.sets.get(part), seed, gate)
    try:
        for name, x, y in corrupted_sets(trained.config.data, shift, root, shift_size, seed, len(labels)):
            x = x.to(trained.device)
            for part, posterior in rungs.items():
                progress.update()
                probs, gate = posterior.predict(x, num_samples), gate_density(rules[part], trained, part, posterior, x)
                stream = trained.stream(part, act_on_alarm)
                results[part].shift[name] = streamed(stream, probs, y, gate, seed, answer[part], x)
    except DataError as err:
        skipped["shift"] = str(err)
        progress.write(f"skipping the corruptions: {err}", file=sys.stderr)
    progress.close()
    return results, skipped


def default_ood(cfg) -> tuple[str, ...]:
    """The OOD sets a run is scored on by default: its data's (``DEFAULT_OOD``) and its
    ``data.ood`` folders, as NAME=FOLDER."""
    return (*DEFAULT_OOD.get(cfg.data.name, ()), *(f"{name}={folder}" for name, folder in cfg.data.ood.items()))


def ood_inputs(data, name: str, root: str | None, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """An OOD set as the run's network sees it (``data``: its typed data section, ``Trained.data``), and the
    overlaid set's digit pairs: a named set (``bnn_zoo.data.shifted.ood_sets``), or NAME=FOLDER, the first
    ``size`` images of a folder (and its subfolders)."""
    name, _, folder = name.partition("=")
    if folder:
        files = image_files(Path(folder).expanduser())  # a seeded sample of them, not the first subfolder's
        chosen = torch.randperm(len(files), generator=torch.Generator().manual_seed(seed))[:size].sort().values
        return image_inputs(data, [files[i] for i in chosen], folder), None
    images, pairs = overlaid_digits(root, size, seed) if name == "overlaid" else (ood_images(name, root, size, seed), None)
    return pixel_inputs(data, images), pairs
