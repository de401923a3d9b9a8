"""Compiling with torch.compile (inductor) as the zoo does it: with torch's random number generator
(``fallback_random``: the draws a plain run would take; a captured step's draws chained in their
order, ``bnn_zoo.core.fast.ordered_draws``), on CUDA in a CUDA graph, its artefacts in torch's caches
(``cached=False``: neither read nor written), falling back to the plain function, with a note,
where compiling or the compiled function fails; and prediction compiled once per model.

Usage::

    run = Compiled(graph, warnings.warn, "the captured step runs uncompiled", cuda_graphs=True)
    out = run(params, buffers, inputs)          # compiled at the first call
    forward = predictive(model, compiled=True)  # f(weights, x): the likelihood's predictive
"""
from __future__ import annotations

import logging
import types
import warnings
import weakref
from contextlib import ExitStack, contextmanager
from typing import Callable

import pyro
import torch

from .code_folder import before_compiling
from .ordered_draws import Unordered, ordered

# Prediction compiles (once per model) from this many predictions, samples x inputs: on two CPU
# cores compiling costs 2-5 s and saves 24 us (lenet) or 1.5 us (mnist_mlp) a prediction.
PREDICTIONS_TO_COMPILE = 1_000_000
_COMPILED_PREDICTIVES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its compiled predictive


class Compiled:
    """``fn`` compiled by inductor at its first call, with torch's random number generator (with
    ``cuda_graphs``, in a CUDA graph where its first argument, a list of tensors, is on CUDA; the
    tensors of ``static``, which the graph may write, stay where they are); where compiling fails
    (no C++ compiler, an op inductor lacks), or the compiled function fails while running, ``fn``
    itself runs from then on, with a note that ends in ``fallback``, drawing what the compiled one
    would have. ``order``: ``fn`` is an FX graph whose draws are chained in their order first.
    ``on_compiled``: called once, when the compiled function has run. It compiles once, at its
    first call, right after torch's compile cache is checked (``before_compiling``: an
    ``UnsafeFolder`` there is raised, not fallen back from); its callers give it one signature."""

    def __init__(self, fn: Callable, note: Callable[[str], None], fallback: str, cuda_graphs: bool,
                 order: bool = False, cached: bool = True, static: tuple = (),
                 on_compiled: Callable[[], None] | None = None):
        self.fn, self.note, self.fallback, self.cuda_graphs = fn, note, fallback, cuda_graphs
        self.on_compiled = on_compiled
        self.order, self.cached, self.static = order, cached, static
        self.run, self.cuda = None, False

    @property
    def compiled(self) -> bool:
        """Whether the compiled function runs (not yet, or fallen back: False)."""
        return self.run is not None and self.run is not self.fn

    def __call__(self, *args):
        if self.cuda:  # a new step: the CUDA graph's outputs of the last one are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        if self.run is not None:
            return self._running(args)
        self.cuda = self.cuda_graphs and any(t.is_cuda for t in args[0])
        cuda_devices = [t.device for t in args[0] if t.is_cuda][:1] if self.cuda else []
        before_compiling()  # what torch is about to read (or write, then load) could be another user's
        try:
            with _compiling(self.cached), torch.random.fork_rng(devices=cuda_devices):
                fn = self.fn
                if self.order:
                    try:
                        fn = ordered(self.fn)
                    except Unordered as err:
                        self.note(f"the draws are left in the order the compiler chooses ({err})")
                if self.cuda:
                    _keep_in_place(self.static)
                compiled = torch.compile(fn, dynamic=False, options={
                    "fallback_random": True, "triton.cudagraphs": self.cuda,
                    "fx_graph_cache": self.cached})
                out = compiled(*args)
                rng = torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in cuda_devices]
        except Exception as err:  # noqa: BLE001 - compiling is an optimization; fn computes the same
            # the random streams are as they were (fork_rng): fn draws what the compiled one would have
            self.note(f"torch.compile failed ({type(err).__name__}: {first_line(err)}); {self.fallback}")
            self.run, self.cuda = self.fn, False
            return self.run(*args)
        torch.set_rng_state(rng[0])
        for device, state in zip(cuda_devices, rng[1]):
            torch.cuda.set_rng_state(state, device)
        self.run = compiled
        if self.on_compiled is not None:
            self.on_compiled()
        return out

    def _running(self, args):
        """The compiled function; where it raises while running (a CUDA graph, a kernel: not only
        while compiling), ``fn`` from then on, with a note, on the random streams the failed call
        started from."""
        if self.run is self.fn:
            return self.fn(*args)
        with KeptStreams(args[0]) as keep:
            try:
                return self.run(*args)
            except Exception as err:  # noqa: BLE001 - fn computes the same, uncompiled
                keep.restore()
                self.note(f"the compiled function failed while running ({type(err).__name__}: {first_line(err)}); "
                          f"{self.fallback}")
                self.run, self.cuda = self.fn, False
                return self.fn(*args)


