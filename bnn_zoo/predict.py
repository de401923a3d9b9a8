"""Posterior predictive sampling, vectorized over chunks of posterior samples; and a command
line that answers for a person's own images, or says "I don't know".

Usage::

    probs = predict(model, guide, x, num_samples=100)   # [100, N, C]
    python -m bnn_zoo.predict runs/lenet digit.png letter.jpg [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyro
import pyro.poutine as poutine
import torch
from torch.func import functional_call, vmap

from .zoo import BayesianNet


def sample_weights(model: BayesianNet, guide, x: torch.Tensor, num_samples: int) -> dict:
    """Draw ``num_samples`` weight sets from the guide at once: {parameter name: [S, *shape]}."""
    with pyro.plate("_posterior_samples", num_samples, dim=-2):
        trace = poutine.trace(guide).get_trace(x[:1])
    weights = {}
    for name, site in trace.nodes.items():
        auxiliary = site.get("infer", {}).get("is_auxiliary")
        if site["type"] == "sample" and name.startswith("net.") and not auxiliary:
            value = site["value"]
            weights[name[len("net."):]] = value.reshape(num_samples, *value.shape[2:])
    return weights


def _outputs(model: BayesianNet, net: torch.nn.Module, weights: dict, x: torch.Tensor) -> torch.Tensor:
    """Run ``net`` (a weightless skeleton) once for all weight sets: [S, N, C] probabilities, or
    [S, N, 2] (mean, noise scale) for regression."""
    out = vmap(lambda w: functional_call(net, w, (x,)))(weights)
    if model.likelihood == "categorical":
        return out.softmax(-1)
    return model.noise(out)


@torch.no_grad()
def predict(model: BayesianNet, guide, x: torch.Tensor, num_samples: int = 100,
            chunk_size: int = 10, batch_size: int = 500, keep: dict | None = None) -> torch.Tensor:
    """Posterior predictive on ``x``: class probabilities [S, N, C], or for regression each
    sample's Normal as [S, N, 2] (mean, noise scale).

    Weights are drawn ``chunk_size`` samples at a time and each chunk runs as one batched pass
    over ``batch_size`` inputs, so memory is bounded by chunk_size x batch_size activations.
    ``keep`` ({parameter name: bool mask}) zeroes the weights where the mask is False in every
    sample (pruning). Result on x's device, without gradients.
    """
    if num_samples < 1 or chunk_size < 1 or batch_size < 1:
        raise ValueError("num_samples, chunk_size and batch_size must be positive")
    net = model.make_net().to("meta")
    chunks = []
    for start in range(0, num_samples, chunk_size):
        weights = sample_weights(model, guide, x, min(chunk_size, num_samples - start))
        for name, mask in (keep or {}).items():
            weights[name] = weights[name] * mask
        chunks.append(torch.cat([_outputs(model, net, weights, xb) for xb in x.split(batch_size)], 1))
    return torch.cat(chunks)


def load_image(path: str | Path, invert: str = "auto") -> torch.Tensor:
    """A PNG/JPEG file as MNIST's format: grayscale uint8 [28, 28], white on black.

    ``invert``: "auto" inverts images whose border is light (dark ink on paper), "yes", "no".
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img = img.convert("L").resize((28, 28), Image.BILINEAR)
            pixels = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(28, 28)
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"not a readable image ({err.__class__.__name__})") from None
    border = torch.cat([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]]).float().mean()
    if invert == "yes" or (invert == "auto" and border > 127):
        pixels = 255 - pixels
    return pixels


def main(argv: list[str] | None = None) -> int:
    from .abstention import abstain
    from .checkpoint import load
    from .data import normalize
    from .train import pick_device

    parser = argparse.ArgumentParser(prog="python -m bnn_zoo.predict",
                                     description="Classify images with a trained run, or say "
                                                 "\"I don't know\".")
    parser.add_argument("run_dir")
    parser.add_argument("images", nargs="+", metavar="IMAGE")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--quantile", type=float, default=0.5)
    parser.add_argument("--threshold", type=float, default=0.2)
    parser.add_argument("--invert", choices=["auto", "yes", "no"], default="auto",
                        help="invert dark-on-light images (auto: when the border is light)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        trained = load(args.run_dir, pick_device(args.device))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if trained.model.likelihood != "categorical":
        print("error: predict classifies images; this run is a regression model", file=sys.stderr)
        return 2
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
        decision = abstain(predict(trained.model, trained.guide, x, args.samples),
                           args.quantile, args.threshold)
        for i, answer in enumerate(good):
            q = decision.quantile_probs[i]
            classes = decision.accepted[i].nonzero()[:, 0].tolist()
            answer["accepted"] = {int(c): round(float(q[c]), 4) for c in
                                  sorted(classes, key=lambda c: -float(q[c]))}
            answer["answer"] = None if decision.refused[i] else int(decision.prediction[i])
    if args.json:
        print(json.dumps(answers, indent=2))
    for a in answers if not args.json else []:
        if "error" in a:
            print(f"{a['file']}: error: {a['error']}")
        elif a["answer"] is None:
            print(f"{a['file']}: I don't know")
        else:
            print(f"{a['file']}: " + ", ".join(f"{c} ({p:.2f})" for c, p in a["accepted"].items()))
    return 1 if any("error" in a for a in answers) else 0


if __name__ == "__main__":
    sys.exit(main())
