"""The CPU threads torch's operations use while a network trains: ``train.threads``, or where it is
null, chosen from the work of one training step, by one rule (``step_threads``).

A second thread pays only where a step's arithmetic outweighs waking it: the forward pass of a
minibatch (``step_flops``: the plain network's, counted by torch's FlopCounterMode, times the
minibatch) under ``PAYS_FROM`` floating-point operations trains on one thread, above it on torch's
own choice (a thread per core). Below it lie the toy curve's 1-50-50-1 (31 thousand a step on its
six points) and the tables' one hidden layer (0.1 to 1 million); above it mnist_mlp's 784-400-400-10
(122 million at 128 inputs) and LeNet-5 (107 million). Where other work shares the cores, every
thread also waits for one: the toy run took 23 s on one thread and 176 s on two on this 2-core CPU
with two other trainings running (docs/guides/speed.md, "CPU threads"). The rule reads the work, not
the machine's load, so a run draws and sums alike wherever it runs; ``train.threads=1`` is the
setting for a shared machine, ``train.threads=N`` for a quiet one.

Usage: ``threads, why = step_threads(plan.train.threads, twin, input_shape, batch, device)``
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

PAYS_FROM = 10_000_000  # floating-point operations in a step's forward pass from which a second thread pays


def step_flops(net: nn.Module, input_shape: tuple[int, ...], batch: int) -> int:
    """The floating-point operations of ``net``'s forward pass over a minibatch of ``batch``
    inputs of ``input_shape`` (one input's, counted on zeros, times the minibatch); its random
    streams and its gradients untouched."""
    with torch.random.fork_rng(devices=[]), torch.no_grad(), FlopCounterMode(display=False) as counted:
        net(torch.zeros(1, *input_shape))
    return counted.get_total_flops() * batch


def step_threads(threads: Optional[int], net: nn.Module, input_shape: tuple[int, ...], batch: int,
                 device: torch.device) -> tuple[Optional[int], str]:
    """The threads a phase trains on (None: torch's own choice) and why, for the log: ``threads``
    where given, else by the step's work (``PAYS_FROM``); on a GPU, torch's own. The log advises
    train.threads=1 for a shared machine only where torch's own choice is more than one."""
    if threads:
        return threads, f"{threads} CPU thread{'s' if threads > 1 else ''} (train.threads)"
    if device.type != "cpu":
        return None, f"torch's own CPU threads ({device.type} trains)"
    work = step_flops(net, input_shape, batch)
    if work < PAYS_FROM:
        return 1, (f"1 CPU thread (train.threads=null: a step's forward pass is {work / 1e6:.2g} million FLOPs, "
                   f"under the {PAYS_FROM / 1e6:g} million from which a second pays)")
    own = torch.get_num_threads()  # one already (one core, OMP_NUM_THREADS=1): nothing to advise
    shared = "; on a shared machine train.threads=1" if own > 1 else ""
    return None, (f"{own} CPU thread{'s' if own > 1 else ''}, torch's own (train.threads=null: a step's forward pass "
                  f"is {work / 1e6:.3g} million FLOPs{shared})")
