"""Where compiled training steps outlive their process: torch's own caches (inductor's FX graphs,
AOTAutograd's, Triton's kernels) in one folder, ``$BNN_ZOO_CACHE`` (else ``$TORCHINDUCTOR_CACHE_DIR``,
else ``$XDG_CACHE_HOME/bnn_zoo/compile``, by default ``~/.cache/bnn_zoo/compile``), so that a run
of an architecture and batch shape compiled before (a resume, a second run, another seed) loads
its compiled step instead of compiling it. ``train.compile_cache=false`` compiles afresh and keeps
nothing. Beside torch's files, one empty file per compiled step, named by the step's signature,
says the cache holds it (``warm``): what ``bnn_zoo.core.captured_step.choose`` weighs.

Usage::

    with compile_cache(plan.train.compile_cache):     # torch's caches in folder() while training
        warm(signature), mark(signature)
"""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

CACHE_ENV, TORCH_ENV = "BNN_ZOO_CACHE", "TORCHINDUCTOR_CACHE_DIR"
_STEPS = "bnn_zoo_steps"  # the markers' subfolder


def folder() -> Path:
    """The folder compiled steps are kept in."""
    chosen = os.environ.get(CACHE_ENV) or os.environ.get(TORCH_ENV)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bnn_zoo" / "compile"


def described() -> str:
    """What --help says about it."""
    return (f"compiled training steps are kept in {folder()} (${CACHE_ENV}, else ${TORCH_ENV}, else "
            "$XDG_CACHE_HOME/bnn_zoo/compile) for the next run of the same network and batch shape; "
            "train.compile_cache=false compiles afresh and keeps nothing")


@contextmanager
def compile_cache(enabled: bool) -> Iterator[None]:
    """torch's compile caches in ``folder()`` inside the block (``enabled``), as they were after it."""
    if not enabled:
        yield
        return
    before = os.environ.get(TORCH_ENV)
    os.environ[TORCH_ENV] = str(folder())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TORCH_ENV, None)
        else:
            os.environ[TORCH_ENV] = before


def _marker(signature: str) -> Path:
    return folder() / _STEPS / hashlib.sha256(signature.encode()).hexdigest()[:32]


def warm(signature: str) -> bool:
    """Whether a step of this signature was compiled into ``folder()`` before."""
    return _marker(signature).is_file()


def mark(signature: str) -> None:
    """Note that a step of this signature is compiled into ``folder()``: where torch's caches are
    there now (inside ``compile_cache(True)``; elsewhere nothing is noted). Best effort: a folder that
    cannot be written only means the next run weighs a cold compile."""
    if os.path.abspath(os.environ.get(TORCH_ENV, "")) != os.path.abspath(folder()):
        return
    path = _marker(signature)
    with suppress(OSError):  # an unwritable folder: the next run weighs a cold compile, as said above
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
