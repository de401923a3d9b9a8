"""Compiled steps outlive their process (bnn_zoo.runs.training.compile_cache): torch's caches in the folder
--help names while a run trains, the note that a step is there, and a second process that loads
its compiled step from them where the first compiled it."""
import json
import os
import subprocess
import sys

import pytest

from bnn_zoo.cli.train import main
from bnn_zoo.core.errors import StorageError
from bnn_zoo.runs.training import compile_cache
from bnn_zoo.runs.training.compile_cache import CACHE_ENV, TORCH_ENV, folder, mark, warm


def test_the_folder_is_ours_else_torchs_else_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "ours"))
    monkeypatch.setenv(TORCH_ENV, str(tmp_path / "torchs"))
    assert folder() == tmp_path / "ours"
    monkeypatch.delenv(CACHE_ENV)
    assert folder() == tmp_path / "torchs"
    monkeypatch.delenv(TORCH_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert folder() == tmp_path / "xdg" / "bnn_zoo" / "compile"


def test_torch_caches_in_the_folder_while_training_and_as_they_were_after(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "ours"))
    monkeypatch.setenv(TORCH_ENV, str(tmp_path / "before"))
    with compile_cache.compile_cache(True):
        assert os.environ[TORCH_ENV] == str(tmp_path / "ours")
    assert os.environ[TORCH_ENV] == str(tmp_path / "before")
    with compile_cache.compile_cache(False):  # off: torch's caches are not ours to point anywhere
        assert os.environ[TORCH_ENV] == str(tmp_path / "before")
    monkeypatch.delenv(TORCH_ENV)
    with compile_cache.compile_cache(True):
        assert os.environ[TORCH_ENV] == str(tmp_path / "ours")
    assert TORCH_ENV not in os.environ


def test_a_step_compiled_before_is_warm_and_no_other_is(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(TORCH_ENV, str(tmp_path / "torchs"))  # torch compiled elsewhere: nothing noted here
    mark("mnist_mlp, batch 128")
    assert not warm("mnist_mlp, batch 128")
    with compile_cache.compile_cache(True):
        mark("mnist_mlp, batch 128")
    assert warm("mnist_mlp, batch 128") and not warm("mnist_mlp, batch 64")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert not warm("mnist_mlp, batch 128")


def test_help_names_the_folder_and_the_setting(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "kept"))
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"compiled training steps are kept in {tmp_path / 'kept'}" in shown
    assert "train.compile_cache=false compiles afresh" in shown


# a run in a process of its own; its last line: torch's counts of cache hits and the run's log
CHILD = ("import json, sys; from bnn_zoo.cli.train import main; main(sys.argv[1:]); "
         "from torch._dynamo.utils import counters; "
         "print(json.dumps({'fx': counters['inductor']['fxgraph_cache_hit'], "
         "'aot': counters['aot_autograd']['autograd_cache_hit']}))")


