"""Posterior predictive sampling, vectorized over chunks of posterior samples; and a command line
that answers for a person's own images, or says "I don't know".

Usage::

    probs = predict(model, guide, x, num_samples=100)      # [100, N, C]; any guide
    probs = predict(model, hmc_samples, x)                 # or a dict of weight samples (NUTS)
    python -m bnn_zoo.predict lenet digit.png letter.jpg [--json]   # shipped posterior, or a run dir
"""
from __future__ import annotations

import json
import sys
from typing import Callable, Optional, Union

import pyro
import pyro.poutine as poutine
import torch

from . import cli
from .abstention import SIGNALS, uncertainty
from .bnn import BayesianNet
from .checkpoint import Trained, load
from .config import pick_device
from .data import MNIST_MEAN, MNIST_STD, normalize
from .images import load_image
from .likelihoods import Categorical

Posterior = Union[Callable, dict]  # a guide, or {site name: [S, *shape]} weight samples
# Normalized images lie in NORMALIZED_RANGE; inputs beyond IMAGE_LIMIT were not normalized (0..255).
NORMALIZED_RANGE = ((0 - MNIST_MEAN) / MNIST_STD, (1 - MNIST_MEAN) / MNIST_STD)
IMAGE_LIMIT = 10.0


def draw_weights(model: BayesianNet, posterior: Posterior, x: torch.Tensor, num_samples: int,
                 index: Optional[torch.Tensor] = None) -> dict[str, torch.Tensor]:
    """``num_samples`` weight sets, {parameter name: [num_samples, *shape]}: from a guide in one
    vectorized trace, or the samples at ``index`` of a dict of samples."""
    if isinstance(posterior, dict):
        return {name: posterior[f"net.{name}"][index] for name in model.weight_shapes
                if f"net.{name}" in posterior}
    with pyro.plate("_posterior_samples", num_samples, dim=-2):
        trace = poutine.trace(posterior).get_trace(x[:1])
    weights = {}
    for name, shape in model.weight_shapes.items():
        site = trace.nodes.get(f"net.{name}")
        if site is None or site["type"] != "sample":
            continue  # a point estimate: the model's own parameter
        value = site["value"]
        weights[name] = value.expand(num_samples, *shape) if value.shape == shape else \
            value.reshape(num_samples, *shape)
    return weights


@torch.no_grad()
def predict(model: BayesianNet, posterior: Posterior, x: torch.Tensor, num_samples: Optional[int] = 100,
            chunk_size: int = 10, batch_size: int = 500, keep: Optional[dict] = None) -> torch.Tensor:
    """Posterior predictive on ``x``: per posterior sample, the likelihood's predictive (class
    probabilities [S, N, C], or a regression's (mean, noise sd) [S, N, 2]).

    ``posterior`` is any guide of the model, or a dict of weight samples (MCMC); of those,
    ``num_samples`` evenly spaced ones are used (None: all). Weights are drawn ``chunk_size``
    samples at a time and each chunk runs as one batched pass over ``batch_size`` inputs, so memory
    beyond the result is bounded by chunk_size x batch_size activations, whatever num_samples is. ``keep`` ({parameter name: bool mask}) zeroes
    the weights where the mask is False (pruning). The model runs in eval mode. Runs in the
    caller's Pyro settings and parameter store; the result is on x's device.
    """
    if not len(x):
        raise ValueError("x holds no inputs (its first dimension is 0)")
    if x.dim() == 4 and float(x.abs().max()) > IMAGE_LIMIT:
        raise ValueError(f"the images hold values up to {float(x.abs().max()):g}, far outside normalized "
                         f"images' {NORMALIZED_RANGE[0]:.2f}..{NORMALIZED_RANGE[1]:.2f}: pass "
                         "bnn_zoo.data.normalize(uint8 images 0..255)")
    index = None
    if isinstance(posterior, dict):
        total = len(next(iter(posterior.values())))
        num_samples = total if num_samples is None else num_samples
        if num_samples > total:
            raise ValueError(f"the posterior holds {total} samples; asked for {num_samples}")
        index = torch.linspace(0, total - 1, num_samples).round().long() if num_samples else None
    if not (num_samples and num_samples >= 1 and chunk_size >= 1 and batch_size >= 1):
        raise ValueError("num_samples, chunk_size and batch_size must be positive")
    was_training = model.training
    model.eval()
    try:
        out = None  # filled in place: no per-chunk pieces kept between the chunks' large buffers
        for start in range(0, num_samples, chunk_size):
            n = min(chunk_size, num_samples - start)
            part = None if index is None else index[start:start + n]
            weights = draw_weights(model, posterior, x, n, part)
            for name, mask in (keep or {}).items():
                weights[name] = weights[name] * mask
            for first, xb in zip(range(0, len(x), batch_size), x.split(batch_size)):
                piece = model.likelihood.predictive(model.forward_with(weights, xb))
                if out is None:
                    out = piece.new_empty(num_samples, len(x), *piece.shape[2:])
                out[start:start + n, first:first + len(xb)] = piece
            del weights
        return out
    finally:
        model.train(was_training)


