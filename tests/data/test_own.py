"""Your own data through the whole product: a folder of PNGs, a CSV table, a tensor file; and the
one-line errors bad data gets."""
import json
import math

import numpy as np
import pyro
import pytest
import torch
from conftest import NO_MNIST, splits_of, tiny_config
from PIL import Image

from bnn_zoo import load
from bnn_zoo.cli.predict import main as predict_main
from bnn_zoo.cli.train import train
from bnn_zoo.core.errors import ConfigError, DataError
from bnn_zoo.data.own import SPLIT_SEED, read_own
from bnn_zoo.data.profile import NOISE_FLOOR, DataProfile, least_squares_sd
from bnn_zoo.data.sets import validation_split
from bnn_zoo.evaluation.evaluate import evaluate_run
from bnn_zoo.runs.plans.checks import check_network_fits
from bnn_zoo.runs.plans.config import make_config, resolved, with_profile
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.storage.trained import posteriors

NAMES = {0: "zero", 1: "one", 7: "seven"}


class Payload:
    """A Python object in a tensor file: torch.load(weights_only=True) decodes none."""


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    """MNIST digits 0, 1 and 7 as PNG files, 50 of each to train on and 15 to test, in
    train/CLASS and test/CLASS folders; and 30 notMNIST letters in a folder of their own."""
    from conftest import SHARED_DATA

    from bnn_zoo.data.shifted.ood_sets import load_notmnist
    from bnn_zoo.data.sets import load_torchvision

    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    root = tmp_path_factory.mktemp("pngs")
    images, labels = load_torchvision("mnist", str(SHARED_DATA), train=True, download=False)
    for part, start, count in (("train", 0, 50), ("test", 10000, 15)):
        for digit, name in NAMES.items():
            (root / part / name).mkdir(parents=True)
            for i in ((labels[start:] == digit).nonzero()[:count, 0] + start).tolist():
                Image.fromarray(images[i].numpy()).save(root / part / name / f"{i}.png")
    (root / "letters").mkdir()
    for i, letter in enumerate(load_notmnist(str(SHARED_DATA))[:30]):
        Image.fromarray(letter.numpy()).save(root / "letters" / f"{i}.png")
    return root


def own_config(arch, run_dir, **overrides):
    return tiny_config(arch, **{"run_dir": str(run_dir), "data.train_limit": "null", "data.test_limit": "null",
                                "data.val_size": "null", "abstention.risk": 0.4, "abstention.delta": 0.2,
                                "abstention.max_refusal": 0.1, "abstention.samples": 4, **overrides})


