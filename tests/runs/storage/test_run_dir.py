import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import tiny_config

from bnn_zoo import load
from bnn_zoo.cli.train import config_for_run, train
from bnn_zoo.core.errors import ConfigError, DataError, StorageError
from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, TWIN_CHECKPOINT
from bnn_zoo.runs.storage.run_dir import claim, existing_run, write_atomic

TOY = {"train.epochs": 4, "train.eval_every": 2}


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_killed_process_releases_its_run_directory(tmp_path):
    code = ("import sys, time\nfrom pathlib import Path\nfrom bnn_zoo.runs.storage.run_dir import claim\n"
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
    with pytest.raises(StorageError, match="metrics.json keeps its previous content"):
        write_atomic(path, "new")
    assert path.read_text() == "old"


def _training(run_dir, *overrides: str) -> subprocess.Popen:
    """A toy run training into ``run_dir`` in a process of its own, to be killed."""
    code = ("import sys\nfrom bnn_zoo.cli.train import main\n"
            f"sys.exit(main(['toy_mlp', 'train.progress=false', *{list(overrides)!r}, 'run_dir={run_dir}']))")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_crash_mid_training_leaves_a_checkpoint_that_resumes(tmp_path):
    """kill -9 in the middle of a run: the checkpoint of the last evaluated epoch is whole."""
    run = _training(tmp_path, "train.epochs=100000", "train.eval_every=200")
    deadline = time.time() + 120
    while not (tmp_path / CHECKPOINT).exists() and time.time() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL), run.wait()  # mid-training: its next checkpoints are 200 epochs apart
    epoch = load(tmp_path).epoch
    assert epoch % 200 == 0 and epoch >= 200
    resumed = train(config_for_run(None, [f"resume={tmp_path}", f"train.epochs={epoch + 2}"]))
    assert [h["epoch"] for h in resumed["bayes"]["history"]][-1] == epoch + 2


@pytest.mark.slow
def test_overwrite_takes_only_the_old_runs_own_files(tmp_path):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **{**TOY, "train.members": 2, "train.test_samples": 4}))
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "members" / "notes.txt").write_text("mine too")
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), seed=1, overwrite=True, **TOY))
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "members" / "notes.txt").read_text() == "mine too"
    assert not (tmp_path / "members" / "1").exists() and load(tmp_path).members == []


def test_files_no_run_wrote_are_never_taken(tmp_path):
    """A folder holding a person's config.yaml and members/notes.txt, no run: overwrite=true deletes nothing."""
    (tmp_path / "config.yaml").write_text("arch: lenet  # my notes\n")
    (tmp_path / "members").mkdir()
    (tmp_path / "members" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds config.yaml, which no bnn-zoo run wrote there: move them away"):
        train(tiny_config("toy_mlp", run_dir=str(tmp_path), overwrite=True, **TOY))
    assert (tmp_path / "config.yaml").read_text() == "arch: lenet  # my notes\n"
    assert (tmp_path / "members" / "notes.txt").read_text() == "mine" and not (tmp_path / CHECKPOINT).exists()


@pytest.mark.slow
def test_resume_with_another_run_dir_is_refused(tmp_path):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path / "a"), **TOY))
    with pytest.raises(ConfigError, match=r"resume=\S+a continues the run in \S+a, not in \S+b: drop run_dir="):
        config_for_run(None, [f"resume={tmp_path / 'a'}", f"run_dir={tmp_path / 'b'}"])
    assert config_for_run(None, [f"resume={tmp_path / 'a'}", f"run_dir={tmp_path / 'a'}"]).run_dir == str(tmp_path / "a")


@pytest.mark.slow
def test_a_planted_link_in_a_run_directory_is_not_written_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".checkpoint.pt.tmp").symlink_to(outside)
    train(tiny_config("toy_mlp", run_dir=str(run), **TOY))
    assert outside.read_text() == "the user's" and load(run).epoch == 4
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(outside)
    with pytest.raises(StorageError, match=r"\.lock is a symbolic link"):
        train(config_for_run(None, [f"resume={run}", "train.epochs=6"]))
    assert outside.read_text() == "the user's"


def test_every_members_config_is_checked_before_the_first_trains(tmp_path):
    with pytest.raises(ConfigError, match="seed"):
        train(tiny_config("toy_mlp", run_dir=str(tmp_path), seed=2 ** 32 - 1,
                          **{**TOY, "train.members": 2, "train.test_samples": 4}))
    assert not (tmp_path / CHECKPOINT).exists()