def _keep_in_place(tensors) -> None:
    """The tensors a CUDA graph reads and writes where they lie (parameters, Adam's moments): marked
    static, the graph neither copies them in at each replay nor, where it writes them, runs
    without a CUDA graph."""
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:
        for t in tensors:
            mark(t)


class KeptStreams:
    """The random streams (torch's CPU generator, and the GPU's of any CUDA tensor in ``tensors``)
    as they were when the block began, for ``restore()``: a step that fails part-way through its
    draws is run again from them, drawing what it would have."""

    def __init__(self, tensors):
        self.devices = list(dict.fromkeys(t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda))

    def __enter__(self):
        self.cpu = torch.get_rng_state()
        self.gpus = [torch.cuda.get_rng_state(d) for d in self.devices]
        return self

    def __exit__(self, *exc):
        return False

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for device, state in zip(self.devices, self.gpus):
            torch.cuda.set_rng_state(state, device)


@contextmanager
def _compiling(cached: bool = True):
    """Compile without global side effects: TorchDynamo's first compile in a process turns off
    torch.distributions' argument validation for everyone (``TorchPatcher.patch``); the caller's
    setting comes back. And without cpp_extension's warning that a CPU-only machine has no CUDA.
    ``cached``: torch's caches of compiled graphs on (as from torch 2.5 by default), else off."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level, validating = logger.level, pyro.settings.get("validate_distributions_torch")
    logger.setLevel(logging.ERROR)
    try:
        with ExitStack() as caches:
            import torch._functorch.config as functorch_config

            if hasattr(functorch_config, "enable_autograd_cache"):  # AOTAutograd's cache: torch >= 2.5
                caches.enter_context(functorch_config.patch(enable_autograd_cache=cached))
            yield
    finally:
        logger.setLevel(level)
        pyro.settings.set(validate_distributions_torch=validating)


def predictive(model, compiled: bool) -> Callable:
    """``f(weights, x)``: the likelihood's predictive of ``model`` (a ``BayesianNet``) at a batch of
    weight samples; with ``compiled``, compiled by ``torch.compile`` for the shapes of its first
    call (other shapes, a last partial batch, run plain: each would be a compile of its own), kept
    while the model lives (not on it: the model still pickles and copies); the plain function, with
    a warning, where compiling fails."""
    if not compiled:
        return _plain(weakref.ref(model))
    if model not in _COMPILED_PREDICTIVES:
        plain = _plain(weakref.ref(model))
        # a code object of its own: TorchDynamo keeps its compiled entries, and their limit of 8,
        # per code object, so models sharing one would crowd each other out
        own = types.FunctionType(plain.__code__.replace(), plain.__globals__, plain.__name__,
                                 plain.__defaults__, plain.__closure__)
        _COMPILED_PREDICTIVES[model] = _OneShape(
            Compiled(own, warnings.warn, "prediction runs uncompiled", cuda_graphs=False), plain)
    return _COMPILED_PREDICTIVES[model]


def _plain(model_ref: weakref.ref) -> Callable:
    """The predictive of the model ``model_ref`` refers to, holding no reference that keeps it alive."""
    def plain(weights: dict, x: torch.Tensor) -> torch.Tensor:
        model = model_ref()
        return model.likelihood.predictive(model.forward_with(weights, x))

    return plain


class _OneShape:
    """``compiled`` for the shapes (and mode) of its first call, ``plain`` for any other."""

    def __init__(self, compiled: Callable, plain: Callable):
        self.compiled, self.plain, self.signature = compiled, plain, None

    def __call__(self, weights: dict, x: torch.Tensor) -> torch.Tensor:
        signature = (tuple(w.shape for w in weights.values()), x.shape, x.dtype, x.device, torch.is_grad_enabled())
        if self.signature is None:
            self.signature = signature
        return (self.compiled if signature == self.signature else self.plain)(weights, x)


def first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else "(no message)"
