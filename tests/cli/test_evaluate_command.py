"""``python -m bnn_zoo.evaluate``'s command line: the default board answers what a user asks first
in a summary that fits a screen, each block saying on how many images; --full measures the whole
board; a missing run or OOD folder is named as the user gave it, before any work."""
import json
import re

import pytest

from bnn_zoo.cli import evaluate
from bnn_zoo.data.shifted.corruptions import CORRUPTIONS
from bnn_zoo.evaluation.results import Evaluation
from bnn_zoo.posterior import BAYES, TWIN


def test_the_default_board_is_a_screen_of_the_first_questions_each_with_its_size(tiny_run, shared_data, tmp_path,
                                                                                    capsys):
    """Issue 47: evaluate took 357 s and printed 365 lines (all 10,000 test images, three OOD sets of
    10,000, fifteen corruptions), its figures not saying on how many images."""
    out = tmp_path / "eval.json"
    assert evaluate.main([str(tiny_run), "--samples", "4", "--output", str(out)]) == 0
    printed, said = capsys.readouterr()
    found = Evaluation.from_dict(json.loads(out.read_text()))
    bayes = found.posteriors[BAYES]
    assert found.test_size == 2000  # of MNIST's 10,000
    assert {name: o.images for name, o in bayes.ood.items()} == {"notmnist": 1000, "noise": 1000, "fashion_mnist": 1000}
    assert bayes.shift == {} and bayes.test.sets_by_target is None  # the corruptions and the fits: --full's
    lines = printed.splitlines()
    assert len(lines) <= 40
    blocks = [line.split("  ")[0] for line in lines if not line.startswith(" ") and "images" in line]
    assert blocks == ["test set, 2,000 images", "OOD set notmnist, 1,000 images", "OOD set noise, 1,000 images",
                      "OOD set fashion_mnist, 1,000 images"]
    assert lines[0] == f"{tiny_run}: 4 posterior samples an input (seed 0)"
    rows = {}
    for line in lines:  # each block's rows, under its title
        if not line.startswith(" "):
            block = line.split("  ")[0]
        elif "  " in line.strip():
            label, *cells = re.split(r"\s{2,}", line.strip())
            rows[(block, label)] = cells
    assert rows[("test set, 2,000 images", "refused")][:2] == [f"{100 * r.test.refused:.2f}%" for r in (bayes, found.posteriors[TWIN])]
    auroc = rows[("OOD set noise, 1,000 images", "AUROC (by the rule's signal)")]
    assert auroc[0] == f"{bayes.ood['noise'].auroc(bayes.rule.signal):.4f}"
    assert auroc[1] == f"{found.posteriors[TWIN].ood['noise'].by_entropy.auroc:.4f}"  # a twin has no mutual information
    fpr95 = rows[("OOD set notmnist, 1,000 images", "FPR at 95% TPR (MI / entropy / max prob)")]
    notmnist = bayes.ood["notmnist"]
    assert fpr95[0] == " / ".join(f"{100 * d.fpr95:.2f}%" for d in (
        notmnist.by_mutual_information, notmnist.by_entropy, notmnist.by_max_prob))
    assert fpr95[1].startswith("n/a / ")  # the twin's: by entropy and by max prob alone
    assert f"wrote every figure to {out}; --full measures the whole board (see --help)\n" in said


@pytest.mark.slow
def test_full_measures_the_whole_board_and_prints_every_figure(tiny_run, shared_data, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert evaluate.main([str(tiny_run), "--full", "--samples", "2", "--ood", "noise", "--shift-size", "20",
                          "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    found = Evaluation.from_dict(json.loads(out.read_text())).posteriors[BAYES]
    assert list(found.shift) == list(CORRUPTIONS) and {s.images for s in found.shift.values()} == {20}
    assert found.ood["noise"].images == 10000 and found.test.set_figures(0.9) is not None
    table, summary = printed.split("\n\n")
    assert table.startswith("metric") and "shift/fog/wrong" in table
    assert "MNIST-C's corruptions, 15 of 20 images, each one stream" in summary


def test_a_missing_run_is_named_as_given_not_as_the_output_beside_it(tmp_path, monkeypatch, capsys):
    """Issue 47: evaluate runs/mine said "--output runs/mine/eval.json: folder runs/mine does not
    exist", though no --output was given."""
    monkeypatch.chdir(tmp_path)
    assert evaluate.main(["runs/mine"]) == 2
    assert capsys.readouterr().err == ("error: runs/mine is neither a run directory nor a shipped posterior "
                                       "(those are lenet, lenet_fashion, mnist_mlp)\n")


def test_a_missing_ood_folder_is_refused_before_the_work(tiny_run, tmp_path, monkeypatch, capsys):
    """Issue 47: --ood letters=my_letters without the folder exited 0, the folder's absence only in
    eval.json."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("bnn_zoo.evaluation.evaluate.evaluate_run",  # what the command calls
                        lambda *a, **k: pytest.fail("evaluated before checking"))
    with pytest.raises(SystemExit) as stop:
        evaluate.main([str(tiny_run), "--ood", "mine=my_letters"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("error: argument --ood: 'mine=my_letters': there is no folder my_letters; "
                                       "give NAME=FOLDER, FOLDER a folder of images (in subfolders or not) "
                                       "(see --help)\n")


@pytest.mark.parametrize("fill", ["nothing", "text", "fake png", "one fake beside an image"])
def test_an_ood_folder_without_images_is_refused_before_the_work(tmp_path, monkeypatch, capsys, fill):
    """Issue 51: --ood mine=EMPTY_FOLDER (or a folder of non-images) measured the test set and exited 0
    without the only set asked for."""
    folder = tmp_path / "mine"
    folder.mkdir()
    if fill == "text":
        (folder / "notes.txt").write_text("no image")
    elif fill == "fake png":
        (folder / "a.png").write_text("no image")
        (folder / "b.png").write_text("no image either")
    elif fill == "one fake beside an image":
        from PIL import Image

        Image.new("L", (28, 28)).save(folder / "a.png")
        (folder / "b.png").write_text("no image")
    monkeypatch.setattr("bnn_zoo.evaluation.evaluate.evaluate_run",  # what the command calls
                        lambda *a, **k: pytest.fail("evaluated before checking"))
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["lenet", "--ood", f"mine={folder}"])
    assert stop.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(f"error: argument --ood: 'mine={folder}': ") and said.count("\n") == 1
    if fill == "fake png":
        assert f"2 of its 2 files cannot be read as images, the first {folder / 'a.png'} (" in said
    elif fill == "one fake beside an image":
        assert f"{folder / 'b.png'} cannot be read as an image (" in said and "delete or replace it" in said
    else:
        assert "no images (.jpg/" in said and f"in {folder}; give NAME=FOLDER, FOLDER a folder of images" in said


def test_an_ood_folder_named_as_a_built_in_set_is_refused(tmp_path, monkeypatch, capsys):
    """Issue 51: --ood notmnist=FOLDER stored a user's folder's figures under the built-in set's name."""
    (tmp_path / "letters").mkdir()
    monkeypatch.setattr("bnn_zoo.evaluation.evaluate.evaluate_run",  # what the command calls
                        lambda *a, **k: pytest.fail("evaluated before checking"))
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["lenet", "--ood", f"notmnist={tmp_path / 'letters'}"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (f"error: argument --ood: 'notmnist={tmp_path / 'letters'}': notmnist is a "
                                       "built-in OOD set's name; pick another name for your folder (for example "
                                       f"my_notmnist={tmp_path / 'letters'}) (see --help)\n")