@pytest.fixture(scope="module")
def folder_run(pngs, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("folder_run")
    train(own_config("lenet", run_dir, **{"data.name": "folder", "data.path": str(pngs), "train.epochs": 5, "train.batch_size": 16,
                                         "data.ood": f"{{my_letters: {pngs / 'letters'}}}",
                                         "train.lr": 0.01}))
    return run_dir


def test_a_folder_of_pngs_trains_certifies_and_answers_in_its_own_class_names(pngs, folder_run, tmp_path, capsys):
    trained = load(folder_run)
    data = trained.data  # the typed section: its statistics are held beside the config
    assert data.classes == ["one", "seven", "zero"] and data.input_shape == [1, 28, 28]  # ImageFolder's order
    assert data.val_size == 150 // 5 and data.path == str(pngs.resolve())
    # the statistics are the training split's (not validation's, not the test folder's): read the PNGs ourselves
    files = sorted((pngs / "train").glob("*/*.png"), key=lambda p: (p.parent.name, p.name))
    pixels = torch.stack([torch.from_numpy(np.asarray(Image.open(f), dtype=np.float32)) / 255 for f in files])
    train_idx, _ = validation_split(len(files), 30)
    assert data.mean[0] == pytest.approx(pixels[train_idx].mean().item(), abs=1e-6)
    assert data.std[0] == pytest.approx(pixels[train_idx].std().item(), abs=1e-6)
    assert "rule" in trained.calibration["bayes"]  # certified on its 30 validation images
    # predict: a digit of the test folder, read at the run's size and statistics, answered in class names
    seven = sorted((pngs / "test" / "seven").glob("*.png"))[0]
    assert predict_main([str(folder_run), str(seven), "--json", "--samples", "8"]) == 0
    answer = json.loads(capsys.readouterr().out)["answers"][0]
    pixels = torch.from_numpy(np.asarray(Image.open(seven), dtype=np.float32))[None, None] / 255
    pyro.set_rng_seed(0)  # predict's default --seed
    probs = posteriors(trained)["bayes"].predict(DataProfile([1, 28, 28], None, list(data.mean), list(data.std)).normalize(pixels), 8)
    expected = trained.rules_for()["bayes"](probs).describe(0)
    assert answer["accepted"] == {str(k): v for k, v in expected["accepted"].items()}
    assert answer["label"] == (None if expected["answer"] is None else data.classes[expected["answer"]])
    # evaluate: its own test folder, and its data.ood folder of letters, scored under its name (not the built-in set's)
    result = evaluate_run(folder_run, num_samples=4, ood_size=30)  # all 30 letters
    assert result.test_size == 45 and set(result.posteriors["bayes"].ood) == {"my_letters"}
    twin = posteriors(trained)["twin"]
    refused = trained.rules_for()["twin"](twin.predict(_letters(pngs, data))).refused  # the twin draws nothing
    assert result.posteriors["twin"].ood["my_letters"].refused == pytest.approx(refused.float().mean().item())


def _letters(pngs, data):
    files = sorted((pngs / "letters").rglob("*.png"))
    pixels = torch.stack([torch.from_numpy(np.asarray(Image.open(f), dtype=np.float32)) / 255 for f in files])[:, None]
    return DataProfile(list(data.input_shape), None, list(data.mean), list(data.std)).normalize(pixels)


def test_the_page_answers_a_folder_run_with_its_statistics_and_class_names(folder_run):
    from bnn_zoo.page.answers import Answerer

    pixels = torch.zeros(28, 28, dtype=torch.uint8)
    pixels[4:24, 13:15] = 255  # a one
    answer = Answerer(str(folder_run), "cpu").answer(str(folder_run), pixels, samples=6, seed=3)
    trained = load(folder_run, "cpu")
    data = trained.data
    x = (pixels.float()[None, None] / 255 - data.mean[0]) / data.std[0]  # the run's statistics, not MNIST's
    pyro.set_rng_seed(3)
    probs = posteriors(trained)["bayes"].predict(x, 6)
    assert answer["classes"] == ["one", "seven", "zero"]
    assert torch.allclose(torch.tensor(answer["samples"]), probs[:, 0], atol=1e-6)


def test_the_page_reads_an_upload_as_the_folder_run_read_its_images(folder_run):
    """Neither centred nor inverted, as MNIST-style drawings are: the whole image, resized."""
    import io

    from starlette.testclient import TestClient

    from bnn_zoo.page.answers import Answerer
    from bnn_zoo.page.app import create_app

    corner = np.zeros((56, 56), dtype=np.uint8)
    corner[2:20, 4:8] = 255  # a stroke in a corner, on a larger canvas
    body = io.BytesIO()
    Image.fromarray(corner).save(body, format="PNG")
    client = TestClient(create_app(Answerer(str(folder_run), "cpu")), base_url="http://localhost")
    found = client.post(f"/api/answer?model={folder_run}&samples=2", content=body.getvalue()).json()
    expected = np.asarray(Image.fromarray(corner).resize((28, 28), Image.BILINEAR))
    assert np.array_equal(np.array(found["pixels"], dtype=np.uint8), expected)


def test_a_folder_that_lost_a_class_is_refused(pngs, folder_run, tmp_path):
    import shutil

    moved = tmp_path / "data"
    shutil.copytree(pngs, moved)
    shutil.rmtree(moved / "train" / "zero")
    shutil.rmtree(moved / "test" / "zero")
    cfg = load(folder_run).config
    cfg.data.path = str(moved)
    with pytest.raises(DataError, match=r"now holds inputs \[1, 28, 28\] of classes \['one', 'seven'\].*where the run trained"):
        splits_of(cfg)


def write_csv(path, header, rows):
    path.write_text("\n".join(",".join(map(str, r)) for r in [header, *rows]) + "\n")


def flowers(n=240, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    x = torch.tensor([[0.0, 0, 5], [4, 4, 5], [0, 4, 9]])[y] + torch.randn(n, 3, generator=g)
    return x, y


def test_a_csv_classifier_reads_its_columns_by_name(tmp_path, capsys):
    x, y = flowers()
    names = ["virginica", "setosa", "versicolor"]
    write_csv(tmp_path / "f.csv", ["a", "species", "b", "c"], [[f"{r[0]:.4f}", names[k], f"{r[1]:.4f}", f"{r[2]:.4f}"]
                                                           for r, k in zip(x.tolist(), y.tolist())])
    run_dir = tmp_path / "run"
    train(own_config("mnist_mlp", run_dir, **{"data.name": "csv", "data.path": str(tmp_path / "f.csv"),
                                              "data.target": "species", "model.hidden": "[16]", "train.epochs": 20,
                                              "train.lr": 0.01}))
    trained = load(run_dir)
    data = trained.data
    assert data.classes == ["setosa", "versicolor", "virginica"] and data.features == ["a", "b", "c"]
    # rows in another column order, without the target: read by name, answered in class names
    write_csv(tmp_path / "q.csv", ["c", "a", "b"], [[5, 0, 0], [9, 0, 4]])
    capsys.readouterr()  # training's log
    assert predict_main([str(run_dir), str(tmp_path / "q.csv"), "--json", "--samples", "8", "--rule", "quantile"]) == 0
    answers = json.loads(capsys.readouterr().out)["answers"]
    assert [a["file"].rsplit(":", 1)[1] for a in answers] == ["1", "2"]
    assert [a["label"] for a in answers] == ["virginica", "versicolor"]
    write_csv(tmp_path / "bad.csv", ["a", "b"], [[1, 2]])
    assert predict_main([str(run_dir), str(tmp_path / "bad.csv")]) == 2  # named on stderr
    assert "lacks the column(s) c the run reads" in capsys.readouterr().err


def test_a_table_given_without_data_name_trains_as_a_table_and_says_so(tmp_path, capsys):
    """And the run's log names the column it predicts (issue 51: a table run's did not)."""
    x, y = flowers(60)
    write_csv(tmp_path / "f.csv", ["a", "b", "c", "kind"], [[*r, k] for r, k in zip(x.tolist(), y.tolist())])
    cfg = own_config("mnist_mlp", tmp_path / "run", **{"data.path": str(tmp_path / "f.csv"), "model.hidden": "[8]",
                                                       "train.epochs": 1, "abstention.certify": "false"})
    assert cfg.data.name == "csv"  # told by the path: not MNIST
    train(make_config(cfg, ["data.name=null"]))  # as the command line leaves it
    log = capsys.readouterr().out.splitlines()
    assert log[0] == (f"data.name=csv, inferred from data.path={tmp_path / 'f.csv'} (data.name=folder, tensors or csv "
                      "says otherwise)")
    assert log[1].startswith("mnist_mlp on csv (39 training examples, target column 'kind'), device ")  # issue 51


@pytest.mark.slow
def test_a_csv_regression_answers_rows_with_their_uncertainty(tmp_path, capsys):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 2, generator=g) * 2 - 1
    write_csv(tmp_path / "r.csv", ["u", "v", "y"], [[f"{a:.4f}", f"{b:.4f}", f"{a + 2 * b:.4f}"] for a, b in x.tolist()])
    run_dir = tmp_path / "run"
    train(own_config("toy_mlp", run_dir, **{"data.name": "csv", "data.path": str(tmp_path / "r.csv"),
                                            "model.hidden": "[16]", "train.epochs": 30, "train.lr": 0.01}))
    assert not (run_dir / "calibration.json").exists()  # a regression has no refusal rule to certify
    write_csv(tmp_path / "q.csv", ["u", "v"], [[0.5, 0.25], [40, -40]])
    capsys.readouterr()  # training's log
    assert predict_main([str(run_dir), str(tmp_path / "q.csv"), "--json", "--samples", "30"]) == 0
    found = json.loads(capsys.readouterr().out)
    near, far = found["answers"]
    assert found["alarm"] is None and found["errors"] == []  # a regression: no alarm
    assert near["mean"] == pytest.approx(1.0, abs=0.6)
    assert far["epistemic_sd"] > 5 * near["epistemic_sd"]  # far outside the data, the weights disagree
    assert near["sd"] == pytest.approx((near["epistemic_sd"] ** 2 + near["noise_sd"] ** 2) ** 0.5, abs=1e-5)


def test_predict_refuses_the_rule_s_options_on_a_regression(tmp_path, capsys):
    """Issue 51: predict on a regression run took --rule and --threshold and answered as if they were
    not given; a wrong --posterior is refused, and so are they."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(60, 2, generator=g)
    write_csv(tmp_path / "r.csv", ["u", "v", "y"], [[f"{a:.4f}", f"{b:.4f}", f"{a + b:.4f}"] for a, b in x.tolist()])
    run_dir = tmp_path / "run"
    train(own_config("toy_mlp", run_dir, **{"data.name": "csv", "data.path": str(tmp_path / "r.csv"),
                                            "model.hidden": "[4]", "train.epochs": 1}))
    write_csv(tmp_path / "q.csv", ["u", "v"], [[0.5, 0.25]])
    capsys.readouterr()  # training's log
    for given, said in ((["--rule", "quantile", "--threshold", "0.5"], "--rule, --threshold"),
                        (["--quantile", "0.9"], "--quantile"), (["--no-act-on-alarm"], "--no-act-on-alarm")):
        assert predict_main([str(run_dir), str(tmp_path / "q.csv"), *given]) == 2
        assert capsys.readouterr() == ("", f"error: {said}: {run_dir} is a regression, answered with a mean and an sd "
                                           "and never refused, so the abstention rule's options do not apply; leave "
                                           "them out\n")
    assert predict_main([str(run_dir), str(tmp_path / "q.csv"), "--samples", "4"]) == 0  # without them, answered
    assert " +- " in capsys.readouterr().out


@pytest.mark.slow
def test_a_regression_learns_the_same_in_any_units_of_its_target(tmp_path):
    """Targets in thousands learn what targets in units do: the network sees them standardized by
    the training split's mean and sd (kept in the config), and answers in the targets' own units."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(120, 2, generator=g) * 2 - 1
    y = torch.sin(3 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(120, generator=g)
    answers = {}
    for name, shift, unit in (("units", 0.0, 1.0), ("thousands", 2000.0, 400.0)):
        write_csv(tmp_path / f"{name}.csv", ["u", "v", "y"], [[f"{a:.4f}", f"{b:.4f}", f"{shift + unit * t:.6f}"]
                                                            for (a, b), t in zip(x.tolist(), y.tolist())])
        run_dir = tmp_path / name
        metrics = train(own_config("toy_mlp", run_dir, **{"data.name": "csv", "data.path": str(tmp_path / f"{name}.csv"),
                                                          "model.hidden": "[16]", "train.epochs": 20, "train.lr": 0.01}))
        answers[name] = (metrics["bayes"]["test/rmse"], metrics["twin"]["test/rmse"], metrics["bayes"]["test/nll"],
                         list(load(run_dir).config.data.target_stats))
    (bayes, twin, nll, (mean, sd)), (bayes_k, twin_k, nll_k, stats_k) = answers["units"], answers["thousands"]
    assert mean == pytest.approx(float(y.mean()), abs=0.2) and sd == pytest.approx(float(y.std()), rel=0.2)
    assert stats_k == pytest.approx([2000 + 400 * mean, 400 * sd], rel=1e-5)  # the training split's, in each run
    assert bayes_k == pytest.approx(400 * bayes, rel=1e-3) and twin_k == pytest.approx(400 * twin, rel=1e-3)
    assert nll_k == pytest.approx(nll + math.log(400), abs=1e-3)  # a density in units 400 times wider


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_a_tensor_file_with_its_own_test_set(tmp_path, suffix):
    x, y = flowers(200)
    xt, yt = flowers(40, seed=1)
    path = tmp_path / f"d{suffix}"
    if suffix == ".pt":
        torch.save({"x": x, "y": y, "x_test": xt, "y_test": yt}, path)
    else:
        np.savez(path, x=x.numpy(), y=y.numpy(), x_test=xt.numpy(), y_test=yt.numpy())
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "tensors", "data.path": str(path)}))
    splits = splits_of(cfg)
    train_idx, val_idx = validation_split(200, 40)
    shuffled = torch.randperm(40, generator=torch.Generator().manual_seed(SPLIT_SEED))  # a --test-size samples every class
    assert len(splits.test) == 40 and torch.equal(splits.test.y, yt[shuffled]) and torch.equal(splits.val.y, y[val_idx])
    mean, std = x[train_idx].mean(0), x[train_idx].std(0)
    assert torch.allclose(splits.test.x, (xt[shuffled] - mean) / std, atol=1e-5)
    assert with_profile(cfg, splits).data.classes == ["0", "1", "2"]


