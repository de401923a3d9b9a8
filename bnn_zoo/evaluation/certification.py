"""Certification of a trained classifier run, below the command line (``python -m bnn_zoo.certify``
and training's end call it; so do the scripts that certify shipped posteriors): each posterior's
abstention rule on the run's validation split (``certify_trained``: for the Bayesian network a quantile
threshold and a mutual-information gate, for the twin the same with an entropy gate or a feature-density
gate), its conformal sets, a lone twin's temperature, and the after-alarm rule nested in each rule,
stored in RUN_DIR/calibration.json (``certify_and_store``, ``certify_run``), and said in a line a
posterior (``summary``).

Usage: ``certified = certify_run("runs/lenet", risk=0.005); print(summary(certified, "runs/lenet"))``
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyro
import torch
from torch import nn

from ..abstain.after_alarm import QUANTILE as AFTER_ALARM_QUANTILE
from ..abstain.after_alarm import REFUSAL as AFTER_ALARM_REFUSAL
from ..abstain.after_alarm import after_alarm_rule
from ..abstain.certify import CUTS, NotCertified, certify, check_settings, density_cuts, inputs_needed, smallest_risk
from ..abstain.conformal import SCORES as SET_SCORES
from ..abstain.conformal import calibrate_sets, percent
from ..abstain.density import DENSITY_INPUTS, FeatureDensity
from ..abstain.rule import DENSITY, Rule
from ..abstain.temperature import fit_temperature
from ..core.errors import ConfigError
from ..core.networks.likelihoods import Categorical
from ..core.inference.inputs import evaluating
from ..core.inference.predictive import seeded
from ..data.sets import run_split
from .set_answers import certify_advice, sets_advice
from ..posterior import KINDS, TWIN, TWIN_SCALED, certifying, held_part
from ..runs.storage.checkpoint import CALIBRATION, CERTIFIED_WEIGHTS, DENSITIES, save_atomic
from ..runs.plans.checks import pick_device
from ..runs.storage.files import check_writable, write_atomic
from ..runs.storage.loading import is_shipped, load
from ..runs.storage.trained import Trained, certified_weights, posteriors, sampled_probs



def validation_set(trained: Trained, data_root: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's validation split (normalized images on the run's device, labels), never test."""
    cfg = trained.config
    if not cfg.data.val_size:
        raise ConfigError("this run holds no validation split (data.val_size=0) to certify on")
    x, labels = run_split(cfg.data, "val", data_root)
    return x.to(trained.device), labels.to(trained.device)


def certify_and_store(trained: Trained, run_dir: str | Path, risk: float, delta: float, max_refusal: float,
                      signal: str = "mutual_information", quantile: float = 0.5, samples: int = 100,
                      alpha: float = 0.01, set_score: str = "thr", seed: int = 0,
                      data_root: str | None = None, twin_signal: str = "entropy",
                      after_alarm_refusal: float = AFTER_ALARM_REFUSAL,
                      after_alarm_quantile: float = AFTER_ALARM_QUANTILE) -> dict:
    """``certify_trained`` on the run's validation split, written to RUN_DIR/calibration.json with a
    record of the weights it certified (``load`` refuses it once they change); returns its content.
    ``twin_signal=DENSITY``: the twin's gate reads its feature density instead of its entropy
    (``certify_density_gate``; the density goes to RUN_DIR/density.pt)."""
    if not isinstance(trained.model.likelihood, Categorical):
        raise ConfigError("abstention rules are for classifiers")
    check_settings(risk, delta, max_refusal, quantile, signal, after_alarm_refusal, after_alarm_quantile)
    after = (after_alarm_refusal, after_alarm_quantile)
    if not 0 < alpha < 1 or set_score not in SET_SCORES:
        raise ValueError(f"alpha must lie in (0, 1) and set_score be one of {', '.join(SET_SCORES)}; got "
                         f"{alpha} and {set_score!r}")
    if samples < 1 or twin_signal not in ("entropy", DENSITY):
        raise ValueError(f"samples must be at least 1 and twin_signal entropy or {DENSITY}, got {samples} and "
                         f"{twin_signal!r}")
    check_writable(run_dir)  # a read-only or full folder fails now, not after the sampling
    x, labels = validation_set(trained, data_root)
    certified = {CERTIFIED_WEIGHTS: certified_weights(trained),
                 **certify_trained(trained, x, labels, risk, delta, max_refusal, signal, quantile, samples, alpha,
                                   set_score, seed, *after)}
    (Path(run_dir) / DENSITIES).unlink(missing_ok=True)  # a density gate certified before goes with its rule
    if twin_signal == DENSITY and TWIN in certified:
        x_train, y_train = run_split(trained.config.data, "train", data_root, DENSITY_INPUTS)
        entry, density = certify_density_gate(trained, x_train.to(trained.device), y_train, x, labels, risk, delta,
                                              max_refusal, quantile, *after)
        certified[TWIN] = {"sets": certified[TWIN]["sets"], **entry}  # its sets stay; the rule is the gated one
        if density is not None:
            save_atomic({"densities": {TWIN: density.state()}}, Path(run_dir) / DENSITIES)
    write_atomic(Path(run_dir) / CALIBRATION, json.dumps(certified, indent=2))
    return certified


