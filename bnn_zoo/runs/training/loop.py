"""The one loop every phase of training runs in (``bnn_zoo.runs.training.phases``): Adam, the learning-rate
schedule replayed on resume, minibatches on the device, a progress bar, validation and a checkpoint
every ``train.eval_every`` epochs (only from finite parameters), early stopping (at a validation
accuracy, or after ``train.patience`` evaluations without a better validation NLL, the best
evaluation's weights kept), and one line on what a diverged or stopped run keeps and how to resume it.

Usage: ``figures = train_phase(TwinPhase(plan.networks, plan.train, len(splits.train), device, path), plan.train,
config, splits, run_id, log, stored)``
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

import torch
from tqdm.auto import tqdm

from ...core.errors import ConfigError, StorageError, TrainingError
from ...core.fast.code_folder import UnsafeFolder
from ...data.shifted.augment import Augment
from ...data.shifted.outliers import Outliers
from ...data.sets import Splits, TensorSet
from ..storage.checkpoint import read, restore_rng, rng_state, save_atomic
from .ranks import Ranks
from ..plans.schema import TrainConfig


def make_scheduler(optimizer: torch.optim.Optimizer, t: TrainConfig, epochs: int, lr: float, done: int = 0):
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


EVALUATIONS = 50  # train.eval_every=null: about this many evaluations a run


def evaluation_interval(t: TrainConfig, epochs: int) -> int:
    """Every how many epochs a run of ``epochs`` evaluates: train.eval_every, or with null about
    EVALUATIONS times a run (at least every epoch)."""
    return t.eval_every or max(1, epochs // EVALUATIONS)


def training_step(loss_fn: Callable, optimizer) -> Callable[..., torch.Tensor]:
    """``step(x, y)`` (or ``step(x, y, outliers)``): one optimizer step on ``loss_fn`` of the same (a
    scalar), its value detached."""
    def step(*inputs: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(*inputs)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def fit(label: str, step: Callable, optimizer, scheduler, train_set: TensorSet,
        t: TrainConfig, epochs: int, history: list, per_example: float,
        after_epoch: Callable[[dict, bool], Optional[bool]], world: Ranks = Ranks(),
        augment: Optional[Augment] = None, outliers: Optional[Outliers] = None) -> None:
    """The epoch loop shared by the BNN and its twin: minibatches on the device (each augmented where
    ``augment`` is given, then with its outliers made from it where ``outliers`` is given, then cut
    into a rank's share, ``bnn_zoo.runs.training.ranks``), a progress bar, a check for non-finite
    losses, then
    ``after_epoch(record, due)``, where ``due`` says it is time to evaluate and checkpoint (every
    ``evaluation_interval`` epochs and the last); it returns True to stop early.

    ``step(x, y)`` (``step(x, y, outliers)`` with outliers) takes an optimizer step and returns the
    minibatch's loss (detached, a scalar);
    ``per_example`` converts it to nats per training example. Between an epoch's first step and its
    end nothing reads a tensor's value on the host (no wait on a GPU): the epoch's loss is summed on
    the device and read once, after it; the progress bar shows the last epoch's.
    """
    batch_size = t.batch_size * world.size  # the global minibatch: train.batch_size on each rank
    steps, every = math.ceil(len(train_set) / batch_size), evaluation_interval(t, epochs)
    # One bar per epoch; for one-step epochs (the toy sets) one bar over the epochs instead.
    shown = t.progress and world.main
    over_epochs = tqdm(range(len(history), epochs), desc=label, dynamic_ncols=True,
                       disable=not shown or steps > 1, initial=len(history), total=epochs)
    for epoch in over_epochs:
        start = time.perf_counter()
        total, taken = torch.zeros((), device=train_set.x.device), 0
        batches = train_set.batches(batch_size, generator=world.order(epoch, train_set.x.device))
        draws = augment.generator(epoch) if augment is not None else None  # on the CPU: alike on every device
        made = outliers.generator(epoch) if outliers is not None else None  # on the CPU too
        bar = tqdm(batches, total=steps, leave=False, dynamic_ncols=True,
                   desc=f"{label} epoch {epoch + 1}/{epochs}", disable=not shown or steps == 1,
                   postfix={"last epoch": f"loss {history[-1]['loss']:.4f}"} if history else None)
        for i, (xb, yb) in enumerate(bar):
            if augment is not None:  # the global minibatch, alike on every rank
                xb = augment(xb, draws)
            # from the digits as training reads them: outliers unlike them in shape, not in ink or background
            extra = (outliers(xb, yb, made),) if outliers is not None else ()
            xb, yb, *extra = world.share(xb, yb, *extra)
            if not len(xb):  # an epoch's last minibatch, smaller than the ranks
                continue
            with world.draws(epoch * steps + i):
                total += step(xb, yb, *extra)
            taken += 1
        if not taken:  # the same on every rank: all stop
            raise ConfigError(f"{len(train_set)} training examples cannot be shared among {world.size} ranks")
        mean_loss = world.mean(total).item() / taken * per_example
        seconds = time.perf_counter() - start
        if not math.isfinite(mean_loss):
            raise TrainingError(f"{label}: the loss became {mean_loss} in epoch {epoch + 1}")
        with warnings.catch_warnings():  # a captured step takes Adam's step in its graph, not by optimizer.step()
            warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler.step\(\)` before", UserWarning)
            scheduler.step()
        record = {"epoch": epoch + 1, "steps": taken, "seconds": seconds, "loss": mean_loss,
                  "lr": optimizer.param_groups[0]["lr"]}
        if not over_epochs.disable:
            over_epochs.set_postfix(loss=f"{mean_loss:.4f}", refresh=False)
        if after_epoch(record, (epoch + 1) % every == 0 or epoch + 1 == epochs):
            break


@contextmanager
def cpu_threads(count: Optional[int]):
    """torch's CPU threads set to ``count`` inside (None: left as they are), restored after."""
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam with its fused kernel (one pass over all parameters; CPU and CUDA)."""
    return torch.optim.Adam(list(params), lr=lr, fused=True)


def reached(record: dict, target: Optional[float]) -> bool:
    """Whether an epoch's validation accuracy reached ``target`` (never when target is None)."""
    return target is not None and record.get("val/accuracy", -1.0) >= target


class Patience:
    """Early stopping on the validation NLL: ``better(record)`` says whether an evaluation is the
    best yet (with ``patience`` None, every one is: the checkpoint follows the run), ``run_out``
    whether ``patience`` evaluations in a row were not. ``best``: the NLL of the weights training
    starts from (a resumed run's checkpoint)."""

    def __init__(self, patience: Optional[int], best: float = math.inf):
        self.patience, self.best, self.waited = patience, best, 0

    def better(self, record: dict) -> bool:
        if self.patience is None:
            return True
        if record["val/nll"] < self.best:
            self.best, self.waited = record["val/nll"], 0
            return True
        self.waited += 1
        return False

    @property
    def run_out(self) -> bool:
        return self.patience is not None and self.waited >= self.patience


def train_phase(phase, t: TrainConfig, config: dict, splits: Splits, run_id: str, log: Callable[[str], None],
                stored: Optional[dict] = None, world: Ranks = Ranks(), augment: Optional[Augment] = None,
                outliers: Optional[Outliers] = None) -> dict:
    """Train ``phase`` (a ``bnn_zoo.runs.training.phases.Phase``) on ``splits.train`` (its minibatches through
    ``augment`` where given, with the ``outliers`` made from each where given) for its planned epochs,
    continuing from its ``stored`` checkpoint; returns its history, median seconds per epoch (and
    training examples per second at that pace) and test figures. With several ranks, each trains on its share and rank 0 alone validates, writes the
    checkpoints and tests (the others return no test figures). ``t``: the plan's training section;
    ``config``: the run's config as its checkpoints store it."""
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
    # DDP averages the gradients as backward makes them: through torch's step on several ranks
    step = (None if world.launched else phase.updating(optimizer)) or \
        training_step(world.wrap(phase.modules(), phase.loss, splits.train.x.device), optimizer)
    last = LastCheckpoint(phase.path, phase.lr, stored["epoch"] if stored else None,
                          min(evaluation_interval(t, phase.epochs), phase.epochs))
    patience = Patience(t.patience, history[-1].get("val/nll", math.inf) if history else math.inf)

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
            format_figures({k: v for k, v in record.items() if k not in ("epoch", "lr", "steps")}))
        last.check(phase.label, record["epoch"], phase.parameters())
        if patience.better(record):
            save_atomic({"config": config, "run": run_id, "epoch": record["epoch"], "ranks": world.size,
                         "optimizer": optimizer.state_dict(), "history": history, **phase.state(),
                         **rng_state(splits.train.x.device)}, phase.path)
            last.epoch = record["epoch"]
        elif patience.run_out:
            log(f"{phase.label}: no better validation NLL than {patience.best:.4f} (epoch {last.epoch}) in "
                f"{t.patience} evaluations; stopped early")
        return world.agree(reached(record, t.stop_at_accuracy) or patience.run_out)

    with phase.stepping(), last, cpu_threads(t.threads):
        fit(phase.label, step, optimizer, scheduler, splits.train, t, phase.epochs, history,
            phase.per_example, after_epoch, world, augment, outliers)
    seconds = statistics.median(h["seconds"] for h in history)
    speed = {"seconds_per_epoch": seconds, "examples_per_second": len(splits.train) / seconds}
    if not world.main:
        return {"history": history, **speed}
    if last.epoch != history[-1]["epoch"]:  # train.patience: the checkpoint holds the best evaluation
        phase.restore(read(phase.path, splits.train.x.device))
        log(f"{phase.label}: back to epoch {last.epoch}, the best by validation NLL, which {phase.path.name} holds")
    kept = {} if t.patience is None else {"best_epoch": last.epoch}
    test = phase.metrics(splits.test, t.test_samples)
    log(f"{phase.label} test{f' ({t.test_samples} posterior samples)' if phase.sampled else ''}: {format_figures(test)}")
    return {"history": history, **speed, **kept, **prefixed("test", test)}