def test_without_a_test_part_a_fixed_fifth_is_held_out(tmp_path):
    x, y = flowers(100)
    torch.save({"x": x, "y": y}, tmp_path / "d.pt")
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "tensors", "data.path": str(tmp_path / "d.pt")}))
    train_part, test_part = read_own(cfg.data, True)
    assert (len(train_part.y), len(test_part.y)) == (80, 20)
    again = read_own(cfg.data, True)[1]
    assert torch.equal(again.x, test_part.x)  # the same examples every run
    together = torch.cat([train_part.x, test_part.x])
    assert sorted(together[:, 0].tolist()) == sorted(x[:, 0].tolist())  # nothing lost, nothing twice


def bad_folder(tmp_path, kind):
    root = tmp_path / kind
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("L", (28, 28), 40 * i).save(root / name / f"{i}.png")
    if kind == "empty":
        for f in (root / "b").iterdir():
            f.unlink()
    elif kind == "unreadable":
        (root / "b" / "broken.png").write_bytes(b"not a png")
    elif kind == "malformed_tiff":  # Pillow's decoder raises a TypeError on it
        from helpers import malformed_tiff

        (root / "b" / "odd.tif").write_bytes(malformed_tiff())
    elif kind == "two_unreadable":
        (root / "a" / "broken.png").write_bytes(b"not a png")
        (root / "b" / "gone.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # a PNG cut short
    elif kind == "eps":  # Pillow would render it by running Ghostscript, an outside program
        (root / "b" / "drawn.png").write_bytes(EPS)
    elif kind == "bomb":  # 48 KB on disk, 900 million pixels
        Image.new("1", (30000, 30000)).save(root / "b" / "huge.png")
    elif kind == "link_out":  # a link out of the folder would read files that are not the data's
        Image.new("L", (28, 28)).save(tmp_path / "elsewhere.png")
        (root / "b" / "out.png").symlink_to(tmp_path / "elsewhere.png")
    elif kind == "loop":  # a link to its own parent read 6 images as 246, with wrong labels
        (root / "a" / "loop").symlink_to("..")
    elif kind == "linked_class":
        (root / "c").symlink_to(root / "a")
    elif kind == "sizes":
        Image.new("L", (32, 32)).save(root / "b" / "big.png")
    elif kind == "one_class":
        import shutil
        shutil.rmtree(root / "b")
    return root


READS = r"send PNG, JPEG, GIF, BMP, TIFF, WebP or PGM/PPM"
LINK = r"a data folder's images are read from the folder itself, never through a link: copy what it links to into the folder, or remove the link"
EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 28 28\nnewpath 4 4 moveto 24 24 lineto stroke\nshowpage\n"


@pytest.mark.parametrize("kind, message", [
    ("empty", r"empty/b holds no images \(.jpg/.jpeg/.png/.ppm/.bmp/.pgm/.tif/.tiff/.webp\): add some, or remove the folder"),
    ("unreadable", rf"cannot read the image .*broken.png \(not a readable image; {READS}\): delete or replace it"),
    ("malformed_tiff", r"cannot read the image .*malformed_tiff/b/odd.tif \(not a readable image \(TypeError\)\): delete or "
                       r"replace it"),
    ("two_unreadable", rf"cannot read 2 images in .*two_unreadable, the first .*a/broken.png \(not a readable image; "
                       rf"{READS}\): delete or replace them"),
    ("eps", rf"cannot read the image .*b/drawn.png \(not an image format bnn-zoo reads \(EPS\); {READS}\)"),
    ("bomb", r"cannot read the image .*b/huge.png \(900,000,000 pixels is too large \(at most 25,000,000\); scale "
             r"it down first\): delete or replace it"),
    ("link_out", rf"link_out/b/out.png is a symbolic link \(to .*elsewhere.png\); {LINK}"),
    ("loop", rf"loop/a/loop is a symbolic link \(to ..\); {LINK}"),
    ("linked_class", rf"linked_class/c is a symbolic link \(to .*linked_class/a\); {LINK}"),
    ("sizes", r"holds images of two sizes \(28x28 0.png, 32x32 big.png\): resize them all with data.image_size=N"),
    ("one_class", r"holds one class \('a'\): a classifier needs examples of two or more"),
])
def test_bad_folders_get_one_line_errors(tmp_path, kind, message, monkeypatch):
    import subprocess

    from PIL import EpsImagePlugin

    def no_program(*args, **kwargs):
        raise AssertionError("an outside program was started")

    monkeypatch.setattr(subprocess, "Popen", no_program)  # nothing a file holds starts a program
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", no_program)
    cfg = resolved(own_config("lenet", tmp_path / "run", **{"data.name": "folder", "data.path": str(bad_folder(tmp_path, kind))}))
    with pytest.raises(DataError, match=message) as err:
        splits_of(cfg)
    assert "\n" not in str(err.value)


def test_hidden_entries_are_no_classes_and_no_images(tmp_path):
    """A thumbnail cache, macOS's .DS_Store and its ._ files are a folder's housekeeping, not data."""
    from bnn_zoo.data.folders import class_files, image_files

    root = bad_folder(tmp_path, "plain")
    (root / ".thumbnails").mkdir()
    Image.new("L", (28, 28)).save(root / ".thumbnails" / "0.png")
    Image.new("L", (28, 28)).save(root / "a" / "._0.png")
    (root / "b" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    classes, files = class_files(root)
    assert classes == ["a", "b"] and [(f.parent.name, f.name, k) for f, k in files] == [
        (c, f"{i}.png", k) for k, c in enumerate("ab") for i in range(3)]
    assert image_files(root) == [f for f, _ in files]


@pytest.mark.slow
def test_an_image_that_cannot_be_read_is_named_and_the_other_files_answered(folder_run, pngs, tmp_path, capsys):
    """predict on files of a folder run: a bomb or an EPS named .png is one file's error, never a
    traceback, and the files beside it are answered."""
    Image.new("1", (30000, 30000)).save(tmp_path / "huge.png")
    (tmp_path / "drawn.png").write_bytes(EPS)
    good = next((pngs / "test" / "seven").iterdir())
    assert predict_main([str(folder_run), str(tmp_path / "huge.png"), str(good), str(tmp_path / "drawn.png"),
                         "--samples", "4", "--device", "cpu"]) == 2
    printed = capsys.readouterr()
    errors, (answered,) = printed.err.splitlines(), printed.out.splitlines()  # the errors on stderr, one a file
    assert errors[0] == f"error: {tmp_path / 'huge.png'}: cannot read the image {tmp_path / 'huge.png'} (900,000,000 " \
                        "pixels is too large (at most 25,000,000); scale it down first): delete or replace it"
    assert answered.startswith(f"{good}: ") and "error" not in answered
    assert errors[1].startswith(f"error: {tmp_path / 'drawn.png'}: ")
    assert errors[1].endswith(f"(not an image format bnn-zoo reads (EPS); {READS.replace(chr(92), '')}): delete or "
                              "replace it")


@pytest.mark.parametrize("rows, message", [
    ([[1, 2, "x"], [1, "nan", "y"]], r"line 3, column 'b' holds nan: fill or drop it"),
    ([[1, 2, "x"], [1, "two", "y"]], r"line 3, column 'b': 'two' is not a number"),
    ([[1, 2, "x"], [3, 4, "x"]], r"holds one class \('x'\)"),
    ([[1, 2, "x"], [3, 4]], r"line 3 holds 2 values under 3 columns"),
])
def test_bad_tables_get_one_line_errors(tmp_path, rows, message):
    write_csv(tmp_path / "t.csv", ["a", "b", "label"], rows * 5)
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "csv", "data.path": str(tmp_path / "t.csv")}))
    with pytest.raises(DataError, match=message):
        splits_of(cfg)


