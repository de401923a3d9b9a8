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
