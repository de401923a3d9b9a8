import json
import subprocess
import sys

import numpy as np
import pyro
import pytest
import torch
from conftest import SHARED_DATA, SMALL, ZOO, example_batch
from PIL import Image

from bnn_zoo import build, make_net, predict
from bnn_zoo.predict import main


@pytest.mark.parametrize("arch", ZOO)
def test_predict_shapes_and_chunks(arch):
    model, guide = build(arch, num_data=100, hidden=SMALL[arch])
    x, _ = example_batch(arch, 7)
    out = predict(model, guide, x, num_samples=11, chunk_size=4, batch_size=3)
    expected = (11, 7, 10) if arch != "toy_mlp" else (11, 7, 2)  # regression: mean, noise scale
    assert out.shape == expected and not out.requires_grad
    assert not torch.allclose(out[0], out[1])  # every sample draws its own weights
    if arch != "toy_mlp":
        assert torch.allclose(out.sum(-1), torch.ones(11, 7))
    else:
        assert torch.equal(out[..., 1], torch.ones(11, 7))  # the fixed noise scale


@pytest.mark.parametrize("arch", ZOO)
def test_predict_on_weight_samples_is_the_network_at_each_sample(arch):
    """A dict of samples (an MCMC posterior): sample s is the plain network at weights s, and
    num_samples picks evenly spaced ones."""
    model, guide = build(arch, num_data=100, hidden=SMALL[arch], init_scale=0.1)
    x, _ = example_batch(arch, 5)
    with pyro.plate("s", 6, dim=-2):
        samples = {n: v[:, 0] for n, v in guide(x).items()}  # {site: [6, *shape]}
    out = predict(model, samples, x, num_samples=None, chunk_size=4, batch_size=2)
    net = make_net(arch, SMALL[arch])
    for s in range(6):
        net.load_state_dict({n[len("net."):]: v[s] for n, v in samples.items()})
        assert torch.allclose(out[s], model.likelihood.predictive(net(x)), rtol=1e-5, atol=1e-6)
    assert torch.allclose(predict(model, samples, x, num_samples=3), out[[0, 2, 5]], atol=1e-6)  # linspace(0, 5, 3)
    with pytest.raises(ValueError, match="holds 6 samples; asked for 7"):
        predict(model, samples, x, num_samples=7)


@pytest.mark.parametrize("kind", ["lowrank", "delta"])
def test_predict_takes_any_guide(kind):
    model, guide = build("mnist_mlp", num_data=100, hidden=[16], guide=kind, rank=2)
    x, _ = example_batch("mnist_mlp", 4)
    out = predict(model, guide, x, 5, chunk_size=2)
    assert out.shape == (5, 4, 10)
    assert torch.allclose(out[0], out[1]) == (kind == "delta")


def test_predict_runs_in_eval_mode_and_restores_the_mode():
    model, guide = build("toy_mlp", hidden=[4])
    seen = []
    model.net.register_forward_pre_hook(lambda module, _: seen.append(module.training))
    model.train()
    predict(model, guide, torch.zeros(2, 1), 2)
    model.forward_with({n: torch.zeros(s) for n, s in model.weight_shapes.items()}, torch.zeros(2, 1))
    assert model.training  # restored
    assert model._skeleton.training  # forward_with follows the model's mode


def test_predict_rejects_bad_sizes():
    model, guide = build("toy_mlp", hidden=[4])
    for kwargs in ({"num_samples": 0}, {"chunk_size": 0}, {"batch_size": 0}):
        with pytest.raises(ValueError, match="positive"):
            predict(model, guide, torch.zeros(2, 1), **kwargs)


def test_predict_cli_answers_per_file(tiny_run, tmp_path, capsys):
    from bnn_zoo.abstention import abstain
    from bnn_zoo.checkpoint import load
    from bnn_zoo.data import load_torchvision, normalize
    from bnn_zoo.images import load_image

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
        assert {int(c) for c in answer["accepted"]} == set(decision.accepted[i].nonzero()[:, 0].tolist())
    assert main([str(tiny_run), files[0], "--samples", "5"]) == 0
    rule_line, line = capsys.readouterr().out.strip().splitlines()
    assert rule_line.startswith("rule: median >= 0.2 (the seed's rule")
    expected = "I don't know" if answers[0]["answer"] is None else f"{answers[0]['answer']} ("
    assert line.startswith(files[0] + ": ") and expected in line