@pytest.mark.parametrize("where, name, problem", [
    ("folder", "red\x1b[31m", "'\\x1b', a character that is not printable"),
    ("label", "x\x1b[2J", "'\\x1b', a character that is not printable"),
    ("label", "x\ry", "'\\r', a character that is not printable"),
    ("column", "a\tb", "'\\t', a character that is not printable"),
    ("label", "${oops}", "'${'"),
])
def test_a_class_or_column_name_that_would_rewrite_the_terminal_is_refused(tmp_path, where, name, problem):
    """Names reach the terminal as they are (predict's answers, the logs): one holding a character
    that is not printable (an escape sequence, a carriage return, a tab) is named and refused."""
    if where == "folder":
        root = bad_folder(tmp_path, "named")
        (root / "b").rename(root / name)
        cfg = resolved(own_config("lenet", tmp_path / "run", **{"data.name": "folder", "data.path": str(root)}))
    else:
        quoted = f'"{name}"'  # between quotes, a CSV field may hold a carriage return
        header, rows = (["a", quoted, "label"], [[1, 2, "x"], [3, 4, "y"]]) if where == "column" else \
            (["a", "b", "label"], [[1, 2, "x"], [3, 4, quoted]])
        write_csv(tmp_path / "t.csv", header, rows * 5)
        overrides = {"data.name": "csv", "data.path": str(tmp_path / "t.csv")}
        cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **overrides))
    with pytest.raises(DataError) as err:
        splits_of(cfg)
    assert str(err.value) == f"the class or column name {name!r} holds {problem}: rename it"