class LastCheckpoint:
    """The epoch a phase's checkpoint file holds, and what a stopped run says about it: a checkpoint
    is written only from finite parameters, and a TrainingError (divergence) or StorageError (a full
    disk, a folder gone read-only; not a compile cache refused where torch reads it, which says its
    own fix) raised inside ``with last:`` ends with which epoch the file holds and how to resume from it."""

    def __init__(self, path: Path, lr: float, epoch: Optional[int], first: int):
        self.path, self.lr, self.epoch = path, lr, epoch
        self.first = first  # the first epoch evaluated

    def check(self, label: str, epoch: int, parameters) -> None:
        if not all(bool(torch.isfinite(p).all()) for p in parameters):
            raise TrainingError(f"{label}: parameters became non-finite in epoch {epoch}")

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        run_dir = self.path.parent
        if isinstance(err, StorageError) and not isinstance(err, UnsafeFolder):  # the compile cache's own line
            advice = (f"{self.path} holds epoch {self.epoch}: free space (or make {run_dir} writable) and resume: "
                      f"python -m bnn_zoo.train resume={run_dir}" if self.epoch is not None else
                      "no checkpoint was written: free space (or make the folder writable) and train again")
            raise StorageError(f"{err}; stopped. {advice}") from None
        if not isinstance(err, TrainingError):
            return False
        lower = f"{min(self.lr / 10, 1e-3):g}"
        if self.epoch is None:
            advice = (f"no checkpoint was written (the first would have followed epoch {self.first}): "
                      f"train again with a lower learning rate, e.g. train.lr={lower} overwrite=true")
        else:
            advice = (f"{self.path} holds epoch {self.epoch}, the last with finite parameters: resume it with "
                      f"a lower learning rate: python -m bnn_zoo.train resume={run_dir} train.lr={lower}")
        raise TrainingError(f"{err}; stopped. {advice}") from None


def prefixed(prefix: str, values: dict) -> dict:
    """``{"prefix/key": value}``: figures as metrics.json names them (val/accuracy, test/nll)."""
    return {f"{prefix}/{k}": v for k, v in values.items()}


def format_figures(values: dict) -> str:
    """Figures as a log line shows them: ``name value, ...``."""
    return ", ".join(f"{k} {v:.4f}" for k, v in values.items())
