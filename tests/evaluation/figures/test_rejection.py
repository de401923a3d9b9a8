import json
import re

import pyro
import pytest
import torch
from conftest import DEVICE
from PIL import Image

from bnn_zoo import load, predict
from bnn_zoo.abstain.rule import abstain
from bnn_zoo.cli.rejection import script_main
from bnn_zoo.data.shifted.ood_sets import white_noise
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.abstain.rule import Rule
from bnn_zoo.evaluation.evaluate import in_distribution, ood_result
from bnn_zoo.evaluation.figures.rejection import Refusals, RejectionReport, refusal_curve, rejection_report, table
from bnn_zoo.posterior import BAYES, KINDS, TWIN, TWIN_SCALED


def test_refusal_curve_counts_inputs_below_each_threshold():
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]]).unsqueeze(0)  # top probabilities .9 .6 .7
    curve = refusal_curve(probs, 0.5, torch.tensor([0.0, 0.65, 0.8, 0.95]))
    assert curve.tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_rejection_report_gives_the_rule_s_refusals(tiny_run, shared_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert script_main("noise", [str(tiny_run), "--out", str(out), "--samples", "5", "--test-size", "200",
                                 "--ood-size", "50"], "doc") == 0
    printed, said = capsys.readouterr()
    assert said.splitlines()[-1] == f"wrote reject_noise.json and the plots to {out}"  # where its six files are
    assert sorted(path.name for path in out.iterdir()) == ["histograms.png", "mean_probabilities.png", "refusal_vs_threshold.png",
                                                          "reject_noise.json", "reliability.png", "risk_coverage.png"]
    assert "refused on MNIST" in printed and "Bayesian" in printed and "deterministic" in printed
    result = json.loads((out / "reject_noise.json").read_text())["posteriors"]
    # the same draws, recomputed: MNIST test first, then the noise
    trained = load(tiny_run, DEVICE)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    pyro.set_rng_seed(0)
    in_probs = predict(trained.model, trained.guide, normalize(images[:200]).to(DEVICE), 5)
    noise = predict(trained.model, trained.guide, normalize(white_noise(50, 0)).to(DEVICE), 5)
    assert result[BAYES]["ood"]["refused"] == pytest.approx(abstain(noise).refused.float().mean().item())
    assert result[BAYES]["test"]["refused"] == pytest.approx(abstain(in_probs).refused.float().mean().item())
    assert result[BAYES]["test"]["accuracy"] == pytest.approx(
        (in_probs.mean(0).argmax(1).cpu() == labels[:200]).float().mean().item())
    twin = trained.twin(normalize(white_noise(50, 0)).to(DEVICE))
    assert result[TWIN]["ood"]["refused"] == pytest.approx(abstain(twin[None]).refused.float().mean().item())
    assert "by_mutual_information" in result[BAYES]["ood"] and "by_mutual_information" not in result[TWIN]["ood"]
    row = next(line for line in printed.splitlines() if line.startswith("refused on white noise"))
    assert row.split()[-2:] == [f"{100 * result[p]['ood']['refused']:.2f}%" for p in (BAYES, TWIN)]
    for plot in ("histograms", "mean_probabilities", "refusal_vs_threshold", "risk_coverage", "reliability"):
        with Image.open(out / f"{plot}.png") as img:
            assert min(img.size) > 300 and len(img.convert("L").getcolors(256) or ()) > 20  # a drawn figure


def test_the_rejection_report_says_it_is_working_on_stderr(tiny_run, tmp_path, capsys):
    """Issue 51: reject_notmnist.py lenet printed nothing for minutes. A progress bar counts each
    posterior's predictions on each set, then the plots, and leaves stdout to the table."""
    from bnn_zoo.runs.storage.trained import posteriors

    steps = 2 * len(posteriors(load(tiny_run))) + 1
    rejection_report(tiny_run, "noise", tmp_path, num_samples=2, test_size=50, ood_size=20)
    printed, said = capsys.readouterr()
    assert re.search(rf"rejection report on white noise: +0%\|.*\| 0/{steps} ", said) and printed == ""
    assert "bayes: test set]" in said  # what it is doing


def test_the_rejection_report_s_bar_names_each_posterior_and_set_as_the_table_does(tiny_run, tmp_path, monkeypatch):
    """The bar read "reject_notmnist ... [bayes on the notmnist]": now the set's title (notMNIST) as
    the table's rows name it, each step "POSTERIOR: SET"."""
    from bnn_zoo.evaluation.figures import rejection
    from bnn_zoo.runs.storage.trained import posteriors

    shown = []

    class Bar:
        def __init__(self, total, desc, unit, leave):
            shown.append(desc)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def set_postfix_str(self, text):
            shown.append(text)

        def update(self, n=1):
            pass

    monkeypatch.setattr(rejection, "tqdm", Bar)
    monkeypatch.setattr(rejection, "ood_images", lambda name, root, size, seed: white_noise(size, seed))  # no notMNIST
    parts = list(posteriors(load(tiny_run)))
    rejection_report(tiny_run, "notmnist", tmp_path, num_samples=2, test_size=20, ood_size=10)
    assert shown == ["rejection report on notMNIST", *(f"{part}: test set" for part in parts),
                     *(f"{part}: notMNIST" for part in parts), "plots"]
    assert parts[0] == "bayes"


def test_rejection_report_refuses_a_missing_run(tmp_path, capsys):
    assert script_main("noise", [str(tmp_path / "none")], "doc") == 2
    assert "is neither a run directory nor a shipped posterior" in capsys.readouterr().err


def test_an_unknown_ood_set_is_named(tiny_run):
    with pytest.raises(ValueError, match="unknown out-of-distribution set 'digits'"):
        rejection_report(tiny_run, "digits", num_samples=2, test_size=10)


def test_the_table_s_columns_stand_apart_each_figure_under_its_title():
    """Issue 47: the header ran together ("deterministicdeterministic, temperature-scaled"), the
    scaled twin's title being wider than the 15 characters each column had."""
    labels, ood = torch.tensor([0, 0, 1, 1]), torch.tensor([[[0.5, 0.5], [0.6, 0.4]]])
    zero, one = [0.9, 0.1], [0.1, 0.9]  # one sample's answer: class 0, class 1
    parts = {BAYES: [zero, zero, one, one], TWIN: [zero, one, one, one], TWIN_SCALED: [zero, one, zero, one]}  # 4, 3, 2 right
    found = {}
    for part, rows in parts.items():
        probs = torch.tensor([rows])
        found[part] = Refusals(Rule(), in_distribution(probs, labels, Rule()), ood_result(probs, ood, Rule()))
    header, *rows = table(RejectionReport("run", "notmnist", 1, "calibrated", 4, 2, found)).splitlines()
    titles = [KINDS[part].title for part in parts]
    assert re.split(r"\s{2,}", header.strip()) == titles == ["Bayesian", "deterministic", "deterministic, temperature-scaled"]
    ends = [header.index(title) + len(title) for title in titles]
    for row in rows:  # each figure ends where its column's title does
        assert [m.end() for m in re.finditer(r"\d+\.\d\d%", row)] == ends, (header, row)
    forced = next(row for row in rows if row.startswith("forced accuracy (MNIST)"))
    assert forced.split()[-3:] == ["100.00%", "75.00%", "50.00%"]


def test_a_shipped_posterior_s_report_goes_beside_you_not_into_a_folder_of_its_name(tmp_path, monkeypatch):
    """reject_notmnist.py lenet wrote ./lenet/reject_notmnist, a folder that then shadowed the shipped
    name (every later command said that ./lenet is the folder lenet)."""
    from pathlib import Path

    from bnn_zoo.evaluation.figures.rejection import report_folder

    monkeypatch.chdir(tmp_path)
    assert report_folder("lenet", "notmnist") == Path("reject_notmnist_lenet")
    assert report_folder("./lenet", "notmnist") == Path("lenet") / "reject_notmnist"  # a run folder of that name
    assert report_folder("runs/lenet", "noise") == Path("runs/lenet/reject_noise")
    assert report_folder("lenet", "noise", tmp_path / "out") == tmp_path / "out"
