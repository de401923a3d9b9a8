import json

import pytest
from helpers import fill, remount_readonly, tmpfs

from bnn_zoo.core.errors import StorageError
from bnn_zoo.runs.storage.files import check_writable, make_folder, open_lock, read_json, write_atomic


def test_a_planted_link_at_the_temporary_name_is_not_written_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file")
    run = make_folder(tmp_path / "run")
    for name in ("metrics.json.tmp", ".metrics.json.tmp"):  # the temporary names a writer could be guessed to use
        (run / name).symlink_to(outside)
    write_atomic(run / "metrics.json", "{}")
    assert outside.read_text() == "the user's own file"
    assert (run / "metrics.json").read_text() == "{}" and not (run / "metrics.json").is_symlink()
    assert not list(run.glob(".metrics.json.*.tmp"))  # its own temporary file renamed, none left


def test_two_writers_of_one_file_each_write_whole(tmp_path):
    """Each write has a temporary file of its own: a second writer never takes the first one's."""
    import threading

    from bnn_zoo.runs.storage import files

    path, started, go = tmp_path / "calibration.json", threading.Event(), threading.Event()
    real, errors = files._create, []

    def slow_first(folder, prefix):  # the first writer waits, its temporary file open, while the second writes
        f, tmp = real(folder, prefix)
        if not started.is_set():
            started.set()
            go.wait(10)
        return f, tmp

    def write(text):
        try:
            write_atomic(path, text)
        except StorageError as err:
            errors.append(err)

    files._create = slow_first
    try:
        first = threading.Thread(target=write, args=("A" * 1000,))
        first.start()
        started.wait(10)
        write("B" * 1000)
        assert path.read_text() == "B" * 1000
        go.set()
        first.join(10)
    finally:
        files._create = real
    assert errors == [] and path.read_text() == "A" * 1000 and not list(tmp_path.glob("*.tmp"))


def test_a_link_at_the_target_is_refused(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    (tmp_path / "eval.json").symlink_to(outside)
    with pytest.raises(StorageError, match=r"eval.json is a symbolic link; bnn-zoo writes only files it makes"):
        write_atomic(tmp_path / "eval.json", "{}")
    assert outside.read_text() == "keep" and (tmp_path / "eval.json").is_symlink()


def test_a_lock_file_that_is_a_link_is_refused(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not to be truncated")
    (tmp_path / ".lock").symlink_to(outside)
    with pytest.raises(StorageError, match=r"\.lock is a symbolic link"):
        open_lock(tmp_path / ".lock")
    assert outside.read_text() == "not to be truncated"


def test_a_failed_write_keeps_the_old_file_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    write_atomic(path, "old")

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", disk_full)
    with pytest.raises(StorageError, match=r"cannot write .*metrics.json \(No space left on device\); "
                                           r"metrics.json keeps its previous content"):
        write_atomic(path, "new")
    assert path.read_text() == "old" and not list(tmp_path.glob(".metrics.json.*.tmp"))


def test_a_full_disk_keeps_the_old_file(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        write_atomic(disk / "checkpoint.pt", b"old weights")
        fill(disk)
        with pytest.raises(StorageError, match="No space left on device.*keeps its previous content"):
            write_atomic(disk / "checkpoint.pt", bytes(1 << 20))
        assert (disk / "checkpoint.pt").read_bytes() == b"old weights"
        with pytest.raises(StorageError, match=r"cannot write into .*disk \(No space left on device\)"):
            check_writable(disk)


def test_a_read_only_folder_fails_the_check_before_any_work(tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        write_atomic(disk / "calibration.json", "{}")
        remount_readonly(disk)
        with pytest.raises(StorageError, match=r"cannot write into .*disk \(Read-only file system\)"):
            check_writable(disk)
        assert (disk / "calibration.json").read_text() == "{}"


def test_folders_that_cannot_be_made_are_one_line(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(StorageError, match="dangling is a symbolic link to .*nowhere, which does not exist"):
        make_folder(tmp_path / "dangling")
    with pytest.raises(StorageError, match=r"cannot (use|create) folder .* \(File name too long\)"):
        make_folder(tmp_path / ("x" * 300))


@pytest.mark.parametrize("text, reason", [('{"bayes": {"rule"', "Expecting"),
                                          ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                                          (b"\xff\xfe", "codec")])
def test_json_files_that_cannot_be_read_name_the_file(tmp_path, text, reason):
    path = tmp_path / "metrics.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(StorageError, match=f"{path} is not a readable metrics file .*{reason}.*train again"):
        read_json(path, "metrics file", "train again")
    with pytest.raises(StorageError, match=f"no metrics file at {tmp_path / 'none.json'}: train again"):
        read_json(tmp_path / "none.json", "metrics file", "train again")
    path.write_text(json.dumps({"a": 1}))
    assert read_json(path, "metrics file", "train again") == {"a": 1}
