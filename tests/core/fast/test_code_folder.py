"""A folder of code that runs is used only where no one else can have written it, along its whole
path (bnn_zoo.core.fast.code_folder), as OpenSSH's StrictModes: the folders above it, the links on
the way, what is in it; and torch's compile cache is checked where torch reads it, at the compile.

The tests run as root, for whom every file is writable: "another user" is uid 65534 (nobody), given
a folder with os.chown, and "others can write" the mode bits, which the check reads."""
import os
from pathlib import Path

import pytest
import torch

from bnn_zoo.core.errors import StorageError
from bnn_zoo.core.fast import code_folder
from bnn_zoo.core.fast.code_folder import TORCH_ENV, TRITON_ENV, Unsafe, UnsafeFolder, before_compiling, problem
from bnn_zoo.core.fast.compiling import Compiled

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root (os.chown)")


def folder(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def planted(place: Path) -> Path:
    """A cached graph's module in ``place``, with a line another user added."""
    graph = place / "ab" / "cab.py"
    graph.parent.mkdir(parents=True, exist_ok=True)
    graph.write_text("import pathlib; pathlib.Path('/tmp/planted_ran').touch()\n")
    return graph


def test_a_folder_above_that_others_can_write_is_unsafe_unless_sticky(tmp_path):
    """Issue 51: PUB writable by everyone without the sticky bit, the cache in it yours and 0700, was
    accepted; another user could rename the cache away and put theirs in its place."""
    pub = folder(tmp_path / "pub", 0o777)
    cache = folder(pub / "cache")
    planted(cache)
    assert problem(cache) == Unsafe(f"{pub}, a folder above it, is writable by its group and others without the "
                                    f"sticky bit (mode 777)", f"close it (chmod go-w {pub}, or chmod +t {pub} as /tmp is)")
    pub.chmod(0o775)
    assert "is writable by its group without the sticky bit (mode 775)" in problem(cache).why
    pub.chmod(0o1777)  # as /tmp: no one renames away what is not theirs
    assert problem(cache) is None


@as_root
def test_a_folder_above_that_another_user_owns_is_unsafe(tmp_path):
    theirs = folder(tmp_path / "theirs", 0o755)
    cache = folder(theirs / "cache")
    os.chown(theirs, NOBODY, -1)
    assert problem(cache) == Unsafe(f"{theirs}, a folder above it, belongs to another user (uid {NOBODY})")


@as_root
def test_a_link_in_the_cache_to_a_folder_others_write_is_unsafe(tmp_path):
    """Issue 51: the cache yours and 0700, its generated-code subfolder a symbolic link (yours) to a
    folder another user owns and anyone can write: that user's line ran."""
    cache = folder(tmp_path / "cache")
    elsewhere = folder(tmp_path / "elsewhere", 0o777)
    planted(elsewhere)
    os.chown(elsewhere, NOBODY, -1)
    (cache / "fxgraph").symlink_to(elsewhere)
    assert problem(cache) == Unsafe(f"{cache / 'fxgraph'} is a symbolic link (to {elsewhere}), which compiled code "
                                    f"is never kept in", f"remove it (rm {cache / 'fxgraph'})")


def test_a_link_on_the_path_is_followed_where_it_is_yours_and_what_it_names_checked(tmp_path):
    real = folder(tmp_path / "real")
    cache = folder(real / "cache")
    (tmp_path / "short").symlink_to("real")  # a relative link, yours
    assert problem(tmp_path / "short" / "cache") is None
    real.chmod(0o777)  # the folder the link names is checked as any folder above the cache
    assert problem(tmp_path / "short" / "cache").why.startswith(f"{real}, a folder above it, is writable")
    real.chmod(0o700)
    (tmp_path / "to_cache").symlink_to(cache)  # the cache itself by a link: its real folder checked whole
    assert problem(tmp_path / "to_cache") is None
    (cache / "graph.py").write_text("")
    (cache / "graph.py").chmod(0o666)
    cache.chmod(0o755)  # others reach it now
    assert f"{cache / 'graph.py'} is writable by" in problem(tmp_path / "to_cache").why
    (tmp_path / "loop").symlink_to("loop")
    assert problem(tmp_path / "loop").why == f"{tmp_path / 'loop'} takes more than 40 symbolic links"


@as_root
def test_a_link_on_the_path_that_another_user_owns_is_unsafe(tmp_path):
    """Only its owner (or root) can point it elsewhere: in a sticky /tmp, say, one of another user's."""
    cache = folder(tmp_path / "real" / "cache")
    link = tmp_path / "link"
    link.symlink_to(cache.parent)
    os.lchown(link, NOBODY, -1)
    assert problem(link / "cache") == Unsafe(f"{link} is a symbolic link another user owns (uid {NOBODY})")


def test_torch_reads_its_cache_from_the_folder_checked_before_a_compile(monkeypatch, tmp_path):
    """The folder inductor keeps and loads compiled code in (torch._inductor.runtime.cache_dir_utils:
    private, pinned here) is the one checked: $TORCHINDUCTOR_CACHE_DIR, else torch's own default."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    monkeypatch.delenv(TORCH_ENV, raising=False)
    monkeypatch.delenv(TRITON_ENV, raising=False)
    assert code_folder.torch_folders() == [Path(default_cache_dir())]
    monkeypatch.setenv(TORCH_ENV, str(tmp_path / "inductor"))
    monkeypatch.setenv(TRITON_ENV, str(tmp_path / "triton"))
    assert code_folder.torch_folders() == [Path(cache_dir()), tmp_path / "triton"]


def test_a_cache_missing_before_a_compile_is_made_yours_alone(monkeypatch, tmp_path):
    monkeypatch.setenv(TORCH_ENV, str(tmp_path / "new" / "inductor"))
    monkeypatch.delenv(TRITON_ENV, raising=False)
    before_compiling()
    assert (tmp_path / "new" / "inductor").stat().st_mode & 0o777 == 0o700


@as_root
def test_a_cache_swapped_after_it_was_checked_is_refused_at_the_compile(monkeypatch, tmp_path):
    """Issue 51: the cache checked, then renamed away and another user's folder put in its place:
    the compile, which is where torch reads it, checks it again and compiles nothing."""
    cache = folder(tmp_path / "cache")
    monkeypatch.setenv(TORCH_ENV, str(cache))
    monkeypatch.delenv(TRITON_ENV, raising=False)
    before_compiling()  # checked: yours alone
    cache.rename(tmp_path / "away")
    planted(folder(cache))
    os.chown(cache, NOBODY, -1)
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda *a, **k: compiled.append(1))
    run = Compiled(lambda tensors: tensors[0] + 1, pytest.fail, "never", cuda_graphs=False)
    with pytest.raises(UnsafeFolder) as refused:
        run([torch.ones(2)])
    assert str(refused.value) == (f"torch's compile cache {cache} is not yours alone ({cache} belongs to another user "
                                  f"(uid {NOBODY})); it holds code that compiling runs: point $TORCHINDUCTOR_CACHE_DIR "
                                  "at a folder of your own")
    assert isinstance(refused.value, StorageError) and compiled == [] and run.run is None
