"""Where compiled training steps outlive their process: torch's own caches (inductor's FX graphs,
AOTAutograd's, Triton's kernels) in one folder, ``$BNN_ZOO_CACHE`` (else ``$TORCHINDUCTOR_CACHE_DIR``,
else ``$XDG_CACHE_HOME/bnn_zoo/compile``, by default ``~/.cache/bnn_zoo/compile``), so that a run
of an architecture and batch shape compiled before (a resume, a second run, another seed) loads
its compiled step instead of compiling it. ``train.compile_cache=false`` compiles afresh and keeps
nothing. Beside torch's files, one empty file per compiled step, named by the step's signature,
says the cache holds it (``warm``): what ``bnn_zoo.core.fast.captured_step.choose`` weighs.

What the folder holds is code that training runs (inductor's generated Python and C++, the
libraries built from it), so it is used only where no one else can have written it, along its whole
path (``check``, by ``bnn_zoo.core.fast.code_folder``'s rules: a folder above it that others can write
and is not sticky, a symbolic link another user owns on the way, a folder or file in it another
user owns or others can write, a symbolic link in it), as ssh's StrictModes refuses a key: in one line
before the run folder is made, and again where torch reads it, at each compile (``compile_cache``
names the folder and its fixes in the refusal the compile makes). A folder whose path holds white
space is not used (torch's C++ build cannot take one): the run compiles without keeping its steps,
and says so.

Usage::

    with compile_cache(plan.train.compile_cache, say=log):   # torch's caches in folder() while training
        warm(signature), mark(signature)
"""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterator

from ...core.errors import StorageError
from ...core.fast.code_folder import Unsafe, UnsafeFolder, problem

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
            "$XDG_CACHE_HOME/bnn_zoo/compile) for the next run of the same network and batch shape; what it "
            "holds is code that training runs, so a folder others can write is refused; "
            "train.compile_cache=false compiles afresh and keeps nothing")


def spaced(path: str | Path) -> bool:
    """Whether ``path`` holds white space, which torch's C++ build cannot take in its cache folder."""
    return any(c.isspace() for c in str(path))


def check() -> bool:
    """Whether ``folder()`` keeps the compiled steps: False where its path holds white space (``spaced``);
    made, yours alone, where missing; a StorageError, before any run folder is made, where it is not a
    folder, or it, a folder above it or anything in it could hold code another user wrote (``refused``)."""
    place = folder()
    if spaced(place):
        return False
    if place.exists() and not place.is_dir():
        raise StorageError(f"the compile cache {place} is a file, not a folder: {HOW}")
    try:
        place.mkdir(mode=0o700, parents=True, exist_ok=True)
        unsafe = problem(place)
    except OSError as err:
        raise StorageError(f"cannot use the compile cache {place} ({err.strerror or type(err).__name__}): {HOW}") from None
    if unsafe:
        raise refused(place, unsafe)
    return True


HOW = f"name a folder of your own ({CACHE_ENV}=DIR), or train without it (train.compile_cache=false)"


def refused(place: Path, unsafe: Unsafe) -> StorageError:
    """The one line that refuses the compile cache ``place``: what is wrong where, and the fixes."""
    fix = f"{unsafe.fix}, " if unsafe.fix else ""
    return StorageError(f"the compile cache {place} is not yours alone ({unsafe.why}); it holds code that training "
                        f"runs: {fix}{HOW}")


@contextmanager
def compile_cache(enabled: bool, say: Callable[[str], None] = print) -> Iterator[None]:
    """torch's compile caches in ``folder()`` inside the block (``enabled``; the folder ``check``ed,
    and where its path holds white space, not used: ``say`` tells so), as they were after it."""
    if not enabled:
        yield
        return
    before, kept = os.environ.get(TORCH_ENV), check()
    if kept:
        os.environ[TORCH_ENV] = str(folder())
    else:
        say(f"note: compiled steps are not kept: the compile cache folder {folder()} has white space in its path, "
            f"which torch's C++ build cannot take ({CACHE_ENV}=DIR names a folder without)")
        if before is not None and spaced(before):  # torch's own folder, then, not this one
            os.environ.pop(TORCH_ENV)
    try:
        yield
    except UnsafeFolder as err:  # found where torch reads it, at a compile: said as a training says it
        if kept and err.folder == Path(os.path.abspath(folder())):
            raise refused(folder(), err.unsafe) from None
        raise
    finally:
        if before is None:
            os.environ.pop(TORCH_ENV, None)
        else:
            os.environ[TORCH_ENV] = before


def _marker(signature: str) -> Path:
    return folder() / _STEPS / hashlib.sha256(signature.encode()).hexdigest()[:32]


def warm(signature: str) -> bool:
    """Whether a step of this signature was compiled into ``folder()`` before (never into one not used)."""
    return not spaced(folder()) and _marker(signature).is_file()


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
