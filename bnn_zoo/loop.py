"""The epoch loop every trainer shares: minibatches on the device, a progress bar, a check for
non-finite losses, the learning-rate schedule, and a hook after each epoch.

Usage: ``fit("twin", twin.loss, optimizer, make_scheduler(optimizer, cfg.train, 20, 1e-3), train_set,
cfg.train, 20, history, 1.0, after_epoch)``
"""
from __future__ import annotations

import math
import time
import warnings
from typing import Callable, Optional

import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from .data import TensorSet
from .errors import TrainingError


def make_scheduler(optimizer: torch.optim.Optimizer, t: DictConfig, epochs: int, lr: float, done: int = 0):
    """The per-epoch learning-rate schedule of a run planned as ``epochs`` epochs from ``lr``, at
    epoch ``done``: replayed from the start, so a resumed run with a new lr or length follows the
    new plan (and an unchanged one continues exactly where it stopped)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
        group.pop("initial_lr", None)
    if t.lr_schedule == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs, lr * t.lr_min_factor)
    elif t.lr_schedule == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, t.lr_step, t.lr_gamma)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": a replay, on purpose
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(done):
            scheduler.step()
    return scheduler


def fit(label: str, loss_fn: Callable, optimizer, scheduler, train_set: TensorSet,
        t: DictConfig, epochs: int, history: list, per_example: float,
        after_epoch: Callable[[dict, bool], Optional[bool]]) -> None:
    """The epoch loop shared by the BNN and its twin: minibatches on the device, a progress bar,
    a check for non-finite losses, then ``after_epoch(record, due)``, where ``due`` says it is
    time to evaluate and checkpoint (every ``t.eval_every`` epochs and the last); it returns True
    to stop early.

    ``loss_fn(x, y)`` returns a scalar; ``per_example`` converts it to nats per training example.
    """
    steps = math.ceil(len(train_set) / t.batch_size)
    # One bar per epoch; for one-step epochs (the toy sets) one bar over the epochs instead.
    over_epochs = tqdm(range(len(history), epochs), desc=label, dynamic_ncols=True,
                       disable=not t.progress or steps > 1, initial=len(history), total=epochs)
    for epoch in over_epochs:
        start = time.perf_counter()
        total = torch.zeros((), device=train_set.x.device)
        bar = tqdm(train_set.batches(t.batch_size), total=steps, leave=False, dynamic_ncols=True,
                   desc=f"{label} epoch {epoch + 1}/{epochs}", disable=not t.progress or steps == 1)
        for i, (xb, yb) in enumerate(bar):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(xb, yb)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            if i % 25 == 0 and not bar.disable:
                bar.set_postfix(loss=f"{total.item() / (i + 1) * per_example:.4f}", refresh=False)
        mean_loss = total.item() / steps * per_example
        seconds = time.perf_counter() - start
        if not math.isfinite(mean_loss):
            raise TrainingError(f"{label}: the loss became {mean_loss} in epoch {epoch + 1}")
        scheduler.step()
        record = {"epoch": epoch + 1, "steps": steps, "seconds": seconds, "loss": mean_loss,
                  "lr": optimizer.param_groups[0]["lr"]}
        if not over_epochs.disable:
            over_epochs.set_postfix(loss=f"{mean_loss:.4f}", refresh=False)
        if after_epoch(record, (epoch + 1) % t.eval_every == 0 or epoch + 1 == epochs):
            break


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam with its fused kernel (one pass over all parameters; CPU and CUDA)."""
    return torch.optim.Adam(list(params), lr=lr, fused=True)


def reached(record: dict, target: Optional[float]) -> bool:
    """Whether an epoch's validation accuracy reached ``target`` (never when target is None)."""
    return target is not None and record.get("val/accuracy", -1.0) >= target
