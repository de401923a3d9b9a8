import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import tiny_config

from bnn_zoo import load
from bnn_zoo.checkpoint import CHECKPOINT, TWIN_CHECKPOINT
from bnn_zoo.errors import ConfigError, DataError
from bnn_zoo.runs import claim, existing_run, write_atomic
from bnn_zoo.train import config_for_run, train

TOY = {"train.epochs": 4, "train.eval_every": 2}


def test_a_new_run_stops_where_another_run_lives(tmp_path):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **TOY))
    before = (tmp_path / CHECKPOINT).read_bytes()
    with pytest.raises(ConfigError, match=r"holds a run already \(config.yaml, checkpoint.pt.*"
                                          r"resume=.*overwrite=true.*run_dir="):
        train(tiny_config("toy_mlp", run_dir=str(tmp_path), seed=1, **TOY))
    assert (tmp_path / CHECKPOINT).read_bytes() == before
    # replaced on request: the old twin goes with the old run, not left as the new run's twin
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), seed=1, overwrite=True, **{**TOY, "train.twin": False}))
    assert not (tmp_path / TWIN_CHECKPOINT).exists() and load(tmp_path).twin is None
    assert (tmp_path / CHECKPOINT).read_bytes() != before


def test_a_failed_replacement_leaves_the_old_run_whole(tmp_path):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **TOY))
    files = {name: (tmp_path / name).read_bytes() for name in existing_run(tmp_path)}
    with pytest.raises(DataError, match="MNIST not found"):  # overwrite=true, but its data is missing
        train(tiny_config("mnist_mlp", run_dir=str(tmp_path), overwrite=True,
                          **{"data.root": str(tmp_path / "nothing"), "data.download": False}))
    assert {name: (tmp_path / name).read_bytes() for name in existing_run(tmp_path)} == files
    assert load(tmp_path).config.arch == "toy_mlp"


def test_one_process_at_a_time_trains_into_a_folder(tmp_path):
    with claim(tmp_path):
        with pytest.raises(ConfigError, match=f"in use by process {os.getpid()}.*run_dir="):
            with claim(tmp_path, resuming=True):
                pass
    with claim(tmp_path):  # released
        pass


def test_a_killed_process_releases_its_run_directory(tmp_path):
    code = ("import sys, time\nfrom pathlib import Path\nfrom bnn_zoo.runs import claim\n"
            "with claim(Path(sys.argv[1])):\n    print('claimed', flush=True)\n    time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "claimed"
    with pytest.raises(ConfigError, match=f"in use by process {holder.pid}"):
        with claim(tmp_path):
            pass
    holder.send_signal(signal.SIGKILL), holder.wait()
    with claim(tmp_path):
        pass


def test_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    write_atomic(path, "old")

    def crash(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_atomic(path, "new")
    assert path.read_text() == "old"


def test_a_crash_mid_training_leaves_a_checkpoint_that_resumes(tmp_path):
    """kill -9 in the middle of a run: the checkpoint of the last evaluated epoch is whole."""
    code = ("import sys\nfrom bnn_zoo.train import main\n"
            "sys.exit(main(['toy_mlp', 'train.epochs=100000', 'train.eval_every=200', 'train.progress=false',"
            f" 'run_dir={tmp_path}']))")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / CHECKPOINT).exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    run.send_signal(signal.SIGKILL), run.wait()
    epoch = load(tmp_path).epoch
    assert epoch % 200 == 0 and epoch >= 200
    resumed = train(config_for_run(None, [f"resume={tmp_path}", f"train.epochs={epoch + 2}"]))
    assert [h["epoch"] for h in resumed["bayes"]["history"]][-1] == epoch + 2
