import json
import os
import subprocess
import sys

import numpy as np
import pyro
import pytest
import torch
from conftest import DEVICE, SHARED_DATA
from PIL import Image

from bnn_zoo import predict
from bnn_zoo.cli.predict import main


def test_predict_cli_answers_per_file(tiny_run, tmp_path, capsys):
    from bnn_zoo.abstain.rule import abstain
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.storage.loading import load

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.fromarray(255 - images[1].numpy()).save(tmp_path / "paper.png")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    files = [str(tmp_path / n) for n in ("digit.png", "notes.txt", "paper.png", "empty.png")]
    assert main([str(tiny_run), *files, "--samples", "5", "--json"]) == 2  # the others answered, on stdout
    printed = capsys.readouterr()
    found = json.loads(printed.out)
    answers, errors = found["answers"], found["errors"]
    assert [a["file"] for a in answers] == [files[0], files[2]] and [e["file"] for e in errors] == [files[1], files[3]]
    assert all("not a readable image" in e["error"] for e in errors)
    assert printed.err.splitlines()[:2] == [f"error: {e['file']}: {e['error']}" for e in errors]  # named on stderr
    # the same answers as the rule on the same draws
    trained = load(tiny_run)
    pyro.set_rng_seed(0)
    x = normalize(torch.stack([load_image(files[0]), load_image(files[2])]))
    decision = abstain(predict(trained.model, trained.guide, x, 5))
    for i, answer in enumerate(answers):
        expected = None if decision.refused[i] else int(decision.prediction[i])
        assert answer["answer"] == expected
        assert {int(c) for c in answer["accepted"]} == (set() if decision.refused[i] else set(decision.accepted[i].nonzero()[:, 0].tolist()))
    assert main([str(tiny_run), files[0], "--samples", "5"]) == 0
    line, = capsys.readouterr().out.strip().splitlines()  # the answer alone
    expected = "I don't know" if answers[0]["answer"] is None else f"{answers[0]['answer']} ("
    assert line.startswith(files[0] + ": ") and expected in line
    assert main([str(tiny_run), files[0], "--samples", "5", "--verbose"]) == 0
    rule_line, verbose_line = capsys.readouterr().out.strip().splitlines()  # --verbose: the rule first
    assert rule_line.startswith("rule: median >= 0.2 (the quantile rule") and verbose_line == line


