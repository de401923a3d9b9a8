"""Every script in scripts/ runs with tiny settings (as Pyro's tests/test_examples.py does), and
prints and writes the figures its library functions compute."""
import json
import os
import re
import statistics
from pathlib import Path

import pyro
import pytest
import torch
from helpers import load_script

from bnn_zoo import load, predict
from bnn_zoo.core.networks.pruning import posterior_loc_scale
from bnn_zoo.data.shifted.augment import AugmentConfig
from bnn_zoo.data.sets import load_torchvision, normalize, run_split
from bnn_zoo.evaluation.figures.rejection import rejection_report
from bnn_zoo.posterior import BAYES, TWIN

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"
SCRIPTS = sorted(SCRIPTS_DIR.glob("*.py"))


def shipped_copy(tmp_path, monkeypatch):
    """A copy of the shipped posteriors that ``load`` and ``scripts/ship_sets.py`` read and write, and
    the script."""
    import shutil

    import bnn_zoo.runs.storage.loading

    shipped = tmp_path / "shipped"
    shutil.copytree(bnn_zoo.runs.storage.loading.SHIPPED, shipped)
    script = load_script("ship_sets")
    monkeypatch.setattr(bnn_zoo.runs.storage.loading, "SHIPPED", shipped)
    monkeypatch.setattr(script, "SHIPPED", shipped)
    return shipped, script


def test_a_script_imports_the_package_never_another_script():
    """Issue 51: nine scripts imported six private modules of scripts/, library code nothing tested
    or documented; a script is a command over the package, and the folder holds commands alone."""
    import ast

    siblings = {p.stem for p in SCRIPTS_DIR.glob("*.py")}
    assert not [p.name for p in SCRIPTS if p.stem.startswith("_")]
    for path in SCRIPTS:
        for node in ast.walk(ast.parse(path.read_text())):  # at any depth of its code
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert not node.level, f"{path.name}: a relative import"
                names = [node.module]
            else:
                continue
            imported = {name.split(".")[0] for name in names}
            assert not imported & siblings, f"{path.name} imports {sorted(imported & siblings)} of scripts/"


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_help(path, capsys):
    with pytest.raises(SystemExit) as done:
        load_script(path.stem).main(["--help"])
    assert done.value.code == 0 and "usage" in capsys.readouterr().out.lower()


@pytest.mark.slow
@pytest.mark.parametrize("name, ood", [("reject_notmnist", "notmnist"), ("reject_noise", "noise")])
def test_rejection_scripts_write_the_report(name, ood, tiny_run, tmp_path, capsys):
    out = tmp_path / "out"
    args = dict(num_samples=5, test_size=200, ood_size=50)
    assert load_script(name).main([str(tiny_run), "--out", str(out), "--samples", "5", "--test-size", "200",
                                   "--ood-size", "50"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / f"reject_{ood}.json").read_text())
    assert result == rejection_report(tiny_run, ood, tmp_path / "again", **args).to_dict()
    refused = 100 * result["posteriors"][BAYES]["ood"]["refused"]
    assert re.search(rf"refused on \S+\s+{refused:.2f}%", printed.replace("white noise", "noise"))


@pytest.mark.slow
def test_prune_script_on_a_tiny_run(tiny_run, shared_data, tmp_path, capsys):
    out = tmp_path / "prune"
    assert load_script("prune").main([str(tiny_run), "--levels", "0", "0.5", "1", "--samples", "3",
                                      "--test-size", "200", "--ood-size", "50", "--out", str(out)]) == 0
    assert "refused notMNIST" in capsys.readouterr().out
    result = json.loads((out / "prune.json").read_text())
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    trained = load(tiny_run)
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(images[:200]), 3)
    for by in ("snr", "magnitude"):
        assert [r["pruned"] for r in result[by]] == [0, 0.5, 1]
        unpruned, everything = result[by][0], result[by][-1]
        assert unpruned["accuracy"] == pytest.approx((probs.mean(0).argmax(1) == labels[:200]).float().mean().item())
        # every weight zero: uniform probabilities, whose argmax is class 0
        assert everything["accuracy"] == pytest.approx((labels[:200] == 0).float().mean().item())
        assert everything["refused_mnist"] == 1.0  # 0.1 per class, under the 0.2 threshold
    for plot in ("pruning", "weight_posteriors"):
        assert (out / f"{plot}.png").stat().st_size > 1000