def test_bad_settings_and_files_are_named(tmp_path):
    from bnn_zoo.core.errors import ConfigError

    with pytest.raises(ConfigError, match="data.name=folder reads your own data; give its folder or file as data.path"):
        make_config({"arch": "lenet", "data": {"name": "folder"}})
    with pytest.raises(ConfigError, match="bad value for data.channels: choose 1 \\(gray\\) or 3 \\(RGB\\), not 2"):
        make_config({"arch": "lenet", "data": {"name": "folder", "path": "x", "channels": 2}})
    write_csv(tmp_path / "t.csv", ["a", "label"], [[1, "x"], [2, "y"]] * 10)
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "csv", "data.path": str(tmp_path / "t.csv"),
                                                               "data.target": "kind"}))
    with pytest.raises(DataError, match="has no column 'kind' \\(data.target\\); its columns: a, label"):
        splits_of(cfg)
    torch.save({"x": torch.zeros(4, 2), "y": torch.zeros(3)}, tmp_path / "d.pt")
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "tensors", "data.path": str(tmp_path / "d.pt")}))
    with pytest.raises(DataError, match=r"x \[4, 2\] and y \[3\] do not pair up"):
        splits_of(cfg)
    torch.save({"x": torch.zeros(4, 2), "y": torch.full((4,), 0.5)}, tmp_path / "d.pt")
    with pytest.raises(DataError, match="a classifier's labels y are whole numbers 0..K-1"):
        splits_of(cfg)

    regression = resolved(own_config("toy_mlp", tmp_path / "run", **{"data.name": "tensors", "data.path": str(tmp_path / "d.pt")}))
    torch.save({"x": torch.zeros(4, 1), "y": torch.tensor([0.5, 1.0, float("nan"), 2.0])}, tmp_path / "d.pt")
    with pytest.raises(DataError, match="example 2 holds a NaN or infinite target; fill or drop it"):
        splits_of(regression)
    torch.save({"x": torch.zeros(4, 1), "y": torch.ones(4), "x_test": torch.zeros(2, 1),
                "y_test": torch.tensor([1.0, float("inf")])}, tmp_path / "d.pt")
    with pytest.raises(DataError, match="example 1 of the test part holds a NaN or infinite target"):
        splits_of(regression)

    torch.save({"x": torch.zeros(4, 2), "y": Payload()}, tmp_path / "d.pt")
    with pytest.raises(DataError, match="cannot read .*d.pt as a .npz of arrays or a .pt of tensors"):
        splits_of(cfg)
    x, y = flowers(60)
    torch.save({"x": x, "y": y}, tmp_path / "d.pt")
    cfg = with_profile(cfg, splits_of(cfg))
    cfg.arch, cfg.model.hidden = "lenet", None
    with pytest.raises(ValueError, match=r"lenet takes square images \[channels, size, size\], not inputs of shape \[3\]"):
        from bnn_zoo.runs.plans.factory import build_networks
        build_networks(Plan.of(cfg).networks, 10)