def certify_trained(trained: Trained, x: torch.Tensor, labels: torch.Tensor, risk: float, delta: float,
                    max_refusal: float, signal: str = "mutual_information", quantile: float = 0.5,
                    samples: int = 100, alpha: float = 0.01, set_score: str = "thr", seed: int = 0,
                    after_alarm_refusal: float = AFTER_ALARM_REFUSAL,
                    after_alarm_quantile: float = AFTER_ALARM_QUANTILE) -> dict:
    """Each posterior's certified rule, its after-alarm rule (``after_alarm_entry``) and conformal sets
    at coverage 1 - ``alpha`` (``set_score``) on validation inputs ``x``, by its name; the
    temperature-scaled twin's entry holds its temperature. A posterior whose rule cannot be
    certified gets an ``error`` entry and keeps the quantile rule."""
    certified, fit = {}, held_part(len(labels))
    try:
        if not 0 < fit.stop < len(labels):
            raise ValueError(f"{len(labels)} validation inputs cannot be split into a part to fit it on and one "
                             "to certify on")
        temperature = twin_temperature(trained, x[fit], labels[fit])
    except ValueError as err:
        temperature, certified[TWIN_SCALED] = None, {"error": f"no temperature: {err}"}
    trained = replace(trained, temperature=temperature)  # not the one it may have been loaded with
    with seeded(seed, trained.device):
        sampled = sampled_probs(trained, x, samples)
    generator = torch.Generator().manual_seed(seed)  # aps and raps draw a uniform per input
    for part, probs in sampled.items():
        held = certifying(part, len(labels))
        probs, y = probs[:, held], labels[held]
        sets = {"sets": calibrate_sets(probs, y, alpha, set_score, generator=generator).to_dict()}
        gate = signal if len(probs) > 1 else "entropy"  # one softmax: no mutual information
        try:
            calibration = certify(probs, y, risk, delta, max_refusal, quantile, gate)
            certified[part] = {**calibration.to_dict(), "samples": len(probs), "after_alarm": after_alarm_entry(
                probs, y, calibration.rule, risk, delta, after_alarm_refusal, after_alarm_quantile)}
        except NotCertified as err:
            certified[part] = not_certified(err, risk, delta)
        certified[part].update(smallest_risk=smallest_risk(probs, y, delta, quantile, gate), **sets)
    if TWIN_SCALED in sampled:
        certified[TWIN_SCALED].update(temperature=trained.temperature, temperature_inputs=fit.stop)
    return {part: certified[part] for part in KINDS if part in certified}


def certify_density_gate(trained: Trained, x_train: torch.Tensor, y_train: torch.Tensor, x: torch.Tensor,
                         labels: torch.Tensor, risk: float, delta: float, max_refusal: float,
                         quantile: float = 0.5, after_alarm_refusal: float = AFTER_ALARM_REFUSAL,
                         after_alarm_quantile: float = AFTER_ALARM_QUANTILE) -> tuple[dict, FeatureDensity | None]:
    """The twin's rule with a gate on its feature density (fitted on ``x_train``; its cuts from
    their scores, fixed before validation ``x`` is seen), certified as the other rules are: its
    calibration.json entry, and the density."""
    rung = posteriors(trained)[TWIN]
    feats = rung.features(x_train)
    if feats is None:
        return {"error": f"the {rung.label} has no single network to read features from"}, None
    density = FeatureDensity.fit(feats, y_train)
    cuts = density_cuts(density.score(feats))
    probs, scores = rung.predict(x), density.score(rung.features(x))
    smallest = {"smallest_risk": smallest_risk(probs, labels, delta, quantile, DENSITY, cuts=cuts, density=scores)}
    try:
        calibration = certify(probs, labels, risk, delta, max_refusal, quantile, DENSITY, cuts=cuts, density=scores)
        after = after_alarm_entry(probs, labels, calibration.rule, risk, delta, after_alarm_refusal,
                                  after_alarm_quantile, scores)
        return {**calibration.to_dict(), "samples": len(probs), **smallest, "after_alarm": after}, density
    except NotCertified as err:
        return {**not_certified(err, risk, delta, len(cuts)), **smallest}, density


