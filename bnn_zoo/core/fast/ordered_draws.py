"""A captured step's random draws kept in Pyro's order through a compiler: each draw of the traced
graph (an op tagged ``nondeterministic_seeded``: ``normal_``, ``randn_like``, ``randint``, ...)
becomes one call of the custom op ``bnn_zoo::ordered_draw`` that takes the draw before it as an
input. The op runs the same aten draw from torch's generator; the chain is a data dependency, which
every pass of inductor keeps. (Inductor's scheduler and its ``reorder_for_locality`` pass moved
independent draws of ``fallback_random`` before torch 2.14, pytorch/pytorch#181136 and #176842:
the compiled step then drew Pyro's numbers for other weights.)

A draw is described by a JSON string (the aten op, its arguments, the tensors it reads by
position): the compiled code holds its draws whole, so a compiled graph stored in torch's cache and
loaded by another process draws the same. Nothing here reads a file.

Usage: ``graph = ordered(graph)  # before torch.compile; raises Unordered where a draw cannot be chained``
"""
from __future__ import annotations

import copy
import functools
import json

import torch
from torch import fx

OP = "bnn_zoo::ordered_draw"
# Makers of a fresh tensor an in-place draw fills whole (Pyro's draws are torch.empty(shape).normal_())
_FRESH = ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like")


class Unordered(RuntimeError):
    """A draw the chain cannot take over (an in-place draw into a tensor something else reads)."""


def _encode(value, tensors: list) -> object:
    """An argument as JSON: tensors (FX nodes) by their position in ``tensors``, torch's enums by name."""
    if isinstance(value, fx.Node):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensors) for v in value]
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise Unordered(f"a draw's argument of type {type(value).__name__}")


def _kwargs(kwargs: dict, tensors: list) -> dict:
    return {k: _encode(v, tensors) for k, v in kwargs.items()}


def _decode(value, tensors: list):
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        (kind, name), = value.items()
        if kind == "tensor":
            return tensors[name]
        return torch.device(name) if kind == "device" else getattr(torch, name)
    return value


@functools.lru_cache(maxsize=None)
def _op(name: str) -> torch._ops.OpOverload:
    """``aten.normal_.default`` -> torch.ops.aten.normal_.default"""
    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


def _spec(node: fx.Node) -> tuple[str, list]:
    """The JSON of a draw node (with the fresh tensor an in-place draw fills), and the tensors it reads."""
    tensors: list = []
    calls = []
    if node.target._schema.is_mutable:
        fresh = node.args[0]
        if not (isinstance(fresh, fx.Node) and isinstance(fresh.target, torch._ops.OpOverload)
                and fresh.target._schema.name.removeprefix("aten::") in _FRESH and len(fresh.users) == 1):
            raise Unordered(f"{node.target} fills a tensor that is read elsewhere")
        calls.append([str(fresh.target), _encode(fresh.args, tensors), _kwargs(fresh.kwargs, tensors)])
        args = node.args[1:]  # the first, the tensor filled, is the fresh one
    else:
        args = node.args
    calls.append([str(node.target), _encode(args, tensors), _kwargs(node.kwargs, tensors)])
    return json.dumps(calls), tensors


@functools.lru_cache(maxsize=None)
def _calls(spec: str) -> list:
    return [(_op(name), args, kwargs) for name, args, kwargs in json.loads(spec)]


def _draw(spec: str, tensors: list[torch.Tensor], after: list[torch.Tensor]) -> torch.Tensor:
    """The draw ``spec`` describes (``after``: the draw before it, read by no one)."""
    out = None
    for op, args, kwargs in _calls(spec):
        args, kwargs = _decode(args, tensors), {k: _decode(v, tensors) for k, v in kwargs.items()}
        out = op(*args, **kwargs) if out is None else op(out, *args, **kwargs)  # an in-place draw fills out
    return out


if hasattr(torch.library, "custom_op"):  # torch >= 2.4
    ordered_draw = torch.library.custom_op(OP, mutates_args=())(_draw)
    ordered_draw.register_fake(_draw)  # the same aten ops on fake tensors give the shapes
else:  # pragma: no cover - torch < 2.4 is outside the supported range
    ordered_draw = None


def _is_draw(node: fx.Node) -> bool:
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in node.target.tags)


def _copied(graph: fx.Graph) -> fx.Graph:
    """``graph``'s nodes copied, its code generator (the pytree specs its inputs and outputs are read
    and written by) shared: ``ordered`` changes no spec, and a deep copy of one warns with a
    FutureWarning (``isinstance(treespec, LeafSpec)`` is deprecated) on torch versions whose
    LeafSpec does not pickle itself. torch's own ``Graph.__deepcopy__`` less that copy."""
    copied = fx.Graph()
    values, output = copied.graph_copy(graph, {}, return_output_node=True)
    copied.output(values, type_expr=getattr(output, "type", None)).meta = copy.copy(output.meta)
    copied.set_codegen(graph._codegen)
    return copied


def ordered(graph: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``graph`` whose draws are calls of ``bnn_zoo::ordered_draw``, each taking the one
    before it; ``graph`` itself as it was where it draws fewer than two numbers' worth of ops."""
    draws = [n for n in graph.graph.nodes if _is_draw(n)]
    if len(draws) < 2:
        return graph
    if ordered_draw is None:
        raise Unordered("torch.library.custom_op is missing (torch < 2.4)")
    copied = fx.GraphModule(graph, _copied(graph.graph))
    g = copied.graph
    before = None
    for node in [n for n in g.nodes if _is_draw(n)]:
        spec, tensors = _spec(node)
        with g.inserting_before(node):
            chained = g.call_function(torch.ops.bnn_zoo.ordered_draw.default,
                                      (spec, tensors, [before] if before is not None else []))
        chained.meta = dict(node.meta)
        node.replace_all_uses_with(chained)
        fresh = node.args[0] if node.target._schema.is_mutable else None
        g.erase_node(node)
        if fresh is not None:
            g.erase_node(fresh)
        before = chained
    g.lint()
    copied.recompile()
    return copied