def test_a_test_table_indexes_the_training_classes(tmp_path):
    write_csv(tmp_path / "train.csv", ["a", "label"], [[i, "abc"[i % 3]] for i in range(30)])
    write_csv(tmp_path / "test.csv", ["a", "label"], [[1, "c"], [2, "c"], [3, "a"]])
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{
        "data.name": "csv", "data.path": str(tmp_path / "train.csv"), "data.test_path": str(tmp_path / "test.csv")}))
    train_part, test_part = read_own(cfg.data, True)
    assert test_part.classes == ["a", "b", "c"] and sorted(test_part.y.tolist()) == [0, 2, 2] and len(train_part.y) == 30
    assert sorted(zip(test_part.x[:, 0].tolist(), test_part.y.tolist())) == [(1.0, 2), (2.0, 2), (3.0, 0)]
    write_csv(tmp_path / "test.csv", ["a", "label"], [[1, "c"], [2, "d"]])
    with pytest.raises(DataError, match=r"column 'label' holds 'd', not one of the training classes \['a', 'b', 'c'\]"):
        read_own(cfg.data, True)


def test_data_that_grew_since_the_run_trained_is_refused(tmp_path):
    """One more row moves every held-out split: the run's digest of its examples says so."""
    x, y = flowers(100)
    torch.save({"x": x, "y": y}, tmp_path / "d.pt")
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "tensors", "data.path": str(tmp_path / "d.pt")}))
    cfg = with_profile(cfg, splits_of(cfg))
    assert len(splits_of(cfg).test) == 20  # the same data: its stored statistics and digest agree
    torch.save({"x": torch.cat([x, x[:1]]), "y": torch.cat([y, y[:1]])}, tmp_path / "d.pt")
    with pytest.raises(DataError, match="holds other examples than the run trained on"):
        splits_of(cfg)


def test_a_test_table_is_read_by_the_training_columns_names(tmp_path):
    x, y = flowers(60)
    rows = [[f"{r[0]:.3f}", f"{r[1]:.3f}", f"{r[2]:.3f}", k] for r, k in zip(x.tolist(), y.tolist())]
    write_csv(tmp_path / "train.csv", ["a", "b", "c", "label"], rows)
    (tmp_path / "test.csv").write_text("\ufeff" + "c,label,a,b\n" + "".join(f"{r[2]},{r[3]},{r[0]},{r[1]}\n" for r in rows[:5]),
                                       encoding="utf-8")  # another order, and Excel's byte-order mark
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{
        "data.name": "csv", "data.path": str(tmp_path / "train.csv"), "data.test_path": str(tmp_path / "test.csv")}))
    train_part, test_part = read_own(cfg.data, True)
    assert test_part.features == train_part.features == ["a", "b", "c"]
    assert sorted(test_part.x.tolist()) == sorted(torch.tensor([[float(v) for v in r[:3]] for r in rows[:5]]).tolist())