@pytest.mark.slow
def test_weight_posteriors_script_prints_the_quartiles(tiny_run, tmp_path, capsys):
    assert load_script("weight_posteriors").main([str(tiny_run), "--out", str(tmp_path / "w.png")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("layers.1.weight"))
    loc, scale = posterior_loc_scale(load(tiny_run).guide)["layers.1.weight"]
    median = torch.quantile(scale.flatten()[:1_000_000], 0.5).item()
    assert f"{median:.3g}" in line.split()  # the sigma quartiles hold the median sd
    assert (tmp_path / "w.png").stat().st_size > 1000


@pytest.mark.slow
def test_benchmark_with_tiny_settings(shared_data, tmp_path, capsys):
    script = load_script("benchmark")
    out = tmp_path / "bench.json"
    assert script.main(["--archs", "mnist_mlp", "--samples", "3", "--images", "40", "--device", "cpu",
                        "--json", str(out), "--draws", "3"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    predicted = result["predict"]["mnist_mlp"]
    gain = predicted["loop"]["seconds"] / predicted["predict"]["seconds"]
    assert f"{gain:.2f}x" in next(x for x in printed.splitlines() if x.startswith("mnist_mlp predict "))
    variance = result["gradient_variance"]["mnist_mlp"]
    assert variance["data"] == "MNIST" and all(variance[r]["loc"] > 0 for r in ("weights", "local"))
    assert set(result["predict"]["mnist_mlp"]) == {"predict", "compiled", "loop"}


@pytest.mark.slow
def test_time_to_accuracy_stops_at_the_target(shared_data, tmp_path, capsys):
    script = load_script("time_to_accuracy")
    out = tmp_path / "tta.json"
    assert script.main(["--archs", "mnist_mlp", "--capture", "trace", "eager", "--device", "cpu", "--json", str(out),
                        "--target", "0.5", "--data-root", str(shared_data),
                        "--override", "data.train_limit=600", "data.val_size=200", "data.test_limit=50",
                        "model.hidden=[32]", "train.epochs=5", "train.lr=0.01"]) == 0
    runs = json.loads(out.read_text())["mnist_mlp"]
    assert runs["trace"]["reached"] and runs["trace"]["val_accuracy"] >= 0.5 and runs["trace"]["epochs"] < 5
    assert runs["trace"]["val_accuracy"] == runs["eager"]["val_accuracy"]  # the same draws, the same run
    assert f"train.capture=trace: reached after {runs['trace']['epochs']} epochs" in capsys.readouterr().out


@pytest.mark.slow
def test_capture_parity_trains_both_ways_and_tables_the_figures(shared_data, tmp_path, capsys):
    script = load_script("capture_parity")
    out = tmp_path / "parity.json"
    assert script.main(["--seeds", "0", "--samples", "4", "--ood-size", "100", "--out", str(tmp_path / "runs"),
                        "--json", str(out), "--override", "data.train_limit=600", "data.val_size=100",
                        "data.test_limit=200", "model.hidden=[16]", "train.epochs=3", "train.lr=0.01"]) == 0
    results = json.loads(out.read_text())
    compiled, eager = results["compile"]["0"], results["eager"]["0"]
    # the same draws: three epochs apart only by float rounding, so the same test predictions nearly everywhere
    assert abs(compiled["accuracy"] - eager["accuracy"]) <= 0.01 and 0.5 < eager["accuracy"]
    assert abs(compiled["auroc notmnist"] - eager["auroc notmnist"]) <= 0.01
    row = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("accuracy"))
    assert f"{compiled['accuracy']:.4f} / {eager['accuracy']:.4f}" in row


def test_ship_sets_portable_rewrites_shipped_files_without_the_builder_s_folders(tmp_path, monkeypatch, capsys):
    """A posterior shipped with the folders of the machine that built it (data.root, run_dir), as
    lenet was: --portable writes it again without them, its weights, calibration and everything
    else as they were, under a digest that holds (read checks it); a file without any is left alone."""

    from bnn_zoo.runs.storage.checkpoint import digest, read, save_atomic
    from bnn_zoo.runs.storage.trained import weights_digest

    shipped, script = shipped_copy(tmp_path, monkeypatch)
    built = read(shipped / "lenet.pt")
    built["config"]["run_dir"], built["config"]["data"]["root"] = "/work/runs/lenet_ens3", "/work/shared/data"
    save_atomic(built, shipped / "lenet.pt")
    weights = weights_digest(load("lenet"))
    twin = (shipped / "lenet_twin.pt").read_bytes()
    assert script.main(["lenet", "--portable"]) == 0
    assert capsys.readouterr().out == ("lenet.pt: rewritten without the folders of the machine that built it\n"
                                       "lenet_twin.pt: holds no folder of the machine that built it\n")
    after = read(shipped / "lenet.pt")
    assert after["config"]["run_dir"] is None and after["config"]["data"]["root"] is None
    assert {**after["config"], "run_dir": "/work/runs/lenet_ens3",
            "data": {**after["config"]["data"], "root": "/work/shared/data"}} == built["config"]
    for key in set(built) - {"config", "digest"}:  # weights, calibration (its certified_weights), densities
        assert digest(after[key]) == digest(built[key]), key
    assert weights_digest(load("lenet")) == weights and (shipped / "lenet_twin.pt").read_bytes() == twin
    assert script.main(["--portable"]) == 0  # every shipped posterior; none holds a folder now
    assert "rewritten" not in capsys.readouterr().out


@pytest.mark.slow
def test_ship_sets_certifies_the_sets_and_keeps_the_rest_of_the_file(shared_data, tmp_path, monkeypatch, capsys):
    """On a copy of the shipped posteriors: the file gets the sets calibration would certify (the
    same draws), and its weights and rules stay as they were."""

    from bnn_zoo.abstain.conformal import calibrate_sets
    from bnn_zoo.evaluation.certification import validation_set
    from bnn_zoo.core.inference.predictive import seeded
    from bnn_zoo.posterior import certifying
    from bnn_zoo.runs.storage.checkpoint import read, save_atomic
    from bnn_zoo.runs.storage.trained import sampled_probs

    shipped, script = shipped_copy(tmp_path, monkeypatch)
    before = read(shipped / "mnist_mlp.pt")
    for part in ("bayes", "twin"):
        before["calibration"][part].pop("sets", None)
        before["calibration"][part]["alarm"] = {"scores": [0.5]}  # the reference the alarm read before fc66f38
    save_atomic(before, shipped / "mnist_mlp.pt")  # a posterior shipped before sets existed
    assert script.main(["mnist_mlp", "--data-root", str(shared_data)]) == 0
    after = read(shipped / "mnist_mlp.pt")
    trained = load("mnist_mlp")
    x, labels = validation_set(trained, str(shared_data))
    with pyro.settings.context(module_local_params=True), seeded(0):
        sampled = sampled_probs(trained, x, trained.config.abstention.samples)
    held = {part: certifying(part, len(labels)) for part in sampled}  # the scaled twin: past its temperature's inputs
    expected = {part: calibrate_sets(probs[:, held[part]], labels[held[part]], 0.01, "thr") for part, probs in sampled.items()}
    for part in ("bayes", "twin"):
        assert after["calibration"][part]["sets"] == expected[part].to_dict()
        assert after["calibration"][part]["rule"] == before["calibration"][part]["rule"]
        assert "alarm" not in after["calibration"][part]  # the alarm watches refusals: no stored reference
    assert all(torch.equal(after["guide"][k], v) for k, v in before["guide"].items())
    assert f"mnist_mlp bayes: thr score <= {expected['bayes'].threshold:.4g} at 99%" in capsys.readouterr().out
    # and the temperature-scaled twin, fitted and certified on the same validation split
    from bnn_zoo.abstain.temperature import fit_temperature

    with torch.no_grad():
        temperature = fit_temperature(trained.twin.net(x[:1000]), labels[:1000])  # the first fifth of 5,000
    scaled = after["calibration"]["twin_scaled"]
    assert scaled["temperature"] == pytest.approx(temperature) and trained.temperature == scaled["temperature"]
    assert scaled["sets"] == expected["twin_scaled"].to_dict() and scaled["rule"]["signal"] in ("entropy", None)


@pytest.mark.parametrize("override", ["data.remade=false", "data.remade=true"])
def test_ship_sets_recertify_writes_nothing_until_all_it_needs_succeeded(tmp_path, monkeypatch, capsys, override):
    """Issue 47: --recertify --override wrote the override into the shipped file, then stopped on the
    missing data, leaving the posterior to load with the override under its old certificate."""
    shipped, script = shipped_copy(tmp_path, monkeypatch)
    before = (shipped / "lenet.pt").read_bytes()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert script.main(["lenet", "--recertify", "--override", override, "--data-root", str(empty)]) == 2
    assert "MNIST" in capsys.readouterr().err.strip().splitlines()[-1]
    assert (shipped / "lenet.pt").read_bytes() == before
    assert script.main(["lenet", "--recertify", "--override", "model.prior_scale=2.0", "--data-root", str(empty)]) == 2
    assert capsys.readouterr().err == ("error: --override model.prior_scale=2.0 changes the networks lenet's weights "
                                       "fit; override only how inputs are read and certified\n")
    assert (shipped / "lenet.pt").read_bytes() == before


@pytest.mark.slow
def test_ship_sets_adds_the_after_alarm_rules_beside_the_shipped_rules(shared_data, tmp_path, monkeypatch, capsys):
    """On a copy of the shipped mnist_mlp without them: --after-alarm-only writes beside each rule the
    after-alarm rule certification would (the same draws and inputs), and keeps the rest of the file;
    what it writes is what the package ships."""

    from bnn_zoo.abstain.rule import Rule
    from bnn_zoo.evaluation.certification import after_alarm_entry, validation_set
    from bnn_zoo.core.inference.predictive import seeded
    from bnn_zoo.posterior import certifying
    from bnn_zoo.runs.storage.checkpoint import read, save_atomic
    from bnn_zoo.runs.storage.trained import sampled_probs

    shipped, script = shipped_copy(tmp_path, monkeypatch)
    before = read(shipped / "mnist_mlp.pt")
    packaged = {part: entry.pop("after_alarm") for part, entry in before["calibration"].items()
                if "after_alarm" in entry}
    save_atomic(before, shipped / "mnist_mlp.pt")  # a posterior shipped before the after-alarm rule
    assert load("mnist_mlp").after_alarm("bayes")[1].startswith("its calibration predates the after-alarm rule")
    assert script.main(["mnist_mlp", "--data-root", str(shared_data), "--after-alarm-only"]) == 0
    after = read(shipped / "mnist_mlp.pt")
    trained = load("mnist_mlp")
    x, labels = validation_set(trained, str(shared_data))
    with pyro.settings.context(module_local_params=True), seeded(0):
        sampled = sampled_probs(trained, x, trained.config.abstention.samples)
    printed = capsys.readouterr().out
    for part in ("bayes", "twin", "twin_scaled"):
        entry, held = before["calibration"][part], certifying(part, len(labels))
        expected = after_alarm_entry(sampled[part][:, held], labels[held], Rule.from_dict(entry["rule"]), entry["risk"],
                                     entry["delta"], 0.075, 0.02)
        assert after["calibration"][part]["after_alarm"] == expected == packaged[part]
        assert {k: v for k, v in after["calibration"][part].items() if k != "after_alarm"} == entry
        assert f"mnist_mlp {part}; after the shift alarm: 0.02 quantile >= " in printed
    assert all(torch.equal(after["guide"][k], v) for k, v in before["guide"].items())


@pytest.mark.slow
def test_peers_times_each_contender_in_a_process_of_its_own(tmp_path, capsys):
    script = load_script("peers")
    out = tmp_path / "peers.json"
    contenders = ["zoo_traced", "bbb", "twin"]
    assert script.main(["--archs", "tiny", "--contenders", *contenders, "--steps", "2", "--rounds", "2",
                        "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]["tiny"]
    lines = capsys.readouterr().out.splitlines()
    for contender in contenders:
        entry = results[contender]
        assert len(entry["rounds"]) == 2 and entry["steps_per_s"] == statistics.median(entry["rounds"])
        line = next(x for x in lines if x.split()[:1] == [contender])
        assert f"{entry['steps_per_s'] / results['bbb']['steps_per_s']:5.2f}x bbb" in line


def test_peers_says_it_is_working_on_stderr(monkeypatch, capsys):
    """Issue 51: --rounds 3 printed nothing for minutes; a progress bar counts the measurements (one
    skipped is not measured again), the table stays on stdout."""
    script = load_script("peers")
    asked = []

    def measured(spec, timeout=None):
        asked.append(spec["contender"])
        return {"skipped": "No module named 'tyxe'"} if spec["contender"] == "tyxe" else {"steps_per_s": 10.0,
                                                                                       "warmup_s": 1.0}

    monkeypatch.setattr(script, "_child", measured)
    assert script.main(["--archs", "tiny", "--contenders", "bbb", "tyxe", "--rounds", "3"]) == 0
    printed = capsys.readouterr()
    assert asked == ["bbb", "tyxe", "bbb", "bbb"]
    assert re.search(r"peers: +0%\|.*\| 0/6 ", printed.err) and "peers" not in printed.out
    assert "  bbb               10.0" in printed.out and "  tyxe          skipped: No module named 'tyxe'" in printed.out


def test_a_peer_not_installed_is_skipped_with_the_command_that_installs_it(monkeypatch):
    script = load_script("peers")

    def missing(_script, spec, timeout=None):
        raise script.ChildFailed(spec, "Traceback ...\nModuleNotFoundError: No module named 'tyxe'", 1)

    monkeypatch.setattr(script, "in_own_process", missing)
    assert script._child({"contender": "tyxe"}) == {"skipped": "No module named 'tyxe' (pip install -e .[bench])"}


@pytest.mark.slow  # a process a contender
def test_a_peer_that_fails_is_reported_with_its_reason_and_the_others_are_still_measured(tmp_path, monkeypatch,
                                                                                        capsys):
    broken = tmp_path / "site" / "bayesian_torch"  # a peer whose install is broken
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise RuntimeError('a broken install')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "peers.json"
    assert load_script("peers").main(["--archs", "tiny", "--contenders", "zoo_traced", "bt_reparam", "twin",
                                      "--steps", "2", "--rounds", "2", "--json", str(out)]) == 1
    results = json.loads(out.read_text())["results"]["tiny"]
    assert results["bt_reparam"] == {"rounds": [], "failed": "RuntimeError: a broken install"}  # tried once
    assert len(results["zoo_traced"]["rounds"]) == len(results["twin"]["rounds"]) == 2
    printed = capsys.readouterr()
    assert "  bt_reparam    FAILED: RuntimeError: a broken install" in printed.out.splitlines()
    assert printed.err.splitlines()[-1] == "1 measurement(s) failed: tiny/bt_reparam"  # after its progress bar


def test_scoreboard_tables_the_figures_it_measured(certified_run, tmp_path, capsys):
    out = tmp_path / "board"
    assert load_script("scoreboard").main([str(certified_run), "--out", str(out), "--samples", "3",
                                           "--test-size", "150", "--ood-size", "40", "--near-size", "20",
                                           "--shift-size", "30"]) == 0
    printed = capsys.readouterr().out
    written = json.loads((out / "scoreboard.json").read_text())
    assert written["command"].startswith("python ") and written["commit"] and "CPU cores" in written["machine"]
    results = written["runs"][str(certified_run)]
    assert results["far"] == ["notmnist", "noise", "fashion_mnist"]
    assert results["near"] == ["letters", "rotated", "overlaid", "inverted", "constant", "scribbles", "blank"]
    from bnn_zoo.data.shifted.ood_sets import font_files  # the fonts that drew the letters, recorded beside them

    assert results["letter_fonts"] == [Path(f).name for f in font_files()] and "DejaVuSans.ttf" in results["letter_fonts"]
    assert f"(letters drawn in {len(font_files())} fonts)" in printed
    bayes = results["posteriors"][BAYES]
    near = [bayes["ood"][n].get("handled", bayes["ood"][n]["refused"]) for n in results["near"]]  # overlaid: handled
    assert "handled" in bayes["ood"]["overlaid"] and "handled" not in bayes["ood"]["rotated"]
    assert results["near_means"][BAYES]["refused"] == pytest.approx(sum(near) / len(near))
    # the markdown shows the JSON's figures
    assert (out / "scoreboard.md").read_text().strip() == printed.strip()
    row = next(line for line in printed.splitlines() if line.startswith("| rotated (near) | mean-field VI |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    rotated = bayes["ood"]["rotated"]
    assert cells[2] == f"{100 * rotated['refused']:.2f}%" and cells[3] == f"{100 * rotated['refused_in_stream']:.2f}%"
    assert cells[4] == f"{100 * rotated['refused_by_quantile_rule']:.2f}%"
    assert cells[5] == f"{rotated['by_entropy']['auroc']:.4f}" and cells[8] == f"{rotated['by_mutual_information']['auroc']:.4f}"
    in_stream = [bayes["ood"][n]["refused_in_stream"] for n in results["near"]]
    assert results["near_means"][BAYES]["refused_in_stream"] == pytest.approx(sum(in_stream) / len(in_stream))
    twin_row = next(line for line in printed.splitlines() if line.startswith("| rotated (near) | MAP (the twin) |"))
    twin_cells = [c.strip() for c in twin_row.strip("|").split("|")]
    twin_rotated = results["posteriors"][TWIN]["ood"]["rotated"]
    assert twin_cells[8:] == ["n/a"] * 3 + [f"{twin_rotated[by][key]:.4f}" for by, key in (  # no MI
        ("by_max_prob", "fpr95"), ("by_feature_density", "auroc"), ("by_feature_density", "fpr95"))] + ["n/a"]
    overlaid = next(line for line in printed.splitlines() if line.startswith("| overlaid (near) | mean-field VI |"))
    assert overlaid.strip("|").split("|")[-1].strip() == f"{100 * bayes['ood']['overlaid']['handled']:.2f}%"
    row = next(line for line in printed.splitlines() if line.startswith(f"| {certified_run} | mean-field VI |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"q>={bayes['rule']['threshold']}, MI<={bayes['rule']['cut']:.3g}"
    assert cells[5] == f"{bayes['test']['ece']:.4f}" and cells[-2] == f"{100 * sum(near) / len(near):.2f}%"
    assert cells[-1] == f"{100 * sum(in_stream) / len(in_stream):.2f}%"
    assert cells[9] == f"{bayes['test']['augrc']:.4f}"  # AUGRC, then the certified sets' coverage and size
    assert cells[12:14] == [f"{100 * bayes['test']['set_coverage']:.2f}%", f"{bayes['test']['set_size']:.4f}"]
    by_target = [(f"{100 * f['coverage']:.2f}%", f"{f['size']:.4f}") for f in bayes["test"]["sets_by_target"]]
    assert [f["target"] for f in bayes["test"]["sets_by_target"]] == [0.9, 0.95, 0.99]
    assert cells[14:20] == [cell for pair in by_target for cell in pair]  # at 90, 95 and 99%
    assert (out / f"scoreboard_{certified_run.name}.png").stat().st_size > 0
    # the ladder: a row per posterior, AUROC by mutual information for the sampled one, entropy for
    # the twin, and what each cost
    metrics = json.loads((certified_run / "metrics.json").read_text())
    for part, label in ((BAYES, "mean-field VI"), (TWIN, "MAP (the twin)")):
        r = results["posteriors"][part]
        row = next(line for line in printed.splitlines() if line.startswith(f"| {certified_run.name}: {label} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        by = "by_mutual_information" if part == BAYES else "by_entropy"
        assert cells[3] == f"{r['ood']['notmnist'][by]['auroc']:.4f}"
        mean_near = sum(r["ood"][n][by]["auroc"] for n in results["near"]) / len(results["near"])
        assert cells[13] == f"{mean_near:.4f}" == f"{results['near_means'][part]['auroc']:.4f}"
        trained_for = metrics[part]["seconds_per_epoch"] * len(metrics[part]["history"])
        assert results["train_seconds"][part] == pytest.approx(trained_for) and cells[14] == f"{trained_for / 60:.1f}"
        assert cells[15] == f"{r['cost']['predict_seconds']:.1f}" and float(cells[15]) >= 0
        stored = 2 * (784 * 32 + 32 + 32 * 10 + 10) if part == BAYES else 784 * 32 + 32 + 32 * 10 + 10
        assert cells[17] == f"{stored:,}" and r["cost"]["parameters"] == stored  # loc and scale per weight
    assert (out / "ladder.png").stat().st_size > 0
    # the feature density's table: a row per posterior, its AUROC per set and over the near sets
    twin = results["posteriors"][TWIN]
    row = next(line for line in printed.splitlines() if line.startswith(f"| {certified_run.name}: MAP (the twin) |")
               and "density" not in line and line.count("|") == len(results["far"]) + len(results["near"]) + 3)
    cells = [c.strip() for c in row.strip("|").split("|")]
    near_density = [twin["ood"][n]["by_feature_density"]["auroc"] for n in results["near"]]
    assert cells[1] == f"{twin['ood']['notmnist']['by_feature_density']['auroc']:.4f}"
    assert cells[-1] == f"{sum(near_density) / len(near_density):.4f}" == f"{results['near_means'][TWIN]['density_auroc']:.4f}"
    # under shift: a row per posterior over the fifteen corruptions, then a row per corruption
    shift = bayes["shift"]
    assert len(shift) == 15 and all(c["alarm"]["stream"] == 30 for c in shift.values())
    summary = results["shift_means"][BAYES]
    worst = max(shift, key=lambda c: shift[c]["wrong"])
    assert summary["wrong"] == pytest.approx(sum(c["wrong"] for c in shift.values()) / 15) and summary["worst"] == worst
    row = next(line for line in printed.splitlines() if line.startswith(f"| {certified_run.name}: mean-field VI | 15 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    within = sum(c["alarm"]["alarm_at"] is not None and c["alarm"]["alarm_at"] <= 50 for c in shift.values())
    alone = {k: sum(c["by_alarm"][k] for c in shift.values()) / 15 for k in ("refused_alone", "wrong_alone")}
    assert (summary["refused_alone"], summary["wrong_alone"]) == pytest.approx((alone["refused_alone"],
                                                                                 alone["wrong_alone"]))
    assert cells[2:7] == [f"{100 * summary['refused']:.2f}% ({100 * alone['refused_alone']:.2f}%)",
                          f"{100 * summary['wrong']:.2f}% ({100 * alone['wrong_alone']:.2f}%)",
                          f"{100 * shift[worst]['wrong']:.2f}% ({worst})",
                          f"{sum(c['wrong'] <= 0.01 for c in shift.values())} of 15", f"{within} of 15"]
    fog = shift["fog"]
    at = "none" if fog["alarm"]["alarm_at"] is None else str(fog["alarm"]["alarm_at"])
    row = next(line for line in printed.splitlines() if line.startswith("| fog |"))
    assert row.split("|")[2].strip() == f"{100 * fog['refused']:.2f}% / {100 * fog['wrong']:.2f}% / {at}"
    # before and after the alarm: each set one stream; its wrong answers on each side, and what acting cost
    b = fog["by_alarm"]
    assert b["before"] + b["after"] == 30 and b["before"] == (30 if fog["alarm"]["alarm_at"] is None else
                                                              fog["alarm"]["alarm_at"] - 1)
    assert fog["wrong"] == pytest.approx((b["wrong_before"] + b["wrong_after"]) / 30) and b["acting"] is True
    rows = [line for line in printed.splitlines() if line.startswith("| fog |")]
    rate = lambda k, n: "n/a" if not n else f"{100 * k / n:.2f}%"  # noqa: E731
    assert rows[1].split("|")[2].strip() == (
        f"{b['wrong_before']} of {b['before']} ({rate(b['wrong_before'], b['before'])}) / {b['wrong_after']} of "
        f"{b['after']} ({rate(b['wrong_after'], b['after'])}) / {100 * fog['refused']:.2f}% "
        f"({100 * b['refused_alone']:.2f}%)")


def test_a_shipped_posterior_loads_by_name(certified_run, shared_data, tmp_path, monkeypatch, capsys):
    from bnn_zoo.runs.storage import loading as trained

    monkeypatch.setattr(trained, "SHIPPED", tmp_path)
    paths = trained.ship(certified_run, "tiny")
    assert [p.name for p in paths] == ["tiny.pt", "tiny_twin.pt"] and trained.shipped_names() == ["tiny"]
    stored = torch.load(paths[0], weights_only=True)
    assert all(v.dtype == torch.float16 for v in stored["guide"].values())
    run, shipped = load(certified_run), load("tiny")
    assert shipped.rules == run.rules and shipped.twin is not None
    for name, value in run.guide.state_dict().items():
        assert torch.equal(shipped.guide.state_dict()[name], value.half().float())
    x = normalize(load_torchvision("mnist", str(shared_data), train=False, download=False)[0][:50])
    pyro.set_rng_seed(0)
    a = predict(run.model, run.guide, x, 4)
    pyro.set_rng_seed(0)
    b = predict(shipped.model, shipped.guide, x, 4)
    assert (a - b).abs().max() < 0.02  # half precision moves the probabilities by little
    script = load_script("ship_posterior")
    assert script.main([str(certified_run), "tiny", "--samples", "3", "--test-size", "100"]) == 0
    printed = capsys.readouterr().out
    assert "tiny.pt:" in printed
    figures = script.compare(str(certified_run), "tiny", 3, 100)
    for part, run in figures["run"].items():  # the printed lines are compare's figures
        shipped = figures["shipped"][part]
        assert f"{part} nll: run {run.nll:.4f}, shipped {shipped.nll:.4f}, difference {shipped.nll - run.nll:+.4f}" in printed


def test_scoreboard_refuses_bad_output_and_damaged_metrics_before_the_work(certified_run, tmp_path, capsys):
    import shutil

    board = load_script("scoreboard")
    (tmp_path / "a_file").write_text("mine")
    assert board.main([str(certified_run), "--out", str(tmp_path / "a_file")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out {tmp_path / 'a_file'} is a file; give a folder for the scoreboard's files"
    run = tmp_path / "run"
    shutil.copytree(certified_run, run)
    for damage, reason in (("{", "is not a readable metrics file"), ('{"bayes": {}}', "lacks the training times")):
        (run / "metrics.json").write_text(damage)
        assert board.main([str(run), "--out", str(tmp_path / "board")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(run / "metrics.json") in err and reason in err
    assert not (tmp_path / "board" / "scoreboard.json").exists()


def test_export_pngs_writes_the_folder_layout_own_data_reads(shared_data, tmp_path, capsys):
    from bnn_zoo.data.own import read_own
    from bnn_zoo.runs.plans.config import make_config, resolved

    out = tmp_path / "pngs"
    assert load_script("export_pngs").main(["fashion_mnist", str(out), "--per-class", "3", "--test-per-class", "2",
                                            "--data-root", str(shared_data)]) == 0
    assert f"{out}: 30 training and 20 test PNGs" in capsys.readouterr().out
    cfg = resolved(make_config({"arch": "lenet", "data": {"name": "folder", "path": str(out)}}))
    train_part, test_part = read_own(cfg.data, True)
    assert train_part.classes == sorted(["Ankle boot", "Bag", "Coat", "Dress", "Pullover", "Sandal", "Shirt", "Sneaker",
                                         "T-shirt_top", "Trouser"])
    images, labels = load_torchvision("fashion_mnist", str(shared_data), train=False, download=False)
    bag = train_part.classes.index("Bag")
    first = sorted((labels == 8).nonzero()[:2, 0].tolist(), key=lambda i: f"{i}.png")  # ImageFolder's file order
    assert torch.equal((test_part.x[test_part.y == bag, 0] * 255).round().byte(), images[first])


def test_gpu_check_says_in_one_line_that_there_is_no_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: scripts/gpu_check.py measures it")
    assert load_script("gpu_check").main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("no CUDA device here") and not (tmp_path / "out").exists()


@pytest.mark.slow  # it compiles a step four times
@pytest.mark.parametrize("order", [True, False])
def test_cuda_draws_holds_each_call_of_the_compiled_step_against_pyros(order):
    """Its measurement, run on the CPU (where torch >= 2.14 keeps the draws' order either way): each
    of the first three calls draws Pyro's numbers."""
    found = load_script("cuda_draws").measure("toy_mlp", order, cuda_graphs=True, device="cpu")
    assert [call["call"] for call in found] == [1, 2, 3] and all(call["same"] for call in found), found


@pytest.mark.slow  # three training processes
def test_compile_cache_times_a_cold_a_warm_and_an_uncached_process(tmp_path, shared_data, capsys):
    out = tmp_path / "cache.json"
    assert load_script("compile_cache").main(["--train-limit", "256", "--data-root", str(shared_data),
                                              "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    runs = found["runs"]
    assert list(runs) == ["cold", "warm", "off"] and all(len(r["epoch_seconds"]) == 2 for r in runs.values())
    assert found["warm_over_cold"] == runs["warm"]["overhead_s"] / runs["cold"]["overhead_s"]
    assert f"warm over cold: {found['warm_over_cold']:.2f}x" in capsys.readouterr().out


@pytest.mark.slow  # it compiles the step
def test_step_profile_times_the_training_step(capsys):
    assert load_script("step_profile").main(["--device", "cpu", "--capture", "trace", "--steps", "3", "--warmup",
                                             "1", "--profiled", "2"]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert found["capture"] == "trace" and found["finite"] and found["steps_per_s"] > 0
    assert "aten::" in found["table"]  # torch.profiler's ops, on a CPU without kernels of a device


@pytest.mark.skipif(torch.cuda.is_available(), reason="its default device, cuda, is there")
def test_step_profile_without_its_device_stops_in_one_line(capsys):
    """Issue 47 (the docs' commands run): python scripts/step_profile.py --arch mnist_mlp on a CPU
    ended in a traceback."""
    assert load_script("step_profile").main(["--arch", "mnist_mlp"]) == 2
    assert capsys.readouterr().err == ("error: bad config key 'device': cuda asked for but CUDA is not available; "
                                       "use device=auto or device=cpu\n")


class FakeGPU:
    """scripts/gpu_check.py's processes, made up (the GPU's half is gpu_check's to run): each takes
    ``seconds`` of a clock of its own and answers as the real one would; what the report held when
    each began is kept."""

    def __init__(self, check, out, seconds):
        self.check, self.out, self.seconds, self.now, self.seen = check, out, seconds, 0.0, []

    def clock(self):
        return self.now

    def run(self, command, timeout, **env):
        report = self.out / "gpu_check.json"
        args = command[1:]
        named = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
        what = ("draws" if "cuda_draws.py" in args[0] else "pytest" if "pytest" in args else "predict"
                if args[0] == "-c" else f"train {named.get('train.capture', 'resumed')}")
        self.seen.append((what, json.loads(report.read_text()) if report.is_file() else None))
        assert timeout <= 200 - (self.now + 5) + 1e-9  # within what the budget has left
        self.now += self.seconds
        if what == "draws":
            calls = [{"call": k, "loss_gap": 0.0, "grad_gap": 0.0, "same_state": True, "same": True} for k in (1, 2, 3)]
            return 0, json.dumps({"arch": "lenet", "torch": "2.11", "torch_chains_random_ops": False,
                                  "variants": {"ordered, CUDA graph": calls}}), self.seconds
        if what == "pytest":
            return 1, ("PASSED tests/a.py::ok\n" + "=" * 10 + " FAILURES " + "=" * 10 + "\n___ off ___\n"
                       "tests/b.py:3: in off\n    assert gap < 1e-6\nE   AssertionError: gap 0.25\n" + "=" * 5 +
                       " short test summary info " + "=" * 5 + "\nFAILED tests/b.py::off - AssertionError\n"
                       "1 failed, 1 passed in 3.0s\n" + "a warning printed after the summary\n" * 200), self.seconds
        if what.startswith("train"):
            run_dir = Path(named.get("run_dir") or named["resume"])
            run_dir.mkdir(parents=True, exist_ok=True)
            epochs = int(named["train.epochs"])
            eager = named.get("train.capture") == "eager"
            history = [{"seconds": [9.0, 0.15, 0.17, 2.0][e], "loss": 100.0 / (e + 1) * (1 + 1e-4 * (not eager))}
                       for e in range(epochs)]
            (run_dir / "metrics.json").write_text(json.dumps({"bayes": {"history": history, "test/accuracy": 0.98}}))
            return 0, "the training step: captured and compiled", self.seconds
        if what == "predict":
            return 0, "0.2", self.seconds
        raise AssertionError(f"not a process gpu_check starts: {command}")


def test_gpu_check_writes_each_section_as_it_ends_and_skips_what_its_budget_cannot_hold(tmp_path, monkeypatch):
    """Its plumbing: sections in order, the report rewritten after each (a call cut off keeps what
    was done), the targets met or missed from the figures, a section the budget left cannot hold
    skipped and named, two files in OUT ($OUT where no --out is given) and the runs elsewhere."""
    check = load_script("gpu_check")
    out = tmp_path / "out"
    fake = FakeGPU(check, out, seconds=20.0)
    monkeypatch.setattr(check, "run", fake.run)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "a made-up GPU")
    monkeypatch.setenv("OUT", str(out))
    assert check.main(["--data-root", str(tmp_path), "--sections", "draws", "mnist_mlp", "tests", "lenet",
                       "--budget", "200"], clock=fake.clock) == 0
    assert [what for what, _ in fake.seen] == ["draws", "train compile", "train resumed", "train compile", "predict",
                                               "train eager", "pytest"]
    before_tests = fake.seen[-1][1]
    assert before_tests["draws"]["ok"] and before_tests["mnist_mlp"]["compile"]["epoch_seconds"] == [9.0, 0.15, 0.17]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["mnist_mlp"]["resumed"]["epoch_seconds"][-1] == 2.0 and report["mnist_mlp"]["same_as_pyro"]
    assert report["tests"]["failed"] == ["FAILED tests/b.py::off - AssertionError"]
    assert report["tests"]["summary"] == "1 failed, 1 passed in 3.0s"  # not the warnings after it
    assert report["tests"]["tail"].startswith("=" * 10 + " FAILURES") and "AssertionError: gap 0.25" in report["tests"]["tail"]
    assert report["sections"]["lenet"].startswith("skipped: ") and "lenet" not in report  # 140 s were gone
    text = (out / "gpu_check.md").read_text()
    assert "| mnist_mlp epoch, compiled (s) | 0.160 | <= 0.2 | yes |" in text
    assert "| mnist_mlp first epoch after resume (s) | 2.000 | <= 3.0 | yes |" in text
    assert "| lenet epoch, compiled (s) | not measured | <= 0.3 | - |" in text
    assert "| python -m pytest -m cuda: failed | 1 | 0 | NO |" in text
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.md"]


@pytest.mark.slow
def test_tables_runs_the_documented_line_and_its_ensemble_beside_the_baselines(tmp_path, capsys):
    """iris on its 80/20 split: the row holds the run's test figures (which its resumed ensemble
    replays to the same), the deep ensemble's, and the baselines scikit-learn fits (logistic
    regression gets iris's test fifth 30/30 right; its majority class is a fifth of it)."""
    pytest.importorskip("sklearn")
    out = tmp_path / "tables"
    assert load_script("tables").main(["--tables", "iris", "--members", "2", "--override", "train.steps=200",
                                       "--out", str(out), "--json", str(tmp_path / "t.json")]) == 0
    row, = json.loads((tmp_path / "t.json").read_text())["rows"]
    metrics = json.loads((out / "iris_0" / "run" / "metrics.json").read_text())
    assert row["bayes"] == {"accuracy": metrics["bayes"]["test/accuracy"], "nll": metrics["bayes"]["test/nll"]}
    assert row["deep_ensemble"]["accuracy"] == metrics["ensemble"]["twin"]["test/accuracy"]
    assert row["linear"]["accuracy"] == 1.0 and row["mean"]["accuracy"] == pytest.approx(0.2)
    assert row["command"].startswith("python -m bnn_zoo.train table_classification data.path=")
    assert f"| iris | 0 | {row['bayes']['accuracy']:.2%} / {row['bayes']['nll']:.3f} |" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--alpha", "2"], "argument --alpha: a false-alarm rate lies in (0, 1), got 2"),
    (["--alpha", "often"], "argument --alpha: expected a number, got 'often'"),
    (["--posteriors", "nope"], "argument --posteriors: invalid choice: 'nope' (choose from 'bayes', 'twin', "),
])
def test_alarm_rates_checks_its_arguments_before_any_work(args, message, monkeypatch, capsys):
    """Issue 47: --alpha 2 was refused after 38 s of work, --posteriors nope said "certify it again"."""
    script = load_script("alarm_rates")
    monkeypatch.setattr(script, "rates", lambda *a, **k: pytest.fail("it worked before checking its arguments"))
    with pytest.raises(SystemExit) as done:
        script.main(["lenet", *args])
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_alarm_rates_checks_its_output_file_before_any_work(tmp_path, monkeypatch, capsys):
    """Issue 51: --json NO_SUCH_FOLDER/x.json ended in an Errno line after minutes of work."""
    script = load_script("alarm_rates")
    monkeypatch.setattr(script, "rates", lambda *a, **k: pytest.fail("it worked before checking its output"))
    (tmp_path / "taken").mkdir()
    for given, said in ((tmp_path / "none" / "x.json", f"folder {tmp_path / 'none'} does not exist; create it or "
                                                         "write elsewhere"),
                        (tmp_path / "taken", "is a folder; give the path of a file to write")):
        assert script.main(["lenet", "--json", str(given)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: --json {given}") and said in err


def test_alarm_rates_refuses_streams_longer_than_the_test_set_before_any_prediction(shared_data, monkeypatch, capsys):
    """Issue 51: --length 20000 reported streams of 20,000 made of MNIST's 10,000 test inputs."""
    import bnn_zoo.evaluation.alarm_rates as alarm_rates

    monkeypatch.setattr(alarm_rates, "corrupted_sets", lambda *a, **k: pytest.fail("it went on to the work"))
    script = load_script("alarm_rates")
    assert script.main(["lenet", "--posteriors", "twin", "--length", "20000", "--data-root", str(shared_data)]) == 2
    assert capsys.readouterr().err == ("error: --length 20000: a stream draws each test input at most once, and "
                                       "lenet's test set holds 10,000; give --length 10000 or less\n")


def test_alarm_rates_gives_the_command_that_adds_a_posterior_the_run_lacks(certified_run, capsys):
    """Issue 51: a posterior the run lacks was answered "certify it", which adds none."""
    script = load_script("alarm_rates")
    assert script.main([str(certified_run), "--posteriors", "laplace_last_layer"]) == 2
    assert capsys.readouterr().err == (
        f"error: {certified_run} holds no laplace_last_layer posterior (it holds bayes, twin, twin_scaled): "
        f"python -m bnn_zoo.train resume={certified_run} 'train.posteriors=[laplace_last_layer]' fits it and "
        "certifies it\n")
    assert script.main(["lenet", "--posteriors", "twin", "hmc"]) == 2
    assert capsys.readouterr().err == ("error: lenet holds no hmc posterior (it holds bayes, twin): a "
                                       "shipped posterior holds what it was shipped with; train a run that holds hmc\n")


@pytest.mark.slow
def test_alarm_rates_counts_the_alarms_it_prints(shared_data, tmp_path, capsys):
    """The shipped lenet's twins: false alarms over streams of test digits, and per corruption the
    median input of the first alarm over orders, each what the alarm itself gives."""
    script = load_script("alarm_rates")
    out = tmp_path / "rates.json"
    assert script.main(["lenet", "--posteriors", "twin", "--streams", "4", "--length", "300", "--orders", "3",
                        "--data-root", str(shared_data), "--json", str(out)]) == 0
    printed, found = capsys.readouterr().out, json.loads(out.read_text())["twin"]
    assert f"false alarms on 4 streams of 300 MNIST test inputs: {found['false_alarms']:.2%}" in printed
    from bnn_zoo.evaluation.under_shift import corrupted_sets
    from bnn_zoo.runs.storage.trained import posteriors

    trained = load("lenet")
    (_, x, _), = corrupted_sets(trained.config.data, ("fog",), str(shared_data), 500)
    with pyro.settings.context(module_local_params=True):
        probs = posteriors(trained)["twin"].predict(x, 100)  # three twins: deterministic
    at = sorted(trained.alarm("twin").observe(probs[:, torch.randperm(500, generator=torch.Generator().manual_seed(k))])
                .alarm_at or 10 ** 9 for k in range(3))
    assert (found["corruptions"]["fog"]["median_alarm_at"] or 10 ** 9) == at[1]
    assert f"  {'fog':<14} {at[1] if at[1] < 10 ** 9 else 'never':>15}" in printed
    x_test, _ = run_split(trained.config.data, "test", str(shared_data))
    with pyro.settings.context(module_local_params=True):
        test = posteriors(trained)["twin"].predict(x_test, 100)
    last = trained.alarm("twin").observe(test[:, -1000:]).alarm_at
    assert found["stored_order"]["last 1,000"] == last and found["test_size"] == len(x_test) == 10_000
    said = "silent" if last is None else f"sounds at input {last}"
    assert f"last 1,000 {said}" in printed


def test_augment_cost_times_each_epoch_s_augmentation_of_each_minibatch_with_its_generator(shared_data, monkeypatch,
                                                                                             capsys):
    """scripts/augment_cost.py: the recipe's augmentation called once a minibatch, with its epoch's
    generator (as training calls it), on one thread, the threads restored after; the least epoch."""
    script = load_script("augment_cost")
    called, threads = [], torch.get_num_threads()
    augment = script.Augment.__call__

    def counted(self, x, generator):
        called.append((len(x), generator.initial_seed(), torch.get_num_threads()))
        return augment(self, x, generator)

    monkeypatch.setattr(script.Augment, "__call__", counted)
    assert script.main(["--images", "300", "--epochs", "2"]) == 0
    found = json.loads(capsys.readouterr().out)
    seed = script.Plan.of(script.resolved(script.load_config("lenet"))).seed
    first, second = (script.Augment(AugmentConfig(), 0.0, 1.0, seed).generator(epoch).initial_seed()
                     for epoch in (0, 1))
    assert called == [(128, first, 1), (128, first, 1), (44, first, 1), (128, second, 1), (128, second, 1),
                      (44, second, 1)] and first != second and torch.get_num_threads() == threads
    assert found["augment"].startswith("translate 0.12, scale 0.65..1.15, rotate 25.0") and found["images"] == 300
    assert len(found["epoch_cpu_seconds"]) == 2 and found["least"] == min(found["epoch_cpu_seconds"]) > 0
    with pytest.raises(SystemExit):
        script.main(["--arch", "mnist_mlp"])
    assert "error: mnist_mlp declares no augmentation (its augment section turns nothing on)" in capsys.readouterr().err


def test_distance_to_hmc_refuses_a_missing_reference_before_any_training(tmp_path, capsys):
    script = load_script("distance_to_hmc")
    assert script.main(["toy_mlp", "--references", str(tmp_path), "--runs", str(tmp_path / "runs")]) == 2
    path = tmp_path / "toy_mlp_hmc.npz"
    assert capsys.readouterr().err.strip() == (f"error: no HMC reference at {path}: build one there with python "
                                               f"scripts/hmc_reference.py CONFIG --out {path}")
    assert not (tmp_path / "runs").exists()


def test_distance_to_hmc_without_a_problem_scores_every_problem(tmp_path, capsys):
    """No problem named: all of them, so the first reference it reads is toy_mlp's (a bare command once
    failed in argparse, whose check of choices took the default list for one choice)."""
    assert load_script("distance_to_hmc").main(["--references", str(tmp_path), "--runs", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err.startswith(f"error: no HMC reference at {tmp_path / 'toy_mlp_hmc.npz'}: ")
    with pytest.raises(SystemExit):
        load_script("distance_to_hmc").main(["toy_mlp", "lenet"])
    assert capsys.readouterr().err == ("error: argument PROBLEM: invalid choice: 'lenet' (choose from toy_mlp, "
                                       "toy_sinusoid, mnist_mlp_hmc) (see --help)\n")


def test_hmc_reference_refuses_its_output_before_the_chains(tmp_path, capsys):
    assert load_script("hmc_reference").main(["toy_mlp", "--out", str(tmp_path / "nowhere" / "r.npz")]) == 2
    assert "folder" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()


@pytest.mark.slow
def test_a_tiny_mnist_reference_is_built_and_the_ladder_scored_against_it(shared_data, tmp_path, capsys):
    """The reduced MNIST MLP's reference as it is built, at a tiny size (2 chains of 4 samples side by
    side on 900 images: SG-MCMC's cycles need 897), then every rung trained on the same network and data and
    scored against it."""
    from bnn_zoo.evaluation.hmc_distance.ladder import PROBLEMS
    from bnn_zoo.evaluation.hmc_distance.reference import Reference

    out = tmp_path / "mnist_mlp_hmc.npz"
    build = ["mnist_mlp_hmc", "--chains", "2", "--jobs", "2", "--samples", "4", "--warmup", "4", "--tree-depth", "2",
             "--test-size", "40", "--ood-size", "20", "--shift-size", "20", "--data-root", str(shared_data), "--out",
             str(out), "--keep", str(tmp_path / "kept"), "--override", "data.train_limit=900"]
    assert load_script("hmc_reference").main(build) == 0
    reference = Reference.read(out)
    printed = capsys.readouterr().out
    assert "read there: none" in printed
    assert load_script("hmc_reference").main(build) == 0  # built again from the chains kept: the same reference
    assert "read there: [0, 1]" in capsys.readouterr().out
    again = Reference.read(out)
    assert again.recipe["chains"] == reference.recipe["chains"]
    assert all(torch.equal(again.predictive[name], reference.predictive[name]) for name in reference.sets)
    assert f"{out}: {out.stat().st_size / 1e6:.2f} MB" in printed and out.stat().st_size < 1e6
    assert f"{reference.recipe['wall_seconds']:.0f} s from start to end" in printed and reference.recipe["jobs"] == 2
    assert reference.sets == ["test", "notmnist", "fog"] and len(reference.recipe["chains"]) == 2
    assert reference.recipe["config"]["data"]["train_limit"] == 900 and reference.recipe["num_samples"] == 4
    for name in reference.sets:
        r_hat = reference.recipe["sets"][name]["max_r_hat"]
        assert f"  {name}: {len(reference.predictive[name])} inputs, predictive R-hat <= {r_hat:.3f}" in printed
    report = tmp_path / "distance.json"
    limits = ["data.train_limit=900", "data.val_size=100", "train.epochs=1", "train.test_samples=8",
              "train.val_samples=2", "abstention.samples=8", "train.twin_epochs=1"]  # 8: a sample of each member
    assert load_script("distance_to_hmc").main(
        ["mnist_mlp_hmc", "--references", str(tmp_path), "--runs", str(tmp_path / "runs"), "--samples", "5",
         "--size", "30", "--data-root", str(shared_data), "--json", str(report), "--override", *limits]) == 0
    table = capsys.readouterr().out.split("\n\n")[-1].strip().splitlines()
    rows = json.loads(report.read_text())["problems"]["mnist_mlp_hmc"]["rows"]
    labels = {row["label"] for row in rows}
    assert {"mean-field VI", "deep ensemble of 5 twins", "low-rank VI (rank 10)", "MC dropout (p = 0.5)"} <= labels
    assert any(label.startswith("ensemble of 5 SWAG") for label in labels)
    assert len(table) == 4 + len(rows) and table[2].startswith("| HMC, 2 chains (distances: chain to chain) |")
    assert table[3].startswith("| HMC: a chain to the others' pool (the floor) |")
    for row, line in zip(rows, table[4:]):
        test = row["sets"]["test"]
        assert test["inputs"] == 30 and line.split(" | ")[5] == f"{test['total_variation']:.4f} ({test['times_floor']:.1f}x)"
    assert [run for run in PROBLEMS["mnist_mlp_hmc"].runs] == ["ladder", "ensemble", "lowrank"]