def test_predict_cli_says_which_signal_refused(certified_run, tmp_path, capsys):
    from bnn_zoo.abstention import uncertainty
    from bnn_zoo.checkpoint import load
    from bnn_zoo.data import load_torchvision, normalize
    from bnn_zoo.images import load_image

    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = []
    for i in range(12):
        files.append(str(tmp_path / f"d{i}.png"))
        Image.fromarray(images[i].numpy()).save(files[-1])
    files.append(str(tmp_path / "grey.png"))
    Image.fromarray(np.full((28, 28), 128, dtype=np.uint8)).save(files[-1])
    assert main([str(certified_run), *files, "--samples", "4", "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)
    trained = load(certified_run)
    rule = trained.rules["bayes"]
    pyro.set_rng_seed(0)
    probs = predict(trained.model, trained.guide, normalize(torch.stack([load_image(f) for f in files])), 4)
    decision, mi = rule(probs), uncertainty(probs)["mutual_information"]
    for i, answer in enumerate(answers):
        expected = (["quantile"] if decision.refused_by_quantile[i] else []) + \
                   (["mutual_information"] if decision.refused_by_gate[i] else [])
        assert answer["refused_by"] == expected
        assert answer["uncertainty"]["mutual_information"] == pytest.approx(float(mi[i]), abs=1e-5)
        assert (answer["answer"] is None) == bool(expected)
    assert main([str(certified_run), files[0], "--samples", "4"]) == 0
    assert capsys.readouterr().out.startswith(f"rule: median >= {rule.threshold}, refuse when mutual_information >")


def test_predict_cli_answers_with_a_shipped_posterior_right_after_install(shared_data, tmp_path, capsys):
    from bnn_zoo.data import load_torchvision

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(tmp_path / "blank.png")
    assert main(["lenet", str(tmp_path / "digit.png"), str(tmp_path / "blank.png"), "--json"]) == 0
    digit, blank = json.loads(capsys.readouterr().out)
    assert digit["answer"] == int(labels[0])
    assert blank["answer"] is None and blank["refused_by"]


def test_predict_cli_refuses_a_missing_run(tmp_path, capsys):
    assert main([str(tmp_path), "x.png"]) == 2
    assert capsys.readouterr().err.startswith("error: no checkpoint at")


def test_predict_cli_answers_the_good_files_beside_a_huge_one(shared_data, tmp_path, capsys):
    from bnn_zoo.data import load_torchvision

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    Image.fromarray(images[0].numpy()).save(tmp_path / "digit.png")
    Image.new("1", (20000, 20000)).save(tmp_path / "bomb.png")
    assert main(["lenet", str(tmp_path / "bomb.png"), str(tmp_path / "digit.png"), "--json", "--samples", "10"]) == 1
    bomb, digit = json.loads(capsys.readouterr().out)
    assert "too large" in bomb["error"] and digit["answer"] == int(labels[0])


def test_predict_refuses_images_that_were_not_normalized():
    model, guide = build("lenet", num_data=100)
    with pytest.raises(ValueError, match="values up to 255.*normalize"):
        predict(model, guide, torch.full((2, 1, 28, 28), 255.0), 2)
    with pytest.raises(ValueError, match="no inputs"):
        predict(model, guide, torch.zeros(0, 1, 28, 28), 2)


def test_predict_cli_refuses_bad_counts(capsys):
    for bad in (["--samples", "0"], ["--samples", "-3"], ["--seed", "-1"]):
        with pytest.raises(SystemExit) as stop:
            main(["lenet", "x.png", *bad])
        assert stop.value.code == 2 and f"argument {bad[0]}: must be at least" in capsys.readouterr().err


def test_predict_memory_does_not_grow_with_the_number_of_samples():
    """Peak memory of 5,000 posterior samples of the shipped mnist_mlp for one input, against 50:
    the chunks' buffers are reused (the output is 0.2 MB)."""
    code = ("import resource, sys, torch, pyro\nfrom bnn_zoo import load, predict\n"
            "with pyro.settings.context(module_local_params=True):\n"
            "    t = load('mnist_mlp'); x = torch.zeros(1, 1, 28, 28)\n"
            "    predict(t.model, t.guide, x, 50)\n"
            "    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "    predict(t.model, t.guide, x, int(sys.argv[1]))\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)")
    grown = float(subprocess.run([sys.executable, "-c", code, "5000"], capture_output=True, text=True,
                                 check=True).stdout)
    assert grown < 40, f"{grown:.0f} MB more for 5,000 samples than for 50"
