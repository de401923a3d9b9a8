import json
import math

import pyro
import pytest
import torch
from conftest import DEVICE

from bnn_zoo import load, predict
from bnn_zoo.abstain.after_alarm import after_alarm_rule
from bnn_zoo.abstain.certify import certify
from bnn_zoo.abstain.conformal import calibrate_sets
from bnn_zoo.abstain.temperature import fit_temperature
from bnn_zoo.cli.certify import main
from bnn_zoo.evaluation.certification import certify_trained, summary, validation_set
from bnn_zoo.core.errors import CheckpointError, StorageError
from bnn_zoo.core.inference.inputs import evaluating
from bnn_zoo.posterior import TWIN_SCALED, certifying
from bnn_zoo.runs.storage.checkpoint import CALIBRATION, CERTIFIED_WEIGHTS, CHECKPOINT, read, save_atomic
from bnn_zoo.runs.storage.trained import posteriors, weights_digest


def test_the_stored_rules_are_the_certified_ones_on_validation(certified_run):
    found = json.loads((certified_run / CALIBRATION).read_text())
    trained = load(certified_run, DEVICE)  # where certify_run drew its samples
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
    # beside it, the after-alarm rule, on the same draws: the config's 7.5% refusal budget and 0.02 quantile
    after = after_alarm_rule(probs, labels, expected.rule, risk=0.4, delta=0.2, refusal=0.075, quantile=0.02)
    assert found["bayes"]["after_alarm"] == after.to_dict() and trained.after_alarm("bayes") == (after.rule, None)
    assert after.rule.quantile == 0.02 and after.rule.threshold >= expected.rule.threshold


def test_the_stored_sets_are_the_conformal_ones_on_validation(certified_run):
    """calibration.json holds each posterior's conformal sets at the run's abstention.alpha (0.01),
    calibrated on the same validation draws as the rule; load gives them back."""
    found = json.loads((certified_run / CALIBRATION).read_text())
    trained = load(certified_run, DEVICE)
    x, labels = validation_set(trained)
    pyro.set_rng_seed(0)
    expected = calibrate_sets(predict(trained.model, trained.guide, x, 4), labels, alpha=0.01, score="thr")
    assert found["bayes"]["sets"] == expected.to_dict() and trained.sets["bayes"] == expected
    assert trained.sets["twin"].alpha == 0.01 and trained.sets["twin"].n == 128


def test_sets_certified_for_other_weights_are_not_used(certified_run, tmp_path):
    run = _copy(certified_run, tmp_path)
    state = read(run / CHECKPOINT)
    state["guide"] = {k: v * 1.01 for k, v in state["guide"].items()}  # weights a resumed run moved on
    save_atomic(state, run / CHECKPOINT)
    trained = load(run)
    assert trained.calibration_problem and load(certified_run).sets
    for held in ("rules", "sets"):  # the README's own quick start reads trained.rules: refused, as rules_for() is
        with pytest.raises(CheckpointError, match="certified other weights .* re-certify with python -m bnn_zoo.certify"):
            getattr(trained, held)
    assert trained.temperature is None and TWIN_SCALED not in posteriors(trained)  # fitted to other weights too


def test_the_twin_s_temperature_is_fitted_on_validation_and_its_scaled_twin_certified(certified_run):
    """calibration.json holds the temperature that minimizes the twin's NLL on the first fifth of
    validation (26 of 128 inputs), and the temperature-scaled twin's own certified rule (entropy
    gate) and sets, from its probabilities on the other 102: inputs its temperature never saw."""
    found = json.loads((certified_run / CALIBRATION).read_text())[TWIN_SCALED]
    trained = load(certified_run, DEVICE)
    x, labels = validation_set(trained)
    with torch.no_grad(), evaluating(trained.twin):
        temperature = fit_temperature(trained.twin.net(x[:26]), labels[:26])
        probs = (trained.twin.net(x) / temperature).softmax(-1)[None]
    assert certifying(TWIN_SCALED, 128) == slice(26, 128) and certifying("twin", 128) == slice(0, 128)
    probs, labels = probs[:, 26:], labels[26:]
    assert found["temperature"] == pytest.approx(temperature) and trained.temperature == found["temperature"]
    assert found["temperature_inputs"] == 26
    rung = posteriors(trained)[TWIN_SCALED]
    assert rung.temperature == trained.temperature and torch.allclose(rung.predict(x[26:]), probs, atol=1e-6)
    expected = certify(probs, labels, risk=0.4, delta=0.2, max_refusal=0.1, signal="entropy")
    assert trained.rules[TWIN_SCALED] == expected.rule and found["samples"] == 1
    assert trained.sets[TWIN_SCALED] == calibrate_sets(probs, labels, alpha=0.01, score="thr")


