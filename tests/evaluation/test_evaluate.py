import json
import re
from dataclasses import asdict, fields

import pyro
import pytest
from conftest import DEVICE, tiny_config

from bnn_zoo import load, predict
from bnn_zoo.abstain.metrics import detection
from bnn_zoo.abstain.rule import Rule, abstain, uncertainty
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.cli.evaluate import main
from bnn_zoo.data.shifted.corruptions import CORRUPTIONS
from bnn_zoo.data.shifted.ood_sets import load_notmnist
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.evaluation.evaluate import Cost, Evaluation, InDistribution
from bnn_zoo.posterior import BAYES, TWIN, TWIN_SCALED


@pytest.mark.slow
def test_evaluate_cli_writes_the_figures_of_the_draws(tiny_run, shared_data, capsys):
    args = [str(tiny_run), "--full", "--samples", "4", "--test-size", "200", "--ood", "notmnist", "noise",
            "--ood-size", "100"]
    assert main(args) == 0
    printed = capsys.readouterr().out.split("\n\n")[0]  # the table of every figure, then the summary
    written = json.loads((tiny_run / "eval.json").read_text())
    results = Evaluation.from_dict(written)
    assert results.to_dict() == written and list(results.posteriors) == [BAYES, TWIN, TWIN_SCALED]
    bayes, twin = results.posteriors[BAYES], results.posteriors[TWIN]
    assert set(bayes.ood) == {"notmnist", "noise"} and bayes.ood["noise"].by_mutual_information is not None
    assert twin.ood["notmnist"].by_mutual_information is None  # one deterministic softmax: no MI
    assert twin.ood["notmnist"].auroc("mutual_information") == twin.ood["notmnist"].by_entropy.auroc  # none: H
    notmnist = bayes.ood["notmnist"]
    assert notmnist.by_mutual_information.auroc != notmnist.by_entropy.auroc  # so the next lines tell them apart
    for signal in ("mutual_information", "entropy"):  # by the signal a rule gates on
        assert notmnist.auroc(signal) == getattr(notmnist, f"by_{signal}").auroc
    assert bayes.auroc("notmnist") == notmnist.auroc(bayes.rule.signal)
    # the table prints every figure of the file, a row each, a column per posterior, none overflowing
    assert len({len(line) for line in printed.splitlines()}) == 1
    rows = {line.split()[0]: line.split()[1:] for line in printed.splitlines()[1:]}
    scaled = results.posteriors[TWIN_SCALED]
    assert printed.splitlines()[0].split() == ["metric", BAYES, TWIN, TWIN_SCALED]
    assert rows["test/ece"] == [f"{r.test.ece:.4f}" for r in (bayes, twin, scaled)]
    assert rows["ood/noise/mean_entropy"] == [f"{r.ood['noise'].mean_entropy:.4f}" for r in (bayes, twin, scaled)]
    assert rows["ood/notmnist/by_mutual_information/fpr95"] == [f"{bayes.ood['notmnist'].by_mutual_information.fpr95:.4f}", "n/a", "n/a"]
    assert rows["cost/parameters"] == [str(r.cost.parameters) for r in (bayes, twin, scaled)]
    per_set = ["refused", "refused_by_quantile_rule", "mean_entropy", *(f"{by}/{m}" for by in (
        "by_entropy", "by_mutual_information", "by_feature_density", "by_max_prob") for m in ("auroc", "aupr", "fpr95"))]
    figures = [*(f"test/{f.name}" for f in fields(InDistribution) if f.name not in ("sets_by_target", "alarm")),
               *(f"test/sets_by_target/{t}/{k}" for t in ("0.9", "0.95", "0.99") for k in ("coverage", "size")),
               *(f"cost/{f.name}" for f in fields(Cost)), *(f"rule/{f.name}" for f in fields(Rule)),
               *(f"ood/{n}/{k}" for n in ("notmnist", "noise") for k in per_set),
               *(f"shift/{c}/{k}" for c in CORRUPTIONS for k in ("refused", "accuracy_accepted", "wrong", "accuracy"))]
    assert len(figures) == 13 + 6 + 3 + 4 + 2 * 15 + 15 * 4 and set(figures) <= set(rows)
    assert not [k for k in rows if "/alarm/" in k]  # an alarm watches a certified rule: this tiny run's sets answer
    # the same figures from the same draws, computed here (seed 0; MNIST test first, then notMNIST)
    trained = load(tiny_run, DEVICE)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    pyro.set_rng_seed(0)
    in_probs = predict(trained.model, trained.guide, normalize(images[:200]).to(DEVICE), 4)
    ood_probs = predict(trained.model, trained.guide, normalize(load_notmnist(str(shared_data))[:100]).to(DEVICE), 4)
    accuracy = (in_probs.mean(0).argmax(1).cpu() == labels[:200]).float().mean().item()
    assert bayes.test.accuracy == pytest.approx(accuracy)
    coverage, size = trained.sets[BAYES].coverage_and_size(in_probs, labels[:200].to(DEVICE))  # the certified sets
    assert (bayes.test.set_coverage, bayes.test.set_size) == pytest.approx((coverage, size))
    auroc = detection(uncertainty(in_probs)["entropy"], uncertainty(ood_probs)["entropy"])["auroc"]
    assert bayes.ood["notmnist"].by_entropy.auroc == pytest.approx(auroc)
    by_max_prob = detection(1 - uncertainty(in_probs)["max_prob"], 1 - uncertainty(ood_probs)["max_prob"])
    assert bayes.ood["notmnist"].by_max_prob.fpr95 == pytest.approx(by_max_prob["fpr95"])
    assert bayes.ood["notmnist"].refused == pytest.approx(abstain(ood_probs).refused.float().mean().item())
    assert bayes.ood["notmnist"].mean_entropy == pytest.approx(uncertainty(ood_probs)["entropy"].mean().item())
    main(args)
    again = Evaluation.from_dict(json.loads((tiny_run / "eval.json").read_text())).posteriors[BAYES]
    assert (again.test, again.ood, again.shift) == (bayes.test, bayes.ood, bayes.shift)  # seeded (the timings differ)
    assert bayes.cost.predict_seconds > 0 and bayes.cost.parameters == 2 * (784 * 32 + 32 + 330)


