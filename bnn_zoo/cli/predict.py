"""A command line that answers for a person's own images, or says "I don't know", with any
posterior a run holds (``bnn_zoo.posterior``). The sampling itself is ``bnn_zoo.core.inference.predictive.predict``.

Usage::

    python -m bnn_zoo.predict lenet digit.png letter.jpg [--json]   # shipped posterior, or a run dir
    python -m bnn_zoo.predict runs/lenet_ensemble digit.png --posterior twin   # its deep ensemble

The files are one stream, in the order given: the shift alarm (``bnn_zoo.abstain.shift``) watches
whether they still look like the inputs the guarantee was certified on, and from the input that
sounds it on the answers are held to the stricter after-alarm rule (``bnn_zoo.abstain.after_alarm``;
--no-act-on-alarm: the certified rule alone). Given two inputs or more, a last line says so in plain
words (on stderr with --json, whose "alarm" holds it with its figures). --json prints
{"answers": [...], "errors": [...], "alarm": ...}; each answer says whether it came after the alarm,
and a refusal why, in figures ("mutual information 1.2 bits > 0.464", as the page says it).
A file that cannot be read is named on stderr (error: FILE: why) and the others are answered; the
exit code is then 2. --verbose first prints the rule that answers.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import pyro
import torch

from ..abstain.after_alarm import Stream
from ..abstain.conformal import percent
from ..abstain.rule import SIGNALS, uncertainty
from ..core.errors import ConfigError, DataError
from ..core.networks.likelihoods import Categorical
from ..data.images import load_image
from ..data.inputs import class_names, image_input
from ..data.own import ROWS, read_rows
from ..data.sets import normalize, profile_of
from ..evaluation.refusals import why_refused
from ..evaluation.set_answers import answering_sets, no_rule_line, set_decision
from ..posterior import KINDS
from ..runs.plans.checks import pick_device
from ..runs.storage.loading import load, shadowed
from ..runs.storage.trained import gate_density, posteriors
from . import options as cli


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
    parser.add_argument("--posterior", choices=list(KINDS), default="bayes",
                        help="which of the run's posteriors answers: bayes (its guide or ensemble of "
                             "guides, the default), twin (MAP, MC dropout or deep ensemble), hmc")
    cli.add_alarm_option(parser)
    parser.add_argument("--verbose", action="store_true",
                        help="first print the rule that answers (and the after-alarm rule)")
    parser.add_argument("--json", action="store_true",
                        help='machine-readable output: {"answers": [...], "errors": [...], "alarm": ...}')
    args, given = cli.parse_noting(parser, argv, "rule", "quantile", "threshold", "act_on_alarm")
    args.rule_options = given  # refused where they cannot apply (a regression)
    return cli.run(lambda: _answer(args))


@pyro.settings.context(module_local_params=True)
def _answer(args) -> int:
    cli.note(shadowed(args.run_dir))
    trained = load(args.run_dir, pick_device(args.device))
    regression = not isinstance(trained.model.likelihood, Categorical)
    if regression and trained.config.data.name not in ROWS:
        raise ValueError("predict answers classifiers, and regressions on rows (data.name=csv or tensors); "
                         f"{args.run_dir} is a regression on {trained.config.data.name}: its figures are in metrics.json")
    if regression and args.rule_options:  # a regression answers a mean and an sd: no rule refuses, no alarm watches
        raise ConfigError(f"{', '.join(args.rule_options)}: {args.run_dir} is a regression, answered with a mean and "
                          "an sd and never refused, so the abstention rule's options do not apply; leave them out")
    rungs = posteriors(trained)
    if args.posterior not in rungs:
        raise ConfigError(f"--posterior {args.posterior}: {args.run_dir} holds no such posterior; it holds "
                          f"{', '.join(rungs)}")
    answers, errors, inputs, rows = [], [], [], trained.config.data.name in ROWS
    for path in args.images:
        try:
            x, resized_from = _inputs(trained.data, path, args)
            inputs.append(x)
            answers += [{"file": f"{path}:{i + 1}" if rows else path} for i in range(len(x))]
            if resized_from:  # an image of another size than the run's: say so
                answers[-1]["resized_from"] = resized_from
        except (ValueError, DataError) as err:
            errors.append({"file": path, "error": str(err)})
    names = class_names(trained.config.data)
    x = torch.cat(inputs).to(trained.device) if answers else None
    pyro.set_rng_seed(args.seed)
    if regression:
        if answers:
            _regress(rungs[args.posterior], x, answers, args.samples)
        return _report(answers, errors, None, args, None, _regression_line)
    header, stream = _classify(trained, rungs[args.posterior], x, answers, names, args) if answers else (None, None)
    shape = trained.config.data.input_shape
    return _report(answers, errors, stream, args, header, lambda a: _class_line(a, names, shape))


def _classify(trained, posterior, x: torch.Tensor, good: list[dict], names: list[str],
              args) -> tuple[str | None, Stream]:
    """Each good answer's decision, label, uncertainties and set as the stream of the inputs in the
    order given answers it (``Trained.stream``): the chosen rule, or the conformal set where no rule
    is certified, and from the alarm on the after-alarm rule; returns what a person is told first
    (the rule in words with --verbose, or why the sets answer), and the stream."""
    rule = trained.rules_for(args.rule, args.quantile, args.threshold)[args.posterior]
    probs = posterior.predict(x, args.samples)
    by_sets = answering_sets(trained, args.posterior, len(probs), args.rule)
    sets = by_sets or (trained.sets.get(args.posterior) if args.rule == "calibrated" else None)
    in_sets = sets.answer(probs, args.seed) if sets and sets.certified_at(len(probs)) else None
    gate = gate_density(rule, trained, args.posterior, posterior, x)
    answering = (lambda p, density: set_decision(in_sets, p)) if by_sets else rule
    stream = trained.stream(args.posterior, args.act_on_alarm)
    answered = stream.decide(probs, gate, rule=answering, inputs=x)  # it tells its certified rule from another
    scores = uncertainty(probs, rule.quantile)
    coverage = None if sets is None else 1 - sets.alpha
    for i, answer in enumerate(good):
        answer.update(answered.describe(i))
        answer["label"] = None if answer["answer"] is None else names[answer["answer"]]
        answer["uncertainty_bits"] = {k: round(float(scores[k][i]), 6) for k in SIGNALS}
        answer["why"] = "; ".join(why_refused(answer["refused_by"], rule, {k: float(scores[k][i]) for k in SIGNALS},
                                              None if gate is None else float(gate[i]), coverage, stream.after_alarm))
        if in_sets is not None and (answer["answer"] is not None or by_sets):  # refused, or answered with a set
            answer["set"] = {"classes": in_sets[i], "coverage": 1 - sets.alpha}
        if by_sets:
            answer["certified"] = False
    if by_sets:
        why = no_rule_line(trained.calibration[args.posterior], args.posterior, args.run_dir)
        if args.json:
            cli.note(why)
        return why, stream
    if not args.verbose:
        return None, stream
    certified = args.rule == "quantile" or "rule" in trained.calibration.get(args.posterior, {})
    other = (f"; its conformal sets answer at the {sets.samples} posterior samples they were certified with "
             f"(--samples {sets.samples})") if sets else ""
    text = "rule: " + rule.in_words() + ("" if certified else " (the quantile rule: this run has no certified rule; "
                                                             f"python -m bnn_zoo.certify RUN_DIR writes one{other})")
    if stream.after_alarm is not None:
        text += "\nafter the shift alarm" + ("" if stream.act else " (not acting: --no-act-on-alarm)") + ": " + \
            stream.after_alarm.in_words()
    return text, stream


def _class_line(answer: dict, names: list[str], input_shape: list[int] | None) -> str:
    resized = (f" (resized from {answer['resized_from'][1]}x{answer['resized_from'][0]} to the run's "
               f"{input_shape[2]}x{input_shape[1]})") if "resized_from" in answer else ""
    if answer["answer"] is None:
        return f"I don't know ({answer['why']}){resized}"
    in_set = f"; {percent(answer['set']['coverage'])} set {{{', '.join(names[c] for c in answer['set']['classes'])}}}" \
        if "set" in answer else ""
    return ", ".join(f"{names[c]} ({p:.2f})" for c, p in answer["accepted"].items()) + in_set + resized


def _regress(posterior, x: torch.Tensor, good: list[dict], samples: int) -> None:
    """A regression's answer per row: the predictive mean and sd, its parts from the weights'
    uncertainty (epistemic) and the noise."""
    drawn = posterior.predict(x, samples)  # [S, N, 2]: each draw's mean and noise sd
    mean, epistemic = drawn[..., 0].mean(0), drawn[..., 0].std(0, correction=0)
    noise = drawn[..., 1].pow(2).mean(0).sqrt()
    for i, answer in enumerate(good):
        answer.update({"mean": round(float(mean[i]), 6), "sd": round(float((epistemic[i] ** 2 + noise[i] ** 2).sqrt()), 6),
                       "epistemic_sd": round(float(epistemic[i]), 6), "noise_sd": round(float(noise[i]), 6)})


def _regression_line(answer: dict) -> str:
    return (f"{answer['mean']:.4g} +- {answer['sd']:.3g} (epistemic sd {answer['epistemic_sd']:.3g}, "
            f"noise sd {answer['noise_sd']:.3g})")


def _report(answers: list[dict], errors: list[dict], stream: Stream | None, args, header: str | None,
            line: Callable[[dict], str]) -> int:
    """The answers printed, as JSON or as the ``header`` and a ``line`` per file, then, for two inputs
    or more, the stream's alarm in plain words (on stderr with --json, which holds it); each file
    that could not be read named on stderr. The exit code is 2 where one could not."""
    for e in errors:
        cli.note(f"error: {_printable(e['file'])}: {e['error']}")
    alarm = stream.to_dict() if stream is not None else None
    if args.json:
        print(json.dumps({"answers": answers, "errors": errors, "alarm": alarm}, indent=2))
    else:
        if header:
            print(header)
        for a in answers:
            print(f"{_printable(a['file'])}: {line(a)}")
    if alarm is not None and alarm["inputs"] >= 2:  # does this stream look like the inputs certified on?
        (cli.note if args.json else print)(alarm["text"])
    return 2 if errors else 0


def _inputs(data, path: str, args) -> tuple[torch.Tensor, list[int] | None]:
    """One file's inputs as the run's network sees them (``data``: its typed data section,
    ``Trained.data``): an image (a MNIST run reads it as MNIST's digits were drawn, a folder run at
    its size and channels), or the rows of a CSV or tensor file; and the image's own size [height,
    width] where a folder run resized it (else None)."""
    if data.name in ROWS:
        return profile_of(data).normalize(read_rows(data, Path(path))), None
    if profile_of(data) is not None:
        return image_input(data, Path(path))
    return normalize(load_image(path, args.invert, args.centre)[None]), None


def _printable(name: str) -> str:
    """A file name as it is, or quoted with Python's escapes when it holds characters a terminal does
    not print as themselves (a newline in a name would forge an answer line)."""
    return name if name.isprintable() else repr(name)


if __name__ == "__main__":
    sys.exit(main())