@pytest.mark.slow
def test_an_ensemble_killed_inside_a_member_resumes(tmp_path):
    """kill -9 while member 2 trains (before or after its first checkpoint), then resume=RUN."""
    run = _training(tmp_path, "train.members=3", "train.epochs=400", "train.eval_every=100", "train.test_samples=6")
    member = tmp_path / "members" / "2"
    deadline = time.time() + 300
    while not (member / "config.yaml").exists() and time.time() < deadline and run.poll() is None:
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL), run.wait()
    assert (member / "config.yaml").exists(), run.stderr.read()
    resumed = train(config_for_run(None, [f"resume={tmp_path}"]))
    assert len(resumed["members"]) == 2
    trained = load(tmp_path)
    assert [m.epoch for m in trained.members] == [400, 400]


@pytest.mark.slow
@pytest.mark.parametrize("trouble, reason", [("read-only", "Read-only file system"),
                                           ("full", "No space left on device")])
def test_an_unwritable_run_directory_stops_resume_before_any_work(tmp_path, trouble, reason):
    from helpers import fill, remount_readonly, tmpfs

    with tmpfs(tmp_path / "disk", "8m") as disk:
        train(tiny_config("toy_mlp", run_dir=str(disk / "run"), **TOY))
        before = (disk / "run" / CHECKPOINT).read_bytes()
        remount_readonly(disk) if trouble == "read-only" else fill(disk)
        with pytest.raises(StorageError, match=rf"cannot write into \S+run \({reason}\)"):
            train(config_for_run(None, [f"resume={disk / 'run'}", "train.epochs=6"]))
        assert (disk / "run" / CHECKPOINT).read_bytes() == before and load(disk / "run").epoch == 4


@pytest.mark.slow
def test_a_disk_that_fills_during_training_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from bnn_zoo.runs.storage import files

    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **TOY))
    real, writes = files._create, []

    def full_at_checkpoints(folder, prefix):  # the resumed plan is stored, then the disk is full at epoch 6
        writes.append(prefix)
        if prefix == ".checkpoint.pt." and writes.count(prefix) > 1:
            raise OSError(28, "No space left on device")
        return real(folder, prefix)

    monkeypatch.setattr(files, "_create", full_at_checkpoints)
    with pytest.raises(StorageError, match=r"checkpoint.pt keeps its previous content; stopped. \S+checkpoint.pt "
                                           r"holds epoch 4: free space .* resume=\S+"):
        train(config_for_run(None, [f"resume={tmp_path}", "train.epochs=6"]))
    monkeypatch.undo()
    assert load(tmp_path).epoch == 4


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_an_ensemble_replaced_with_overwrite_trains_every_member_afresh(tmp_path):
    ensemble = {**TOY, "train.members": 2, "train.test_samples": 4}
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **ensemble))
    before = (tmp_path / "members" / "1" / CHECKPOINT).read_bytes()
    metrics = train(tiny_config("toy_mlp", run_dir=str(tmp_path), seed=7, overwrite=True, **ensemble))
    assert len(metrics["members"]) == 1 and (tmp_path / "members" / "1" / CHECKPOINT).read_bytes() != before
    assert [m.epoch for m in load(tmp_path).members] == [4]


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_links_among_an_ensemble_s_members_are_neither_followed_nor_deleted(tmp_path):
    ensemble = {**TOY, "train.members": 2, "train.test_samples": 4}
    other = tmp_path / "other"
    train(tiny_config("toy_mlp", run_dir=str(other), **ensemble))
    kept = {p: p.read_bytes() for p in (other / "members" / "1").iterdir() if p.is_file()}
    replaced = tmp_path / "b"
    train(tiny_config("toy_mlp", run_dir=str(replaced), **TOY))
    (replaced / "members").symlink_to(other / "members")  # a link to another run's members
    train(tiny_config("toy_mlp", run_dir=str(replaced), seed=3, overwrite=True, **TOY))
    adopting = tmp_path / "c"
    (adopting / "members").mkdir(parents=True)
    (adopting / "members" / "1").symlink_to(other / "members" / "1")
    with pytest.raises(StorageError, match=r"members/1 is a symbolic link; an ensemble's members live in its own"):
        train(tiny_config("toy_mlp", run_dir=str(adopting), **ensemble))
    assert {p: p.read_bytes() for p in (other / "members" / "1").iterdir() if p.is_file()} == kept


@pytest.mark.slow
def test_overwrite_leaves_a_folder_that_only_has_a_run_file_s_name(tmp_path):
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **TOY))
    (tmp_path / "eval.json").mkdir()
    (tmp_path / "eval.json" / "notes.txt").write_text("precious")
    train(tiny_config("toy_mlp", run_dir=str(tmp_path), seed=1, overwrite=True, **TOY))
    assert (tmp_path / "eval.json" / "notes.txt").read_text() == "precious"