def test_evaluate_uses_the_run_s_certified_rule(certified_run, shared_data, tmp_path):
    out = tmp_path / "eval.json"
    assert main([str(certified_run), "--shift", "--samples", "4", "--test-size", "300", "--ood", "noise", "constant",
                 "--ood-size", "60", "--output", str(out)]) == 0
    results = Evaluation.from_dict(json.loads(out.read_text())).posteriors
    trained = load(certified_run, DEVICE)
    rule = trained.rules[BAYES]
    assert rule.signal == "mutual_information"
    assert results[BAYES].rule == rule
    assert results[TWIN].rule.signal == "entropy"
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(images[:300]).to(DEVICE), 4)
    decision = rule(probs)
    assert results[BAYES].test.refused == pytest.approx(decision.refused.float().mean().item())
    assert results[BAYES].test.refused_by_gate == pytest.approx(decision.refused_by_gate.float().mean().item())
    assert results[BAYES].test.refused_by_gate > 0  # the gate is at work, not only the threshold
    # the quantile rule is reported beside it, and refuses no more than the rule with the gate
    for name in ("noise", "constant"):
        assert results[BAYES].ood[name].refused_by_quantile_rule <= results[BAYES].ood[name].refused
    assert main([str(certified_run), "--shift", "--samples", "4", "--test-size", "300", "--ood", "noise", "--ood-size", "60",
                 "--rule", "quantile", "--threshold", "0.5", "--output", str(tmp_path / "q.json")]) == 0
    quantile = Evaluation.from_dict(json.loads((tmp_path / "q.json").read_text()))
    assert quantile.rule == "quantile" and quantile.posteriors[BAYES].rule == Rule(0.5, 0.5)
    assert quantile.posteriors[BAYES].test.refused_by_gate == 0


