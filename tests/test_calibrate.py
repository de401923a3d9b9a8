import json
import math

import pyro
import pytest
from conftest import DEVICE

from bnn_zoo import load, predict
from bnn_zoo.calibrate import main, validation_set
from bnn_zoo.calibration import certify
from bnn_zoo.checkpoint import CALIBRATION
from bnn_zoo.errors import CheckpointError


def test_the_stored_rules_are_the_certified_ones_on_validation(certified_run):
    found = json.loads((certified_run / CALIBRATION).read_text())
    trained = load(certified_run, DEVICE)  # where calibrate_run drew its samples
    x, labels = validation_set(trained)
    assert len(labels) == 128  # the run's validation split, not its test set
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, x, 4)
    expected = certify(probs, labels, risk=0.4, delta=0.2, max_refusal=0.1)
    assert found["bayes"]["rule"] == expected.rule.to_dict() and found["bayes"]["samples"] == 4
    assert trained.rules["bayes"] == expected.rule and trained.rules["twin"].signal == "entropy"
    decision = expected.rule(probs)
    assert found["bayes"]["validation"]["refused"] == pytest.approx(decision.refused.float().mean().item())
    assert found["bayes"]["validation"]["refused"] <= 0.1


def test_training_certifies_at_its_end_and_says_so(tiny_run):
    found = json.loads((tiny_run / CALIBRATION).read_text())
    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert metrics["calibration"] == found
    # 128 validation images cannot certify the default risk of 0.5%: the seed's rule stays, and the
    # file says why
    assert "higher risk or delta" in found["bayes"]["error"]
    assert load(tiny_run).rules["bayes"].cut == math.inf


def test_the_calibrate_cli(certified_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(certified_run, run)
    assert main([str(run), "--risk", "0.5", "--delta", "0.3", "--max-refusal", "0.05", "--signal", "entropy",
                 "--samples", "3"]) == 0
    printed = capsys.readouterr().out
    found = json.loads((run / CALIBRATION).read_text())
    assert found["bayes"]["rule"]["signal"] in ("entropy", None) and found["bayes"]["risk"] == 0.5
    assert f"refused {found['bayes']['validation']['refused']:.2%}" in printed
    assert main([str(run), "--risk", "2"]) == 2
    assert "risk must lie strictly between 0 and 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # argparse: "argument --samples: must be at least 1"
        main([str(run), "--samples", "0"])
    assert stop.value.code == 2 and "--samples: must be at least 1" in capsys.readouterr().err
    # no settings: the run's config's (abstention.risk 0.01, which 128 images cannot certify)
    assert main([str(run)]) == 0
    assert "no rule reaches an error rate of 0.01 " in json.loads((run / CALIBRATION).read_text())["bayes"]["error"]


def test_a_damaged_calibration_is_named(certified_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(certified_run, run)
    (run / CALIBRATION).write_text('{"bayes": {"rule": {"threshold": 0.2}}}')
    with pytest.raises(CheckpointError, match="calibration.json is not a calibration"):
        load(run)