def test_no_temperature_fits_a_twin_that_gets_every_validation_input_right(certified_run):
    trained = load(certified_run, DEVICE)
    x, labels = validation_set(trained)
    with torch.no_grad():
        right = trained.twin(x).argmax(-1) == labels
    x, labels = x[right], labels[right]
    found = certify_trained(trained, x, labels, risk=0.4, delta=0.2, max_refusal=0.1, samples=2)
    fitted = certifying(TWIN_SCALED, len(labels)).start
    assert found[TWIN_SCALED] == {"error": f"no temperature: the network classifies all {fitted} inputs "
                                           "right: their NLL falls without end as T -> 0, so no temperature is "
                                           "best; calibrate on a larger held-out set"}
    assert summary(found).splitlines()[-1].startswith("twin_scaled: none (no temperature: the network")


def test_a_calibration_written_before_sets_existed_loads_without_them(certified_run, tmp_path):
    run = _copy(certified_run, tmp_path)
    calibration = json.loads((run / CALIBRATION).read_text())
    for part in ("bayes", "twin"):
        del calibration[part]["sets"]
    del calibration[TWIN_SCALED]  # nor scaled twins
    (run / CALIBRATION).write_text(json.dumps(calibration))
    trained = load(run)
    assert trained.sets == {} and trained.temperature is None and trained.rules["bayes"] == load(certified_run).rules["bayes"]


def test_training_certifies_at_its_end_and_says_so(tiny_run):
    found = json.loads((tiny_run / CALIBRATION).read_text())
    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert metrics["calibration"] == found
    # 128 validation images cannot certify the default risk of 0.5%: the quantile rule stays, and the
    # file says why
    assert "higher risk or delta" in found["bayes"]["error"]
    assert load(tiny_run).rules["bayes"].cut == math.inf


def test_an_uncertified_run_says_the_smallest_risk_its_validation_certifies(tiny_run, tmp_path, capsys):
    """128 validation images cannot certify risk 0.01: calibration.json holds the smallest risk they
    do certify at the run's delta, beside the error, and how many inputs 0.01 needs; calibrate says
    both with the command that certifies it, and that command certifies it."""
    from bnn_zoo.abstain.certify import CUTS

    found = json.loads((tiny_run / CALIBRATION).read_text())["bayes"]
    assert (found["risk"], found["delta"], found["inputs_needed"]) == (0.01, 0.05, 709)
    smallest = found["smallest_risk"]
    assert 1 - (0.05 / len(CUTS)) ** (1 / 128) <= smallest < 1  # the best 128 inputs can do: all accepted, all right
    run = _copy(tiny_run, tmp_path)
    assert main([str(run)]) == 0
    printed = capsys.readouterr().out
    assert (f"bayes: not certified ({found['error']}); the smallest risk these 128 validation inputs certify at delta "
            f"0.05 is {smallest:g}, which python -m bnn_zoo.certify {run} --risk {smallest:g} certifies; risk 0.01 "
            "needs at least 709 validation inputs accepted with no error; until one is, predict, evaluate and the page "
            "answer with its conformal set; its sets at 99% coverage: ") in printed
    assert main([str(run), "--risk", f"{smallest:g}"]) == 0
    certified = json.loads((run / CALIBRATION).read_text())["bayes"]
    assert certified["risk"] == smallest and certified["smallest_risk"] == smallest
    assert f"(certified <= {smallest} with probability >= 0.95); the smallest risk they certify: {smallest:g}" in \
        capsys.readouterr().out