def test_uint8_image_tensors_train_lenet_as_images(tmp_path):
    images = torch.randint(0, 256, (60, 16, 16), dtype=torch.uint8)  # [N, H, W] as NumPy's MNIST has them
    torch.save({"x": images, "y": torch.arange(60) % 2}, tmp_path / "d.pt")
    cfg = resolved(own_config("lenet", tmp_path / "run", **{"data.name": "tensors", "data.path": str(tmp_path / "d.pt")}))
    found = make_config(with_profile(cfg, splits_of(cfg)))
    check_network_fits(Plan.of(found))  # lenet takes them: 1 x 16 x 16
    assert found.data.input_shape == [1, 16, 16]
    first = read_own(cfg.data, True)[0].x[0]  # an image scaled to 0..1, given its channel
    assert first.shape == (1, 16, 16) and any(torch.equal((first[0] * 255).round().byte(), image) for image in images)


def test_a_network_that_cannot_take_the_data_stops_before_the_run_directory(tmp_path):
    from bnn_zoo.core.errors import ConfigError

    x, y = flowers(60)
    torch.save({"x": x, "y": y}, tmp_path / "d.pt")
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"lenet takes square images \[channels, size, size\], not inputs of shape \[3\]"):
        train(own_config("lenet", run_dir, **{"data.name": "tensors", "data.path": str(tmp_path / "d.pt")}))
    assert not run_dir.exists()  # no config, no mark, no lock left: a new try starts afresh


def test_images_too_small_for_lenet_name_what_resizes_them(tmp_path):
    """LeNet-5 on 8x8 images (scikit-learn's digits) named no fix: a folder's are resized by
    data.image_size, a tensor file's must be given larger; mnist_mlp takes any size."""
    from bnn_zoo.core.errors import ConfigError

    for k, name in enumerate("ab"):
        (tmp_path / "pngs" / name).mkdir(parents=True)
        for i in range(4):
            pixels = np.full((8, 8), 60 * k + 10 * i, dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "pngs" / name / f"{i}.png")
    torch.save({"x": torch.randint(0, 256, (8, 8, 8), dtype=torch.uint8), "y": torch.arange(8) % 2}, tmp_path / "d.pt")
    too_small = "bad config key 'arch': LeNet-5 takes images of at least 12x12, got 8x8: "
    any_size = ", or train arch=mnist_mlp, which takes images of any size"
    for kind, path, fix in (("folder", tmp_path / "pngs", "resize them with data.image_size=N, N at least 12"),
                            ("tensors", tmp_path / "d.pt", "give images of at least 12x12")):
        with pytest.raises(ConfigError) as refused:
            train(own_config("lenet", tmp_path / "run", **{"data.name": kind, "data.path": str(path)}))
        assert str(refused.value) == too_small + fix + any_size and not (tmp_path / "run").exists()
    cfg = resolved(own_config("lenet", tmp_path / "run", **{"data.name": "folder", "data.path": str(tmp_path / "pngs"),
                                                            "data.image_size": 12}))
    check_network_fits(Plan.of(make_config(with_profile(cfg, splits_of(cfg)))))  # resized as it says: LeNet takes them


def test_an_image_of_another_size_than_the_run_s_is_said_to_be_resized(folder_run, pngs, tmp_path, capsys):
    """predict and the page resize an image to a folder run's size, and say so (an MNIST 7 sent to a
    model of 8x8 images was answered "4" without a word)."""
    from starlette.testclient import TestClient

    from bnn_zoo.data.inputs import image_input, image_inputs
    from bnn_zoo.page.answers import Answerer
    from bnn_zoo.page.app import create_app

    good = next((pngs / "test" / "seven").iterdir())  # 28x28, the run's size
    Image.open(good).resize((40, 30)).save(tmp_path / "large.png")
    files = [str(good), str(tmp_path / "large.png")]
    assert predict_main([str(folder_run), *files, "--samples", "4", "--json"]) == 0
    same, large = json.loads(capsys.readouterr().out)["answers"]
    assert "resized_from" not in same and large["resized_from"] == [30, 40]
    assert predict_main([str(folder_run), *files, "--samples", "4"]) == 0
    same_line, large_line, alarm = capsys.readouterr().out.splitlines()  # no rule line without --verbose
    assert alarm.startswith(("no shift alarm: the certified rule refused", "shift alarm: "))  # two inputs: a stream
    assert "resized" not in same_line and large_line.endswith(" (resized from 40x30 to the run's 28x28)")
    data = load(folder_run).data
    for path in (good, tmp_path / "large.png"):  # what the network reads, either way, is what it read before
        assert torch.equal(image_input(data, path)[0], image_inputs(data, [path], str(path)))
    client = TestClient(create_app(Answerer(str(folder_run), "cpu")), base_url="http://localhost")
    for path, resized in ((good, None), (tmp_path / "large.png", [30, 40])):
        found = client.post(f"/api/answer?model={folder_run}&samples=2", content=path.read_bytes())
        assert found.json().get("resized_from") == resized


@pytest.mark.parametrize("text, message", [
    ("a;b;label\n1;2;x\n3;4;y\n", r"holds the column 'a;b;label' alone: give feature columns beside it, separated by commas"),
    ("a,label\n1,x\n2,\n", r"line 3: the target 'label' is empty; fill or drop the row"),
])
def test_tables_without_features_or_targets_are_named(tmp_path, text, message):
    (tmp_path / "t.csv").write_text(text)
    cfg = resolved(own_config("mnist_mlp", tmp_path / "run", **{"data.name": "csv", "data.path": str(tmp_path / "t.csv")}))
    with pytest.raises(DataError, match=message):
        read_own(cfg.data, True)


