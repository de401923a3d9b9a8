"""A captured training step: the tensor program of one step of a loss (for SVI: the guide's draws,
the model, the ELBO with its closed-form KL, and the backward pass; with an optimizer, Adam's
update too) traced once from the Python that computes it, here Pyro's own step, and replayed at
every later step without that Python.

The trace is ``torch.fx``'s ``make_fx`` over fake tensors (nothing is computed and no random number
drawn while tracing), of ``torch.func.functional_call`` on the modules' parameters and buffers and
``torch.autograd.grad``. A replay draws its random numbers from torch's generator in the order the
Python would, so it draws the same numbers. ``compiled`` hands the graph to ``torch.compile``
(``bnn_zoo.core.fast.compiling``: inductor fuses the passes over the weights and Adam's update into
them; ``fallback_random`` keeps torch's generator, and the draws are chained in Pyro's order,
``bnn_zoo.core.fast.ordered_draws``; on CUDA the step is one CUDA graph). A step that cannot be traced
(a branch on a tensor's value, an op without a fake-tensor rule) raises ``NotCaptured`` with the
reason in one line.

Usage::

    guide(x)                # an autoguide makes its parameters at its first call: before capturing
    step = CapturedStep(lambda x, y: (elbo.differentiable_loss(model, guide, x, y),), [model, guide])
    loss, = step(x, y)      # loss.backward() puts the gradients on the parameters, as Pyro's step would
    whole = CapturedStep(fn, [model, guide], compiled=True, optimizer=adam)
    loss, = whole(x, y)     # drawn, differentiated and Adam's step taken
"""
from __future__ import annotations

import warnings
from typing import Callable, Sequence

import pyro
import torch
from pyro.infer.autoguide import AutoGuide
from torch import nn
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import make_fx

from .adam_in_graph import InGraphAdam, update
from .code_folder import UnsafeFolder
from .compiling import Compiled, KeptStreams, first_line

MODES = ("compile", "trace", "eager")  # with inductor; replayed op by op; Pyro's Python every step
# The steps from which capturing pays for what it costs, (trace from, compile from), by the device
# the step runs on and whether its compiled graph is in the compile cache (a run of the same network
# and batch shape compiled it before: bnn_zoo.runs.training.compile_cache). Measured:
# - cpu, cold: two CPU cores, scripts/peers.py: tracing 0.2-0.5 s and compiling 2-15 s per batch
#   shape, against 1-5 ms saved a step.
# - cpu, warm: a second process's compile overhead a fifth of the first's (mnist_mlp on 4,096
#   images, a loaded 2-core machine: 51.5 s, then 10.4 s; issue 42).
# - cuda, cold: an H200 (issue 42): the first compiled epoch 19 s (mnist_mlp) and 24 s (lenet) over
#   the second, 5.8 and 8.6 ms saved a step against Pyro's (143 and 99 steps/s, compiled 808 and 654).
# - cuda, warm: the same H200, the first epoch of a resumed run 5.5 and 7.5 s over the second.
# Tracing costs the same everywhere (no compiler) and saves Pyro's Python, which is most of a step.
# scripts/gpu_check.py measures the GPU's again (its training table: the first epoch cold and warm).
BREAK_EVEN = {("cpu", False): (300, 3000), ("cpu", True): (300, 600),
              ("cuda", False): (300, 3000), ("cuda", True): (300, 1000)}


def choose(mode: str, steps: int, device: str = "cpu", warm: bool = False) -> str:
    """The capture mode ``train.capture=mode`` means for a run of ``steps`` steps on a ``device``
    ("cpu", "cuda"; others count as the CPU), its compiled step in the cache (``warm``) or not:
    auto is compile for a run long enough to pay for compiling, trace for a shorter one, eager
    for a short one (``BREAK_EVEN``)."""
    if mode != "auto":
        return mode
    trace_from, compile_from = _break_even(device, warm)
    if steps >= compile_from:
        return "compile"
    return "trace" if steps >= trace_from else "eager"


def reason(mode: str, steps: int, device: str = "cpu", warm: bool = False) -> str:
    """Why ``choose`` chose as it did, for the run's log."""
    if mode != "auto":
        return f"train.capture={mode}"
    trace_from, compile_from = _break_even(device, warm)
    kind = "cuda" if device == "cuda" else "cpu"
    return (f"train.capture=auto: {steps:,} steps on {kind}, the compiled step {'in' if warm else 'not in'} the "
            f"compile cache; tracing pays from {trace_from:,} steps, compiling from {compile_from:,}")


