"""A captured training step: the tensor program of one step of a loss (for SVI: the guide's draws,
the model, the ELBO with its closed-form KL, and the backward pass) traced once from the Python
that computes it, here Pyro's own step, and replayed at every later step without that Python.

The trace is ``torch.fx``'s ``make_fx`` over fake tensors (nothing is computed and no random number
drawn while tracing), of ``torch.func.functional_call`` on the modules' parameters and buffers and
``torch.autograd.grad``. A replay draws its random numbers from torch's generator in the order the
Python would, so it draws the same numbers. ``compiled`` hands the graph to ``torch.compile``
(inductor fuses the passes over the weights; its ``fallback_random`` keeps torch's generator).
A step that cannot be traced (a branch on a tensor's value, an op without a fake-tensor rule)
raises ``NotCaptured`` with the reason in one line.

Usage::

    guide(x)                # an autoguide makes its parameters at its first call: before capturing
    step = CapturedStep(lambda x, y: (elbo.differentiable_loss(model, guide, x, y),), [model, guide])
    loss, = step(x, y)      # loss.backward() puts the gradients on the parameters, as Pyro's step would
"""
from __future__ import annotations

import logging
import types
import warnings
import weakref
from contextlib import contextmanager
from typing import Callable, Sequence

import pyro
import torch
from pyro.infer.autoguide import AutoGuide
from torch import nn
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import make_fx

MODES = ("compile", "trace", "eager")  # with inductor; replayed op by op; Pyro's Python every step
# A run of at least this many steps pays for what capturing costs (measured on two CPU cores by
# scripts/peers.py: tracing 0.2-0.5 s and compiling 2-15 s per batch shape, against 1-5 ms saved a step).
STEPS_TO_TRACE, STEPS_TO_COMPILE = 300, 3000


def choose(mode: str, steps: int) -> str:
    """The capture mode ``train.capture=mode`` means for a run of ``steps`` steps: auto is compile
    for a long run, trace for a shorter one, eager for a short one."""
    if mode != "auto":
        return mode
    if steps >= STEPS_TO_COMPILE:
        return "compile"
    return "trace" if steps >= STEPS_TO_TRACE else "eager"


# Prediction compiles (once per model) from this many predictions, samples x inputs: on two CPU
# cores compiling costs 2-5 s and saves 24 us (lenet) or 1.5 us (mnist_mlp) a prediction.
PREDICTIONS_TO_COMPILE = 1_000_000
_COMPILED_PREDICTIVES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its compiled predictive


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
            _Compiled(own, warnings.warn, "prediction runs uncompiled", cuda_graphs=False), plain)
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


DESCRIBED = {"compile": "captured and compiled", "trace": "captured, replayed op by op",
             "eager": "Pyro's Python at every step"}


class NotCaptured(RuntimeError):
    """The step could not be captured; the message says why, in one line."""


class _Modules(nn.Module):
    """The modules whose parameters and buffers the traced step reads, under one root."""

    def __init__(self, fn: Callable, modules: Sequence[nn.Module]):
        super().__init__()
        self.parts = nn.ModuleList(modules)
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


class CapturedStep:
    """``fn(*inputs) -> (loss, *figures)`` over the parameters of ``modules``, captured once per
    input signature (shape, dtype, device) and replayed. The loss is differentiable as ``fn``'s was:
    its backward puts on each parameter the gradient the replay computed; the figures come detached.

    Parameters are the modules' ``parameters()`` when the step is made (a module given new ones
    needs a new step; ``load_state_dict`` copies into the old ones); buffers are read and updated
    in place (BatchNorm's running statistics). PyroModules must hold module-local parameters
    (``pyro.settings.set(module_local_params=True)``): with Pyro's global parameter store the trace
    would not see the modules' parameters. A graph is kept per input signature and train/eval mode;
    plain Python values ``fn`` reads (a KL weight, ``num_data``) are frozen into it. A signature
    that cannot be captured, or whose replay failed while running (the random streams then as the
    failed call found them), raises ``NotCaptured`` at each call; the others still replay. A compiled
    graph that fails while running falls back to the graph replayed op by op. On CUDA each call
    starts a new step of the CUDA graph: read the last call's results before the next.
    """

    def __init__(self, fn: Callable, modules: Sequence[nn.Module], compiled: bool = False,
                 note: Callable[[str], None] = warnings.warn):
        for module in modules:
            if isinstance(module, AutoGuide) and getattr(module, "prototype_trace", True) is None:
                raise ValueError(f"the {type(module).__name__} has no parameters yet: call it once "
                                 "(guide(x)) before capturing a step")
        self.root = _Modules(fn, modules)
        self.compiled, self.note = compiled, note
        self.graphs: dict[tuple, Callable | NotCaptured] = {}
        self.params = dict(self.root.named_parameters())
        self.buffers = dict(self.root.named_buffers())
        self.modes = [m for m in self.root.modules()]

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        key = (tuple((tuple(t.shape), t.dtype, t.device) for t in inputs), tuple(m.training for m in self.modes))
        graph = self.graphs.get(key)
        if graph is None:
            try:
                graph = self.graphs[key] = self._capture(inputs)
            except NotCaptured as err:
                graph = self.graphs[key] = err
        if isinstance(graph, NotCaptured):
            raise graph
        params, buffers = self.params.values(), self.buffers.values()
        with _KeptStreams(inputs) as keep:
            try:
                return _Replay.apply(graph, len(params), len(buffers), *params, *buffers, *inputs)
            except Exception as err:  # noqa: BLE001 - the replay failed while running: Pyro's step from now on
                keep.restore()  # the draws the failed replay took are drawn again by Pyro's step
                failed = self.graphs[key] = NotCaptured(f"the captured step failed while running "
                                                        f"({type(err).__name__}: {_first_line(err)})")
                raise failed from None

    def _capture(self, inputs) -> Callable:
        if not pyro.settings.get("module_local_params"):
            raise NotCaptured("Pyro's global parameter store is in use; capture needs module-local "
                              "parameters (pyro.settings.set(module_local_params=True))")
        root, names, buffer_names = self.root, list(self.params), list(self.buffers)

        def step(params, buffers, inputs):
            state = {**dict(zip(names, params)), **dict(zip(buffer_names, buffers))}
            loss, *figures = functional_call(root, state, tuple(inputs))
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            return loss.detach(), [f.detach() for f in figures], list(grads)

        if not torch.is_grad_enabled():
            raise NotCaptured("gradients are off (torch.no_grad): a step is captured with its backward pass")
        try:
            graph = make_fx(step, tracing_mode="fake")(list(self.params.values()), list(self.buffers.values()),
                                                       list(inputs))
        except Exception as err:  # noqa: BLE001 - whatever the trace met, the step runs uncaptured
            if "DataDependent" in type(err).__name__:
                raise NotCaptured(f"the computation branches on a tensor's value ({type(err).__name__}), "
                                  "which a trace would freeze") from None
            raise NotCaptured(f"{type(err).__name__}: {_first_line(err)}") from None
        if dict(self.root.named_parameters()).keys() != self.params.keys():
            raise NotCaptured("the modules made new parameters while traced: make them before the step "
                              "(call the guide once)")
        if not self.compiled:
            return graph
        return _Compiled(graph, self.note, "the captured step runs uncompiled", cuda_graphs=True)


