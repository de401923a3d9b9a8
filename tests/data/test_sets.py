
import pytest
import torch
from conftest import splits_of
from helpers import write_idx

from bnn_zoo.data.shifted import ood_sets as ood
from bnn_zoo.data import sets as data
from bnn_zoo.data.sets import DataError


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_round_trip(tmp_path, gz):
    images = torch.randint(0, 256, (5, 28, 28), dtype=torch.uint8)
    path = tmp_path / ("imgs.gz" if gz else "imgs")
    write_idx(path, images, gz)
    assert torch.equal(data.read_idx(path), images)


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01\x00\x00\x00\x01\x00")
    with pytest.raises(DataError, match="not an unsigned-byte IDX"):
        data.read_idx(tmp_path / "bad")
    write_idx(tmp_path / "short", torch.zeros(3, 2, 2))
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(DataError, match="truncated"):
        data.read_idx(tmp_path / "short")


def _mnist_folder(root, images=None, labels=None, gz=False):
    """ROOT/MNIST/raw with small train and test files (torchvision's names)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = torch.randint(0, 256, (20, 28, 28), dtype=torch.uint8) if images is None else images
    labels = torch.arange(20) % 10 if labels is None else labels
    for prefix in ("train", "t10k"):
        write_idx(raw / (f"{prefix}-images-idx3-ubyte" + ".gz" * gz), images, gz)
        write_idx(raw / (f"{prefix}-labels-idx1-ubyte" + ".gz" * gz), labels, gz)
    return raw


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_is_read_from_plain_or_gz_files_without_a_download(tmp_path, monkeypatch, gz):
    from torchvision import datasets

    monkeypatch.setattr(datasets.MNIST, "download", lambda self: pytest.fail("tried to download"))
    images = torch.randint(0, 256, (20, 28, 28), dtype=torch.uint8)
    _mnist_folder(tmp_path, images, gz=gz)
    x, y = data.load_torchvision("mnist", str(tmp_path), train=False, download=True)
    assert torch.equal(x, images) and torch.equal(y, torch.arange(20) % 10) and y.dtype == torch.int64


@pytest.mark.parametrize("damage, message", [
    ("int8_magic", r"t10k-labels-idx1-ubyte is not an unsigned-byte IDX file \(its magic number is 00000901"),
    ("label_200", r"t10k-labels-idx1-ubyte holds label 200; MNIST has classes 0-9"),
    ("truncated", r"t10k-images-idx3-ubyte is truncated"),
    ("wrong_magic", r"t10k-images-idx3-ubyte is not an unsigned-byte IDX file"),
    ("count", r"t10k-labels-idx1-ubyte holds \(19,\) labels for 20 images"),
])
def test_damaged_mnist_files_are_named(damage, message, tmp_path):
    raw = _mnist_folder(tmp_path)
    images, labels = raw / "t10k-images-idx3-ubyte", raw / "t10k-labels-idx1-ubyte"
    if damage == "int8_magic":
        labels.write_bytes(b"\x00\x00\x09" + labels.read_bytes()[3:])
    elif damage == "label_200":
        write_idx(labels, torch.tensor([200] + [1] * 19))
    elif damage == "truncated":
        images.write_bytes(images.read_bytes()[:5000])
    elif damage == "wrong_magic":
        images.write_bytes(b"\x00\x00\x08\x07" + images.read_bytes()[4:])
    else:
        write_idx(labels, torch.ones(19))
    with pytest.raises(DataError, match=message):
        data.load_torchvision("mnist", str(tmp_path), train=False, download=True)


def test_missing_mnist_offline_error(tmp_path, monkeypatch):
    with pytest.raises(DataError) as err:
        data.load_torchvision("mnist", str(tmp_path), download=False)
    message = str(err.value)
    for needed in (str(tmp_path.resolve() / "MNIST" / "raw"), "train-images-idx3-ubyte",
                   "data.root=DIR to train", "--data-root DIR to evaluate", "BNN_ZOO_DATA=DIR"):
        assert needed in message

    from torchvision import datasets

    def no_network(self):  # as torchvision reports it: a line per mirror tried
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://a/, got:\n"
                           "<urlopen error [Errno -3] Temporary failure in name resolution>")

    monkeypatch.setattr(datasets.MNIST, "download", no_network)
    with pytest.raises(DataError, match=r"the download failed \(RuntimeError: <urlopen error \[Errno -3\] Temporary "
                                        r"failure in name resolution>\)") as err:
        data.load_torchvision("mnist", str(tmp_path), download=True)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("root", ["new/data", "."], ids=["a_new_folder", "a_folder_there"])
def test_a_failed_download_leaves_no_empty_folder_behind(root, tmp_path, monkeypatch):
    """torchvision makes ROOT/MNIST/raw before it downloads; where the download fails (offline, here
    a mirror that refuses), the folders it made go again, and a folder that was there stays."""
    from torchvision import datasets

    monkeypatch.setattr(datasets.MNIST, "mirrors", ["http://127.0.0.1:9/"])  # nothing listens on port 9
    with pytest.raises(DataError, match=r"MNIST not found in .* and the download failed \(RuntimeError: "):
        data.load_torchvision("mnist", str(tmp_path / root), train=False, download=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_run_reads_the_user_s_data_folder_before_its_own(monkeypatch):
    """--data-root, then $BNN_ZOO_DATA, then the data.root the run trained with (of the machine it
    trained on), then ./data."""
    monkeypatch.setenv("BNN_ZOO_DATA", "env")
    assert data.run_data_root("given", "stored") == "given"
    assert data.run_data_root(None, "stored") == "env"
    monkeypatch.delenv("BNN_ZOO_DATA")
    assert data.run_data_root(None, "stored") == "stored"
    assert data.run_data_root(None, None) is None and data.data_root(None) == data.Path("data")


def test_a_run_that_finds_no_data_leaves_no_lock_or_folder(tmp_path):
    from conftest import tiny_config

    from bnn_zoo.cli.train import train

    run_dir = tmp_path / "run"
    with pytest.raises(DataError, match="MNIST not found"):
        train(tiny_config("mnist_mlp", run_dir=str(run_dir), **{"data.root": str(tmp_path / "nothing"), "data.download": False}))
    assert not run_dir.exists()


def test_data_root_order(monkeypatch, tmp_path):
    monkeypatch.setenv("BNN_ZOO_DATA", str(tmp_path))
    assert data.data_root("elsewhere") == data.Path("elsewhere")
    assert data.data_root() == tmp_path
    monkeypatch.delenv("BNN_ZOO_DATA")
    assert data.data_root() == data.Path("data")


def test_normalize_is_shared_and_checks_dtype():
    x = data.normalize(torch.zeros(2, 28, 28, dtype=torch.uint8))
    assert x.shape == (2, 1, 28, 28)
    assert torch.allclose(x, torch.full_like(x, -data.MNIST_MEAN / data.MNIST_STD))
    with pytest.raises(TypeError):
        data.normalize(torch.zeros(2, 28, 28))


def test_toy_sets():
    poly = data.toy_data("polynomial")
    assert poly.x.squeeze(-1).tolist() == pytest.approx([-2, -1.8, -1, 1, 1.8, 2])
    assert torch.allclose(poly.y, -poly.x.squeeze(-1) ** 4 + 3 * poly.x.squeeze(-1) ** 2 + 1)
    sine = data.toy_data("sinusoid", seed=0)
    assert sine.x.shape == (32, 1) and sine.x.min() == -0.5 and sine.x.max() == 0.5
    assert torch.equal(sine.y, data.toy_data("sinusoid", seed=0).y)
    residual = sine.y - 10 * torch.sin(2 * torch.pi * sine.x.squeeze(-1))
    assert 0.5 < residual.std() < 1.5
    with pytest.raises(DataError, match="unknown toy"):
        data.toy_data("cubic")


def test_validation_split_is_disjoint_and_fixed():
    train, val = data.validation_split(1000, 100)
    assert len(val) == 100 and len(train) == 900
    assert sorted(torch.cat([train, val]).tolist()) == list(range(1000))
    again_train, again_val = data.validation_split(1000, 100)
    assert torch.equal(val, again_val) and torch.equal(train, again_train)


def test_batches_cover_the_set_once():
    s = data.TensorSet(torch.arange(10).float().unsqueeze(1), torch.arange(10))
    seen = torch.cat([y for _, y in s.batches(3)])
    assert sorted(seen.tolist()) == list(range(10))


def test_real_mnist_splits(shared_data):
    from conftest import tiny_config

    cfg = tiny_config("mnist_mlp", **{"data.root": str(shared_data), "data.train_limit": "null",
                                      "data.test_limit": "null", "data.val_size": 5000})
    splits = splits_of(cfg)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (55000, 5000, 10000)
    assert abs(splits.train.x.mean()) < 0.05 and abs(splits.train.x.std() - 1) < 0.05
    assert splits.train.x.dtype == torch.float32 and splits.train.y.dtype == torch.int64
    letters = ood.load_notmnist(str(shared_data))
    assert letters.shape == (10000, 28, 28)