def test_sets_on_too_few_validation_inputs_say_how_many_they_need(tiny_run, tmp_path, capsys):
    """At 99% coverage a set smaller than every class needs 99 calibration inputs: a run whose
    validation split holds fewer says so, and which coverage its inputs allow."""
    from bnn_zoo.evaluation.certification import certify_trained

    trained = load(tiny_run, DEVICE)
    x, labels = validation_set(trained)
    found = certify_trained(trained, x[:91], labels[:91], risk=0.01, delta=0.05, max_refusal=0.02, samples=2)
    assert found["bayes"]["sets"]["threshold"] is None  # every class
    assert summary(found, "RUN").splitlines()[0].endswith(
        "its sets at 99% coverage: every class (smaller ones need at least 99 validation inputs, these are 91, or a "
        "lower coverage: python -m bnn_zoo.certify RUN --alpha 0.02 for 98% sets)")


@pytest.mark.slow
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
    assert "its sets at 99% coverage: thr score <= " in printed
    assert main([str(run), "--risk", "2"]) == 2
    assert "risk must lie strictly between 0 and 1" in capsys.readouterr().err
    assert main([str(run), "--alpha", "1.5"]) == 2
    assert "alpha must lie in (0, 1) and set_score be one of thr, aps, raps; got 1.5" in capsys.readouterr().err
    assert main([str(run), "--alpha", "0.2", "--set-score", "aps", "--samples", "3"]) == 0
    sets = json.loads((run / CALIBRATION).read_text())["bayes"]["sets"]
    assert sets["score"] == "aps" and sets["alpha"] == 0.2 and "its sets at 80% coverage: aps score" in \
        capsys.readouterr().out
    assert main([str(run), "--risk", "0.5", "--delta", "0.3", "--samples", "3", "--after-alarm-refusal", "0.4",
                 "--after-alarm-quantile", "0.25"]) == 0
    after = json.loads((run / CALIBRATION).read_text())["bayes"]["after_alarm"]
    assert after["rule"]["quantile"] == 0.25 and after["max_refusal"] == 0.4 and after["validation"]["refused"] <= 0.4
    assert f"; after the shift alarm: 0.25 quantile >= {after['rule']['threshold']}" in capsys.readouterr().out
    assert main([str(run), "--after-alarm-quantile", "0.6"]) == 2
    assert "after_alarm_quantile must lie in [0, quantile]" in capsys.readouterr().err
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
    (run / CALIBRATION).write_text('{"bayes": {"sets": {"score": "lac", "alpha": 0.1}}}')
    with pytest.raises(CheckpointError, match="calibration.json is not a calibration"):
        load(run)
    (run / CALIBRATION).write_text('{"bayes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(StorageError, match=r"calibration.json is not a readable calibration bnn-zoo wrote \(nested "
                                           r"too deeply\): delete it or write it again: python -m bnn_zoo.certify"):
        load(run)


def _copy(run, tmp_path):
    import shutil

    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def test_a_calibration_records_the_weights_it_certified(certified_run):
    found = json.loads((certified_run / CALIBRATION).read_text())[CERTIFIED_WEIGHTS]
    trained = load(certified_run)
    assert found == {"digest": weights_digest(trained), "run": trained.run, "epoch": 2, "members": 1}
    assert trained.calibration_problem is None and trained.rules_for()["bayes"] == trained.rules["bayes"]


