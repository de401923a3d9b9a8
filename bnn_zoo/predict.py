"""A command line that answers for a person's own images, or says "I don't know", with any
posterior a run holds (``bnn_zoo.ladder``). The sampling itself is ``bnn_zoo.sampling.predict``.

Usage::

    python -m bnn_zoo.predict lenet digit.png letter.jpg [--json]   # shipped posterior, or a run dir
    python -m bnn_zoo.predict runs/lenet_ensemble digit.png --posterior twin   # its deep ensemble
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import pyro
import torch

from . import cli
from .abstention import DENSITY, SIGNALS, uncertainty
from .checkpoint import PARTS
from .trained import load
from .config_checks import pick_device
from .data import found_of, normalize
from .inputs import class_names, image_inputs
from .errors import ConfigError, DataError
from .images import load_image
from .ladder import gate_density, posteriors
from .likelihoods import Categorical
from .own_data import ROWS, read_rows
from .sampling import predict


class _CallableModule(types.ModuleType):
    """Importing this module sets ``bnn_zoo.predict``, the function, to it (as Python binds every
    submodule on its package): calling it calls that function."""

    __call__ = staticmethod(predict)


sys.modules[__name__].__class__ = _CallableModule


def main(argv: list[str] | None = None) -> int:
    """Classify images with a trained run, or say "I don't know"."""
    parser = cli.command_parser("python -m bnn_zoo.predict", main.__doc__)
    parser.add_argument("run_dir", help="a trained run (python -m bnn_zoo.train ...) or the name of a shipped "
                                        "posterior: lenet, mnist_mlp, lenet_fashion")
    parser.add_argument("images", nargs="+", metavar="FILE", help="images; for a run on rows (data.name=csv or "
                        "tensors), CSV or tensor files of them")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    parser.add_argument("--invert", choices=["auto", "yes", "no"], default="auto",
                        help="invert dark-on-light images (auto: when the border is light)")
    parser.add_argument("--centre", action=argparse.BooleanOptionalAction, default=True,
                        help="fit the ink into 20x20 and centre it by its mass, as MNIST's digits were "
                             "(default; --no-centre: the whole image resized to 28x28)")
    parser.add_argument("--posterior", choices=PARTS, default="bayes",
                        help="which of the run's posteriors answers: bayes (its guide or ensemble of "
                             "guides, the default), twin (MAP, MC dropout or deep ensemble), hmc")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return cli.run(lambda: _answer(args))


@pyro.settings.context(module_local_params=True)
def _answer(args) -> int:
    trained = load(args.run_dir, pick_device(args.device))
    regression = not isinstance(trained.model.likelihood, Categorical)
    if regression and trained.config.data.name not in ROWS:
        raise ValueError("predict answers classifiers, and regressions on rows (data.name=csv or tensors); "
                         f"{args.run_dir} is a regression on {trained.config.data.name}: its figures are in metrics.json")
    rungs = posteriors(trained)
    if args.posterior not in rungs:
        raise ConfigError(f"--posterior {args.posterior}: {args.run_dir} holds no such posterior; it holds "
                          f"{', '.join(rungs)}")
    answers, inputs, rows = [], [], trained.config.data.name in ROWS
    for path in args.images:
        try:
            x = _inputs(trained.config, path, args)
            inputs.append(x)
            answers += [{"file": f"{path}:{i + 1}" if rows else path} for i in range(len(x))]
        except (ValueError, DataError) as err:
            answers.append({"file": path, "error": str(err)})
    good, names = [a for a in answers if "error" not in a], class_names(trained.config)
    if regression:
        return _regression(rungs[args.posterior], torch.cat(inputs).to(trained.device) if good else None, answers, args)
    if good:
        pyro.set_rng_seed(args.seed)
        x = torch.cat(inputs).to(trained.device)
        rule = trained.rules_for(args.rule, args.quantile, args.threshold)[args.posterior]
        probs = rungs[args.posterior].predict(x, args.samples)
        gate = gate_density(rule, trained, args.posterior, rungs[args.posterior], x)
        decision, scores = rule(probs, gate), uncertainty(probs, rule.quantile)
        sets = trained.sets.get(args.posterior) if args.rule == "calibrated" else None
        in_sets = sets.answer(probs, args.seed) if sets and sets.certified_at(len(probs)) else None
        for i, answer in enumerate(good):
            answer.update(decision.describe(i))
            answer["label"] = None if answer["answer"] is None else names[answer["answer"]]
            answer["uncertainty_bits"] = {k: round(float(scores[k][i]), 6) for k in SIGNALS}
            if in_sets is not None and answer["answer"] is not None:  # refused, or answered with a set
                answer["set"] = {"classes": in_sets[i], "coverage": 1 - sets.alpha}
        rule_text = f"rule: median >= {rule.threshold}" if rule.quantile == 0.5 else \
            f"rule: {rule.quantile} quantile >= {rule.threshold}"
        if rule.signal == DENSITY:  # minus the log density of its features, in nats
            rule_text += f", refuse when minus the log density of its features > {rule.cut:.4g} nats"
        elif rule.signal:
            rule_text += f", refuse when {rule.signal} > {rule.cut:.4g} bits"
    if args.json:
        print(json.dumps(answers, indent=2))
    elif good:
        certified = args.rule == "quantile" or "rule" in trained.calibration.get(args.posterior, {})
        print(rule_text + ("" if certified else " (the quantile rule: this run has no certified rule; "
                                                "python -m bnn_zoo.calibrate RUN_DIR writes one)"))
    for a in answers if not args.json else []:
        name = _printable(a["file"])
        if "error" in a:
            print(f"{name}: error: {a['error']}")
        elif a["answer"] is None:
            print(f"{name}: I don't know (refused by {' and '.join(a['refused_by'])})")
        else:
            in_set = f"; {a['set']['coverage']:.0%} set {{{', '.join(names[c] for c in a['set']['classes'])}}}" \
                if "set" in a else ""
            print(f"{name}: " + ", ".join(f"{names[c]} ({p:.2f})" for c, p in a["accepted"].items()) + in_set)
    return 1 if any("error" in a for a in answers) else 0


def _regression(posterior, x: torch.Tensor | None, answers: list[dict], args) -> int:
    """A regression's answer per row: the predictive mean and sd, its parts from the weights'
    uncertainty (epistemic) and the noise."""
    if x is not None:
        pyro.set_rng_seed(args.seed)
        samples = posterior.predict(x, args.samples)  # [S, N, 2]: each draw's mean and noise sd
        mean, epistemic = samples[..., 0].mean(0), samples[..., 0].std(0, correction=0)
        noise = samples[..., 1].pow(2).mean(0).sqrt()
        for i, answer in enumerate(a for a in answers if "error" not in a):
            answer.update({"mean": round(float(mean[i]), 6), "sd": round(float((epistemic[i] ** 2 + noise[i] ** 2).sqrt()), 6),
                           "epistemic_sd": round(float(epistemic[i]), 6), "noise_sd": round(float(noise[i]), 6)})
    for a in answers if not args.json else []:
        print(f"{_printable(a['file'])}: error: {a['error']}" if "error" in a else
              f"{_printable(a['file'])}: {a['mean']:.4g} +- {a['sd']:.3g} (epistemic sd {a['epistemic_sd']:.3g}, "
              f"noise sd {a['noise_sd']:.3g})")
    if args.json:
        print(json.dumps(answers, indent=2))
    return 1 if any("error" in a for a in answers) else 0


def _inputs(cfg, path: str, args) -> torch.Tensor:
    """One file's inputs as the run's network sees them: an image (a MNIST run reads it as MNIST's
    digits were drawn, a folder run at its size and channels), or the rows of a CSV or tensor file."""
    if cfg.data.name in ROWS:
        return found_of(cfg).normalize(read_rows(cfg, Path(path)))
    if found_of(cfg) is not None:
        return image_inputs(cfg, [Path(path)], path)
    return normalize(load_image(path, args.invert, args.centre)[None])


def _printable(name: str) -> str:
    """A file name as it is, or quoted with Python's escapes when it holds characters a terminal does
    not print as themselves (a newline in a name would forge an answer line)."""
    return name if name.isprintable() else repr(name)


if __name__ == "__main__":
    sys.exit(main())
