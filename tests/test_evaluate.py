import json

import pyro
import pytest
from conftest import DEVICE, tiny_config

from bnn_zoo import load, predict
from bnn_zoo.abstention import abstain, uncertainty
from bnn_zoo.data import load_notmnist, load_torchvision, normalize
from bnn_zoo.evaluate import main
from bnn_zoo.metrics import detection


def test_evaluate_cli_writes_the_figures_of_the_draws(tiny_run, shared_data, capsys):
    args = [str(tiny_run), "--samples", "4", "--test-size", "200", "--ood", "notmnist", "noise",
            "--ood-size", "100"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "ood/auroc_notmnist" in printed and "bayes" in printed and "twin" in printed
    results = json.loads((tiny_run / "eval.json").read_text())
    for key in ("test/accuracy", "test/nll", "test/ece", "test/refused", "test/accuracy_accepted",
                "test/multiple", "ood/refused_notmnist", "ood/entropy_noise", "ood/auroc_notmnist",
                "ood/aupr_mi_noise", "ood/fpr95_notmnist"):
        assert key in results["bayes"], key
    assert "ood/auroc_notmnist" in results["twin"] and "ood/auroc_mi_notmnist" not in results["twin"]
    # the same figures from the same draws, computed here (seed 0; MNIST test first, then notMNIST)
    trained = load(tiny_run, DEVICE)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    pyro.set_rng_seed(0)
    in_probs = predict(trained.model, trained.guide, normalize(images[:200]).to(DEVICE), 4)
    ood_probs = predict(trained.model, trained.guide, normalize(load_notmnist(str(shared_data))[:100]).to(DEVICE), 4)
    accuracy = (in_probs.mean(0).argmax(1).cpu() == labels[:200]).float().mean().item()
    assert results["bayes"]["test/accuracy"] == pytest.approx(accuracy)
    auroc = detection(uncertainty(in_probs)["entropy"], uncertainty(ood_probs)["entropy"])["auroc"]
    assert results["bayes"]["ood/auroc_notmnist"] == pytest.approx(auroc)
    assert results["bayes"]["ood/refused_notmnist"] == pytest.approx(abstain(ood_probs).refused.float().mean().item())
    main(args)
    again = json.loads((tiny_run / "eval.json").read_text())["bayes"]
    figures = lambda r: {k: v for k, v in r.items() if not k.startswith("cost/predict_")}  # noqa: E731 (timings)
    assert figures(again) == figures(results["bayes"])  # seeded
    assert results["bayes"]["cost/predict_seconds"] > 0 and results["bayes"]["cost/parameters"] == 2 * (784 * 32 + 32 + 330)


def test_evaluate_uses_the_run_s_certified_rule(certified_run, shared_data, tmp_path):
    out = tmp_path / "eval.json"
    assert main([str(certified_run), "--samples", "4", "--test-size", "300", "--ood", "noise", "constant",
                 "--ood-size", "60", "--output", str(out)]) == 0
    results = json.loads(out.read_text())
    trained = load(certified_run, DEVICE)
    rule = trained.rules["bayes"]
    assert rule.signal == "mutual_information"
    assert results["bayes"]["rule/cut"] == rule.cut and results["bayes"]["rule/threshold"] == rule.threshold
    assert results["twin"]["rule/signal"] == "entropy"
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(images[:300]).to(DEVICE), 4)
    decision = rule(probs)
    assert results["bayes"]["test/refused"] == pytest.approx(decision.refused.float().mean().item())
    assert results["bayes"]["test/refused_by_gate"] == pytest.approx(decision.refused_by_gate.float().mean().item())
    assert results["bayes"]["test/refused_by_gate"] > 0  # the gate is at work, not only the threshold
    # the seed's rule is reported beside it, and refuses no more than the rule with the gate
    for name in ("noise", "constant"):
        assert results["bayes"][f"ood/refused_quantile_rule_{name}"] <= results["bayes"][f"ood/refused_{name}"]
    assert main([str(certified_run), "--samples", "4", "--test-size", "300", "--ood", "noise", "--ood-size", "60",
                 "--rule", "quantile", "--threshold", "0.5", "--output", str(tmp_path / "q.json")]) == 0
    quantile = json.loads((tmp_path / "q.json").read_text())
    assert quantile["bayes"]["rule/threshold"] == 0.5 and quantile["bayes"]["rule/signal"] is None
    assert quantile["bayes"]["test/refused_by_gate"] == 0


def test_evaluate_rejects_a_toy_run(tmp_path, capsys):
    from bnn_zoo.train import train

    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **{"train.epochs": 2}))
    assert main([str(tmp_path)]) == 2
    assert "for classifiers" in capsys.readouterr().err


def test_evaluate_checks_its_arguments_before_the_work(tiny_run, tmp_path, capsys, monkeypatch):
    from bnn_zoo import evaluate

    monkeypatch.setattr(evaluate, "evaluate_run", lambda *a, **k: pytest.fail("evaluated before checking"))
    assert evaluate.main([str(tiny_run), "--output", str(tmp_path / "missing" / "x.json")]) == 2
    assert f"folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    for bad in (["--test-size", "0"], ["--test-size", "-1"], ["--ood-size", "0"], ["--samples", "0"]):
        with pytest.raises(SystemExit) as stop:
            evaluate.main([str(tiny_run), *bad])
        assert stop.value.code == 2 and f"argument {bad[0]}: must be at least 1" in capsys.readouterr().err


def test_evaluate_and_calibrate_refuse_unwritable_outputs_before_the_work(certified_run, tmp_path, capsys):
    import shutil

    from test_files import remount_readonly, tmpfs

    from bnn_zoo.calibrate import main as calibrate_main

    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    (tmp_path / "link.json").symlink_to(outside)
    assert main([str(certified_run), "--output", str(tmp_path / "link.json")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --output {tmp_path / 'link.json'} is a symbolic link; "
                                               "give the path of a file to write")
    assert outside.read_text() == "keep"
    with tmpfs(tmp_path / "disk", "4m") as disk:
        shutil.copytree(certified_run, disk / "run")
        remount_readonly(disk)
        for command in (main, calibrate_main):
            assert command([str(disk / "run"), "--samples", "2"]) == 2
            assert capsys.readouterr().err.strip() == (f"error: cannot write into {disk / 'run'} (Read-only file "
                                                       "system): make it writable, free space, or choose another folder")