def compiled_run(tmp_path, name: str, *overrides: str) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", CHILD, "toy_mlp", f"run_dir={tmp_path / name}", "device=cpu",
                           "train.epochs=2", "train.capture=compile", "train.progress=false", "train.twin=false",
                           "train.test_samples=4", *overrides],
                          capture_output=True, text=True, env={**os.environ, CACHE_ENV: str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout


@pytest.mark.slow  # three processes that compile: about a minute on two cores
def test_a_second_process_loads_the_compiled_step_the_first_compiled(tmp_path):
    first, _ = compiled_run(tmp_path, "first")
    assert first == {"fx": 0, "aot": 0}
    second, log = compiled_run(tmp_path, "second", "seed=1")  # another seed: the same graph
    assert second["fx"] + second["aot"] >= 1, log
    off, _ = compiled_run(tmp_path, "off", "seed=2", "train.compile_cache=false")
    assert off == {"fx": 0, "aot": 0}
    assert len(list((tmp_path / "cache" / "bnn_zoo_steps").iterdir())) == 1  # the one step, noted once


# -- what the folder holds runs: only a folder no one else can have written is used ---------------

def refusal(monkeypatch, place) -> str:
    monkeypatch.setenv(CACHE_ENV, str(place))
    with pytest.raises(StorageError) as refused:
        compile_cache.check()
    return str(refused.value)


@pytest.mark.parametrize("mode, writers", [(0o777, "its group and others"), (0o775, "its group"), (0o757, "others")])
def test_a_cache_folder_others_can_write_is_refused(monkeypatch, tmp_path, mode, writers):
    place = tmp_path / "shared"
    place.mkdir()
    place.chmod(mode)
    assert refusal(monkeypatch, place) == (
        f"the compile cache {place} is not yours alone ({place} is writable by {writers} (mode {mode:o})); it holds "
        f"code that training runs: make it yours alone (chmod -R go-w {place}), name a folder of your own "
        "(BNN_ZOO_CACHE=DIR), or train without it (train.compile_cache=false)")


def test_a_file_others_can_write_is_refused_where_they_can_reach_it(monkeypatch, tmp_path):
    """A group-writable file (torch's under umask 002) inside a folder closed to others cannot be
    reached by them: used. Inside a folder they can pass through, it is refused."""
    place = tmp_path / "cache"
    graph = place / "fxgraph" / "ab" / "graph.py"
    graph.parent.mkdir(parents=True)
    graph.write_text("")
    for inside in (place / "fxgraph", place / "fxgraph" / "ab"):
        inside.chmod(0o775)
    graph.chmod(0o664)
    place.chmod(0o700)
    monkeypatch.setenv(CACHE_ENV, str(place))
    assert compile_cache.check() is True
    place.chmod(0o755)
    assert f"({place / 'fxgraph'} is writable by its group (mode 775))" in refusal(monkeypatch, place)
    for inside in (place / "fxgraph", place / "fxgraph" / "ab"):
        inside.chmod(0o755)
    assert f"({graph} is writable by its group (mode 664))" in refusal(monkeypatch, place)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root (os.chown)")
def test_a_cache_folder_or_a_file_another_user_owns_is_refused(monkeypatch, tmp_path):
    place = tmp_path / "theirs"
    place.mkdir(mode=0o700)
    os.chown(place, 12345, -1)
    assert refusal(monkeypatch, place) == (
        f"the compile cache {place} is not yours alone ({place} belongs to another user (uid 12345)); it holds "
        "code that training runs: name a folder of your own (BNN_ZOO_CACHE=DIR), or train without it "
        "(train.compile_cache=false)")
    os.chown(place, 0, -1)
    planted = place / "graph.py"
    planted.write_text("")
    os.chown(planted, 12345, -1)  # planted before the folder was closed, say
    assert f"({planted} belongs to another user (uid 12345))" in refusal(monkeypatch, place)


def test_a_folder_of_your_own_is_used_and_a_missing_one_is_made_yours_alone(monkeypatch, tmp_path):
    place = tmp_path / "mine"
    place.mkdir(mode=0o700)
    (place / "fxgraph").mkdir(mode=0o755)
    (place / "fxgraph" / "graph.py").write_text("")
    monkeypatch.setenv(CACHE_ENV, str(place))
    assert compile_cache.check() is True
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "new" / "cache"))
    assert compile_cache.check() is True
    assert (tmp_path / "new" / "cache").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("kind", ["a file", "writable by others"])
def test_a_refused_cache_stops_training_before_the_run_folder_is_made(monkeypatch, tmp_path, capsys, kind):
    """Issue 47: BNN_ZOO_CACHE naming a file left a half-made run folder that blocked the same
    command until overwrite=true."""
    place = tmp_path / "cache"
    if kind == "a file":
        place.write_text("not a folder")
    else:
        place.mkdir(mode=0o777)
        place.chmod(0o777)
    monkeypatch.setenv(CACHE_ENV, str(place))
    run = tmp_path / "run"
    assert main(["toy_mlp", f"run_dir={run}", "train.epochs=1", "train.progress=false", "device=cpu"]) == 2
    last = capsys.readouterr().err.strip().splitlines()
    assert len(last) == 1 and last[0].startswith(f"error: the compile cache {place} is ")
    assert not run.exists()


