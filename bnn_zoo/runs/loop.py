"""The one loop every phase of training runs in (``bnn_zoo.runs.phases``): Adam, the learning-rate
schedule replayed on resume, minibatches on the device, a progress bar, validation and a checkpoint
every ``train.eval_every`` epochs (only from finite parameters), early stopping, and one line on
what a diverged or stopped run keeps and how to resume it.

Usage: ``figures = train_phase(TwinPhase(cfg, device, run.twin_checkpoint), cfg, splits, run_id, log, stored)``
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from .checkpoint import config_dict, restore_rng, rng_state, save_atomic
from ..data.sets import Splits, TensorSet
from .ranks import World
from ..core.errors import ConfigError, StorageError, TrainingError


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
        after_epoch: Callable[[dict, bool], Optional[bool]], world: World = World()) -> None:
    """The epoch loop shared by the BNN and its twin: minibatches on the device (a rank's share of
    each, ``bnn_zoo.runs.ranks``), a progress bar, a check for non-finite losses, then
    ``after_epoch(record, due)``, where ``due`` says it is time to evaluate and checkpoint (every
    ``t.eval_every`` epochs and the last); it returns True to stop early.

    ``loss_fn(x, y)`` returns a scalar; ``per_example`` converts it to nats per training example.
    """
    batch_size = t.batch_size * world.size  # the global minibatch: train.batch_size on each rank
    steps = math.ceil(len(train_set) / batch_size)
    # One bar per epoch; for one-step epochs (the toy sets) one bar over the epochs instead.
    shown = t.progress and world.main
    over_epochs = tqdm(range(len(history), epochs), desc=label, dynamic_ncols=True,
                       disable=not shown or steps > 1, initial=len(history), total=epochs)
    for epoch in over_epochs:
        start = time.perf_counter()
        total, taken = torch.zeros((), device=train_set.x.device), 0
        batches = train_set.batches(batch_size, generator=world.order(epoch, train_set.x.device))
        bar = tqdm(batches, total=steps, leave=False, dynamic_ncols=True,
                   desc=f"{label} epoch {epoch + 1}/{epochs}", disable=not shown or steps == 1)
        for i, (xb, yb) in enumerate(bar):
            xb, yb = world.share(xb, yb)
            if not len(xb):  # an epoch's last minibatch, smaller than the ranks
                continue
            optimizer.zero_grad(set_to_none=True)
            with world.draws(epoch * steps + i):
                loss = loss_fn(xb, yb)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            taken += 1
            if i % 25 == 0 and not bar.disable:
                bar.set_postfix(loss=f"{total.item() / (i + 1) * per_example:.4f}", refresh=False)
        if not taken:  # the same on every rank: all stop
            raise ConfigError(f"{len(train_set)} training examples cannot be shared among {world.size} ranks")
        mean_loss = world.mean(total).item() / taken * per_example
        seconds = time.perf_counter() - start
        if not math.isfinite(mean_loss):
            raise TrainingError(f"{label}: the loss became {mean_loss} in epoch {epoch + 1}")
        scheduler.step()
        record = {"epoch": epoch + 1, "steps": taken, "seconds": seconds, "loss": mean_loss,
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


def train_phase(phase, cfg: DictConfig, splits: Splits, run_id: str, log: Callable[[str], None],
                stored: Optional[dict] = None, world: World = World()) -> dict:
    """Train ``phase`` (a ``bnn_zoo.runs.phases.Phase``) on ``splits.train`` for its planned epochs,
    continuing from its ``stored`` checkpoint; returns its history, median seconds per epoch (and
    training examples per second at that pace) and test figures. With several ranks, each trains on its share and rank 0 alone validates, writes the
    checkpoints and tests (the others return no test figures)."""
    t = cfg.train
    loss = world.wrap(phase.modules(), phase.loss, splits.train.x.device)
    optimizer = adam(phase.parameters(), phase.lr)
    history: list = []
    if stored:
        phase.restore(stored)
        optimizer.load_state_dict(stored["optimizer"])
        history = stored["history"]
        restore_rng(stored, splits.train.x.device)
        log(f"resumed {phase.path} after epoch {stored['epoch']}" + (
            f" on {world.size} ranks, trained on {stored.get('ranks', 1)}: the global minibatch is now "
            f"{world.size} x train.batch_size" if stored.get("ranks", 1) != world.size else ""))
    scheduler = make_scheduler(optimizer, t, phase.epochs, phase.lr, done=len(history))
    last = LastCheckpoint(phase.path, cfg, phase.lr, stored["epoch"] if stored else None)

    def after_epoch(record: dict, due: bool) -> bool:
        phase.end_epoch(record, world.mean)
        history.append(record)
        if not due:
            return False
        if not world.main:  # the same parameters as rank 0's: the same check
            last.check(phase.label, record["epoch"], phase.parameters())
            return world.agree(False)  # rank 0's word on stopping early
        if splits.val is not None:
            record.update(prefixed("val", phase.metrics(splits.val, t.val_samples)))
        log(f"{phase.label} epoch {record['epoch']}: " +
            figures({k: v for k, v in record.items() if k not in ("epoch", "lr", "steps")}))
        last.check(phase.label, record["epoch"], phase.parameters())
        save_atomic({"config": config_dict(cfg), "run": run_id, "epoch": record["epoch"], "ranks": world.size,
                     "optimizer": optimizer.state_dict(), "history": history, **phase.state(),
                     **rng_state(splits.train.x.device)}, phase.path)
        last.epoch = record["epoch"]
        return world.agree(reached(record, t.stop_at_accuracy))

    with phase.stepping(), last:
        fit(phase.label, loss, optimizer, scheduler, splits.train, t, phase.epochs, history,
            phase.per_example, after_epoch, world)
    seconds = statistics.median(h["seconds"] for h in history)
    speed = {"seconds_per_epoch": seconds, "examples_per_second": len(splits.train) / seconds}
    if not world.main:
        return {"history": history, **speed}
    test = phase.metrics(splits.test, t.test_samples)
    log(f"{phase.label} test{f' ({t.test_samples} posterior samples)' if phase.sampled else ''}: {figures(test)}")
    return {"history": history, **speed, **prefixed("test", test)}


class LastCheckpoint:
    """The epoch a phase's checkpoint file holds, and what a stopped run says about it: a checkpoint
    is written only from finite parameters, and a TrainingError (divergence) or StorageError (a full
    disk, a folder gone read-only) raised inside ``with last:`` ends with which epoch the file holds
    and how to resume from it."""

    def __init__(self, path: Path, cfg: DictConfig, lr: float, epoch: Optional[int]):
        self.path, self.cfg, self.lr, self.epoch = path, cfg, lr, epoch

    def check(self, label: str, epoch: int, parameters) -> None:
        if not all(bool(torch.isfinite(p).all()) for p in parameters):
            raise TrainingError(f"{label}: parameters became non-finite in epoch {epoch}")

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        run_dir = self.path.parent
        if isinstance(err, StorageError):
            advice = (f"{self.path} holds epoch {self.epoch}: free space (or make {run_dir} writable) and resume: "
                      f"python -m bnn_zoo.train resume={run_dir}" if self.epoch is not None else
                      "no checkpoint was written: free space (or make the folder writable) and train again")
            raise StorageError(f"{err}; stopped. {advice}") from None
        if not isinstance(err, TrainingError):
            return False
        lower = f"{min(self.lr / 10, 1e-3):g}"
        if self.epoch is None:
            advice = (f"no checkpoint was written (the first would have followed epoch {self.cfg.train.eval_every}): "
                      f"train again with a lower learning rate, e.g. train.lr={lower} overwrite=true")
        else:
            advice = (f"{self.path} holds epoch {self.epoch}, the last with finite parameters: resume it with "
                      f"a lower learning rate: python -m bnn_zoo.train resume={run_dir} train.lr={lower}")
        raise TrainingError(f"{err}; stopped. {advice}") from None


def prefixed(prefix: str, values: dict) -> dict:
    """``{"prefix/key": value}``: figures as metrics.json names them (val/accuracy, test/nll)."""
    return {f"{prefix}/{k}": v for k, v in values.items()}


def figures(values: dict) -> str:
    """Figures as a log line shows them: ``name value, ...``."""
    return ", ".join(f"{k} {v:.4f}" for k, v in values.items())