def test_a_calibration_of_other_weights_is_refused_until_recertified(certified_run, tmp_path, capsys):
    """What kill -9 during a resumed run leaves: the checkpoint holds new weights, calibration.json
    certified the old ones."""
    from bnn_zoo.cli import evaluate
    from bnn_zoo.cli.predict import main as predict_main

    run = _copy(certified_run, tmp_path)
    state = read(run / CHECKPOINT)
    name = next(iter(state["guide"]))
    state["guide"][name] = state["guide"][name] + 0.01
    state["epoch"] = 3
    save_atomic(state, run / CHECKPOINT)
    trained = load(run)
    fix = f"re-certify with python -m bnn_zoo.certify {run}, or use the quantile rule"
    with pytest.raises(CheckpointError, match=f"certified other weights \\(epoch 2, 1 member\\(s\\)\\) than the run "
                                              f"holds now \\(epoch 3, 1 member\\(s\\)\\): {fix}"):
        trained.rules_for()
    assert trained.rules_for("quantile")["bayes"].cut == math.inf  # the quantile rule needs no calibration
    image = tmp_path / "digit.png"
    _write_digit(image)
    assert predict_main([str(run), str(image)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "certified other weights" in err and "python -m bnn_zoo.certify" in err
    assert predict_main([str(run), str(image), "--rule", "quantile"]) == 0
    before = (run / "eval.json").read_bytes() if (run / "eval.json").exists() else None
    assert evaluate.main([str(run), "--test-size", "20", "--ood-size", "10"]) == 2
    assert "certified other weights" in capsys.readouterr().err
    assert ((run / "eval.json").read_bytes() if (run / "eval.json").exists() else None) == before
    assert main([str(run), "--risk", "0.4", "--delta", "0.2", "--max-refusal", "0.1", "--samples", "4"]) == 0
    assert load(run).rules_for()["bayes"].threshold >= 0.2


def test_a_calibration_that_does_not_name_its_weights_is_refused(certified_run, tmp_path):
    run = _copy(certified_run, tmp_path)
    found = json.loads((run / CALIBRATION).read_text())
    del found[CERTIFIED_WEIGHTS]
    (run / CALIBRATION).write_text(json.dumps(found))
    with pytest.raises(CheckpointError, match="does not say which weights it certified .*python -m bnn_zoo.certify"):
        load(run).rules_for()


def test_a_resumed_run_recertifies_at_its_end_even_without_calibrate(certified_run, tmp_path):
    from bnn_zoo.cli.train import config_for_run, train

    run = _copy(certified_run, tmp_path)
    before = json.loads((run / CALIBRATION).read_text())
    train(config_for_run(None, [f"resume={run}", "train.epochs=3", "abstention.certify=false",
                                "abstention.risk=0.4", "abstention.delta=0.2", "abstention.max_refusal=0.1",
                                "abstention.samples=4"]))
    after = json.loads((run / CALIBRATION).read_text())
    trained = load(run)
    assert after[CERTIFIED_WEIGHTS]["epoch"] == 3 != before[CERTIFIED_WEIGHTS]["epoch"]
    assert after[CERTIFIED_WEIGHTS]["digest"] == weights_digest(trained) and trained.calibration_problem is None


def _write_digit(path):
    import torch
    from PIL import Image

    pixels = torch.zeros(28, 28, dtype=torch.uint8)
    pixels[4:24, 13:16] = 255  # a 1
    Image.fromarray(pixels.numpy()).save(path)


def test_calibration_leaves_the_caller_s_random_stream(certified_run, tmp_path):
    import torch

    from bnn_zoo.evaluation.certification import certify_run

    run = _copy(certified_run, tmp_path)
    torch.manual_seed(7)
    state = torch.get_rng_state()
    found = certify_run(run, risk=0.4, delta=0.2, max_refusal=0.1, samples=4)
    assert torch.equal(torch.get_rng_state(), state)
    assert found["bayes"] == json.loads((certified_run / CALIBRATION).read_text())["bayes"]  # the same draws: seed 0


def test_predict_answers_with_the_scaled_twin_under_its_own_rule(certified_run, shared_data, tmp_path, capsys):
    from PIL import Image

    from bnn_zoo.cli.predict import main as predict_main
    from bnn_zoo.data.sets import load_torchvision, normalize

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    files = []
    for i in range(6):
        Image.fromarray(images[i].numpy()).save(tmp_path / f"{i}.png")
        files.append(str(tmp_path / f"{i}.png"))
    assert predict_main([str(certified_run), *files, "--posterior", TWIN_SCALED, "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)["answers"]
    trained = load(certified_run)
    decision = trained.rules[TWIN_SCALED](posteriors(trained)[TWIN_SCALED].predict(normalize(images[:6])))
    assert [a["answer"] for a in answers] == [None if r else int(p) for r, p in zip(decision.refused, decision.prediction)]


def test_a_temperature_fitted_on_every_validation_input_is_not_used(certified_run, tmp_path):
    """A calibration that does not say how many validation inputs fitted its temperature (written
    before its certificate left them out) gives no scaled twin: its guarantee would not hold."""
    run = _copy(certified_run, tmp_path)
    calibration = json.loads((run / CALIBRATION).read_text())
    del calibration[TWIN_SCALED]["temperature_inputs"]
    (run / CALIBRATION).write_text(json.dumps(calibration))
    trained = load(run)
    assert trained.temperature is None and TWIN_SCALED not in posteriors(trained)


def test_a_twin_certified_with_a_density_gate_answers_through_it_everywhere(certified_run, shared_data, tmp_path, capsys):
    """--twin-signal feature_density: the twin's gate reads its feature density, fitted on the run's
    training split with cuts from those inputs' scores, certified on validation; load, evaluate and
    predict apply it; calibrating again without it removes the density with its rule."""
    from PIL import Image

    from bnn_zoo.abstain.certify import density_cuts
    from bnn_zoo.abstain.rule import DENSITY
    from bnn_zoo.cli.predict import main as predict_main
    from bnn_zoo.data.sets import load_torchvision, normalize, run_split
    from bnn_zoo.evaluation.evaluate import evaluate_run
    from bnn_zoo.runs.storage.checkpoint import DENSITIES

    run = _copy(certified_run, tmp_path)
    args = [str(run), "--risk", "0.4", "--delta", "0.2", "--max-refusal", "0.1", "--samples", "4"]
    assert main([*args, "--twin-signal", DENSITY]) == 0
    assert "twin: median >= " in capsys.readouterr().out
    trained = load(run, DEVICE)
    rule, density, twin = trained.rules["twin"], trained.densities["twin"], posteriors(trained)["twin"]
    x_train, y_train = run_split(trained.config.data, "train", limit=10000)
    feats = twin.features(x_train.to(DEVICE))
    assert torch.allclose(density.score(feats), type(density).fit(feats, y_train).score(feats))
    x, labels = validation_set(trained)
    expected = certify(twin.predict(x), labels, 0.4, 0.2, 0.1, signal=DENSITY, cuts=density_cuts(density.score(feats)),
                       density=density.score(twin.features(x)))
    assert rule == expected.rule and rule.signal == DENSITY
    images, test_labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    test = normalize(images[:300]).to(DEVICE)
    refused = rule(twin.predict(test), density.score(twin.features(test))).refused
    result = evaluate_run(run, num_samples=2, test_size=300, ood=("noise",), ood_size=50, shift=())
    assert result.posteriors["twin"].test.refused == pytest.approx(refused.float().mean().item())
    for i in range(4):
        Image.fromarray(images[i].numpy()).save(tmp_path / f"{i}.png")
    assert predict_main([str(run), *(str(tmp_path / f"{i}.png") for i in range(4)), "--posterior", "twin", "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)["answers"]
    assert [a["answer"] is None for a in answers] == refused[:4].tolist()
    shipped_gate = _shipped(run, tmp_path / "posteriors")  # shipped, the gate keeps its density
    shipped_twin = posteriors(shipped_gate)["twin"]
    assert torch.equal(shipped_gate.densities["twin"].score(feats), density.score(feats))
    again = shipped_gate.rules["twin"](shipped_twin.predict(test), shipped_gate.densities["twin"].score(shipped_twin.features(test)))
    assert (again.refused != refused).float().mean() <= 0.01  # half-precision weights move a rare border case
    assert main(args) == 0 and not (run / DENSITIES).exists()  # back to the entropy gate
    assert load(run).rules["twin"].signal == "entropy" and load(run).densities == {}


def _shipped(run, folder):
    """``run`` shipped into ``folder`` as "shipped", and loaded back by that name."""
    from bnn_zoo.runs.storage import loading as trained

    folder.mkdir()
    original = trained.SHIPPED
    trained.SHIPPED = folder
    try:
        trained.ship(run, "shipped")
        return load("shipped", DEVICE)
    finally:
        trained.SHIPPED = original


def test_a_rule_that_misses_max_refusal_says_so():
    """A third of the inputs are wrong and unsure: no rule under 5% errors refuses at most 10%."""
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (600,), generator=g)
    probs = torch.full((1, 600, 10), 0.01)
    probs[0, torch.arange(600), labels] = 0.91
    unsure = torch.arange(600) % 3 == 0
    probs[0, unsure] = 0.1  # a flat answer, wrong as often as not
    found = certify(probs, labels, risk=0.05, delta=0.05, max_refusal=0.1, signal=None)
    assert not found.validation["max_refusal_met"] and found.validation["refused"] >= 0.33
    line = summary({"bayes": {**found.to_dict(), "samples": 1}})
    assert "MAX_REFUSAL MISSED: no certified rule refuses at most 10.00%, so this one answers the most" in line
    kept = certify(probs, labels, risk=0.05, delta=0.05, max_refusal=0.4, signal=None)
    assert kept.validation["max_refusal_met"] and "MISSED" not in summary({"bayes": {**kept.to_dict(), "samples": 1}})
