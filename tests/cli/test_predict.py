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
    from bnn_zoo.runs.loading import load

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.fromarray(255 - images[1].numpy()).save(tmp_path / "paper.png")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    files = [str(tmp_path / n) for n in ("digit.png", "notes.txt", "paper.png", "empty.png")]
    assert main([str(tiny_run), *files, "--samples", "5", "--json"]) == 1
    answers = json.loads(capsys.readouterr().out)
    assert [a["file"] for a in answers] == files
    assert "not a readable image" in answers[1]["error"] and "not a readable image" in answers[3]["error"]
    # the same answers as the rule on the same draws
    trained = load(tiny_run)
    pyro.set_rng_seed(0)
    x = normalize(torch.stack([load_image(files[0]), load_image(files[2])]))
    decision = abstain(predict(trained.model, trained.guide, x, 5))
    for i, answer in enumerate((answers[0], answers[2])):
        expected = None if decision.refused[i] else int(decision.prediction[i])
        assert answer["answer"] == expected
        assert {int(c) for c in answer["accepted"]} == (set() if decision.refused[i] else set(decision.accepted[i].nonzero()[:, 0].tolist()))
    assert main([str(tiny_run), files[0], "--samples", "5"]) == 0
    rule_line, line = capsys.readouterr().out.strip().splitlines()
    assert rule_line.startswith("rule: median >= 0.2 (the quantile rule")
    expected = "I don't know" if answers[0]["answer"] is None else f"{answers[0]['answer']} ("
    assert line.startswith(files[0] + ": ") and expected in line


