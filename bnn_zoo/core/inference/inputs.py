"""How a network is asked: its inputs checked (``check_inputs``: a tensor of real inputs of a shape
its network takes, in its weights' dtype, normalized where they are images) and the mode it reads them
in (``evaluating``: eval mode, dropout sampling if asked).

Usage: ``x = check_inputs(x, model, twin)``; ``with evaluating(twin): logits = twin(x)``
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Optional, Union

import torch
from torch import nn
from torch.func import functional_call

from ..networks.bnn import BayesianNet
from ..networks.twin import Twin

# MNIST's normalized images lie in NORMALIZED_RANGE ((0 - 0.1307) / 0.3081 to (1 - 0.1307) / 0.3081);
# inputs beyond IMAGE_LIMIT were not normalized (0..255).
NORMALIZED_RANGE = (-0.42, 2.82)
IMAGE_LIMIT = 10.0

def _dims(shape) -> str:
    return ", ".join(map(str, shape))


def check_shape(network: Union[BayesianNet, Twin], x: torch.Tensor) -> None:
    """ValueError unless ``network`` (a model, a twin) takes inputs shaped as ``x``'s: free where
    the shape is the one it knows it takes (``input_shape``), else one input passed through its
    network on the meta device, where nothing is computed."""
    known = network.input_shape
    if x.shape[1:] == known:
        return
    why = _refusal(network.skeleton if isinstance(network, BayesianNet) else network.net, x)
    if why is None:
        return
    what, got = ("the twin" if isinstance(network, Twin) else "the model"), list(x.shape)
    if known is None:
        raise ValueError(f"{what} cannot take x of shape {got} ({why}): give it inputs [N, ...] of the shape "
                         "its network was built for")
    if tuple(x.shape) == tuple(known):
        fix = "one input without its batch dimension: pass x[None]"
    elif math.prod(x.shape[1:]) == math.prod(known):
        fix = f"reshape it: x.reshape(-1, {_dims(known)})"
    else:
        fix = "give it inputs of that shape"
    raise ValueError(f"{what} takes inputs [N, {_dims(known)}]; x has shape {got}, {fix}")


def _refusal(net: nn.Module, x: torch.Tensor) -> Optional[str]:
    """Why ``net`` refuses one input shaped as ``x``'s (its error's first line), None where it takes
    it or where the meta device cannot tell: an operation without a meta kernel, a tensor made
    on a device of its own."""
    meta = {name: t.to("meta") for name, t in (*net.named_parameters(), *net.named_buffers())}
    try:
        with torch.no_grad(), evaluating(net):  # eval: a batch of one is no BatchNorm statistics
            functional_call(net, meta, (x[:1].to("meta"),))
    except NotImplementedError:
        return None
    except Exception as err:  # noqa: BLE001 - whatever the network raised, said in one line
        return None if "meta" in str(err) else first_line(err)
    return None


def first_line(err: Exception) -> str:
    """An error in one line: its type and its message's first line."""
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"


def check_inputs(x: torch.Tensor, *networks: Union[BayesianNet, Twin]) -> torch.Tensor:
    """``x`` as the networks (of ``networks``: a model, a twin) take it, in the dtype of their weights
    (a float64 or integer batch cast, as torch would not mix them); refused where it is not a tensor of
    real inputs: an empty one, one of a shape a network does not take (``check_shape``), NaN or inf
    values, and images that were not normalized (values far beyond -0.42..2.82)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of inputs [N, ...], got a {type(x).__name__}; "
                        "pass torch.as_tensor(x, dtype=torch.float32)")
    if not x.dim() or not len(x):
        raise ValueError(f"x holds no inputs: expected [N, ...] with N >= 1, got shape {tuple(x.shape)}")
    if networks and x.dtype != input_dtype(networks[0]):
        if x.is_complex():
            raise TypeError(f"x holds complex numbers ({x.dtype}); the network takes real inputs, "
                            f"{input_dtype(networks[0])}")
        x = x.to(input_dtype(networks[0]))
    for network in networks:
        check_shape(network, x)
    if x.is_floating_point() and not x.isfinite().all():
        raise ValueError(f"x holds {int((~x.isfinite()).sum())} non-finite values (NaN or inf): drop or "
                         "repair the inputs that hold them")
    if x.dim() == 4 and float(x.abs().max()) > IMAGE_LIMIT:
        raise ValueError(f"the images hold values up to {float(x.abs().max()):g}, far outside normalized "
                         f"images' {NORMALIZED_RANGE[0]:.2f}..{NORMALIZED_RANGE[1]:.2f}: pass "
                         "bnn_zoo.data.sets.normalize(uint8 images 0..255)")
    return x


def input_dtype(network: Union[BayesianNet, Twin]) -> torch.dtype:
    """The floating dtype of a network's weights (a model's: its skeleton's), which its inputs must
    share; torch's default where it holds none."""
    module = network.skeleton if isinstance(network, BayesianNet) else network
    held = (t.dtype for t in (*module.parameters(), *module.buffers()) if t.is_floating_point())
    return next(held, torch.get_default_dtype())


@contextmanager
def evaluating(module: nn.Module, dropout: bool = False) -> Iterator[nn.Module]:
    """``module`` in eval mode (its dropout layers sampling when ``dropout``), its mode restored after.

    Usage: ``with evaluating(twin): probs = twin(x)``
    """
    was_training = module.training
    module.eval()
    for layer in module.modules() if dropout else ():
        if isinstance(layer, nn.Dropout):
            layer.train()
    try:
        yield module
    finally:
        module.train(was_training)