def test_where_no_rule_is_certified_evaluate_scores_the_conformal_sets_as_the_answers(uncertified_run, shared_data,
                                                                                     tmp_path, capsys):
    """Each test image answered by its set, as predict and the page answer it: refused where the set
    holds every class, accepted (its most probable class the prediction) where it holds fewer; the
    line that says no rule is certified goes to stderr and into eval.json."""
    out = tmp_path / "eval.json"
    assert main([str(uncertified_run), "--shift", "--samples", "4", "--test-size", "200", "--ood", "noise", "--ood-size", "50",
                 "--output", str(out)]) == 0
    err = capsys.readouterr().err
    results = Evaluation.from_dict(json.loads(out.read_text())).posteriors
    assert results[BAYES].note.startswith("no rule is certified for bayes, so each answer is its 80% conformal set")
    assert results[BAYES].note in err and results[TWIN].note in err
    trained = load(uncertified_run, DEVICE)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(images[:200]).to(DEVICE), 4)
    in_sets = trained.sets[BAYES].answer(probs)
    every, several = [len(s) == 10 for s in in_sets], [1 < len(s) < 10 for s in in_sets]
    mean = probs.mean(0).cpu()
    right = [max(s, key=lambda c: float(p[c])) == y
             for s, p, y, e in zip(in_sets, mean, labels[:200].tolist(), every) if not e]
    assert results[BAYES].test.refused == pytest.approx(sum(every) / 200)
    assert results[BAYES].test.multiple == pytest.approx(sum(several) / 200) and sum(several) > 0
    assert results[BAYES].test.accuracy_accepted == pytest.approx(sum(right) / len(right))
    assert results[BAYES].rule == Rule()  # the rule it holds, the quantile rule, is not what answered


def test_evaluate_rejects_a_toy_run(tmp_path, capsys):
    from bnn_zoo.cli.train import train

    train(tiny_config("toy_mlp", run_dir=str(tmp_path), **{"train.epochs": 2}))
    assert main([str(tmp_path)]) == 2
    assert "for classifiers" in capsys.readouterr().err


def test_evaluate_checks_its_arguments_before_the_work(tiny_run, tmp_path, capsys, monkeypatch):
    from bnn_zoo.cli import evaluate

    monkeypatch.setattr("bnn_zoo.evaluation.evaluate.evaluate_run",  # what the command calls
                        lambda *a, **k: pytest.fail("evaluated before checking"))
    assert evaluate.main([str(tiny_run), "--output", str(tmp_path / "missing" / "x.json")]) == 2
    assert f"folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    for bad in (["--test-size", "0"], ["--test-size", "-1"], ["--ood-size", "0"], ["--samples", "0"]):
        with pytest.raises(SystemExit) as stop:
            evaluate.main([str(tiny_run), *bad])
        assert stop.value.code == 2 and f"argument {bad[0]}: must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("ood, says", [(("notmnist", "cifar"), "'cifar' is neither an OOD set"),
                                       ("notmnist", "not one string: give ood=('notmnist',)"),
                                       (("mine=/nowhere",), "there is no folder /nowhere"),
                                       (("noise=.",), "noise is a built-in OOD set's name")])
def test_evaluate_run_refuses_a_bad_ood_entry_before_loading_the_run(ood, says, monkeypatch):
    from bnn_zoo.evaluation import evaluate

    monkeypatch.setattr(evaluate, "load_for_evaluation", lambda *a, **k: pytest.fail("loaded before checking"))
    with pytest.raises(ConfigError, match=re.escape(says)):
        evaluate.evaluate_run("any_run", ood=ood)


def test_evaluate_and_calibrate_refuse_unwritable_outputs_before_the_work(certified_run, tmp_path, capsys):
    import shutil

    from helpers import remount_readonly, tmpfs

    from bnn_zoo.cli.certify import main as calibrate_main

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


def test_evaluation_draws_from_its_seed_and_leaves_the_caller_s_random_stream(certified_run):
    import torch

    from bnn_zoo.evaluation.evaluate import evaluate_run

    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = evaluate_run(certified_run, num_samples=3, test_size=40, ood=("noise",), ood_size=20, seed=5, shift=("fog",))
    assert torch.equal(torch.get_rng_state(), state)  # the caller's stream is untouched
    torch.manual_seed(999)  # another caller state: the same figures, drawn from seed 5
    again = evaluate_run(certified_run, num_samples=3, test_size=40, ood=("noise",), ood_size=20, seed=5, shift=("fog",))
    figures = lambda e: {part: (r.test, r.ood, r.shift) for part, r in e.posteriors.items()}  # noqa: E731 (not the timings)
    assert figures(again) == figures(first)


