"""Where compiled training steps outlive their process: torch's own caches (inductor's FX graphs,
AOTAutograd's, Triton's kernels) in one folder, ``$BNN_ZOO_CACHE`` (else ``$TORCHINDUCTOR_CACHE_DIR``,
else ``$XDG_CACHE_HOME/bnn_zoo/compile``, by default ``~/.cache/bnn_zoo/compile``), so that a run
of an architecture and batch shape compiled before (a resume, a second run, another seed) loads
its compiled step instead of compiling it. ``train.compile_cache=false`` compiles afresh and keeps
nothing. Beside torch's files, one empty file per compiled step, named by the step's signature,
says the cache holds it (``warm``): what ``bnn_zoo.core.fast.captured_step.choose`` weighs.

What the folder holds is code that training runs (inductor's generated Python and C++, the
libraries built from it), so it is used only where no one else can have written it (``check``): a
folder another user owns, or that others can write, or a file in it that is so, is refused in one
line, as ssh refuses a key others can read. A folder whose path holds white space is not used
(torch's C++ build cannot take one): the run compiles without keeping its steps, and says so.

Usage::

    with compile_cache(plan.train.compile_cache, say=log):   # torch's caches in folder() while training
        warm(signature), mark(signature)
"""
from __future__ import annotations

import hashlib
import os
import stat
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterator

from ...core.errors import StorageError

CACHE_ENV, TORCH_ENV = "BNN_ZOO_CACHE", "TORCHINDUCTOR_CACHE_DIR"
_STEPS = "bnn_zoo_steps"  # the markers' subfolder
GROUP, OTHERS = (stat.S_IWGRP, stat.S_IXGRP), (stat.S_IWOTH, stat.S_IXOTH)  # (can write, can pass through)


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
    folder, or it or anything in it could hold code another user wrote (``_not_yours``)."""
    place = folder()
    if spaced(place):
        return False
    how = f"name a folder of your own ({CACHE_ENV}=DIR), or train without it (train.compile_cache=false)"
    if place.exists() and not place.is_dir():
        raise StorageError(f"the compile cache {place} is a file, not a folder: {how}")
    try:
        place.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = _not_yours(place)
    except OSError as err:
        raise StorageError(f"cannot use the compile cache {place} ({err.strerror or type(err).__name__}): {how}") from None
    if why:
        fix = "" if "another user" in why else f"make it yours alone (chmod -R go-w {place}), "
        raise StorageError(f"the compile cache {place} is not yours alone ({why}); it holds code that training "
                           f"runs: {fix}{how}")
    return True


WRITERS = {"its group": (stat.S_IWGRP, stat.S_IXGRP), "others": (stat.S_IWOTH, stat.S_IXOTH)}  # (writes, passes)


def _not_yours(root: Path) -> str | None:
    """Why ``root`` or what it holds could hold code another user wrote, or None: it or anything in
    it owned by another user, ``root`` writable by its group or others, anything in it writable by
    those of them who can reach it (every folder on the way lets them pass: the one bnn-zoo makes
    does not, so what torch writes in it under any umask is yours alone)."""
    me, info = os.geteuid(), root.stat()
    why = _why(str(root), info, me, stat.S_IXGRP | stat.S_IXOTH)
    passes = {str(root): info.st_mode}  # the pass bits that reach into each folder
    for top, folders, files in os.walk(root):  # links are not followed
        for name in (*folders, *files):
            if why:
                return why
            path = os.path.join(top, name)
            held = os.lstat(path)
            why = _why(path, held, me, passes[top])
            if stat.S_ISDIR(held.st_mode):
                passes[path] = passes[top] & held.st_mode
    return why


def _why(path: str, held: os.stat_result, me: int, reach: int) -> str | None:
    """Why ``path`` (its lstat ``held``) could hold another user's code, reached by those whose pass
    bits ``reach`` holds; None where it cannot."""
    if held.st_uid != me:
        return f"{path} belongs to another user (uid {held.st_uid})"
    writers = [who for who, (writes, passes) in WRITERS.items()
               if reach & passes and held.st_mode & writes and not stat.S_ISLNK(held.st_mode)]
    return f"{path} is writable by {' and '.join(writers)} (mode {stat.S_IMODE(held.st_mode):o})" if writers else None


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
