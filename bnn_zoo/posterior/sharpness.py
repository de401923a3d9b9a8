"""How sharp a twin's training loss is at its weights: the largest magnitude of an eigenvalue of its
Hessian (``sharpness``, power iteration on Hessian-vector products), and the learning rate a walk
from the twin may take (``stable_lr``): gradient descent on a quadratic diverges from a step of
2 / sharpness (3.8 / sharpness with momentum 0.9), so a walk's step is kept at most 1 / sharpness.

A classifier's loss is flat at a trained twin (LeNet's and mnist_mlp's shipped twins: sharpness 4.1
and 1.6 on 1,000 MNIST digits), so SWAG's and SG-MCMC's own rates stand; a regression's is steep
where its noise is small (toy_mlp at noise sd 0.1: about 8,800), where those rates diverge.

Usage: ``lr = stable_lr(twin, x_train, y_train, lr=0.01)``
"""
from __future__ import annotations

import torch

from ..core.inference.inputs import evaluating

SHARPNESS_INPUTS = 1000  # the first training inputs the sharpness is measured on
ITERATIONS = 30  # power iteration's steps


def sharpness(twin, x: torch.Tensor, y: torch.Tensor, iterations: int = ITERATIONS, seed: int = 0) -> float:
    """The largest |eigenvalue| of the Hessian of ``twin.loss`` (the mean over ``x``, ``y``) in all
    its parameters, at its weights, in eval mode: ``iterations`` steps of power iteration from a
    seeded start, ||H v|| for the last unit v."""
    params = [p for p in twin.parameters() if p.requires_grad]
    generator = torch.Generator(device=x.device).manual_seed(seed)
    v = [torch.randn(p.shape, generator=generator, device=p.device, dtype=p.dtype) for p in params]
    size = 0.0
    with evaluating(twin), torch.enable_grad():
        grads = torch.autograd.grad(twin.loss(x, y), params, create_graph=True)
        for _ in range(iterations):
            norm = torch.sqrt(sum((a * a).sum() for a in v))
            v = [a / norm for a in v]
            hv = torch.autograd.grad(grads, params, v, retain_graph=True)
            size = torch.sqrt(sum((a * a).sum() for a in hv)).item()
            v = [a.detach() for a in hv]
    return size


def stable_lr(twin, x: torch.Tensor, y: torch.Tensor, lr: float) -> float:
    """``lr``, or 1 / sharpness (on the first SHARPNESS_INPUTS of ``x``) where that is smaller."""
    sharp = sharpness(twin, x[:SHARPNESS_INPUTS], y[:SHARPNESS_INPUTS])
    return min(lr, 1 / sharp) if sharp > 0 else lr
