"""Posterior predictive sampling, vectorized over chunks of posterior samples, with memory that
does not grow with the number of samples.

Usage::

    probs = predict(model, guide, x, num_samples=100)      # [100, N, C]; any guide
    probs = predict(model, hmc_samples, x)                 # or a dict of weight samples (NUTS)
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import pyro
import pyro.poutine as poutine
import torch

from .bnn import BayesianNet
from .data import MNIST_MEAN, MNIST_STD

WeightSource = Union[Callable, dict]  # a guide, or {site name: [S, *shape]} weight samples
# Normalized images lie in NORMALIZED_RANGE; inputs beyond IMAGE_LIMIT were not normalized (0..255).
NORMALIZED_RANGE = ((0 - MNIST_MEAN) / MNIST_STD, (1 - MNIST_MEAN) / MNIST_STD)
IMAGE_LIMIT = 10.0


def draw_weights(model: BayesianNet, posterior: WeightSource, x: torch.Tensor, num_samples: int,
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


def check_inputs(x: torch.Tensor) -> None:
    """Refuse what is not a tensor of inputs: an empty one, NaN or inf values, and images that were
    not normalized (values far beyond -0.42..2.82)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of inputs [N, ...], got a {type(x).__name__}; "
                        "pass torch.as_tensor(x, dtype=torch.float32)")
    if not x.dim() or not len(x):
        raise ValueError(f"x holds no inputs: expected [N, ...] with N >= 1, got shape {tuple(x.shape)}")
    if x.is_floating_point() and not x.isfinite().all():
        raise ValueError(f"x holds {int((~x.isfinite()).sum())} non-finite values (NaN or inf): drop or "
                         "repair the inputs that hold them")
    if x.dim() == 4 and float(x.abs().max()) > IMAGE_LIMIT:
        raise ValueError(f"the images hold values up to {float(x.abs().max()):g}, far outside normalized "
                         f"images' {NORMALIZED_RANGE[0]:.2f}..{NORMALIZED_RANGE[1]:.2f}: pass "
                         "bnn_zoo.data.normalize(uint8 images 0..255)")


def sample_count(samples: dict) -> int:
    """How many draws a dict of weight samples {site name: [S, *shape]} holds; ValueError when it
    holds none or its sites disagree."""
    if not samples:
        raise ValueError("the posterior holds no weight samples (an empty dict): pass a guide, or "
                         "{site name: [S, *shape]} samples such as mcmc.get_samples()")
    for name, value in samples.items():
        if not (isinstance(value, torch.Tensor) and value.dim()):
            raise TypeError(f"the posterior's {name!r} is not a tensor of samples [S, *shape], got a "
                            f"{type(value).__name__}")
    counts = {name: len(value) for name, value in samples.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise ValueError(f"the posterior's sites hold different numbers of samples ({listed}); each "
                         "site needs one value per draw")
    return next(iter(counts.values()))


@torch.no_grad()
def predict(model: BayesianNet, posterior: WeightSource, x: torch.Tensor, num_samples: Optional[int] = 100,
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
    check_inputs(x)
    index = None
    if isinstance(posterior, dict):
        total = sample_count(posterior)
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