def _break_even(device: str, warm: bool) -> tuple[int, int]:
    return BREAK_EVEN["cuda" if device == "cuda" else "cpu", bool(warm)]


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
    With ``optimizer`` (a plain ``torch.optim.Adam``), a call is the whole training step: the
    update is applied, the loss and figures come detached, and nothing is left in ``.grad``; the
    compiled graph holds Adam's update (``bnn_zoo.core.fast.adam_in_graph``), a graph replayed op by op
    hands its gradients to ``optimizer.step()``, torch's own fused kernel.

    Parameters are the modules' ``parameters()`` when the step is made (a module given new ones
    needs a new step; ``load_state_dict`` copies into the old ones); buffers are read and updated
    in place (BatchNorm's running statistics). PyroModules must hold module-local parameters
    (``pyro.settings.set(module_local_params=True)``): with Pyro's global parameter store the trace
    would not see the modules' parameters. A graph is kept per input signature and train/eval mode;
    plain Python values ``fn`` reads (a KL weight, ``num_data``) are frozen into it. ``compiled``
    compiles the first signature's graph (the batch shape of a run; a last, smaller batch is
    replayed op by op: a compile of its own would cost more than it saves). A signature that cannot
    be captured, or whose replay failed while running (the random streams then as the failed call
    found them), raises ``NotCaptured`` at each call; the others still replay. A compiled graph that
    fails while running falls back to the graph replayed op by op. On CUDA each call starts a new
    step of the CUDA graph: read the last call's results before the next. ``cached``: the compiled
    graph may come from and go to torch's compile caches; ``on_compiled`` is called once it has run.
    """

    def __init__(self, fn: Callable, modules: Sequence[nn.Module], compiled: bool = False,
                 note: Callable[[str], None] = warnings.warn, optimizer: torch.optim.Optimizer | None = None,
                 cached: bool = True, on_compiled: Callable[[], None] | None = None):
        for module in modules:
            if isinstance(module, AutoGuide) and getattr(module, "prototype_trace", True) is None:
                raise ValueError(f"the {type(module).__name__} has no parameters yet: call it once "
                                 "(guide(x)) before capturing a step")
        self.root = _Modules(fn, modules)
        self.compiled, self.note, self.cached, self.on_compiled = compiled, note, cached, on_compiled
        self.graphs: dict[tuple, Callable | NotCaptured] = {}
        self.params = dict(self.root.named_parameters())
        self.buffers = dict(self.root.named_buffers())
        self.modes = [m for m in self.root.modules()]
        self.optimizer = optimizer
        self.adam = None if optimizer is None else InGraphAdam(optimizer, list(self.params.values()))

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
        params, buffers = list(self.params.values()), list(self.buffers.values())
        with KeptStreams(inputs) as keep:
            try:
                if self.optimizer is None:
                    return _Replay.apply(graph, len(params), len(buffers), *params, *buffers, *inputs)
                with torch.no_grad():
                    if isinstance(graph, Compiled):  # the update is in the graph
                        loss, figures, _ = graph(params, buffers, list(inputs), list(self.adam.moments()))
                        return (loss, *figures)
                    loss, figures, grads = graph(params, buffers, list(inputs))
            except UnsafeFolder:  # the compile cache refused where torch reads it: no step runs past that
                raise
            except Exception as err:  # noqa: BLE001 - the replay failed while running: Pyro's step from now on
                keep.restore()  # the draws the failed replay took are drawn again by Pyro's step
                failed = self.graphs[key] = NotCaptured(f"the captured step failed while running "
                                                        f"({type(err).__name__}: {first_line(err)})")
                raise failed from None
        self.optimizer.zero_grad(set_to_none=True)  # a parameter the step does not reach is not moved
        for param, grad in zip(params, grads):
            param.grad = grad
        self.optimizer.step()
        return (loss, *figures)

    def _capture(self, inputs) -> Callable:
        if not pyro.settings.get("module_local_params"):
            raise NotCaptured("Pyro's global parameter store is in use; capture needs module-local "
                              "parameters (pyro.settings.set(module_local_params=True))")
        root, names, buffer_names = self.root, list(self.params), list(self.buffers)
        compiling = self.compiled and not any(isinstance(g, Compiled) for g in self.graphs.values())
        adam = self.adam if compiling else None

        def step(params, buffers, inputs):
            state = {**dict(zip(names, params)), **dict(zip(buffer_names, buffers))}
            loss, *figures = functional_call(root, state, tuple(inputs))
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            return loss.detach(), [f.detach() for f in figures], list(grads)

        def step_and_update(params, buffers, inputs, moments):
            loss, figures, grads = step(params, buffers, inputs)
            with torch.no_grad():
                update([params[i] for i in adam.index], [grads[i] for i in adam.index], *moments, **adam.constants)
            return loss, figures, []

        if not torch.is_grad_enabled():
            raise NotCaptured("gradients are off (torch.no_grad): a step is captured with its backward pass")
        arguments = [list(self.params.values()), list(self.buffers.values()), list(inputs)]
        try:
            graph = (make_fx(step_and_update, tracing_mode="fake")(*arguments, list(adam.moments())) if adam else
                     make_fx(step, tracing_mode="fake")(*arguments))
        except Exception as err:  # noqa: BLE001 - whatever the trace met, the step runs uncaptured
            if "DataDependent" in type(err).__name__:
                raise NotCaptured(f"the computation branches on a tensor's value ({type(err).__name__}), "
                                  "which a trace would freeze") from None
            raise NotCaptured(f"{type(err).__name__}: {first_line(err)}") from None
        if dict(self.root.named_parameters()).keys() != self.params.keys():
            raise NotCaptured("the modules made new parameters while traced: make them before the step "
                              "(call the guide once)")
        if not compiling:
            return graph
        static = [*arguments[0], *arguments[1], *(adam.tensors() if adam else [])]
        return Compiled(graph, self.note, "the captured step runs uncompiled", cuda_graphs=True, order=True,
                        cached=self.cached, static=static, on_compiled=self.on_compiled)


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
