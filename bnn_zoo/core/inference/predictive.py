"""Posterior predictive sampling, vectorized over chunks of posterior samples, with memory that
does not grow with the number of samples.

Usage::

    probs = predict(model, guide, x, num_samples=100)      # [100, N, C]; any guide
    probs = predict(model, hmc_samples, x)                 # or a dict of weight samples (NUTS)
"""
from __future__ import annotations

from contextlib import closing, contextmanager
from typing import Callable, Generator, Iterator, Optional, Union

import pyro
import pyro.poutine as poutine
import torch

from ..networks.bnn import BayesianNet
from ..fast.compiling import PREDICTIONS_TO_COMPILE, predictive
from .inputs import check_inputs, evaluating, first_line

WeightSource = Union[Callable, dict]  # a guide, or {site name: [S, *shape]} weight samples
# (n, predict_batch): n samples' weights, and what they predict on a batch xb, [n, len(xb), ...]
Chunk = tuple[int, Callable[[torch.Tensor], torch.Tensor]]
GUIDE_FIX = "the guide built with this model, not another network's (bnn_zoo.build and bayesian return the pair)"


def own_parameters(module: torch.nn.Module):
    """A context in which a Pyro module (a guide, a model) reads its parameters in the mode it was
    built in: its own, module-local ones where it was built with them (``bnn_zoo.load``'s pairs;
    in Pyro's global store an ensemble's guides, which share names, would take one another's, for
    good), the global store where it was built in that. Only around the module's own call, so no
    setting outlives it."""
    built_local = hasattr(getattr(module, "_pyro_context", None), "param_state")  # pyro.nn.module's, pinned < 1.10
    return pyro.settings.context(module_local_params=built_local)


def _in_own_parameters(model: torch.nn.Module, forward, weights: dict, xb: torch.Tensor) -> torch.Tensor:
    with own_parameters(model):  # a likelihood's learned noise scale is one of the model's parameters
        return forward(weights, xb)


def draw_weights(model: BayesianNet, posterior: WeightSource, x: torch.Tensor, num_samples: int,
                 index: Optional[torch.Tensor] = None, check: bool = False) -> dict[str, torch.Tensor]:
    """``num_samples`` weight sets, {parameter name: [num_samples, *shape]}: from a guide in one
    vectorized trace, or the samples at ``index`` of a dict of samples. ``check``: first a
    ValueError where the guide's sites are not the model's weights (``check_sites``)."""
    if isinstance(posterior, dict):
        return {name: posterior[f"net.{name}"][index] for name in model.weight_shapes
                if f"net.{name}" in posterior}
    try:
        with own_parameters(posterior), pyro.plate("_posterior_samples", num_samples, dim=-2):
            trace = poutine.trace(posterior).get_trace(x[:1])
    except RuntimeError as err:  # a guide not yet run runs its own model: another network's refuses x
        if not check:
            raise
        raise ValueError(f"the guide cannot draw weights for inputs of shape {list(x.shape)} ({first_line(err)}): "
                         f"pass {GUIDE_FIX}") from None
    drawn = {name: site["value"] for name, site in trace.nodes.items() if site["type"] == "sample"}
    if check:
        check_sites(model, {site: _one_draw(value, num_samples, model.weight_shapes.get(site[len("net."):]))
                            for site, value in drawn.items()}, "the guide", GUIDE_FIX)
    weights = {}
    for name, shape in model.weight_shapes.items():
        value = drawn.get(f"net.{name}")
        if value is None:
            continue  # a point estimate: the model's own parameter
        weights[name] = value.expand(num_samples, *shape) if value.shape == shape else \
            value.reshape(num_samples, *shape)
    return weights


def _one_draw(value: torch.Tensor, num_samples: int, shape: Optional[torch.Size]) -> torch.Size:
    """The shape of one of a guide's ``num_samples`` draws of a site: [num_samples, 1, *shape] under
    the samples' plate, [*shape] from a guide that ignores it (``shape``: the model's weight's)."""
    plated = value.shape[:2] == (num_samples, 1) and value.shape != shape
    return value.shape[2:] if plated else value.shape


def check_sites(model: BayesianNet, shapes: dict[str, torch.Size], source: str, fix: str) -> None:
    """ValueError unless ``shapes`` ({site: the shape of one draw}, of ``source``: a guide, weight
    samples) holds each of the model's sampled weights (``net.<name>``) in its shape; ``fix`` says
    what to pass instead. Other sites (AutoNormal's auxiliary ones, say) are named, not refused."""
    missing = [f"no site net.{name} {list(shape)}" for name, shape in model.sampled.items()
               if f"net.{name}" not in shapes]
    wrong = [f"site net.{name} is {list(shapes[f'net.{name}'])} where the model's weight is {list(shape)}"
             for name, shape in model.sampled.items() if shapes.get(f"net.{name}", shape) != shape]
    extra = [f"site {site} {list(shape)} is no weight of the model's" for site, shape in shapes.items()
             if site.startswith("net.") and site[len("net."):] not in model.weight_shapes]
    if missing or wrong:
        said = "; ".join(found[0] for found in (missing, wrong, extra) if found)
        raise ValueError(f"{source} and the model do not match ({said}): pass {fix}")


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


def positive_sizes(num_samples, chunk_size: int, batch_size: int) -> None:
    """ValueError unless the number of samples, the chunk size and the batch size are all >= 1."""
    if not (num_samples and num_samples >= 1 and chunk_size >= 1 and batch_size >= 1):
        raise ValueError("num_samples, chunk_size and batch_size must be positive")