def after_alarm_entry(probs: torch.Tensor, labels: torch.Tensor, rule: Rule, risk: float, delta: float,
                      refusal: float = AFTER_ALARM_REFUSAL, quantile: float = AFTER_ALARM_QUANTILE,
                      density: torch.Tensor | None = None) -> dict:
    """calibration.json's ``after_alarm`` entry beside ``rule``: its after-alarm rule (``after_alarm_rule``,
    on the same validation inputs and draws), or why none is certified."""
    try:
        return after_alarm_rule(probs, labels, rule, risk, delta, refusal, quantile, density).to_dict()
    except NotCertified as err:
        return {"error": str(err)}


def not_certified(err: NotCertified, risk: float, delta: float, tests: int = len(CUTS)) -> dict:
    """calibration.json's entry for a posterior no rule is certified for: why, the risk and delta
    asked, and how many validation inputs a rule must accept with no error to certify that risk."""
    return {"error": str(err), "risk": risk, "delta": delta, "inputs_needed": inputs_needed(risk, delta, tests)}


def twin_temperature(trained: Trained, x: torch.Tensor, labels: torch.Tensor) -> float | None:
    """The temperature of the run's twin on validation inputs ``x`` (``fit_temperature``); None where
    the run has no lone plain twin (none, MC dropout, or a deep ensemble). ValueError where none fits."""
    twin = trained.twin
    if twin is None or trained.members or any(isinstance(m, nn.Dropout) for m in twin.modules()):
        return None
    with torch.no_grad(), evaluating(twin):
        logits = torch.cat([twin.net(xb) for xb in x.split(1000)])
    return fit_temperature(logits, labels)


SETTINGS = ("risk", "delta", "max_refusal", "signal", "quantile", "samples", "alpha", "set_score",
            "after_alarm_refusal", "after_alarm_quantile")


@pyro.settings.context(module_local_params=True)
def certify_run(run_dir: str | Path, device: str = "auto", **settings) -> dict:
    """``certify_and_store`` on the run stored in ``run_dir``; settings left out or None come from
    the run's config (``abstention.risk``, ...), the twin's signal from ``twin_signal``."""
    if is_shipped(run_dir):
        raise ConfigError(f"{run_dir} is a shipped posterior, certified as it shipped; certify a run directory "
                          f"(./{run_dir} for a folder of that name)")
    trained = load(run_dir, pick_device(device))
    given = {k: v for k, v in settings.items() if v is not None}
    defaults = {k: trained.config.abstention[k] for k in SETTINGS if k not in given}
    return certify_and_store(trained, run_dir, **defaults, **given)


def summary(certified: dict, run_dir: str | Path = "RUN_DIR") -> str:
    """One line per model: its rule and what validation said about it, the smallest risk it
    certifies, and where no rule is certified what would certify one and how its sets answer."""
    lines = []
    for part, c in certified.items():
        if part == CERTIFIED_WEIGHTS:
            continue
        sets, set_line = c.get("sets"), ""
        if sets:
            threshold = "every class" if sets["threshold"] is None else f"{sets['score']} score <= {sets['threshold']:.4g}"
            too_few = sets_advice(sets, str(run_dir))  # on too few inputs: how many they need
            set_line = f"; its sets at {percent(1 - sets['alpha'])} coverage: {threshold}" + (
                f" ({too_few})" if too_few else "")
        if part == TWIN_SCALED and "sets" not in c:
            lines.append(f"{part}: none ({c['error']})")
            continue
        if "error" in c:
            advice = certify_advice(c, str(run_dir))
            lines.append(f"{part}: not certified ({c['error']})" + (f"; {advice}" if advice else "") +
                         f"; until one is, predict, evaluate and the page answer with its conformal set{set_line}")
            continue
        if "temperature" in c:
            set_line += f"; temperature {c['temperature']:.4g}"

        v = c["validation"]
        missed = "" if v.get("max_refusal_met", True) else (
            f"; MAX_REFUSAL MISSED: no certified rule refuses at most {c['max_refusal']:.2%}, so this one answers the "
            "most (train longer, or ask for a higher risk)")
        smallest = f"; the smallest risk they certify: {c['smallest_risk']:g}" if c.get("smallest_risk") else ""
        lines.append(f"{part}: {Rule.from_dict(c['rule']).in_words()}; on {v['size']} validation inputs "
                     f"refused {v['refused']:.2%}, error rate among accepted {v['risk']:.4%} "
                     f"(certified <= {c['risk']} with probability >= {1 - c['delta']}){smallest}{missed}{set_line}"
                     f"{after_alarm_line(c.get('after_alarm'))}")
    return "\n".join(lines)


def after_alarm_line(entry: dict | None) -> str:
    """The after-alarm rule of a calibration.json entry, as the summary's line ends."""
    if entry is None:
        return ""
    if "error" in entry:
        return f"; no after-alarm rule ({entry['error']})"
    v = entry["validation"]
    return (f"; after the shift alarm: {Rule.from_dict(entry['rule']).in_words()}, refused "
            f"{v['refused']:.2%} of validation (certified <= {entry['risk']} with probability >= {1 - entry['delta']})")
