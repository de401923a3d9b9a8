"""One posterior trained on several processes by PyTorch's DistributedDataParallel, launched by
torchrun: one process per GPU (NCCL), or per CPU core (gloo). DDP broadcasts rank 0's parameters at
the start and averages the gradients after each backward pass; nothing here exchanges gradients.

``train.batch_size`` is each rank's, as DDP and Lightning count it: a global minibatch of ranks x
train.batch_size examples, in an order every rank draws alike from (seed, epoch), is cut into equal
shares, one per rank (an epoch's last minibatch cut to a multiple of the ranks). Every rank draws its own weights, from (seed, step, rank). A rank's log-likelihood
is scaled by num_data over its share (the data plate), so the average of the ranks' gradients is
the single-process gradient of the global minibatch under their draws. Only rank 0 writes the run
directory, validates and tests.

The ranks meet at rank 0's MASTER_ADDR:MASTER_PORT (``bnn_zoo.runs.training.meeting``); once met, a rank
waits on the others up to 30 minutes (``TIMEOUT``). A mistake found on one rank (no data, a run
directory in use) is said there alone, the others stopping with it quietly, all with exit code 2.

Usage::

    torchrun --nproc_per_node 2 -m bnn_zoo.train mnist_mlp run_dir=runs/ddp      # two GPUs, or two cores
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 -m bnn_zoo.train lenet
"""
from __future__ import annotations

import gc
import os
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Callable, Iterator, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ...core.errors import ConfigError, DataError, UserError, said_elsewhere, say
from .meeting import meet

if dist.is_available():
    # Imported before any process group exists: its functions take group.WORLD as a default argument,
    # so imported later (DDP's first construction does) they would hold the group past
    # destroy_process_group, its gloo threads alive to drop a collective's tensors while Python
    # exits, which aborts the process.
    import torch.distributed.nn  # noqa: F401

# A rank that waits longer on the others stops (one died, one hangs): rank 0 alone validates, tests
# and writes while the others wait, so this is gloo's own default, not less.
T = TypeVar("T")
TIMEOUT = timedelta(minutes=30)


