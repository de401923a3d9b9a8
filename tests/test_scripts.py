"""Every script in scripts/ runs with tiny settings (as Pyro's tests/test_examples.py does)."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*.py"))


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_help(path, capsys):
    with pytest.raises(SystemExit) as done:
        load_script(path).main(["--help"])
    assert done.value.code == 0 and "usage" in capsys.readouterr().out.lower()


@pytest.mark.parametrize("name, ood", [("reject_notmnist", "notmnist"), ("reject_noise", "noise")])
def test_rejection_scripts_on_a_tiny_run(name, ood, tiny_run, tmp_path, capsys):
    script = load_script(Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    out = tmp_path / "out"
    assert script.main([str(tiny_run), "--out", str(out), "--samples", "5", "--test-size", "200",
                        "--ood-size", "50"]) == 0
    printed = capsys.readouterr().out
    assert "refused on MNIST" in printed and "Bayesian" in printed and "deterministic" in printed
    result = json.loads((out / f"reject_{ood}.json").read_text())
    assert set(result["bayes"]) == {"refused_mnist", "accuracy_accepted_mnist",
                                    "forced_accuracy_mnist", f"refused_{ood}"}
    for plot in ("histograms", "mean_probabilities", "refusal_vs_threshold", "risk_coverage",
                 "reliability"):
        assert (out / f"{plot}.png").stat().st_size > 1000


def test_prune_script_on_a_tiny_run(tiny_run, tmp_path, capsys):
    script = load_script(Path(__file__).resolve().parents[1] / "scripts" / "prune.py")
    out = tmp_path / "prune"
    assert script.main([str(tiny_run), "--levels", "0", "0.5", "1", "--samples", "3", "--test-size", "200",
                        "--ood-size", "50", "--out", str(out)]) == 0
    assert "refused notMNIST" in capsys.readouterr().out
    result = json.loads((out / "prune.json").read_text())
    for by in ("snr", "magnitude"):
        assert [r["pruned"] for r in result[by]] == [0, 0.5, 1]
        assert result[by][0]["accuracy"] > result[by][-1]["accuracy"]
    assert result["snr"][0] == result["magnitude"][0]  # nothing pruned: the same draws, the same figures
    for plot in ("pruning", "weight_posteriors"):
        assert (out / f"{plot}.png").stat().st_size > 1000


def test_weight_posteriors_script(tiny_run, tmp_path, capsys):
    script = load_script(Path(__file__).resolve().parents[1] / "scripts" / "weight_posteriors.py")
    assert script.main([str(tiny_run), "--out", str(tmp_path / "w.png")]) == 0
    printed = capsys.readouterr().out
    assert "layers.1.weight" in printed and "SNR quartiles" in printed
    assert (tmp_path / "w.png").stat().st_size > 1000


def test_benchmark_with_tiny_settings(shared_data, tmp_path, capsys):
    script = load_script(Path(__file__).resolve().parents[1] / "scripts" / "benchmark.py")
    out = tmp_path / "bench.json"
    assert script.main(["--archs", "mnist_mlp", "--steps", "2", "--warmup", "1", "--repeats", "1",
                        "--samples", "3", "--images", "40", "--device", "cpu", "--json", str(out), "--draws", "3",
                        "--time-to-accuracy", "--tta-override", "data.train_limit=300", "data.val_size=100",
                        "data.test_limit=50", "model.hidden=[16]", "train.epochs=1"]) == 0
    printed = capsys.readouterr().out
    assert "zoo/bbb" in printed and "speed-up" in printed and "time to 98% validation accuracy" in printed
    result = json.loads(out.read_text())
    mlp = result["train"]["mnist_mlp"]
    assert all(mlp[m]["steps_per_s"] > 0 and mlp[m]["peak_mb"] > 0 for m in script.TRAINING)
    variance = result["gradient_variance"]["mnist_mlp"]
    assert variance["data"] == "MNIST" and all(variance[r]["loc"] > 0 for r in ("weights", "local"))
    assert set(result["predict"]["mnist_mlp"]) == {"predict", "loop"}
    assert result["time_to_accuracy"]["mnist_mlp"]["epochs"] == 1


def test_hand_written_bayes_by_backprop_learns():
    """The benchmark's baseline is a working BbB: on a separable problem its loss falls and its
    posterior means classify."""
    import torch

    script = load_script(Path(__file__).resolve().parents[1] / "scripts" / "benchmark.py")
    torch.manual_seed(0)
    x = torch.randn(256, 5)
    y = (x[:, 0] > 0).long()
    params, loss = script.bayes_by_backprop(torch.nn.Linear(5, 2))
    optimizer = torch.optim.Adam(params, lr=0.05)
    losses = []
    for _ in range(100):
        optimizer.zero_grad()
        value = loss(x, y, num_batches=1)
        value.backward()
        optimizer.step()
        losses.append(value.item())
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    weight, bias = params[:2]  # the posterior means
    assert ((x @ weight.T + bias).argmax(1) == y).float().mean() > 0.95
