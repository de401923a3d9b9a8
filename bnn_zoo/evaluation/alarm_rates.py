"""The shift alarm's rates (``bnn_zoo.abstain.shift``) for a shipped posterior or a run
(scripts/alarm_rates.py): how often it sounds on streams of test inputs (its false alarms against
its alpha, with a 95% upper bound), how soon on each of MNIST-C's corruptions (the median input of
the first alarm over random orders of the corrupted images, and the share of orders in which it
sounds within ``WITHIN`` inputs), and where on windows of the test set in its stored order. What it
cannot measure is refused in one line before the work: a stream longer than the test set, a
posterior the run does not hold (with the command that adds it) or holds no alarm for.

Usage: ``print(report("lenet", rates("lenet", ["twin"], streams=200, length=1000, orders=20, alpha=0.01, samples=100)))``
"""
from __future__ import annotations

import math

import pyro
import torch

from ..abstain.shift import ShiftAlarm
from ..core.errors import ConfigError
from ..core.inference.predictive import seeded
from ..data.sets import run_data_root, run_split
from ..posterior import KINDS
from ..runs.storage.trained import Trained, posteriors
from ..runs.storage.loading import load
from .under_shift import corrupted_sets, default_shift

WITHIN = 50  # the alarm should sound within 50 inputs of a corrupted stream
# Windows of the test set in its stored order, each a stream (first and last inputs, 0-based, end excluded)
WINDOWS = {"first 1,000": (0, 1000), "last 1,000": (-1000, None), "4,000-5,000": (4000, 5000),
           "5,000-6,000": (5000, 6000), "last 5,000": (-5000, None), "whole set": (0, None)}
DATA_NAMES = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}


def upper_bound(hits: int, n: int, level: float = 0.95) -> float:
    """The one-sided Clopper-Pearson upper bound on a rate seen ``hits`` times in ``n``."""
    if hits >= n:
        return 1.0
    low, high = hits / n, 1.0
    for _ in range(60):  # bisection on P(Binomial(n, p) <= hits) = 1 - level
        mid = (low + high) / 2
        tail = sum(math.comb(n, k) * mid ** k * (1 - mid) ** (n - k) for k in range(hits + 1))
        low, high = (mid, high) if tail > 1 - level else (low, mid)
    return high


def alarm_at(alarm: ShiftAlarm, probs: torch.Tensor) -> int | None:
    """Where ``alarm`` sounds on the stream of sampled predictions ``probs`` [S, N, C] (None: silent)."""
    return alarm.observe(probs).alarm_at


def how_to_add(trained: Trained, name: str, part: str) -> str:
    """What gives the run ``name`` the posterior ``part`` it does not hold: the command, or why none can."""
    if trained.run_dir is None:
        return f"a shipped posterior holds what it was shipped with; train a run that holds {part}"
    if KINDS[part].fitted:
        return f"python -m bnn_zoo.train resume={name} 'train.posteriors=[{part}]' fits it and certifies it"
    if part == "hmc":
        return f"python -m bnn_zoo.train resume={name} infer=nuts draws its samples"
    if trained.twin is None:  # the twin, and the temperature-scaled twin, need the twin trained
        return f"python -m bnn_zoo.train resume={name} train.twin=true trains the twin and certifies it"
    if part == "twin_scaled" and trained.members:
        return "an ensemble's twins are not temperature-scaled; measure its twin"
    return f"python -m bnn_zoo.certify {name} fits its temperature"


def check_posteriors(trained: Trained, name: str, parts: list[str]) -> None:
    """Each of ``parts`` a posterior the run holds, with a shift alarm (a certified rule); else one line
    naming the first that is not and what adds it."""
    held = posteriors(trained)
    lacking = next((part for part in parts if part not in held), None)
    if lacking:
        raise ConfigError(f"{name} holds no {lacking} posterior (it holds {', '.join(held)}): "
                          f"{how_to_add(trained, name, lacking)}")
    silent = [part for part in parts if trained.alarm(part) is None]
    if silent:
        again = (f"python scripts/ship_sets.py {name} --recertify" if trained.run_dir is None else
                 f"python -m bnn_zoo.certify {name}")
        raise ConfigError(f"{name} holds no certified rule for {', '.join(silent)}, so no alarm: certify it ({again})")


