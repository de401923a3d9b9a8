import json

import pytest
import torch
from PIL import Image

from bnn_zoo.evaluate import detection, main
from bnn_zoo.predict import load_image
from bnn_zoo.predict import main as predict_main


def test_auroc_is_one_on_separable_and_half_on_identical_scores():
    separable = detection(torch.rand(200), torch.rand(300) + 1.0)
    assert separable["auroc"] == pytest.approx(1.0) and separable["aupr"] == pytest.approx(1.0)
    assert separable["fpr95"] == 0.0
    same = torch.rand(500)
    identical = detection(same, same.clone())
    assert identical["auroc"] == pytest.approx(0.5)


def test_evaluate_cli_writes_eval_json(tiny_run, capsys):
    args = [str(tiny_run), "--samples", "4", "--test-size", "200", "--ood-size", "100"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "ood/auroc_notmnist" in printed and "bayes" in printed and "twin" in printed
    results = json.loads((tiny_run / "eval.json").read_text())
    for key in ("test/accuracy", "test/nll", "test/ece", "test/refused", "test/accuracy_accepted",
                "test/multiple", "ood/refused_notmnist", "ood/entropy_noise", "ood/auroc_notmnist",
                "ood/aupr_mi_noise", "ood/fpr95_notmnist"):
        assert key in results["bayes"], key
    assert "ood/auroc_notmnist" in results["twin"] and "ood/auroc_mi_notmnist" not in results["twin"]
    assert 0.0 <= results["bayes"]["ood/auroc_notmnist"] <= 1.0
    main(args)
    assert json.loads((tiny_run / "eval.json").read_text())["bayes"] == results["bayes"]  # seeded


def test_evaluate_calibrates_the_threshold_on_validation(tiny_run, tmp_path):
    out = tmp_path / "calibrated.json"
    assert main([str(tiny_run), "--samples", "4", "--test-size", "300", "--ood", "noise",
                 "--ood-size", "50", "--coverage", "0.9", "--output", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["threshold"] == "calibrated" and results["coverage"] == 0.9
    for part in ("bayes", "twin"):
        assert 0 < results[part]["threshold"] < 1
        # 90% of validation accepted; the test set, drawn alike, lands near that.
        assert 0.02 < results[part]["test/refused"] < 0.2


def test_evaluate_rejects_a_toy_run(tmp_path, capsys):
    from conftest import tiny_config

    from bnn_zoo.train import train

    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **{"train.epochs": 2}))
    assert main([str(tmp_path)]) == 2
    assert "for classifiers" in capsys.readouterr().err


def test_load_image_converts_to_white_on_black(tmp_path):
    dark_on_light = Image.new("L", (64, 64), 255)
    dark_on_light.paste(0, (20, 20, 44, 44))
    dark_on_light.convert("RGB").save(tmp_path / "paper.jpg")
    pixels = load_image(tmp_path / "paper.jpg")
    assert pixels.shape == (28, 28) and pixels.dtype == torch.uint8
    assert pixels[0, 0] < 20 and pixels[14, 14] > 235
    assert load_image(tmp_path / "paper.jpg", invert="no")[0, 0] > 235
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable image"):
        load_image(tmp_path / "empty.png")


def test_predict_cli_answers_per_file(tiny_run, tmp_path, capsys):
    from conftest import SHARED_DATA

    from bnn_zoo.data import load_torchvision

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.fromarray(255 - images[1].numpy()).save(tmp_path / "paper.png")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    files = [str(tmp_path / n) for n in ("digit.png", "notes.txt", "paper.png", "empty.png")]
    assert predict_main([str(tiny_run), *files, "--samples", "5", "--json"]) == 1
    answers = json.loads(capsys.readouterr().out)
    assert [a["file"] for a in answers] == files
    assert "error" in answers[1] and "not a readable image" in answers[3]["error"]
    for good in (answers[0], answers[2]):
        assert "accepted" in good and (good["answer"] is None or str(good["answer"]) in good["accepted"])
    predict_main([str(tiny_run), files[0], "--samples", "5"])
    line = capsys.readouterr().out.strip()
    assert line.startswith(files[0] + ": ") and ("I don't know" in line or "(" in line)
