"""Local reparameterization (linear layers) and Flipout (2-d convolutions) as a Pyro effect handler.

Inside the handler each example sees its own weights, which lowers the gradient variance; the
posterior (the guide) and the KL are unchanged. It works on any model whose weights are drawn from
Normal distributions and used through ``F.linear`` / ``F.conv2d`` (``nn.Linear``, ``nn.Conv2d``):
the handler records the Normal behind each draw, and a torch function mode, which is thread-local,
rewrites the calls that use such a draw. The mode is on from the first recorded draw a model sees
until its next observed site (so the KL terms computed afterwards do not pay its dispatch), and
never outside the handler. Every other call passes through unchanged: a twin's parameters, or a
vectorized batch of weights in prediction.

Usage (around the guide and the model together, so it sees the guide's draws)::

    with LocalReparameterization():
        loss = elbo.differentiable_loss(model, guide, x, y)
    loss.backward()
"""
from __future__ import annotations

import weakref

import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.poutine.messenger import Messenger
from torch.overrides import TorchFunctionMode


class LocalReparameterization(Messenger):
    """Kingma et al. 2015 for linear layers: pre-activations drawn from N(x mu, x^2 sigma^2);
    Wen et al. 2018 for convolutions: conv(x, mu) + conv(x * s_in, W - mu) * s_out with random
    signs per example."""

    def __enter__(self):
        # id(draw) -> (weak reference to the draw, loc, scale); an entry goes when its draw does, so
        # a long-lived handler holds only the Normals of the weights still in use.
        self.normals: dict[int, tuple[weakref.ref, torch.Tensor, torch.Tensor]] = {}
        self._given: set[int] = set()  # ids of the messages whose value was given, not drawn
        self._mode = _Rewrite(self.normals)
        self._rewriting = False
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._rewrite(False)
            self.normals, self._given = {}, set()

    def _rewrite(self, on: bool) -> None:
        if on != self._rewriting:
            self._mode.__enter__() if on else self._mode.__exit__(None, None, None)
            self._rewriting = on

    def _pyro_sample(self, msg: dict) -> None:
        if msg["value"] is not None or msg["is_observed"]:  # replayed or conditioned: not drawn here
            self._given.add(id(msg))

    def _pyro_post_sample(self, msg: dict) -> None:
        value = msg["value"]
        if msg["is_observed"]:  # the likelihood: the network has run
            self._rewrite(False)
        if id(msg) in self._given:
            self._given.discard(id(msg))
            if torch.is_tensor(value) and id(value) in self.normals:
                self._rewrite(True)  # a model replaying a recorded draw: its network runs next
            return
        if not torch.is_tensor(value) or id(value) in self.normals:
            return  # the first record of a tensor is the guide's draw; the model's replay keeps it
        fn = msg["fn"]
        while isinstance(fn, dist.Independent):
            fn = fn.base_dist
        if isinstance(fn, dist.Normal):
            self.normals[id(value)] = (weakref.ref(value), fn.loc, fn.scale)
            weakref.finalize(value, self.normals.pop, id(value), None)


class _Rewrite(TorchFunctionMode):
    """Rewrites F.linear / F.conv2d calls whose weight is a recorded Normal draw."""

    def __init__(self, normals: dict):
        super().__init__()
        self.normals = normals

    def _normal(self, value):
        entry = self.normals.get(id(value)) if torch.is_tensor(value) else None
        return entry[1:] if entry is not None and entry[0]() is value else None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear or func is F.conv2d:
            names = ("input", "weight", "bias")
            bound = {**dict(zip(names, args)), **{n: kwargs[n] for n in names if n in kwargs}}
            w = self._normal(bound.get("weight"))
            if w is not None:
                x, weight, bias = bound["input"], bound["weight"], bound.get("bias")
                if func is F.linear:
                    return _local_linear(x, w, bias, self._normal(bias))
                options = {k: v for k, v in kwargs.items() if k not in names}
                return _flipout_conv2d(x, weight, w, bias, self._normal(bias), args[3:], options)
        return func(*args, **kwargs)


def _local_linear(x, w, bias, b):
    mean = F.linear(x, w[0], b[0] if b else bias)
    var = F.linear(x * x, w[1] ** 2, b[1] ** 2 if b else None)
    return mean + var.clamp_min(1e-16).sqrt() * torch.randn_like(mean)


def _signs(shape, device):
    return torch.randint(0, 2, shape, device=device) * 2.0 - 1


def _flipout_conv2d(x, weight, w, bias, b, rest, kwargs):
    mean = F.conv2d(x, w[0], b[0] if b else bias, *rest, **kwargs)
    sign_in = _signs((x.shape[0], x.shape[1], 1, 1), x.device)
    delta = F.conv2d(x * sign_in, weight - w[0], bias - b[0] if b else None, *rest, **kwargs)
    return mean + delta * _signs((x.shape[0], delta.shape[1], 1, 1), x.device)
