"""What a piece of work costs: wall-clock seconds and the peak memory it added (CUDA: the allocator's
peak; CPU: the process's resident set, sampled every few milliseconds, Linux only).

Usage::

    with Cost(device) as cost:
        probs = posterior.predict(x, 100)
    cost.seconds, cost.peak_mb        # peak_mb is None where it cannot be read
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch

STATM = Path("/proc/self/statm")


def resident_mb() -> float | None:
    """The process's resident set in MB, None off Linux."""
    try:
        return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return None


class Cost:
    """Seconds and peak memory (MB above what was in use at the start) of the ``with`` block."""

    def __init__(self, device: torch.device | str = "cpu", interval: float = 0.005):
        self.device, self.interval = torch.device(device), interval
        self.seconds: float = 0.0
        self.peak_mb: float | None = None

    def __enter__(self) -> "Cost":
        self._stop = threading.Event()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._base = resident_mb()
            self._peak = self._base
            if self._base is not None:
                self._thread = threading.Thread(target=self._sample, daemon=True)
                self._thread.start()
        self._start = time.perf_counter()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._peak = max(self._peak, resident_mb() or 0.0)

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        self._stop.set()
        if self.device.type == "cuda":
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2 ** 20
        elif self._base is not None:
            self._thread.join()
            self._peak = max(self._peak, resident_mb() or 0.0)
            self.peak_mb = self._peak - self._base