def test_predict_cli_says_which_signal_refused(certified_run, tmp_path, capsys):
    from bnn_zoo.abstain.rule import uncertainty
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.storage.loading import load

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = []
    for i in range(12):
        files.append(str(tmp_path / f"d{i}.png"))
        Image.fromarray(images[i].numpy()).save(files[-1])
    files.append(str(tmp_path / "grey.png"))
    Image.fromarray(np.full((28, 28), 128, dtype=np.uint8)).save(files[-1])
    assert main([str(certified_run), *files, "--samples", "4", "--json", "--no-act-on-alarm"]) == 0  # the rule alone
    answers = json.loads(capsys.readouterr().out)["answers"]
    trained = load(certified_run, DEVICE)
    rule = trained.rules["bayes"]
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(torch.stack([load_image(f) for f in files])).to(DEVICE), 4)
    decision, mi = rule(probs), uncertainty(probs)["mutual_information"]
    for i, answer in enumerate(answers):
        expected = (["quantile"] if decision.refused_by_quantile[i] else []) + \
                   (["mutual_information"] if decision.refused_by_gate[i] else [])
        assert answer["refused_by"] == expected
        assert answer["uncertainty_bits"]["mutual_information"] == pytest.approx(float(mi[i]), abs=1e-5)
        said = ([f"no class's median probability reaches {rule.threshold:g}"] if "quantile" in expected else []) + \
               ([f"mutual information {float(mi[i]):.3g} bits > {rule.cut:.3g}"] if "mutual_information" in expected else [])
        assert answer["why"] == "; ".join(said)  # issue 47: why, in figures, as the page says it
        assert (answer["answer"] is None) == bool(expected)
        # an accepted input is answered with its certified conformal set, a refused one with none
        in_set = trained.sets["bayes"].predict(probs)[i].nonzero().flatten().tolist()
        assert answer.get("set") == (None if expected else {"classes": in_set, "coverage": 0.99})
    assert main([str(certified_run), *files, "--samples", "4", "--no-act-on-alarm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for line, answer in zip(lines, answers):
        assert line.endswith(f"I don't know ({answer['why']})") == (answer["answer"] is None)
    assert any("; mutual information" in line or ": I don't know (mutual information" in line for line in lines)
    assert main([str(certified_run), files[0], "--samples", "5", "--json"]) == 0  # not the certified 4
    assert "set" not in json.loads(capsys.readouterr().out)["answers"][0]
    assert main([str(certified_run), files[0], "--samples", "4", "--verbose"]) == 0
    after = trained.after_alarm("bayes")[0]
    assert capsys.readouterr().out.startswith(
        f"rule: median >= {rule.threshold}, refuse when mutual_information > {rule.cut:.4g} bits\nafter the shift "
        f"alarm: {after.quantile:g} quantile >= {after.threshold}, refuse when mutual_information > "
        f"{after.cut:.4g} bits\n")


def test_where_no_rule_is_certified_predict_answers_with_the_conformal_set(uncertified_run, tmp_path, capsys):
    """No rule certified (128 validation images cannot bear risk 0.01): each image is answered with
    its certified conformal set, not the quantile rule that accepts nearly everything; a set of every
    class is an "I don't know"; a line says why, what the validation inputs certify and the command."""
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.storage.loading import load

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = []
    for i in range(12):
        files.append(str(tmp_path / f"d{i}.png"))
        Image.fromarray(images[i].numpy()).save(files[-1])
    assert main([str(uncertified_run), *files, "--samples", "4", "--json"]) == 0
    printed = capsys.readouterr()
    answers = json.loads(printed.out)["answers"]
    why = ("no rule is certified for bayes, so each answer is its 80% conformal set: the smallest risk these 128 "
           "validation inputs certify at delta 0.05 is ")
    assert printed.err.startswith(why) and printed.err.count("\n") == 1  # the alarm watches a certified rule: none
    assert "shift alarm" not in printed.err and json.loads(printed.out)["alarm"] is None
    assert f"python -m bnn_zoo.certify {uncertified_run} --risk " in printed.err
    assert "risk 0.01 needs at least 709 validation inputs accepted with no error" in printed.err
    trained = load(uncertified_run, DEVICE)
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(torch.stack([load_image(f) for f in files])).to(DEVICE), 4)
    in_sets, mean = trained.sets["bayes"].answer(probs), probs.mean(0)
    assert {len(s) for s in in_sets} - {10} and any(len(s) > 1 for s in in_sets)  # single classes and larger sets
    for answer, in_set, p in zip(answers, in_sets, mean):
        assert answer["set"] == {"classes": in_set, "coverage": 0.8} and answer["certified"] is False
        best = max(in_set, key=lambda c: float(p[c]))
        assert answer["answer"] == (None if len(in_set) == 10 else best)  # every class: it names none
        ranked = [] if len(in_set) == 10 else sorted(in_set, key=lambda c: -float(p[c]))  # by mean probability
        assert list(map(int, answer["accepted"])) == ranked
    assert main([str(uncertified_run), *files[:2], "--samples", "4"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header == printed.err.splitlines()[0] and len(lines) == 2  # no alarm line: no certified rule to watch
    for line, answer in zip(lines, answers):
        names = ", ".join(map(str, answer["set"]["classes"]))
        held = "I don't know (its 80% conformal set holds every class)"
        assert line.endswith(f"; 80% set {{{names}}}" if answer["answer"] is not None else held)
    assert main([str(uncertified_run), files[0], "--samples", "4", "--rule", "quantile", "--json"]) == 0
    assert "certified" not in json.loads(capsys.readouterr().out)["answers"][0]  # the quantile rule, as asked


def test_predict_cli_answers_with_a_shipped_posterior_right_after_install(shared_data, tmp_path, capsys):
    from bnn_zoo.data.sets import load_torchvision

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(tmp_path / "blank.png")
    assert main(["lenet", str(tmp_path / "digit.png"), str(tmp_path / "blank.png"), "--json"]) == 0
    digit, blank = json.loads(capsys.readouterr().out)["answers"]
    assert digit["answer"] == int(labels[0])
    assert digit["set"] == {"classes": [int(labels[0])], "coverage": 0.99}  # its certified 99% set
    assert blank["answer"] is None and blank["refused_by"] and "set" not in blank


def _digits(folder, images, turned: bool = False) -> list[str]:
    files = []
    for i, image in enumerate(images):
        files.append(str(folder / f"{'turned' if turned else 'digit'}{i}.png"))
        Image.fromarray((torch.rot90(image, 1) if turned else image).numpy()).save(files[-1])
    return files


def _shipped_draws(files: list[str], samples: int) -> torch.Tensor:
    """The shipped lenet's draws for the files, as predict makes them (its seed 0, in the order given)."""
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import normalize
    from bnn_zoo.runs.storage.loading import load
    from bnn_zoo.runs.storage.trained import posteriors

    with pyro.settings.context(module_local_params=True):
        pyro.set_rng_seed(0)
        return posteriors(load("lenet", DEVICE))["bayes"].predict(
            normalize(torch.stack([load_image(f) for f in files])).to(DEVICE), samples)


def test_predict_cli_holds_the_answers_from_the_alarm_on_to_the_after_alarm_rule(shared_data, tmp_path, capsys):
    """The shipped lenet's files as one stream: 20 digits turned 90 degrees sound the alarm, and from
    that input on each answer must pass the after-alarm rule too: of the 30 ordinary digits after
    them, those it refuses and the certified rule would answer are refused, by it. The JSON holds the
    alarm and says of each answer whether it came after it; the text says it in plain words."""
    from bnn_zoo.abstain.shift import ShiftAlarm
    from bnn_zoo.data.sets import load_torchvision
    from bnn_zoo.runs.storage.loading import load

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    files = _digits(tmp_path, images[:20], turned=True) + _digits(tmp_path, images[20:50])
    assert main(["lenet", *files, "--samples", "20", "--json"]) == 0
    printed = capsys.readouterr()
    found = json.loads(printed.out)
    trained, probs = load("lenet"), _shipped_draws(files, 20)
    rule, after = trained.rules["bayes"], trained.after_alarm("bayes")[0]
    expected = ShiftAlarm.of(trained.calibration["bayes"]).observe(probs)
    expected_at = expected.alarm_at
    alarm = found["alarm"]
    assert alarm["alarm_at"] == expected_at <= 20 and alarm["direction"] == "refused" and alarm["acting"] is True
    assert alarm["inputs"] == 50 and alarm["peaks"]["refused"] >= alarm["bounds"]["refused"] == pytest.approx(1 / 0.0045)
    assert alarm["after_alarm_rule"] == after.to_dict()
    held = torch.arange(1, 51) >= expected_at
    plain, strict = rule(probs), after(probs)
    only_after = (held & strict.refused & ~plain.refused).nonzero().flatten().tolist()
    assert any(i >= 20 for i in only_after)  # ordinary digits too, held to the after-alarm rule
    assert [i for i, a in enumerate(found["answers"]) if a["refused_by"] == ["after_alarm_rule"]] == only_after
    assert [a["after_alarm"] for a in found["answers"]] == held.tolist()
    assert all(a["answer"] == (None if plain.refused[i] else int(plain.prediction[i]))
               for i, a in enumerate(found["answers"]) if not held[i])  # before the alarm: the certified rule
    assert alarm["refused_after_alarm"] == len(only_after)
    assert printed.err == alarm["text"] + "\n" and "martingale" not in alarm["text"]
    assert alarm["text"] == (
        f"{expected.describe()}; from input {expected_at} on, answers are held to the stricter after-alarm rule ({len(only_after)} "
        f"input{'s' * (len(only_after) != 1)} refused that the certified rule alone would have answered); to answer "
        "inputs like these under a guarantee, "
        "train and certify a run on labelled ones like them (python -m bnn_zoo.train lenet data.name=folder "
        "data.path=DIR, a folder per class: its validation split certifies it)")
    assert main(["lenet", *files, "--samples", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == alarm["text"]
    assert lines[only_after[0]].endswith(
        "I don't know (since the shift alarm sounded, answers are held to the after-alarm rule (its 0.02 quantile of "
        f"its sampled probability >= {after.threshold:g}, mutual information <= {after.cut:.3g}))")
    assert main(["lenet", *files, "--samples", "20", "--json", "--no-act-on-alarm"]) == 0  # the certified rule alone
    off = json.loads(capsys.readouterr().out)
    expected = [None if r else int(p) for r, p in zip(plain.refused, plain.prediction)]
    assert [a["answer"] for a in off["answers"]] == expected
    assert off["alarm"]["alarm_at"] == expected_at and off["alarm"]["acting"] is False
    assert "answers after it are given as before: acting on the alarm is turned off" in off["alarm"]["text"]


def test_predict_cli_counts_every_copy_of_one_input_in_one_batch_as_a_repeat(shared_data, tmp_path, capsys):
    """Issue 51: 8 copies of a digit in one batch were counted 5 repeats of 7: the same input's
    predictions differed in their last bits by batch row. The alarm counts repeats of the input."""
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    files = _digits(tmp_path, images[4:5]) * 8
    assert main(["lenet", *files, "--samples", "20", "--json"]) == 0
    alarm = json.loads(capsys.readouterr().out)["alarm"]
    assert alarm["inputs"] == 8 and alarm["counted"]["repeated"] == 7


@pytest.mark.slow
def test_predict_cli_leaves_a_clean_stream_as_the_certified_rule_answers_it(shared_data, tmp_path, capsys):
    """20 test digits: no alarm, every answer the certified rule's, none after an alarm; one input is no stream."""
    from bnn_zoo.abstain.shift import ShiftAlarm
    from bnn_zoo.data.sets import load_torchvision
    from bnn_zoo.runs.storage.loading import load

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    digits = _digits(tmp_path, images[:20])
    assert main(["lenet", *digits, "--samples", "20", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    draws = _shipped_draws(digits, 20)
    plain = load("lenet").rules["bayes"](draws)
    expected = [None if r else int(p) for r, p in zip(plain.refused, plain.prediction)]
    assert [a["answer"] for a in found["answers"]] == expected
    assert not any(a["after_alarm"] for a in found["answers"]) and found["alarm"]["alarm_at"] is None
    assert main(["lenet", *digits, "--samples", "20"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    refused = sum(r is None for r in expected)
    assert last == ShiftAlarm.of(load("lenet").calibration["bayes"]).observe(draws).describe()
    assert last.startswith(f"no shift alarm: the certified rule refused {refused} of 20 inputs ({refused / 20:.0%}), "
                           "where it refused ") and last.endswith("(a stream within it sounds the alarm at most 1% of "
                                                                  "the time)")
    assert main(["lenet", digits[0], "--samples", "20"]) == 0  # one input is no stream
    assert "shift alarm" not in capsys.readouterr().out


def test_predict_cli_refuses_a_missing_run(tmp_path, capsys):
    assert main([str(tmp_path), "x.png"]) == 2
    assert capsys.readouterr().err.startswith("error: no checkpoint at")
    (tmp_path / "notes.txt").write_text("")
    assert main([str(tmp_path / "notes.txt"), "x.png"]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path / 'notes.txt'} is a file; give a run directory (the folder "
                                       "that holds checkpoint.pt) or a shipped posterior (lenet, lenet_fashion, mnist_mlp)\n")


def test_predict_cli_takes_a_run_s_checkpoint_for_its_run(tiny_run, tmp_path, capsys):
    Image.fromarray(np.full((28, 28), 90, dtype=np.uint8)).save(tmp_path / "grey.png")
    answers = []
    for run in (tiny_run, tiny_run / "checkpoint.pt"):  # it said "no checkpoint at .../checkpoint.pt/checkpoint.pt"
        assert main([str(run), str(tmp_path / "grey.png"), "--json", "--samples", "4"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["answers"])
    assert answers[0] == answers[1]


@pytest.mark.slow
def test_a_shipped_name_is_the_shipped_posterior_beside_a_folder_of_that_name(tiny_run, shared_data, tmp_path,
                                                                               monkeypatch, capsys):
    """One rule: a bare shipped name (lenet) is the shipped posterior, ./lenet the folder; where both
    are at hand a line says which answered (a folder lenet/ silently replaced the shipped lenet)."""
    import shutil

    shutil.copytree(tiny_run, tmp_path / "lenet")
    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.full((28, 28), 90, dtype=np.uint8)).save(tmp_path / "grey.png")
    assert main(["lenet", "grey.png", "--json", "--samples", "10"]) == 0
    shipped = capsys.readouterr()
    assert shipped.err == "note: lenet is the shipped posterior lenet; for the folder lenet here, write ./lenet\n"
    assert main(["./lenet", "grey.png", "--json", "--samples", "10"]) == 0
    folder = capsys.readouterr()
    assert folder.err == "" and (json.loads(folder.out)["answers"][0]["uncertainty_bits"] !=
                                 json.loads(shipped.out)["answers"][0]["uncertainty_bits"])
    from bnn_zoo.cli.certify import main as calibrate_main

    assert calibrate_main(["lenet"]) == 2
    assert capsys.readouterr().err == ("error: lenet is a shipped posterior, certified as it shipped; certify a run "
                                       "directory (./lenet for a folder of that name)\n")


@pytest.mark.slow
def test_predict_cli_answers_the_good_files_beside_a_huge_one(shared_data, tmp_path, capsys):
    from bnn_zoo.data.sets import load_torchvision

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.new("1", (20000, 20000)).save(tmp_path / "bomb.png")
    assert main(["lenet", str(tmp_path / "bomb.png"), str(tmp_path / "digit.png"), "--json", "--samples", "10"]) == 2
    printed = capsys.readouterr()
    found = json.loads(printed.out)
    (bomb,), (digit,) = found["errors"], found["answers"]
    assert "too large" in bomb["error"] and digit["answer"] == int(labels[0])
    assert printed.err == f"error: {tmp_path / 'bomb.png'}: {bomb['error']}\n"


def test_predict_cli_answers_the_good_files_beside_a_malformed_one(tmp_path, capsys):
    """Issue 47: a TIFF that makes Pillow's decoder raise a TypeError ended predict in a traceback,
    answering neither it nor the digit beside it."""
    from helpers import malformed_tiff

    from bnn_zoo.shipped import EXAMPLE as SEVEN

    (tmp_path / "odd.tif").write_bytes(malformed_tiff())
    assert main(["lenet", str(tmp_path / "odd.tif"), str(SEVEN), "--json", "--samples", "10", "--device", "cpu"]) == 2
    printed = capsys.readouterr()
    found = json.loads(printed.out)
    assert found["errors"] == [{"file": str(tmp_path / "odd.tif"), "error": "not a readable image (TypeError)"}]
    assert [(a["file"], a["answer"]) for a in found["answers"]] == [(str(SEVEN), 7)]
    assert printed.err == f"error: {tmp_path / 'odd.tif'}: not a readable image (TypeError)\n"


def test_predict_cli_refuses_bad_counts(capsys):
    for bad in (["--samples", "0"], ["--samples", "-3"], ["--seed", "-1"]):
        with pytest.raises(SystemExit) as stop:
            main(["lenet", "x.png", *bad])
        assert stop.value.code == 2 and f"argument {bad[0]}: must be at least" in capsys.readouterr().err


@pytest.mark.slow
def test_predict_cli_runs_no_outside_program_on_a_postscript_file(tmp_path):
    bin_dir, marker = tmp_path / "bin", tmp_path / "gs_ran"
    bin_dir.mkdir()
    (bin_dir / "gs").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")  # a Ghostscript that tells
    (bin_dir / "gs").chmod(0o755)
    (tmp_path / "digit.eps").write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 28 28\nshowpage\n")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.predict", "mnist_mlp", "digit.eps"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert not marker.exists()
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr == ("error: digit.eps: not an image format bnn-zoo reads (EPS); "
                                                 "send PNG, JPEG, GIF, BMP, TIFF, WebP or PGM/PPM\n")


def test_predict_cli_prints_names_that_cannot_forge_an_answer_line(tmp_path, capsys):
    forged = tmp_path / "a\nb.png: 7 (1.00)"
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(forged, format="PNG")
    nan = np.zeros((28, 28), dtype=np.float32)
    nan[3, 4] = np.nan
    Image.fromarray(nan, "F").save(tmp_path / "nan.tif")
    plain = str(tmp_path / "nan.tif")
    assert main(["mnist_mlp", str(forged), plain, "--samples", "2"]) == 2
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert not any(line.startswith("b.png") for line in lines)
    answer, = lines
    assert answer.startswith(repr(str(forged)) + ": ")  # one line, the name escaped
    assert printed.err.startswith(f"error: {plain}: holds 1 non-finite pixels (NaN or inf)")  # a plain name as it is


def test_bnn_zoo_predict_stays_the_function_once_the_command_line_is_imported():
    import bnn_zoo
    import bnn_zoo.cli.predict  # noqa: F401 — the command line's module: bnn_zoo.predict stays the function

    model, guide = bnn_zoo.build("toy_mlp", hidden=[4])
    assert bnn_zoo.predict(model, guide, torch.zeros(3, 1), num_samples=2).shape == (2, 3, 2)


@pytest.mark.slow
def test_python_m_bnn_zoo_predict_warns_of_nothing():
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "bnn_zoo.predict", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_99_9_percent_set_is_said_as_99_9_not_100(uncertified_run, tmp_path, capsys):
    """Issue 51: sets at 99.9% coverage were printed as "100%" sets, which a set that may leave a class
    out is not."""
    import shutil

    from bnn_zoo.data.sets import load_torchvision

    run = tmp_path / "run"
    shutil.copytree(uncertified_run, run)
    calibration = json.loads((run / "calibration.json").read_text())
    calibration["bayes"]["sets"]["alpha"] = 0.001  # as certify --alpha 0.001 on 999 inputs or more stores it
    (run / "calibration.json").write_text(json.dumps(calibration))
    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = [str(tmp_path / f"d{i}.png") for i in range(6)]
    for i, file in enumerate(files):
        Image.fromarray(images[i].numpy()).save(file)
    assert main([str(run), *files, "--samples", "4"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.startswith("no rule is certified for bayes, so each answer is its 99.9% conformal set")
    assert len(lines) == 6 and all("; 99.9% set {" in line or ": I don't know (its 99.9% conformal set holds every "
                                   "class)" in line for line in lines), lines
