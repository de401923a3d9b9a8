"""A captured step's draws chained in their order (bnn_zoo.core.fast.ordered_draws): a compiler that moves
independent ops (as inductor's scheduler did to random ops before torch 2.14) cannot move them."""
import pyro
import pytest
import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

from bnn_zoo.core.fast.ordered_draws import Unordered, ordered


def three_draws():
    """pytorch/pytorch#181136's example: the first draw is read last."""
    a = torch.randn(2, 4, 4, 4)
    b = torch.empty(2, 3, 4, 4).normal_()  # in place, as Pyro's Normal draws
    c = torch.randn(4, 3, 3, 3)
    return a + torch.nn.functional.conv2d(b, c, padding=1)


def sunk(graph: fx.GraphModule) -> fx.GraphModule:
    """Each op moved to just before its first reader, from the last op back: a legal order (every
    input still comes first) of the kind inductor's reorder_for_locality chose."""
    nodes = list(graph.graph.nodes)
    for node in reversed(nodes):
        if node.op == "call_function" and node.users:
            first = min(node.users, key=nodes.index)
            first.prepend(node)
            nodes = list(graph.graph.nodes)
    graph.graph.lint()
    graph.recompile()
    return graph


def run(fn, seed=3):
    torch.manual_seed(seed)
    return fn()


def test_draws_chained_in_their_order_keep_it_under_any_legal_order():
    eager = run(three_draws)
    moved = run(sunk(make_fx(three_draws)()))
    assert not torch.equal(moved, eager)  # unchained, the compiler's order draws other numbers
    chained = ordered(make_fx(three_draws)())
    assert torch.equal(run(chained), eager)
    assert torch.equal(run(sunk(chained)), eager)  # the chain is data: no order can break it
    assert sum(n.target == torch.ops.bnn_zoo.ordered_draw.default for n in chained.graph.nodes) == 3


def test_chained_draws_compile_and_draw_the_same():
    chained = ordered(make_fx(three_draws)())
    with pyro.settings.context(validate_distributions_torch=True):  # TorchDynamo's first compile turns it off
        compiled = torch.compile(chained, dynamic=False, options={"fallback_random": True})
        assert (run(compiled) - run(three_draws)).abs().max() <= 1e-5


def test_a_draw_into_a_tensor_read_elsewhere_is_not_chained():
    def shared():
        t = torch.zeros(3)
        before = t.clone()
        return t.normal_() + before, torch.randn(2)

    with pytest.raises(Unordered, match="fills a tensor that is read elsewhere"):
        ordered(make_fx(shared)())


def test_a_graph_with_one_draw_is_left_as_it_is():
    graph = make_fx(lambda: torch.randn(3) * 2)()
    assert ordered(graph) is graph


def test_ordering_a_step_s_graph_copies_none_of_its_pytree_specs(monkeypatch):
    """Issue 51: lenet and table training printed torch's FutureWarning "`isinstance(treespec,
    LeafSpec)` is deprecated": ``ordered`` deep-copied the graph's pytree specs (a captured step's
    graph takes and gives lists), and a LeafSpec that does not pickle itself (as in some torch
    versions that deprecate it; 2.14.1's does) warns when copied. With such a LeafSpec, ordering
    warns not, and the copy still takes and gives lists (its specs shared: torch's Graph._codegen,
    pinned here)."""
    import warnings

    import torch.utils._pytree as pytree

    monkeypatch.delattr(pytree.LeafSpec, "__reduce__", raising=False)

    def step(params, inputs):
        return [params[0] * torch.randn(3) + inputs[0], torch.randn(2)]

    graph = make_fx(step)([torch.ones(3)], [torch.ones(3)])
    assert graph.graph._codegen.pytree_info is not None  # lists in and out: specs to copy or share
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chained = ordered(graph)
    assert chained.graph._codegen is graph.graph._codegen
    got, want = run(lambda: chained([torch.ones(3)], [torch.ones(3)])), run(lambda: step([torch.ones(3)], [torch.ones(3)]))
    assert isinstance(got, list) and all(torch.equal(a, b) for a, b in zip(got, want))
