"""The shift alarm's rates (``bnn_zoo.abstain.shift``) for a shipped posterior or a run: how often it
sounds on streams of test inputs (MNIST, FashionMNIST), where the guarantee holds (false alarms, against its alpha,
with a 95% upper bound), and how soon it sounds on each of MNIST-C's corruptions (the median input
of the first alarm over random orders of the corrupted images, and the share of orders in which it
sounds within 50 inputs), and where it sounds on windows of the test set in its stored order (MNIST's
test digits come writer group by writer group: the first and last 1,000, digits 4,000-5,000 and
5,000-6,000, the last 5,000 and the whole set, each a stream of its own).

Usage: python scripts/alarm_rates.py lenet [--posteriors bayes twin] [--streams 200] [--length 1000]
           [--orders 20] [--alpha 0.01] [--json alarm_rates.json]
"""
import argparse
import json
import math
import sys
from pathlib import Path

import pyro
import torch

from bnn_zoo.abstain.shift import ShiftAlarm
from bnn_zoo.cli import options as cli
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.data.sets import run_data_root, run_split
from bnn_zoo.evaluation.under_shift import corrupted_sets, default_shift
from bnn_zoo.posterior import KINDS
from bnn_zoo.runs.storage.loading import load
from bnn_zoo.runs.storage.trained import posteriors

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


@pyro.settings.context(module_local_params=True)
def rates(name: str, parts: list[str] | None, streams: int, length: int, orders: int, alpha: float,
          samples: int, data_root: str | None = None) -> dict:
    """{part: {"false_alarms", "streams", "length", "upper_95", "corruptions": {name: {...}}}}."""
    trained = load(name)
    held = posteriors(trained)
    parts = parts or [p for p in ("bayes", "twin") if p in held]
    missing = [p for p in parts if p not in held or trained.alarm(p) is None]
    if missing:
        raise ConfigError(f"{name} holds no certified rule for {', '.join(missing)}, so no alarm: certify it "
                          "(python -m bnn_zoo.certify RUN_DIR, or scripts/ship_sets.py for a shipped posterior)")
    cfg, out = trained.config, {}
    x, _ = run_split(cfg.data, "test", data_root)
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


def false_alarm_rate(text: str) -> float:
    """--alpha, checked before any work: a rate in (0, 1)."""
    try:
        alpha = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < alpha < 1:
        raise argparse.ArgumentTypeError(f"a false-alarm rate lies in (0, 1), got {text}")
    return alpha


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("name", help="a shipped posterior (lenet, mnist_mlp, lenet_fashion) or a run directory")
    parser.add_argument("--posteriors", nargs="+", default=None, choices=list(KINDS), help="default: bayes and twin")
    parser.add_argument("--streams", type=cli.count, default=200)
    parser.add_argument("--length", type=cli.count, default=1000)
    parser.add_argument("--orders", type=cli.count, default=20)
    parser.add_argument("--alpha", type=false_alarm_rate, default=0.01)
    parser.add_argument("--samples", type=cli.posterior_samples, default=100)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    def command() -> int:
        found = rates(args.name, args.posteriors, args.streams, args.length, args.orders, args.alpha, args.samples,
                      args.data_root)
        print(report(args.name, found))
        if args.json:
            Path(args.json).write_text(json.dumps(found, indent=2))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