def test_evaluation_ignores_a_caller_s_global_parameters_of_the_same_names(certified_run):
    """Why evaluate_run (like train, certify_run and predict) runs with module-local parameters,
    not only the command lines: under Pyro's global store a PyroModule takes the store's value of a
    parameter of its name, so a caller's own "locs.net..." would silently replace the run's weights."""
    import torch

    from bnn_zoo.data.sets import normalize
    from bnn_zoo.evaluation.evaluate import evaluate_run

    clean = evaluate_run(certified_run, num_samples=3, test_size=40, ood=(), seed=1, shift=())
    trained = load(certified_run)
    trained.guide(normalize(torch.zeros(1, 28, 28, dtype=torch.uint8)))  # global mode: its parameters enter the store
    store = pyro.get_param_store()
    assert any(".locs.net." in name for name in store.keys())
    for name in list(store.keys()):
        store[name] = torch.zeros_like(store[name]) + 0.5  # a caller's own values under the same names
    crowded = evaluate_run(certified_run, num_samples=3, test_size=40, ood=(), seed=1, shift=())
    assert crowded.posteriors["bayes"].test == clean.posteriors["bayes"].test


def test_the_test_figures_hold_the_conformal_sets_coverage_and_size():
    import torch

    from bnn_zoo.abstain.conformal import ConformalSets
    from bnn_zoo.abstain.rule import Rule
    from bnn_zoo.evaluation.evaluate import in_distribution

    probs = torch.tensor([[[0.7, 0.2, 0.1], [0.4, 0.35, 0.25], [0.1, 0.1, 0.8]]])  # one sample, 3 inputs
    labels = torch.tensor([0, 1, 0])
    sets = ConformalSets("thr", 0.1, threshold=0.7, n=100)  # every class with p >= 0.3
    result = in_distribution(probs, labels, Rule(), sets)
    assert result.set_size == pytest.approx(4 / 3) and result.set_coverage == pytest.approx(2 / 3)
    assert in_distribution(probs, labels, Rule()).set_coverage is None


def test_aurc_and_augrc_of_a_known_ranking():
    """Four inputs by falling confidence, right, wrong, right, wrong: the risk among the accepted
    is 0, 1/2, 1/3, 1/2 (AURC their mean, 1/3); the accepted-and-wrong share of all inputs is
    0, 1/4, 1/4, 1/2 (AUGRC, 1/4)."""
    import torch

    from bnn_zoo.evaluation.evaluate import selective_risks

    probs = torch.tensor([[[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]]])
    labels = torch.tensor([0, 1, 1, 0])
    risks = selective_risks(probs, labels)
    assert risks["aurc"] == pytest.approx(1 / 3) and risks["augrc"] == pytest.approx(1 / 4)


def test_the_feature_density_and_the_sets_by_coverage_come_from_the_run_s_own_splits(certified_run, shared_data):
    """The twin's feature density is fitted on (the first 10,000 of) its training split and scores
    the test set against notMNIST; its sets at 90, 95 and 99% are calibrated on validation and
    measured on the test set (one deterministic prediction: no draws to replay)."""
    from bnn_zoo.abstain.conformal import calibrate_sets
    from bnn_zoo.abstain.density import FeatureDensity
    from bnn_zoo.evaluation.certification import validation_set
    from bnn_zoo.data.sets import run_split
    from bnn_zoo.evaluation.evaluate import evaluate_run
    from bnn_zoo.evaluation.results import SetFigures
    from bnn_zoo.runs.storage.trained import posteriors

    result = evaluate_run(certified_run, num_samples=3, test_size=300, ood=("notmnist",), ood_size=100, seed=2, shift=())
    trained = load(certified_run, DEVICE)
    twin = posteriors(trained)[TWIN]
    x_train, y_train = run_split(trained.config.data, "train", limit=10000)
    assert len(y_train) == 1000  # the run's training split as it trained (data.train_limit), not all of MNIST
    density = FeatureDensity.fit(twin.features(x_train.to(DEVICE)), y_train)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    x, ood = normalize(images[:300]).to(DEVICE), normalize(load_notmnist(str(shared_data))[:100]).to(DEVICE)
    expected = detection(density.score(twin.features(x)), density.score(twin.features(ood)))
    assert asdict(result.posteriors[TWIN].ood["notmnist"].by_feature_density) == pytest.approx(expected)
    assert result.posteriors[BAYES].ood["notmnist"].by_feature_density is not None  # at the posterior mean
    x_val, y_val = validation_set(trained)
    for target in (0.9, 0.95, 0.99):
        sets = calibrate_sets(twin.predict(x_val), y_val, round(1 - target, 6), "thr")
        measured = SetFigures(target, *sets.coverage_and_size(twin.predict(x), labels[:300].to(DEVICE)))
        assert asdict(result.posteriors[TWIN].test.set_figures(target)) == pytest.approx(asdict(measured))
    assert result.posteriors[TWIN].test.set_figures(0.5) is None