def test_predict_cli_says_which_signal_refused(certified_run, tmp_path, capsys):
    from bnn_zoo.abstain.rule import uncertainty
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.loading import load

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = []
    for i in range(12):
        files.append(str(tmp_path / f"d{i}.png"))
        Image.fromarray(images[i].numpy()).save(files[-1])
    files.append(str(tmp_path / "grey.png"))
    Image.fromarray(np.full((28, 28), 128, dtype=np.uint8)).save(files[-1])
    assert main([str(certified_run), *files, "--samples", "4", "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)
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
        assert (answer["answer"] is None) == bool(expected)
        # an accepted input is answered with its certified conformal set, a refused one with none
        in_set = trained.sets["bayes"].predict(probs)[i].nonzero().flatten().tolist()
        assert answer.get("set") == (None if expected else {"classes": in_set, "coverage": 0.99})
    assert main([str(certified_run), files[0], "--samples", "5", "--json"]) == 0  # not the certified 4
    assert "set" not in json.loads(capsys.readouterr().out)[0]
    assert main([str(certified_run), files[0], "--samples", "4"]) == 0
    assert capsys.readouterr().out.startswith(f"rule: median >= {rule.threshold}, refuse when mutual_information >")


def test_where_no_rule_is_certified_predict_answers_with_the_conformal_set(uncertified_run, tmp_path, capsys):
    """No rule certified (128 validation images cannot bear risk 0.01): each image is answered with
    its certified conformal set, not the quantile rule that accepts nearly everything; a set of every
    class is an "I don't know"; a line says why, what the validation inputs certify and the command."""
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.loading import load

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = []
    for i in range(12):
        files.append(str(tmp_path / f"d{i}.png"))
        Image.fromarray(images[i].numpy()).save(files[-1])
    assert main([str(uncertified_run), *files, "--samples", "4", "--json"]) == 0
    printed = capsys.readouterr()
    answers = json.loads(printed.out)
    why = ("no rule is certified for bayes, so each answer is its 80% conformal set: the smallest risk these 128 "
           "validation inputs certify at delta 0.05 is ")
    assert printed.err.startswith(why) and printed.err.count("\n") == 2
    assert printed.err.splitlines()[1].startswith("no shift alarm: 12 inputs look like")  # the sets' guarantee too
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
    header, *lines, alarm = capsys.readouterr().out.splitlines()
    assert header == printed.err.splitlines()[0] and alarm.startswith("no shift alarm: 2 inputs look like")
    for line, answer in zip(lines, answers):
        names = ", ".join(map(str, answer["set"]["classes"]))
        held = "I don't know (its 80% set holds every class)"
        assert line.endswith(f"; 80% set {{{names}}}" if answer["answer"] is not None else held)
    assert main([str(uncertified_run), files[0], "--samples", "4", "--rule", "quantile", "--json"]) == 0
    assert "certified" not in json.loads(capsys.readouterr().out)[0]  # the quantile rule, as asked


def test_predict_cli_answers_with_a_shipped_posterior_right_after_install(shared_data, tmp_path, capsys):
    from bnn_zoo.data.sets import load_torchvision

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(tmp_path / "blank.png")
    assert main(["lenet", str(tmp_path / "digit.png"), str(tmp_path / "blank.png"), "--json"]) == 0
    digit, blank = json.loads(capsys.readouterr().out)
    assert digit["answer"] == int(labels[0])
    assert digit["set"] == {"classes": [int(labels[0])], "coverage": 0.99}  # its certified 99% set
    assert blank["answer"] is None and blank["refused_by"] and "set" not in blank


def test_predict_cli_says_when_a_batch_stops_looking_like_the_certifying_inputs(shared_data, tmp_path, capsys):
    """The shipped lenet's shift alarm over the files in the order given: silent on 40 test digits,
    sounding on 40 digits turned 90 degrees, in the text's last line and on stderr with --json."""
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    digits, turned = [], []
    for i in range(40):
        digits.append(str(tmp_path / f"digit{i}.png"))
        Image.fromarray(images[i].numpy()).save(digits[-1])
        turned.append(str(tmp_path / f"turned{i}.png"))
        Image.fromarray(torch.rot90(images[i], 1).numpy()).save(turned[-1])
    assert main(["lenet", *digits, "--samples", "20"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("no shift alarm: 40 inputs look like the ones the guarantee was certified on")
    assert main(["lenet", *turned, "--samples", "20", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 40 and "of 40 inputs; false alarms at most 1% over the whole stream" in err
    assert err.startswith("shift alarm: these inputs do not look like the ones the guarantee was certified on")
    assert main(["lenet", turned[0], "--samples", "20"]) == 0  # one input is no stream
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
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0] == answers[1]


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
    assert folder.err == "" and json.loads(folder.out)[0]["uncertainty_bits"] != json.loads(shipped.out)[0]["uncertainty_bits"]
    from bnn_zoo.cli.certify import main as calibrate_main

    assert calibrate_main(["lenet"]) == 2
    assert capsys.readouterr().err == ("error: lenet is a shipped posterior, certified as it shipped; certify a run "
                                       "directory (./lenet for a folder of that name)\n")


def test_predict_cli_answers_the_good_files_beside_a_huge_one(shared_data, tmp_path, capsys):
    from bnn_zoo.data.sets import load_torchvision

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.new("1", (20000, 20000)).save(tmp_path / "bomb.png")
    assert main(["lenet", str(tmp_path / "bomb.png"), str(tmp_path / "digit.png"), "--json", "--samples", "10"]) == 1
    bomb, digit = json.loads(capsys.readouterr().out)
    assert "too large" in bomb["error"] and digit["answer"] == int(labels[0])


def test_predict_cli_refuses_bad_counts(capsys):
    for bad in (["--samples", "0"], ["--samples", "-3"], ["--seed", "-1"]):
        with pytest.raises(SystemExit) as stop:
            main(["lenet", "x.png", *bad])
        assert stop.value.code == 2 and f"argument {bad[0]}: must be at least" in capsys.readouterr().err


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
    assert done.returncode == 1, done.stderr
    assert done.stdout == ("digit.eps: error: not an image format bnn-zoo reads (EPS); "
                           "send PNG, JPEG, GIF, BMP, TIFF, WebP or PGM/PPM\n")


def test_predict_cli_prints_names_that_cannot_forge_an_answer_line(tmp_path, capsys):
    forged = tmp_path / "a\nb.png: 7 (1.00)"
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(forged, format="PNG")
    nan = np.zeros((28, 28), dtype=np.float32)
    nan[3, 4] = np.nan
    Image.fromarray(nan, "F").save(tmp_path / "nan.tif")
    plain = str(tmp_path / "nan.tif")
    assert main(["mnist_mlp", str(forged), plain, "--samples", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("b.png") for line in lines)
    _, answer, refused = lines
    assert answer.startswith(repr(str(forged)) + ": ")  # one line, the name escaped
    assert refused.startswith(f"{plain}: error: holds 1 non-finite pixels (NaN or inf)")  # a plain name as it is


def test_bnn_zoo_predict_stays_the_function_once_the_command_line_is_imported():
    import bnn_zoo
    import bnn_zoo.cli.predict  # the command line's module: bnn_zoo.predict stays the function

    model, guide = bnn_zoo.build("toy_mlp", hidden=[4])
    assert bnn_zoo.predict(model, guide, torch.zeros(3, 1), num_samples=2).shape == (2, 3, 2)


def test_python_m_bnn_zoo_predict_warns_of_nothing():
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "bnn_zoo.predict", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
