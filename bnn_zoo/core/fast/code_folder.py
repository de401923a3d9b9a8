"""A folder of code that runs (torch's compile cache: inductor's generated Python and C++, the
libraries built from it, Triton's kernels, the pickled graphs that name them) is used only where no
one else can have written it, along its whole path, as OpenSSH's StrictModes checks every folder
above ``authorized_keys`` (``problem``):

- every folder on its path, from ``/`` down, belongs to you or root and is writable by neither its
  group nor others, or is sticky (as ``/tmp`` is: there no one renames away what is not theirs);
- a symbolic link on the path is followed only where it is yours or root's (who alone can change
  it), and the path it names is checked alike;
- the folder and everything in it are yours, no symbolic link is in it, and nothing in it is
  writable by those of its group or others who can reach it (every folder on the way lets them pass).

``before_compiling`` makes the check where torch reads the folder, at each compile
(``bnn_zoo.core.fast.compiling.Compiled``), not only before a run: a refusal is an ``UnsafeFolder``,
one line naming what is wrong where and how to fix it.

Usage::

    unsafe = problem(Path("~/.cache/bnn_zoo/compile").expanduser())   # Unsafe(why, fix) or None
    before_compiling()          # UnsafeFolder where the folders torch loads compiled code from are not safe
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import StorageError

TORCH_ENV, TRITON_ENV = "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"
WRITERS = {"its group": (stat.S_IWGRP, stat.S_IXGRP), "others": (stat.S_IWOTH, stat.S_IXOTH)}  # (writes, passes)
LINKS = 40  # the symbolic links one path may take, as Linux's own limit


@dataclass(frozen=True)
class Unsafe:
    """Why a folder could hold code another user wrote (naming the path at fault), and how to fix it
    (None: only another folder does)."""

    why: str
    fix: Optional[str] = None


class UnsafeFolder(StorageError):
    """torch's compile cache could hold another user's code: refused before torch reads it."""

    def __init__(self, folder: Path, unsafe: Unsafe):
        fix = f"{unsafe.fix}, or " if unsafe.fix else ""
        super().__init__(f"torch's compile cache {folder} is not yours alone ({unsafe.why}); it holds code that "
                         f"compiling runs: {fix}point ${TORCH_ENV} at a folder of your own")
        self.folder, self.unsafe = folder, unsafe


def torch_folders() -> list[Path]:
    """The folders torch loads compiled code from: ``$TORCHINDUCTOR_CACHE_DIR``, else torch's own
    default (``/tmp/torchinductor_USER``); and ``$TRITON_CACHE_DIR`` where it is set."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # where inductor keeps it unless told

    folders = [Path(os.environ.get(TORCH_ENV) or default_cache_dir())]
    return folders + ([Path(os.environ[TRITON_ENV])] if os.environ.get(TRITON_ENV) else [])


def before_compiling() -> None:
    """Each of ``torch_folders()``, made yours alone where missing (as torch would make it, but
    closed to others whatever the umask), checked (``problem``): an UnsafeFolder where one is not safe."""
    for folder in torch_folders():
        folder = Path(os.path.abspath(folder.expanduser()))
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            unsafe = problem(folder)
        except OSError as err:
            unsafe = Unsafe(f"it cannot be checked: {err.strerror or type(err).__name__}")
        if unsafe:
            raise UnsafeFolder(folder, unsafe)


def problem(folder: Path) -> Optional[Unsafe]:
    """Why the existing ``folder`` could hold code another user wrote, through its path or in it,
    or None (the module's rules); OSError where it cannot be read."""
    real, unsafe = _path(Path(os.path.abspath(folder)))
    return unsafe or _inside(real)


def _path(folder: Path) -> tuple[Path, Optional[Unsafe]]:
    """``folder``'s real path, walked from ``/`` one step at a time (its symbolic links followed
    where they are yours or root's), and why a folder above it is not safe, or None."""
    me, here, todo, links = os.geteuid(), Path("/"), list(folder.parts[1:]), 0
    unsafe = _above(here, os.lstat(here), me)
    while todo and unsafe is None:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            here = here.parent  # ``here`` holds no link: its parent is the real one
            continue
        step = here / name
        held = os.lstat(step)
        if stat.S_ISLNK(held.st_mode):
            links += 1
            if held.st_uid not in (me, 0):
                return step, Unsafe(f"{step} is a symbolic link another user owns (uid {held.st_uid})")
            if links > LINKS:
                return step, Unsafe(f"{step} takes more than {LINKS} symbolic links")
            target = Path(os.readlink(step))
            here, todo = (Path("/") if target.is_absolute() else here), [*target.parts[target.is_absolute():], *todo]
            continue
        here = step
        if todo:  # a folder above the one checked whole
            unsafe = _above(step, held, me)
    return here, unsafe


def _above(path: Path, held: os.stat_result, me: int) -> Optional[Unsafe]:
    """Why a folder above the cache (its lstat ``held``) lets another user change what lies below
    it: not yours or root's, or writable by its group or others and not sticky."""
    if held.st_uid not in (me, 0):
        return Unsafe(f"{path}, a folder above it, belongs to another user (uid {held.st_uid})")
    writers = [who for who, (writes, _) in WRITERS.items() if held.st_mode & writes]
    if writers and not held.st_mode & stat.S_ISVTX:
        return Unsafe(f"{path}, a folder above it, is writable by {' and '.join(writers)} without the sticky bit "
                      f"(mode {stat.S_IMODE(held.st_mode):o})", f"close it (chmod go-w {path}, or chmod +t {path} as "
                      "/tmp is)")
    return None


def _inside(root: Path) -> Optional[Unsafe]:
    """Why ``root`` or what it holds could hold code another user wrote, or None: it or anything in
    it owned by another user, a symbolic link in it, ``root`` writable by its group or others,
    anything in it writable by those of them who can reach it (every folder on the way lets them
    pass: a folder made yours alone does not, so what torch writes in it under any umask is yours
    alone)."""
    me, info = os.geteuid(), os.lstat(root)
    unsafe = _own(str(root), info, me, stat.S_IXGRP | stat.S_IXOTH, root)
    passes = {str(root): info.st_mode}  # the pass bits that reach into each folder
    for top, folders, files in os.walk(root):  # links are not followed
        for name in (*folders, *files):
            if unsafe:
                return unsafe
            path = os.path.join(top, name)
            held = os.lstat(path)
            unsafe = _own(path, held, me, passes[top], root)
            if stat.S_ISDIR(held.st_mode):
                passes[path] = passes[top] & held.st_mode
    return unsafe


def _own(path: str, held: os.stat_result, me: int, reach: int, root: Path) -> Optional[Unsafe]:
    """Why ``path`` in the folder ``root`` (its lstat ``held``) could hold another user's code,
    reached by those whose pass bits ``reach`` holds; None where it cannot."""
    if held.st_uid != me:
        return Unsafe(f"{path} belongs to another user (uid {held.st_uid})")
    if stat.S_ISLNK(held.st_mode):
        return Unsafe(f"{path} is a symbolic link (to {os.readlink(path)}), which compiled code is never kept in",
                      f"remove it (rm {path})")
    writers = [who for who, (writes, passes) in WRITERS.items() if reach & passes and held.st_mode & writes]
    if writers:
        return Unsafe(f"{path} is writable by {' and '.join(writers)} (mode {stat.S_IMODE(held.st_mode):o})",
                      f"make it yours alone (chmod -R go-w {root})")
    return None