@contextmanager
def seeded(seed: Optional[int], device: torch.device | str = "cpu") -> Iterator[None]:
    """Draws inside the block come from ``seed`` (torch's generator, which Pyro's samplers use, and
    ``device``'s where it is a GPU; None: from wherever the streams are); the caller's random
    streams are as they were once it ends.

    Usage: ``with seeded(0, trained.device): probs = predict(model, guide, x)``
    """
    device = torch.device(device)
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        if seed is not None:
            torch.default_generator.manual_seed(seed)
        if cuda and seed is not None:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)  # this GPU's generator only: the others are not forked
        yield


def sample_chunks(num_samples: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """(first sample, size) of the chunks that ``num_samples`` samples are drawn in."""
    for start in range(0, num_samples, chunk_size):
        yield start, min(chunk_size, num_samples - start)


@torch.no_grad()
def fill_predictions(x: torch.Tensor, chunks: Generator[Chunk, None, None], total: int,
                     batch_size: int) -> torch.Tensor:
    """The one prediction loop: [total, N, ...] filled in place, chunk after chunk of samples, each
    chunk ``(n, predict_batch)`` run over ``x`` ``batch_size`` inputs at a time (predict_batch(xb)
    gives [n, len(xb), ...]). ``chunks`` is read lazily, so one chunk's weights live at a time, and
    closed at the end, whatever happened, so that the modes its chunks set are restored.

    Usage: ``fill_predictions(x, network_chunks(model, guide, x, 100, 10), 100, 500)``
    """
    out, start = None, 0
    with closing(chunks):
        for n, predict_batch in chunks:
            for first, xb in zip(range(0, len(x), batch_size), x.split(batch_size)):
                piece = predict_batch(xb)
                if out is None:
                    out = piece.new_empty(total, len(x), *piece.shape[2:])
                out[start:start + n, first:first + len(xb)] = piece
            start += n
    return out


def network_chunks(model: BayesianNet, posterior: WeightSource, x: torch.Tensor, num_samples: int,
                   chunk_size: int, keep: Optional[dict] = None,
                   compiled: Optional[bool] = None) -> Generator[Chunk, None, None]:
    """Chunks of the model's predictions (for ``fill_predictions``), the model in eval mode: each
    chunk's weights drawn from a guide in one vectorized trace, or ``num_samples`` evenly spaced
    ones of a dict of samples; ``keep`` ({parameter name: bool mask}) zeroes the weights where False.
    ``compiled``: the network's pass compiled (``bnn_zoo.core.fast.compiling.predictive``); None: where there
    are at least ``PREDICTIONS_TO_COMPILE`` predictions to make."""
    if compiled is None:
        compiled = num_samples * len(x) >= PREDICTIONS_TO_COMPILE
    forward = predictive(model, compiled)
    index = None
    if isinstance(posterior, dict):
        index = torch.linspace(0, sample_count(posterior) - 1, num_samples).round().long()
        check_sites(model, {site: value.shape[1:] for site, value in posterior.items()}, "the weight samples",
                    "samples drawn for this model, not another network's (bnn_zoo.core.inference.nuts.nuts_posterior)")
    with evaluating(model):
        for start, n in sample_chunks(num_samples, chunk_size):
            # a guide's sites are checked once, in its first chunk's trace: no trace of its own
            weights = draw_weights(model, posterior, x, n, None if index is None else index[start:start + n],
                                   check=not start)
            for name, mask in (keep or {}).items():
                weights[name] = weights[name] * mask
            yield n, lambda xb: _in_own_parameters(model, forward, weights, xb)
            weights.clear()  # this chunk's weights go before the next chunk's are drawn


def predict(model: BayesianNet, posterior: WeightSource, x: torch.Tensor, num_samples: Optional[int] = 100,
            chunk_size: int = 10, batch_size: int = 500, keep: Optional[dict] = None,
            compiled: Optional[bool] = None) -> torch.Tensor:
    """Posterior predictive on ``x``: per posterior sample, the likelihood's predictive (class
    probabilities [S, N, C], or a regression's (mean, noise sd) [S, N, 2]).

    ``posterior`` is any guide of the model, or a dict of weight samples (MCMC); of those,
    ``num_samples`` evenly spaced ones are used (None: all). Weights are drawn ``chunk_size``
    samples at a time and each chunk runs as one batched pass over ``batch_size`` inputs, so memory
    beyond the result is bounded by chunk_size x batch_size activations, whatever num_samples is
    (``fill_predictions``). ``keep`` ({parameter name: bool mask}) zeroes the weights where the mask
    is False (pruning). The model runs in eval mode. ``compiled``: the network's pass compiled by
    ``torch.compile`` (the same draws; float rounding apart); None: from 10^6 predictions
    (samples x inputs) on, where it pays. Runs in the caller's Pyro settings and parameter store;
    the result is on x's device. ``x`` of another dtype than the model's weights (float64, say) is
    cast to theirs. A ValueError says what the model takes where ``x`` is not of that shape, and
    where ``posterior`` was built for another network.
    """
    x = check_inputs(x, model)
    if isinstance(posterior, dict):
        total = sample_count(posterior)
        num_samples = total if num_samples is None else num_samples
        if num_samples > total:
            raise ValueError(f"the posterior holds {total} samples; asked for {num_samples}")
    positive_sizes(num_samples, chunk_size, batch_size)
    return fill_predictions(x, network_chunks(model, posterior, x, num_samples, chunk_size, keep, compiled),
                            num_samples, batch_size)