def test_overlaid_digits_are_handled_when_refused_or_answered_with_both():
    import torch

    from bnn_zoo.abstain.conformal import ConformalSets
    from bnn_zoo.evaluation.evaluate import handled_overlaid

    probs = torch.tensor([[[0.5, 0.45, 0.05], [0.9, 0.05, 0.05], [0.1, 0.1, 0.8]]])  # one sample, 3 inputs
    pairs = torch.tensor([[0, 1], [0, 1], [1, 0]])
    assert handled_overlaid(probs, pairs, Rule(threshold=0.4), None) == pytest.approx(1 / 3)  # {0, 1}; {0}; {2}
    assert handled_overlaid(probs, pairs, Rule(threshold=0.95), None) == 1.0  # every one refused
    wide = ConformalSets("thr", 0.1, threshold=0.96, n=100)  # every class with p >= 0.04: both, on each
    assert handled_overlaid(probs, pairs, Rule(threshold=0.4), wide) == 1.0


@pytest.mark.slow
def test_a_shipped_posterior_is_evaluated_by_name_beside_you(shared_data, tmp_path, monkeypatch, capsys):
    from bnn_zoo.cli import evaluate

    monkeypatch.chdir(tmp_path)
    assert evaluate.main(["lenet_fashion", "--shift", "--samples", "2", "--test-size", "20", "--ood", "noise", "--ood-size", "10",
                          "--data-root", str(shared_data)]) == 0
    written = json.loads((tmp_path / "lenet_fashion_eval.json").read_text())
    assert written["run_dir"] == "lenet_fashion" and set(written["posteriors"]["bayes"]["ood"]) == {"noise"}
    assert "wrote every figure to lenet_fashion_eval.json;" in capsys.readouterr().err  # says where, beside the table


@pytest.mark.parametrize("given", ["--data-root", "BNN_ZOO_DATA"])
def test_evaluate_reads_the_user_s_data_folder_before_the_one_the_run_stored(given, tiny_run, shared_data, tmp_path,
                                                                             monkeypatch, capsys):
    """A run from another machine stores that machine's data.root (as the shipped posteriors did):
    evaluate read it before $BNN_ZOO_DATA, so it looked, and downloaded, there. The user's
    --data-root, then $BNN_ZOO_DATA, come first; the stored folder is not touched."""
    import shutil

    from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, read, save_atomic

    run, theirs = tmp_path / "run", tmp_path / "their_machine" / "data"
    shutil.copytree(tiny_run, run)
    state = read(run / CHECKPOINT)
    state["config"]["data"].update(root=str(theirs), download=False)
    save_atomic(state, run / CHECKPOINT)
    args = [str(run), "--shift", "--samples", "2", "--test-size", "20", "--ood", "--ood-size", "10"]
    if given == "--data-root":
        monkeypatch.delenv("BNN_ZOO_DATA", raising=False)
        args += ["--data-root", str(shared_data)]
    else:
        monkeypatch.setenv("BNN_ZOO_DATA", str(shared_data))
    assert main(args) == 0, capsys.readouterr().err
    assert load(run).config.data.root == str(theirs) and not theirs.parent.exists()
    assert Evaluation.from_dict(json.loads((run / "eval.json").read_text())).test_size == 20