def test_a_cache_path_with_a_space_is_not_used_and_the_note_names_it(monkeypatch, tmp_path):
    """Issue 47: torch's C++ build failed in a folder whose path holds a space, and its note did not
    name the folder: the run keeps no compiled steps there, and says so in one line."""
    place = tmp_path / "my cache"
    said = []
    monkeypatch.setenv(CACHE_ENV, str(place))
    monkeypatch.setenv(TORCH_ENV, str(place))
    with compile_cache.compile_cache(True, said.append):
        assert TORCH_ENV not in os.environ  # torch's own folder, not the spaced one
        mark("mnist_mlp, batch 128")
    assert os.environ[TORCH_ENV] == str(place) and not place.exists() and not warm("mnist_mlp, batch 128")
    assert said == [f"note: compiled steps are not kept: the compile cache folder {place} has white space in its path, "
                    "which torch's C++ build cannot take (BNN_ZOO_CACHE=DIR names a folder without)"]


@pytest.mark.slow  # a compile: half a minute on two cores
def test_training_compiles_where_the_cache_path_holds_a_space(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.train", "toy_mlp", f"run_dir={tmp_path / 'run'}", "device=cpu",
                           "train.epochs=2", "train.capture=compile", "train.progress=false", "train.twin=false",
                           "train.test_samples=4"], capture_output=True, text=True,
                          env={**os.environ, CACHE_ENV: str(tmp_path / "my cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"the compile cache folder {tmp_path / 'my cache'} has white space" in done.stdout
    assert "torch.compile failed" not in done.stdout + done.stderr


# -- issue 51: the cache's whole path, and the check where torch reads it ---------------------------

NOBODY = 65534  # "another user": the tests run as root, who can give a folder away (os.chown)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root (os.chown)")
PLANT = "import pathlib; pathlib.Path({!r}).touch()  # another user's line\n"


def plant(place, marker) -> None:
    """A cached graph's module in ``place`` that leaves ``marker`` where it runs."""
    graph = place / "ab" / "cab.py"
    graph.parent.mkdir(parents=True, exist_ok=True)
    graph.write_text(PLANT.format(str(marker)))


def planted_cache(tmp_path, how: str):
    """A cache folder, yours and 0700, holding code another user can change: through ``how``."""
    if how == "a folder above it others can write":
        above = tmp_path / "pub"
        above.mkdir(mode=0o777)
        above.chmod(0o777)
        cache = above / "cache"
        cache.mkdir(mode=0o700)
        plant(cache, tmp_path / "ran")
        return cache, (f"{above}, a folder above it, is writable by its group and others without the sticky bit "
                       f"(mode 777)); it holds code that training runs: close it (chmod go-w {above}, or chmod +t "
                       f"{above} as /tmp is), ")
    cache, theirs = tmp_path / "cache", tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    theirs.mkdir(mode=0o777)
    theirs.chmod(0o777)
    plant(theirs, tmp_path / "ran")
    os.chown(theirs, NOBODY, -1)
    (cache / "fxgraph").symlink_to(theirs)
    return cache, (f"{cache / 'fxgraph'} is a symbolic link (to {theirs}), which compiled code is never kept in); it "
                   f"holds code that training runs: remove it (rm {cache / 'fxgraph'}), ")


@as_root
@pytest.mark.parametrize("how", ["a folder above it others can write", "a link in it to another user's folder"])
def test_a_cache_others_can_change_through_its_path_is_refused_before_the_run_folder(monkeypatch, tmp_path, capsys,
                                                                                      how):
    """Issue 51: BNN_ZOO_CACHE=PUB/cache, PUB writable by everyone without the sticky bit, or the
    cache's generated-code folder a link to a folder another user owns and anyone writes: accepted,
    and the other user's line ran in the training."""
    cache, why = planted_cache(tmp_path, how)
    monkeypatch.setenv(CACHE_ENV, str(cache))
    run = tmp_path / "run"
    assert main(["toy_mlp", f"run_dir={run}", "train.epochs=1", "train.progress=false", "device=cpu",
                 "train.capture=compile"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: the compile cache {cache} is not yours alone ({why}name a folder of your own (BNN_ZOO_CACHE=DIR), "
        "or train without it (train.compile_cache=false)"]
    assert not run.exists() and not (tmp_path / "ran").exists()


@as_root
def test_a_cache_swapped_after_the_check_is_refused_where_torch_would_read_it(monkeypatch, tmp_path, capsys):
    """Issue 51: the cache checked, then renamed away by another user and theirs moved into its
    place: the compile checks it again, compiles nothing, and the refusal names the folder."""
    import torch

    from bnn_zoo.cli import train as command

    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    begin, compiled = command._begin, []

    def swapped(*args):  # the run folder made, the cache checked long before: now it is swapped
        begin(*args)
        cache.rename(tmp_path / "away")
        cache.mkdir(mode=0o700)
        plant(cache, tmp_path / "ran")
        os.chown(cache, NOBODY, -1)

    monkeypatch.setattr(command, "_begin", swapped)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: compiled.append(1))
    assert main(["toy_mlp", f"run_dir={tmp_path / 'run'}", "train.epochs=1", "train.progress=false", "device=cpu",
                 "train.capture=compile", "train.twin=false"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: the compile cache {cache} is not yours alone ({cache} belongs to another user (uid {NOBODY})); it holds "
        "code that training runs: name a folder of your own (BNN_ZOO_CACHE=DIR), or train without it "
        "(train.compile_cache=false)"]
    assert compiled == [] and not (tmp_path / "ran").exists()


# the run of compiled_run, its cache swapped for PLANTED (another user's) once the run folder is made
SWAPPING = ("import os, sys; from bnn_zoo.cli import train as t; begin = t._begin; cache = os.environ['BNN_ZOO_CACHE']\n"
            "def swapped(*args):\n    begin(*args); os.rename(cache, cache + '.away'); os.rename(sys.argv[1], cache)\n"
            "t._begin = swapped; sys.exit(t.main(sys.argv[2:]))")


@as_root
@pytest.mark.slow  # two processes that compile and one refused: about a minute on two cores
def test_code_planted_in_a_warm_cache_runs_where_it_is_yours_and_not_where_it_was_swapped_in(tmp_path):
    """The plant is real: a line added to every cached module of a warm cache runs in the next
    training where the folder is yours (you wrote it); the same folder another user's, swapped in
    after the check, is refused at the compile and its line never runs."""
    compiled_run(tmp_path, "first")
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    modules = [p for p in cache.rglob("*.py") if "bnn_zoo_steps" not in p.parts]
    assert modules
    for module in modules:
        module.write_text(module.read_text() + "\n" + PLANT.format(str(marker)))
    compiled_run(tmp_path, "yours", "seed=1")
    assert marker.exists()  # the cached code ran: a folder others could change would run theirs
    marker.unlink()
    planted = tmp_path / "planted"
    os.rename(cache, planted)
    cache.mkdir(mode=0o700)  # the cache as checked: yours alone, empty
    for path in [planted, *planted.rglob("*")]:
        os.lchown(path, NOBODY, -1)
    done = subprocess.run([sys.executable, "-c", SWAPPING, str(planted), "toy_mlp", f"run_dir={tmp_path / 'swapped'}",
                           "device=cpu", "train.epochs=2", "train.capture=compile", "train.progress=false",
                           "train.twin=false", "train.test_samples=4", "seed=2"],
                          capture_output=True, text=True, env={**os.environ, CACHE_ENV: str(cache)})
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"error: the compile cache {cache} is not yours alone ({cache} belongs to another user (uid {NOBODY})); it holds "
        "code that training runs: name a folder of your own (BNN_ZOO_CACHE=DIR), or train without it "
        "(train.compile_cache=false)"], done.stderr[-2000:]
    assert not marker.exists()