def test_a_train_folder_without_a_test_folder_is_named(tmp_path):
    root = bad_folder(tmp_path, "ok")
    (tmp_path / "split").mkdir()
    root.rename(tmp_path / "split" / "train")
    cfg = resolved(own_config("lenet", tmp_path / "run", **{"data.name": "folder", "data.path": str(tmp_path / "split")}))
    with pytest.raises(DataError, match="holds train/ but no test/"):
        read_own(cfg.data, True)


def test_two_ood_sets_of_one_name_are_refused(folder_run, pngs):
    from bnn_zoo.core.errors import ConfigError

    with pytest.raises(ConfigError, match="the OOD set name 'my_letters' is given twice"):
        evaluate_run(folder_run, num_samples=2, ood=(f"my_letters={pngs}", f"my_letters={pngs / 'letters'}"), ood_size=5)


def test_an_eps_named_png_is_refused_by_every_path_without_a_program(folder_run, tmp_path, monkeypatch):
    """Training's folders (test_bad_folders_get_one_line_errors), predict (above), evaluate's OOD
    folders and the page read images through one decoder, which opens raster formats alone."""
    import io
    import subprocess

    from PIL import EpsImagePlugin
    from starlette.testclient import TestClient

    from bnn_zoo.evaluation.evaluate import ood_inputs
    from bnn_zoo.page.answers import Answerer
    from bnn_zoo.page.app import create_app

    def no_program(*args, **kwargs):
        raise AssertionError("an outside program was started")

    monkeypatch.setattr(subprocess, "Popen", no_program)
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", no_program)
    (tmp_path / "ood").mkdir()
    (tmp_path / "ood" / "drawn.png").write_bytes(EPS)
    with pytest.raises(DataError, match=rf"drawn.png \(not an image format bnn-zoo reads \(EPS\); {READS}\)"):
        ood_inputs(load(folder_run).data, f"eps={tmp_path / 'ood'}", None, 10, 0)
    client = TestClient(create_app(Answerer(str(folder_run), "cpu")), base_url="http://localhost")
    found = client.post(f"/api/answer?model={folder_run}&samples=2", content=io.BytesIO(EPS).getvalue())
    assert found.status_code == 400
    assert found.json() == {"error": f"cannot use this file: not an image format bnn-zoo reads (EPS); "
                                     f"{READS.replace(chr(92), '')}"}


def test_a_transparent_image_is_read_alike_by_predict_and_the_page(folder_run, tmp_path, capsys):
    """One rule for transparency: transparent pixels take the background that contrasts with the
    ink, whichever path reads the file (they took black in predict, white on the page)."""

    from starlette.testclient import TestClient

    from bnn_zoo.data.inputs import image_inputs
    from bnn_zoo.page.answers import Answerer
    from bnn_zoo.page.app import create_app

    rgba = np.zeros((28, 28, 4), dtype=np.uint8)
    rgba[6:22, 12:16] = (20, 20, 20, 255)  # a dark stroke on nothing
    Image.fromarray(rgba, "RGBA").save(tmp_path / "stroke.png")
    trained = load(folder_run)
    x = image_inputs(trained.data, [tmp_path / "stroke.png"], "stroke.png")
    client = TestClient(create_app(Answerer(str(folder_run), "cpu")), base_url="http://localhost")
    found = client.post(f"/api/answer?model={folder_run}&samples=2", content=(tmp_path / "stroke.png").read_bytes()).json()
    pixels = torch.tensor(found["pixels"], dtype=torch.uint8)
    assert pixels[0, 0] == 255 and pixels[10, 13] == 20  # white paper under a dark stroke
    from bnn_zoo.data.inputs import pixel_inputs
    assert torch.equal(pixel_inputs(trained.data, pixels[None]), x)


def test_a_null_noise_scale_starts_where_a_least_squares_line_leaves_the_targets(tmp_path):
    """model.noise_scale=null: the residual sd of a line through the training split, in the
    targets' standard units, kept in the run's config; 1.0 where the rows cannot say, 0.01 at least."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 3, generator=g)
    y = 5 + 2 * x[:, 0] - x[:, 2] + 0.3 * torch.randn(400, generator=g)
    write_csv(tmp_path / "r.csv", ["a", "b", "c", "y"], [[*map("{:.5f}".format, r), f"{t:.5f}"]
                                                         for r, t in zip(x.tolist(), y.tolist())])
    cfg = resolved(make_config({"arch": "table_mlp", "model": {"likelihood": "gaussian", "noise_scale": None},
                                "data": {"path": str(tmp_path / "r.csv")}}))
    splits = splits_of(cfg)
    found = with_profile(cfg, splits)
    sd = found.data.target_stats[1]
    assert found.model.noise_scale == pytest.approx(0.3 / sd, rel=0.15)  # sd: about sqrt(5.09)
    assert least_squares_sd(x[:3], y[:3]) == 1.0  # three rows, four coefficients
    assert least_squares_sd(x, 2 * x[:, 0]) == NOISE_FLOOR
    with pytest.raises(ConfigError, match="'model.noise_scale': null starts the noise where a least-squares line "
                                          "leaves it, which needs your own table; polynomial takes a number"):
        make_config(None, ["model.noise_scale=null"])