@pyro.settings.context(module_local_params=True)
def rates(name: str, parts: list[str] | None, streams: int, length: int, orders: int, alpha: float,
          samples: int, data_root: str | None = None) -> dict:
    """{part: {"false_alarms", "streams", "length", "upper_95", "stored_order", "corruptions": {name: {...}}}}:
    ``streams`` random orders of the test set, each cut to its first ``length`` inputs (at most the
    test set's size), ``orders`` random orders of each corruption's 500 images."""
    trained = load(name)
    held = posteriors(trained)
    parts = parts or [p for p in ("bayes", "twin") if p in held]
    check_posteriors(trained, name, parts)
    cfg, out = trained.config, {}
    x, _ = run_split(cfg.data, "test", data_root)
    if length > len(x):
        raise ConfigError(f"--length {length}: a stream draws each test input at most once, and {name}'s test set "
                          f"holds {len(x):,}; give --length {len(x)} or less")
    corrupted = list(corrupted_sets(cfg.data, default_shift(cfg.data), run_data_root(data_root, cfg.data.root), 500))
    for part in parts:
        with seeded(0):
            test = held[part].predict(x.to(trained.device), samples).cpu()
            shifted = {c: held[part].predict(xc.to(trained.device), samples).cpu() for c, xc, _ in corrupted}
        false = 0
        for k in range(streams):  # a stream: a random order of the test set, its first `length` inputs
            order = torch.randperm(test.shape[1], generator=torch.Generator().manual_seed(k))[:length]
            false += alarm_at(trained.alarm(part, alpha), test[:, order]) is not None
        windows = {w: alarm_at(trained.alarm(part, alpha), test[:, start:end]) for w, (start, end) in WINDOWS.items()}
        found = {}
        for c, s in shifted.items():
            at = [alarm_at(trained.alarm(part, alpha),
                           s[:, torch.randperm(s.shape[1], generator=torch.Generator().manual_seed(k))])
                  for k in range(orders)]
            fired = sorted(a for a in at if a is not None)
            found[c] = {"median_alarm_at": fired[(orders - 1) // 2] if len(fired) > (orders - 1) // 2 else None,
                        "within": sum(a <= WITHIN for a in fired) / orders, "fired": len(fired) / orders}
        out[part] = {"data": cfg.data.name, "alpha": alpha, "streams": streams, "length": length,
                     "false_alarms": false / streams, "stored_order": windows, "test_size": test.shape[1],
                     "upper_95": upper_bound(false, streams), "orders": orders, "corruptions": found}
    return out


def report(name: str, found: dict) -> str:
    """``rates``'s figures as lines of text, a block per posterior."""
    lines = []
    for part, r in found.items():
        data = DATA_NAMES.get(r["data"], r["data"])
        lines.append(f"{name} {part}: false alarms on {r['streams']} streams of {r['length']} {data} test inputs: "
                     f"{r['false_alarms']:.2%} (95% upper bound {r['upper_95']:.2%}; alpha {r['alpha']:g})")
        said = [f"{w} {'silent' if at is None else f'sounds at input {at}'}" for w, at in r["stored_order"].items()]
        lines.append(f"  the test set ({r['test_size']} inputs) in its stored order, window by window: {', '.join(said)}")
        within = sum(c["median_alarm_at"] is not None and c["median_alarm_at"] <= WITHIN
                     for c in r["corruptions"].values())
        lines.append(f"  sounds by input {WITHIN} (the median over {r['orders']} orders) on {within} of "
                     f"{len(r['corruptions'])} corruptions")
        lines.append(f"  {'corruption':<14} {'median alarm at':>15} {'within 50':>9} {'sounded':>8}")
        for c, v in r["corruptions"].items():
            at = "never" if v["median_alarm_at"] is None else str(v["median_alarm_at"])
            lines.append(f"  {c:<14} {at:>15} {v['within']:>9.0%} {v['fired']:>8.0%}")
    return "\n".join(lines)