class _Compiled:
    """``fn`` compiled by inductor at its first call, with torch's random number generator (with
    ``cuda_graphs``, in a CUDA graph where its first argument, a list of tensors, is on CUDA); where
    compiling fails (no C++ compiler, an op inductor lacks), or the compiled function fails while
    running, ``fn`` itself runs from then on, with a note that ends in ``fallback``, drawing what
    the compiled one would have."""

    def __init__(self, fn: Callable, note: Callable[[str], None], fallback: str, cuda_graphs: bool):
        self.fn, self.note, self.fallback, self.cuda_graphs = fn, note, fallback, cuda_graphs
        self.run, self.cuda = None, False

    def __call__(self, *args):
        if self.cuda:  # a new step: the CUDA graph's outputs of the last one are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        if self.run is not None:
            return self._running(args)
        self.cuda = self.cuda_graphs and any(t.is_cuda for t in args[0])
        cuda_devices = [t.device for t in args[0] if t.is_cuda][:1] if self.cuda else []
        try:
            with _compiling(), torch.random.fork_rng(devices=cuda_devices):
                compiled = torch.compile(self.fn, dynamic=False,
                                         options={"fallback_random": True, "triton.cudagraphs": self.cuda})
                out = compiled(*args)
                rng = torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in cuda_devices]
        except Exception as err:  # noqa: BLE001 - compiling is an optimization; fn computes the same
            # the random streams are as they were (fork_rng): fn draws what the compiled one would have
            self.note(f"torch.compile failed ({type(err).__name__}: {_first_line(err)}); {self.fallback}")
            self.run = self.fn
            return self.run(*args)
        torch.set_rng_state(rng[0])
        for device, state in zip(cuda_devices, rng[1]):
            torch.cuda.set_rng_state(state, device)
        self.run = compiled
        return out

    def _running(self, args):
        """The compiled function; where it raises while running (a CUDA graph, a kernel: not only
        while compiling), ``fn`` from then on, with a note, on the random streams the failed call
        started from."""
        if self.run is self.fn:
            return self.fn(*args)
        with _KeptStreams(args[0]) as keep:
            try:
                return self.run(*args)
            except Exception as err:  # noqa: BLE001 - fn computes the same, uncompiled
                keep.restore()
                self.note(f"the compiled function failed while running ({type(err).__name__}: {_first_line(err)}); "
                          f"{self.fallback}")
                self.run, self.cuda = self.fn, False
                return self.fn(*args)


class _KeptStreams:
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
def _compiling():
    """Compile without global side effects: TorchDynamo's first compile in a process turns off
    torch.distributions' argument validation for everyone (``TorchPatcher.patch``); the caller's
    setting comes back. And without cpp_extension's warning that a CPU-only machine has no CUDA."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level, validating = logger.level, pyro.settings.get("validate_distributions_torch")
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
        pyro.settings.set(validate_distributions_torch=validating)


class _Replay(torch.autograd.Function):
    """Runs a captured graph; the loss's backward hands out the gradients the graph computed."""

    @staticmethod
    def forward(ctx, graph, n_params: int, n_buffers: int, *tensors):
        params, buffers = list(tensors[:n_params]), list(tensors[n_params:n_params + n_buffers])
        loss, figures, grads = graph(params, buffers, list(tensors[n_params + n_buffers:]))
        ctx.grads, ctx.n_rest = grads, len(tensors) - n_params
        ctx.mark_non_differentiable(*figures)
        return (loss, *figures)

    @staticmethod
    def backward(ctx, grad_loss, *_figures):
        present = [g for g in ctx.grads if g is not None]
        scaled = iter(torch._foreach_mul(present, grad_loss) if present else [])  # one call for all
        grads = [None if g is None else next(scaled) for g in ctx.grads]
        return (None, None, None, *grads, *[None] * ctx.n_rest)


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else "(no message)"