def _stream(*numbers: int) -> int:
    """A seed of its own for each tuple of numbers (Python hashes a tuple of ints alike in every process)."""
    return hash(numbers) % (2**63)


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks of a run; ``Ranks()`` is a single process, where every
    method leaves training exactly as it was."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    seed: int = 0
    launched: bool = False  # by torchrun: in a process group, through DDP, even as its only rank

    @classmethod
    def from_env(cls, seed: int) -> "Ranks":
        """The world torchrun describes in the environment (WORLD_SIZE, RANK, LOCAL_RANK); one process without it."""
        try:
            size, rank, local = (int(os.environ.get(k, d)) for k, d in (("WORLD_SIZE", 1), ("RANK", 0), ("LOCAL_RANK", 0)))
        except ValueError:
            raise ConfigError("WORLD_SIZE, RANK and LOCAL_RANK must be integers: launch with torchrun") from None
        if size < 1 or not 0 <= rank < size:
            raise ConfigError(f"RANK {rank} of WORLD_SIZE {size} is no rank: launch with torchrun")
        return cls(rank, size, local, seed, "WORLD_SIZE" in os.environ)

    def __str__(self) -> str:
        """What a log line says of the ranks: nothing for one process."""
        return f", rank {self.rank} of {self.size} (torchrun)" if self.launched else ""

    def on_cpus(self, device: torch.device, threads: int) -> str:
        """What rank 0's first line says of ranks that train on CPUs (nothing on GPUs, or for one
        rank): how many share this machine's cores, at ``threads`` threads each, and what that costs:
        more threads than cores take turns on them (no faster than the ranks that fit), each rank holds
        its own copy of the data."""
        if self.size == 1 or device.type != "cpu":
            return ""
        local = int(os.environ.get("LOCAL_WORLD_SIZE", self.size))  # the ranks on this machine (torchrun's)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        line = f"; {local} CPU ranks on {cores} core{'s' * (cores > 1)}, {threads} thread{'s' * (threads > 1)} each"
        if local * threads > cores:
            fit = max(1, cores // threads)
            line += (f": more threads than cores, so they take turns on them and train no faster than {fit} "
                     f"rank{'s' * (fit > 1)} would")
        return line + ("; DDP on CPUs is for trying the ranks' path before GPUs, each rank holding its own copy of "
                       "the data")

    @property
    def main(self) -> bool:
        """Whether this process writes the run directory, validates and logs."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """A rank's own GPU (its LOCAL_RANK) where the run trains on GPUs; the CPU stays the CPU."""
        return torch.device("cuda", self.local_rank) if self.launched and device.type == "cuda" else device

    def check(self, infer: str) -> None:
        """What a run on several ranks cannot do: NUTS, a one-process job (an ensemble's members
        train one after another, each on every rank)."""
        if self.size > 1 and infer != "svi":
            raise ConfigError(f"torchrun trains by SVI on {self.size} ranks; infer={infer} runs in one process: "
                              "launch it without torchrun, or set infer=svi")

    def of_member(self, index: int) -> "Ranks":
        """The ranks as ensemble member ``index`` trains on them: its minibatch order and draws from
        its own seed (the run's seed + index), as a member trained alone draws them."""
        return replace(self, seed=self.seed + index)

    def shared(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (what rank 0 read of the run directory, say)."""
        if self.size == 1:
            return value
        held = [value]
        dist.broadcast_object_list(held, src=0)
        return held[0]

    @contextmanager
    def joined(self, device: torch.device) -> Iterator[None]:
        """In the process group (NCCL on GPUs, gloo on CPUs) for the block, out of it after, whatever
        happened; a torchrun of one rank too (the same path as several: a test of it on one device)."""
        if not self.launched or dist.is_initialized():
            yield
            return
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=meet(self.rank, self.size, TIMEOUT),
                                rank=self.rank, world_size=self.size, timeout=TIMEOUT,
                                device_id=device if device.type == "cuda" else None)
        try:
            yield
        except BaseException as err:
            _let_go(err)
            raise
        finally:
            gc.collect()  # a DDP sits in a reference cycle: gone only now, it lets go of the group
            dist.destroy_process_group()  # joins gloo's threads: none is left to touch Python as it exits

    def first(self, load: Callable[[], T]) -> T:
        """``load()`` on each machine's first rank (LOCAL_RANK 0: a download, say), then on its others:
        no two ranks write one file. Where a first rank fails, every rank stops."""
        if self.size == 1:
            return load()
        result, failure = _attempt(load) if self.local_rank == 0 else (None, None)
        self._settle(failure, DataError, "could not load the data")
        return result if self.local_rank == 0 else load()

    def on_main(self, act: Callable[[], T]) -> T | None:
        """``act()`` on rank 0 alone (claiming the run directory, say); where it fails, every rank
        stops with its message, not with a broken connection."""
        if self.size == 1:
            return act()
        result, failure = _attempt(act) if self.main else (None, None)
        self._settle(failure, UserError, "stopped")
        return result

    def _settle(self, failure: Exception | None, kind: type[Exception], what: str) -> None:
        """Every rank's ``failure`` (None: it went well) told to all; said where it happened, before
        any rank leaves (torchrun stops the others once one has left, maybe before they said it),
        and raised there; on the others raised as ``kind`` ("another rank {what} (...)"), said by
        that rank, not again: the command ends with one line, the ranks with exit code 2."""
        failures = [None] * self.size
        dist.all_gather_object(failures, None if failure is None else f"{type(failure).__name__}: {failure}")
        failed = next((f for f in failures if f is not None), None)
        if failed is None:
            return
        if failure is not None:
            say(failure)
        dist.barrier()
        raise failure if failure is not None else said_elsewhere(kind(f"another rank {what} ({failed})"))

    def said(self, log: Callable[[str], None]) -> Callable[[str], None]:
        """``log`` on rank 0; on the others a log that says nothing."""
        return log if self.main else _silent

    def order(self, epoch: int, device: torch.device) -> torch.Generator | None:
        """The generator of epoch ``epoch``'s minibatch order, alike on every rank (None: torch's own)."""
        if self.size == 1:
            return None
        return torch.Generator(device).manual_seed(_stream(self.seed, epoch))

    def share(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """This rank's share of each of a global minibatch's tensors (inputs, labels, outliers): its
        slice of each (empty where it holds fewer rows than ranks)."""
        if self.size == 1:
            return tensors
        return tuple(t[self.rank * (len(t) // self.size):(self.rank + 1) * (len(t) // self.size)] for t in tensors)

    def draws(self, step: int):
        """The context of step ``step``'s weight draws: a stream of this rank's own."""
        return _own_stream(_stream(self.seed, step, self.rank)) if self.size > 1 else nullcontext()

    def wrap(self, modules: list[nn.Module], loss: Callable, device: torch.device) -> Callable:
        """``loss`` (x, y) -> scalar over ``modules``' parameters, through DDP where torchrun launched
        the ranks (one rank's DDP averages its own gradients: the single-process step)."""
        if not self.launched:
            return loss
        return DistributedDataParallel(_Loss(modules, loss), device_ids=[device] if device.type == "cuda" else None,
                                       gradient_as_bucket_view=True)

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (whether to stop early: only rank 0 validates)."""
        return bool(self.shared(flag))

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of a tensor over the ranks (an epoch's loss, for the log)."""
        if self.size > 1:
            value = value.clone()
            dist.all_reduce(value)
            value /= self.size
        return value


def _let_go(err: BaseException) -> None:
    """The finished frames of ``err``'s traceback, and of every error chained to it (a re-raise
    ``from None`` keeps the first as its context), cleared of their locals: they hold the DDP.
    The messages and lines stay; a debugger after the fact sees no locals there."""
    todo, seen = [err], set()
    while todo:
        e = todo.pop()
        if e is not None and id(e) not in seen:
            seen.add(id(e))
            traceback.clear_frames(e.__traceback__)
            todo += [e.__cause__, e.__context__]


def _attempt(act: Callable[[], T]) -> tuple[T | None, Exception | None]:
    """``act()``'s result, or the error it raised (to be told to the other ranks first)."""
    try:
        return act(), None
    except Exception as err:  # said to the others, then raised here
        return None, err


def _silent(message: str) -> None:
    """The log of a rank other than 0."""


class _Loss(nn.Module):
    """A phase's loss as a module holding its parameters: what DDP wraps."""

    def __init__(self, modules: list[nn.Module], loss: Callable):
        super().__init__()
        self.held = nn.ModuleList(modules)
        self.loss = loss

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.loss(*inputs)


@contextmanager
def _own_stream(seed: int) -> Iterator[None]:
    """Draws from ``seed`` inside the block (the CPU's generator and this rank's GPU's), the streams
    as they were after it."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []):
        torch.default_generator.manual_seed(seed)
        if cuda:
            torch.cuda.manual_seed(seed)  # the current device only
        yield