def sampled_probs(trained: Trained, x: torch.Tensor, num_samples: int) -> dict[str, torch.Tensor]:
    """Sampled probabilities [S, N, C] of the BNN, and [1, N, C] of the twin when there is one."""
    out = {"bayes": predict(trained.model, trained.guide, x, num_samples)}
    if trained.twin is not None:
        with torch.no_grad():
            out["twin"] = torch.cat([trained.twin(xb) for xb in x.split(1000)])[None]
    return out


def main(argv: list[str] | None = None) -> int:
    """Classify images with a trained run, or say "I don't know"."""
    parser = cli.command_parser("python -m bnn_zoo.predict", main.__doc__)
    parser.add_argument("run_dir", help="a trained run (python -m bnn_zoo.train ...) or the name of a shipped "
                                        "posterior: lenet, mnist_mlp, lenet_fashion")
    parser.add_argument("images", nargs="+", metavar="IMAGE")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    parser.add_argument("--invert", choices=["auto", "yes", "no"], default="auto",
                        help="invert dark-on-light images (auto: when the border is light)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return cli.run(lambda: _answer(args))


@pyro.settings.context(module_local_params=True)
def _answer(args) -> int:
    trained = load(args.run_dir, pick_device(args.device))
    if not isinstance(trained.model.likelihood, Categorical):
        raise ValueError("predict classifies images; this run is a regression model")
    answers, pixels = [], []
    for path in args.images:
        try:
            pixels.append(load_image(path, args.invert))
            answers.append({"file": path})
        except ValueError as err:
            answers.append({"file": path, "error": str(err)})
    good = [a for a in answers if "error" not in a]
    if good:
        pyro.set_rng_seed(args.seed)
        x = normalize(torch.stack(pixels)).to(trained.device)
        rule = trained.rules_for(args.rule, args.quantile, args.threshold)["bayes"]
        probs = predict(trained.model, trained.guide, x, args.samples)
        decision, scores = rule(probs), uncertainty(probs, rule.quantile)
        for i, answer in enumerate(good):
            q = decision.quantile_probs[i]
            classes = sorted(decision.accepted[i].nonzero()[:, 0].tolist(), key=lambda c: -float(q[c]))
            answer["accepted"] = {int(c): round(float(q[c]), 4) for c in classes}
            answer["answer"] = None if decision.refused[i] else int(decision.prediction[i])
            answer["refused_by"] = [rule.signal if r == "gate" else r for r in decision.reasons(i)]
            answer["uncertainty"] = {k: round(float(scores[k][i]), 6) for k in SIGNALS}
        rule_text = f"rule: median >= {rule.threshold}" if rule.quantile == 0.5 else \
            f"rule: {rule.quantile} quantile >= {rule.threshold}"
        if rule.signal:
            rule_text += f", refuse when {rule.signal} > {rule.cut:.4g} bits"
    if args.json:
        print(json.dumps(answers, indent=2))
    elif good:
        certified = args.rule == "quantile" or "rule" in trained.calibration.get("bayes", {})
        print(rule_text + ("" if certified else " (the seed's rule: this run has no certified rule; "
                                                "python -m bnn_zoo.calibrate RUN_DIR writes one)"))
    for a in answers if not args.json else []:
        if "error" in a:
            print(f"{a['file']}: error: {a['error']}")
        elif a["answer"] is None:
            print(f"{a['file']}: I don't know (refused by {' and '.join(a['refused_by'])})")
        else:
            print(f"{a['file']}: " + ", ".join(f"{c} ({p:.2f})" for c, p in a["accepted"].items()))
    return 1 if any("error" in a for a in answers) else 0


if __name__ == "__main__":
    sys.exit(main())
