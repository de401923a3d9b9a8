"""Compiled steps outlive their process (bnn_zoo.runs.compile_cache): torch's caches in the folder
--help names while a run trains, the note that a step is there, and a second process that loads
its compiled step from them where the first compiled it."""
import json
import os
import subprocess
import sys

import pytest

from bnn_zoo.cli.train import main
from bnn_zoo.runs import compile_cache
from bnn_zoo.runs.compile_cache import CACHE_ENV, TORCH_ENV, folder, mark, warm


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
