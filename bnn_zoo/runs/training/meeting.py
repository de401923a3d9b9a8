"""Where the ranks of a torchrun run meet before they train (``bnn_zoo.runs.training.ranks``): at rank 0's
MASTER_ADDR:MASTER_PORT, within ``BNN_ZOO_RENDEZVOUS_SECONDS`` (default 120). Ranks launched
together meet at once, in silence; a rank that has waited ``WAIT_NOTICE`` seconds says (on stderr)
whom it waits for and how long, and one that finds not every other there in time (one was never
launched) stops with a line that says so.

Usage: ``store = meet(rank, size, timedelta(minutes=30))``, the store init_process_group takes
"""
from __future__ import annotations

import math
import os
import socket
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from ...core.errors import ConfigError

# How long the ranks may take to meet at start-up (they are launched together): after it, a missing rank is named.
RENDEZVOUS, RENDEZVOUS_SECONDS = "BNN_ZOO_RENDEZVOUS_SECONDS", 120.0
WAIT_NOTICE = 5.0  # seconds of waiting after which a rank says whom it waits for (torchrun's ranks meet sooner)


def meet(rank: int, size: int, timeout: timedelta) -> dist.Store:
    """The store the ranks share (rank 0 serves it at MASTER_ADDR:MASTER_PORT, or torchrun's agent),
    once every rank is there, its waits then bound by ``timeout``; a ConfigError where they are not
    all there within BNN_ZOO_RENDEZVOUS_SECONDS."""
    seconds = _rendezvous_seconds()
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    others = f"the other {size - 1} ranks" if size > 2 else "the other rank"
    notice = threading.Timer(WAIT_NOTICE, print, [f"rank {rank} of {size} waits for {others} at {host}:{port}, up to "
                                                  f"{seconds:g} s ({RENDEZVOUS})"], {"file": sys.stderr, "flush": True})
    notice.daemon = True
    if size > 1:  # a rank whose peers do not come is not silent for the wait
        notice.start()
    deadline = time.monotonic() + seconds
    try:
        if rank and host and port and port.isdigit():  # torch's client would log each try to reach rank 0
            _reach(host, int(port), deadline)
        left = timedelta(seconds=max(deadline - time.monotonic(), 1.0))
        store, _, _ = next(dist.rendezvous("env://", rank, size, timeout=left))
    except (dist.DistError, TimeoutError) as err:
        said = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        if isinstance(err, dist.DistNetworkError) and not rank:
            raise ConfigError(f"rank 0 cannot serve the ranks at {host}:{port} ({said}): set MASTER_PORT to a "
                              "free port") from None
        raise ConfigError(f"WORLD_SIZE={size} expects {size} ranks at {host}:{port}; rank {rank} "
                          f"waited {seconds:g} s ({RENDEZVOUS}) and not all came ({said}): launch every rank, e.g. "
                          f"torchrun --nproc_per_node {size} -m bnn_zoo.train ..., or unset WORLD_SIZE to "
                          "train in one process") from None
    finally:
        notice.cancel()
    store.set_timeout(timeout)  # met: from here a rank waits on the others as long as on a collective
    return dist.PrefixStore("default_pg", store)  # as init_process_group keeps its keys apart from others'


def _rendezvous_seconds() -> float:
    """How long the ranks may take to meet: BNN_ZOO_RENDEZVOUS_SECONDS, or its default."""
    text = os.environ.get(RENDEZVOUS, str(RENDEZVOUS_SECONDS))
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ConfigError(f"{RENDEZVOUS} must be a positive number of seconds, got {text!r}")
    return seconds


def _reach(host: str, port: int, deadline: float) -> None:
    """Wait until something takes connections at host:port (rank 0's store), or until ``deadline``
    (time.monotonic()): a TimeoutError."""
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing answered at {host}:{port} ({err.strerror or err})") from None
            time.sleep(0.25)
