import json
from pathlib import Path

import pyro
import pytest
import torch
from conftest import NO_MNIST, SHARED_DATA, SMALL, ZOO, example_batch, splits_of, tiny_config

from bnn_zoo import build, load, make_twin, predict
from bnn_zoo.cli.train import config_for_run, train
from bnn_zoo.core.errors import CheckpointError, ConfigError
from bnn_zoo.posterior import (
    BAYES,
    HMC,
    TWIN,
    DropoutPosterior,
    Mixture,
    PointPosterior,
    SampledPosterior,
    ScaledPosterior,
    VariationalPosterior,
)
from bnn_zoo.runs.storage.checkpoint import CALIBRATION, CHECKPOINT, MEMBERS, save_atomic
from bnn_zoo.runs.training.cost import Cost
from bnn_zoo.runs.storage.trained import posteriors


def twin_of(arch, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return make_twin(arch, SMALL[arch], dropout=dropout).eval()


@pytest.mark.parametrize("arch", ZOO)
def test_a_mixture_splits_the_samples_over_its_members_and_stacks_their_predictions(arch):
    """5 samples over (a guide, a point estimate): 3 from the guide, the twin's single prediction."""
    model, guide = build(arch, num_data=100, hidden=SMALL[arch], init_scale=0.1)
    twin = twin_of(arch)
    x, _ = example_batch(arch, 6)
    guide(x)  # its parameters exist before the seeded draws
    mixture = Mixture([VariationalPosterior(model, guide), PointPosterior(twin)], "both")
    pyro.set_rng_seed(3)
    out = mixture.predict(x, 5, chunk_size=2, batch_size=4)
    pyro.set_rng_seed(3)
    first = predict(model, guide, x, 3, chunk_size=2, batch_size=4)
    assert out.shape[0] == mixture.rows(5) == 4
    assert torch.equal(out[:3], first)
    assert torch.allclose(out[3], twin(x), atol=1e-6)
    assert mixture.parameters_stored == sum(p.numel() for p in [*guide.parameters(), *twin.parameters()])


def test_a_deep_ensemble_gives_one_prediction_per_twin_and_an_ensemble_needs_a_sample_per_member():
    twins = [twin_of("lenet", seed=s) for s in range(3)]
    x, _ = example_batch("lenet", 5)
    deep = Mixture([PointPosterior(t) for t in twins], "deep")
    out = deep.predict(x, 100)
    assert out.shape == (3, 5, 10)
    for k, twin in enumerate(twins):
        assert torch.allclose(out[k], twin(x), atol=1e-6)
    model, guide = build("lenet", num_data=100)
    guides = Mixture([VariationalPosterior(model, guide)] * 3, "three")
    with pytest.raises(ValueError, match="ensemble of 3 members needs at least 3 samples"):
        guides.predict(x, 2)


@pytest.mark.parametrize("arch", ZOO)
def test_mc_dropout_samples_the_twin_with_fresh_masks_and_leaves_its_mode(arch):
    x, _ = example_batch(arch, 6)
    twin = twin_of(arch, dropout=0.5)
    posterior = DropoutPosterior(twin)
    out = posterior.predict(x, 7, chunk_size=3, batch_size=4)
    assert out.shape[:2] == (7, 6) and not twin.training
    assert all(not torch.allclose(out[0], out[s]) for s in range(1, 7))  # every sample its own masks
    # at a vanishing rate every mask keeps every unit: each sample is the plain twin's prediction
    tiny = twin_of(arch, dropout=1e-9)
    assert torch.allclose(DropoutPosterior(tiny).predict(x, 4, chunk_size=3), tiny(x).expand(4, *tiny(x).shape), atol=1e-5)
    assert posterior.label == "MC dropout (p = 0.5)"
    with pytest.raises(ValueError, match="trained with dropout"):
        DropoutPosterior(twin_of(arch))


@pytest.mark.parametrize("arch", ["mnist_mlp", "lenet"])
def test_a_scaled_twin_divides_its_logits_by_the_temperature(arch):
    twin = twin_of(arch)
    x, _ = example_batch(arch, 6)
    scaled = ScaledPosterior(twin, 2.5)
    with torch.no_grad():
        expected = torch.softmax(twin.net(x) / 2.5, -1)
    out = scaled.predict(x, 10)
    assert out.shape == (1, 6, 10) and torch.allclose(out[0], expected, atol=1e-6)
    assert torch.equal(out[0].argmax(-1), twin(x).argmax(-1))  # the same answers, other confidences
    assert scaled.label == "MAP (the twin), temperature-scaled (T = 2.5)"
    with pytest.raises(ValueError, match="must be positive"):
        ScaledPosterior(twin, 0.0)


@pytest.mark.parametrize("arch", ZOO)
def test_a_guide_s_features_are_the_network_s_at_the_posterior_mean(arch):
    """The penultimate features of a guide's rung are those of the plain network holding the
    guide's means (its median), and a twin's those of the twin; HMC and mixtures have none."""
    from bnn_zoo.abstain.density import features

    model, guide = build(arch, num_data=100, hidden=SMALL[arch], init_scale=0.1)
    x, _ = example_batch(arch, 5)
    guide(x)
    plain = twin_of(arch).net
    plain.load_state_dict({name[len("net."):]: value for name, value in guide.median().items()}, strict=False)
    rung = VariationalPosterior(model, guide)
    assert torch.allclose(rung.features(x), features(plain, plain, x), atol=1e-5)
    twin = twin_of(arch, seed=1)
    assert torch.allclose(PointPosterior(twin).features(x), features(twin.net, twin.net, x))
    assert Mixture([rung, rung], "two").features(x) is None


def test_sampled_posterior_takes_evenly_spaced_samples():
    model, guide = build("toy_mlp", num_data=10, hidden=[4], init_scale=0.1)
    x, _ = example_batch("toy_mlp", 3)
    with pyro.plate("s", 6, dim=-2):
        samples = {n: v[:, 0] for n, v in guide(x).items()}
    posterior = SampledPosterior(model, samples)
    assert torch.equal(posterior.predict(x, 3), predict(model, samples, x, 3))
    assert posterior.predict(x, 100).shape[0] == posterior.rows(100) == 6  # all it holds
    assert posterior.label == "HMC (NUTS, 6 samples)"


def test_every_rung_says_what_shape_its_networks_take():
    model, guide = build("lenet", num_data=10)
    twin, other = twin_of("lenet"), twin_of("lenet", seed=1)
    with pyro.plate("s", 4, dim=-2):
        samples = {n: v[:, 0] for n, v in guide(torch.zeros(1, 1, 28, 28)).items()}
    rungs = {"model": [VariationalPosterior(model, guide), SampledPosterior(model, samples),
                       Mixture([VariationalPosterior(model, guide), PointPosterior(twin)], "both")],
             "twin": [PointPosterior(twin), ScaledPosterior(twin, 2.0), DropoutPosterior(twin_of("lenet", 0.5)),
                      Mixture([PointPosterior(twin), PointPosterior(other)], "deep ensemble")]}
    for what, posteriors_of in rungs.items():
        for posterior in posteriors_of:
            with pytest.raises(ValueError) as err:
                posterior.predict(torch.zeros(2, 784), 4)
            assert str(err.value) == (f"the {what} takes inputs [N, 1, 28, 28]; x has shape [2, 784], reshape it: "
                                      "x.reshape(-1, 1, 28, 28)"), posterior.label


def test_cost_sees_the_memory_a_block_allocates():
    with Cost("cpu") as cost:
        block = torch.ones(64, 2 ** 20)  # 256 MB
        block += 1
    assert cost.seconds > 0
    if cost.peak_mb is not None:  # Linux
        assert 200 < cost.peak_mb < 400


def ensemble_config(arch, run_dir, **overrides):
    data = {"data.root": str(SHARED_DATA), "data.train_limit": 1000, "train.lr": 0.01, "abstention.risk": 0.4, "abstention.delta": 0.2,
            "abstention.max_refusal": 0.1, "abstention.samples": 4} if arch != "toy_mlp" else {}
    return tiny_config(arch, run_dir=str(run_dir), **{
        "model.hidden": str(SMALL[arch] or "null").replace(" ", ""), "train.epochs": 2, "train.members": 2,
        "train.twin_epochs": 2, **data, **overrides})


@pytest.fixture(scope="module")
def ensembles(tmp_path_factory):
    """A two-member ensemble of each architecture, the twins trained with dropout."""
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    found = {}
    for arch in ZOO:
        run_dir = tmp_path_factory.mktemp(arch)
        found[arch] = run_dir, train(ensemble_config(arch, run_dir, **{"train.twin_dropout": 0.25}))
    return found


@pytest.mark.parametrize("arch", ZOO)
def test_an_ensemble_trains_members_from_their_own_seeds_and_loads_as_a_mixture(arch, ensembles):
    run_dir, metrics = ensembles[arch]
    member = run_dir / MEMBERS / "1"
    assert (member / CHECKPOINT).is_file()
    trained = load(run_dir)
    assert len(trained.members) == 1
    other = trained.members[0]
    assert other.config.seed == trained.config.seed and other.config.train.members == 1
    first = trained.guide.state_dict()
    assert not any(torch.equal(v, other.guide.state_dict()[k]) for k, v in first.items() if "loc" in k)
    found = posteriors(trained)
    assert found[BAYES].label == "ensemble of 2 mean-field VI"
    assert found[TWIN].label == "deep ensemble of 2 MC dropout (p = 0.25)"
    assert [m.guide for m in found[BAYES].members] == [trained.guide, other.guide]
    assert metrics["ensemble"][BAYES]["label"] == found[BAYES].label
    assert len(metrics["members"]) == 1 and "test/nll" in metrics["members"][0][BAYES]
    # every member fits the same data (the toy set is drawn from the run's seed, not the member's)
    assert torch.equal(splits_of(other.config).train.x, splits_of(trained.config).train.x)
    if arch != "toy_mlp":  # the rules are certified for the mixtures: 4 guide samples, 2 x 4 MC dropout ones
        calibration = json.loads((run_dir / CALIBRATION).read_text())
        assert calibration[BAYES]["samples"] == 4 and calibration[TWIN]["samples"] == 4
        assert calibration[TWIN]["rule"]["signal"] == "mutual_information"  # MC dropout is sampled


def test_a_shipped_ensemble_answers_as_its_run(ensembles, tmp_path, monkeypatch):
    """ship() carries every member's guide and twin: the shipped mixture predicts as the run's."""
    from bnn_zoo.runs.storage import loading as trained_module

    run_dir, _ = ensembles["mnist_mlp"]
    monkeypatch.setattr(trained_module, "SHIPPED", tmp_path)
    paths = trained_module.ship(run_dir, "ens")
    assert [p.name for p in paths] == ["ens.pt", "ens_twin.pt"]
    run, shipped = load(run_dir), load("ens")
    assert len(shipped.members) == 1 and shipped.rules == run.rules
    x = torch.randn(20, 1, 28, 28)
    for part in (BAYES, TWIN):
        pyro.set_rng_seed(1)
        a = posteriors(run)[part].predict(x, 6)
        pyro.set_rng_seed(1)
        b = posteriors(shipped)[part].predict(x, 6)
        assert posteriors(shipped)[part].label == posteriors(run)[part].label
        assert (a - b).abs().max() < 0.03  # the members' half-precision weights move the mixture by little
    twins = torch.load(paths[1], weights_only=True)
    del twins["members"][0]["net"]
    save_atomic(twins, paths[1])  # a whole file (its digest right) that lacks a member's twin
    with pytest.raises(CheckpointError, match="ens_twin.pt does not hold a twin for each of the 2 members"):
        load("ens")


def test_an_ensemble_answers_with_each_member_in_pyro_s_global_parameter_store(ensembles):
    """The members' guides share their parameters' names: in the global store they would read one
    another's; each answers with its own whatever the caller's mode."""
    trained = load(ensembles["mnist_mlp"][0])
    mixture, x = posteriors(trained)[BAYES], torch.randn(6, 1, 28, 28)
    with pyro.settings.context(module_local_params=True):
        pyro.set_rng_seed(2)
        local = mixture.predict(x, 8)
    pyro.set_rng_seed(2)
    assert torch.equal(mixture.predict(x, 8), local)  # the global store (the tests' default)
    pyro.set_rng_seed(2)
    first = mixture.members[0].predict(x, 4)
    assert torch.allclose(local[:4], first) and not torch.allclose(local[4:], mixture.members[0].predict(x, 4))
    # bnn_zoo.predict on each member in the global store leaves each guide its own weights, for good
    before = [dict(m.guide.named_parameters()) for m in (trained, trained.members[0])]
    before = [{k: v.detach().clone() for k, v in b.items()} for b in before]
    for member in (trained, trained.members[0]):
        predict(member.model, member.guide, x, 2)
    after = [dict(m.guide.named_parameters()) for m in (trained, trained.members[0])]
    assert all(torch.equal(b[k], a[k]) for b, a in zip(before, after) for k in b)
    pyro.set_rng_seed(2)
    assert torch.equal(mixture.predict(x, 8), local)


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_an_ensemble_grows_on_resume_and_goes_whole_on_overwrite(shared_data, tmp_path):
    train(ensemble_config("mnist_mlp", tmp_path, **{"train.twin": False}))
    member = lambda: torch.load(tmp_path / MEMBERS / "1" / CHECKPOINT, "cpu", weights_only=True)  # noqa: E731
    kept = member()
    train(config_for_run(None, [f"resume={tmp_path}", "train.members=3"]))
    again = member()  # finished: not trained again
    assert again["epoch"] == kept["epoch"] and all(torch.equal(v, again["guide"][k]) for k, v in kept["guide"].items())
    assert len(load(tmp_path).members) == 2
    assert posteriors(load(tmp_path))[BAYES].label == "ensemble of 3 mean-field VI"
    train(ensemble_config("mnist_mlp", tmp_path, **{"train.twin": False, "train.members": 1, "overwrite": True}))
    assert not (tmp_path / MEMBERS).exists() and load(tmp_path).members == []


@pytest.mark.slow
def test_a_missing_member_is_named(shared_data, tmp_path):
    train(ensemble_config("mnist_mlp", tmp_path, **{"train.twin": False, "abstention.certify": False}))
    (tmp_path / MEMBERS / "1" / CHECKPOINT).unlink()
    with pytest.raises(Exception, match="member 1 has no checkpoint.*resume="):
        load(tmp_path)


def test_ensemble_and_dropout_settings_are_checked():
    for bad, key in ((["train.members=0"], "train.members"), (["train.twin_dropout=1"], "train.twin_dropout"),
                     (["train.members=3", "train.member=1"], "train.member"),
                     (["train.members=8", "abstention.samples=5"], "ensemble of 8 needs at least")):
        with pytest.raises(ConfigError, match=key):
            config_for_run("mnist_mlp", bad)


@pytest.mark.parametrize("part", [BAYES, TWIN])
def test_predict_answers_with_any_posterior_of_a_run_under_its_rule(part, ensembles, tmp_path, capsys):
    """The command line's answer is the certified rule applied to that posterior's draws."""
    from PIL import Image

    from bnn_zoo.cli.predict import main
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision, normalize

    run_dir, _ = ensembles["mnist_mlp"]
    images, _ = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    files = []
    for i in range(4):
        Image.fromarray(images[i].numpy()).save(tmp_path / f"{i}.png")
        files.append(str(tmp_path / f"{i}.png"))
    assert main([str(run_dir), *files, "--samples", "6", "--posterior", part, "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)["answers"]
    trained = load(run_dir)
    pyro.set_rng_seed(0)
    probs = posteriors(trained)[part].predict(normalize(torch.stack([load_image(f) for f in files])), 6)
    decision = trained.rules[part](probs)
    assert len(probs) == (6 if part == BAYES else 2 * 3)  # MC dropout: 3 draws from each of 2 twins
    assert [a["answer"] for a in answers] == [None if r else int(p) for r, p in
                                             zip(decision.refused, decision.prediction)]


def test_predict_names_the_posteriors_a_run_holds(ensembles, capsys):
    from bnn_zoo.cli.predict import main

    run_dir, _ = ensembles["mnist_mlp"]
    assert main([str(run_dir), "x.png", "--posterior", HMC]) == 2
    assert "holds no such posterior; it holds bayes, twin" in capsys.readouterr().err


@pytest.fixture(scope="module")
def rungs(tmp_path_factory):
    """The rungs the ensembles above do not cover, each a tiny mnist_mlp run: a deep ensemble of
    plain twins beside an ensemble of low-rank guides, and a single MC dropout twin beside NUTS."""
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    deep, single = tmp_path_factory.mktemp("deep"), tmp_path_factory.mktemp("single")
    train(ensemble_config("mnist_mlp", deep, **{"train.members": 3, "model.guide": "lowrank", "model.guide_rank": 2}))
    train(ensemble_config("mnist_mlp", single, **{
        "train.members": 1, "train.twin_dropout": 0.5, "infer": "nuts", "model.hidden": "[4]",
        "data.train_limit": 200, "mcmc.num_samples": 6, "mcmc.warmup_steps": 6, "mcmc.max_tree_depth": 3}))
    return deep, single


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_every_rung_scores_on_the_ladder_with_its_cost(rungs, ensembles, tmp_path, capsys):
    from helpers import load_script

    deep, single = rungs
    runs = [str(deep), str(single), str(ensembles["mnist_mlp"][0])]
    out = tmp_path / "board"
    assert load_script("scoreboard").main([*runs, "--out", str(out), "--samples", "6", "--test-size", "100",
                                           "--ood-size", "30", "--near-size", "10"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "scoreboard.json").read_text())["runs"]
    found = {run: results[run]["posteriors"] for run in runs}
    labels = {run: {part: r["posterior"] for part, r in found[run].items()} for run in runs}
    assert labels == {runs[0]: {BAYES: "ensemble of 3 low-rank VI (rank 2)", TWIN: "deep ensemble of 3 twins"},
                      runs[1]: {BAYES: "mean-field VI", TWIN: "MC dropout (p = 0.5)", HMC: "HMC (NUTS, 6 samples)"},
                      runs[2]: {BAYES: "ensemble of 2 mean-field VI", TWIN: "deep ensemble of 2 MC dropout (p = 0.25)"}}
    width = {BAYES: 784 * 32 + 32 + 32 * 10 + 10, HMC: 784 * 4 + 4 + 4 * 10 + 10}
    stored = {(0, TWIN): 3 * width[BAYES], (1, TWIN): width[HMC], (1, HMC): 6 * width[HMC],
              (2, BAYES): 2 * 2 * width[BAYES], (0, BAYES): 3 * (2 + 2) * width[BAYES]}  # lowrank: loc, scale, 2 factors
    for (k, part), numbers in stored.items():
        assert found[runs[k]][part]["cost"]["parameters"] == numbers, (k, part)
    parts = [json.loads((Path(runs[0]) / d / "metrics.json").read_text())[BAYES] for d in (".", "members/1", "members/2")]
    assert results[runs[0]]["train_seconds"][BAYES] == pytest.approx(
        sum(p["seconds_per_epoch"] * len(p["history"]) for p in parts))
    for run in runs:
        for part, label in labels[run].items():
            row = next(line for line in printed.splitlines() if line.startswith(f"| {Path(run).name}: {label} |"))
            assert row.split("|")[2].strip() == f"{100 * found[run][part]['test']['accuracy']:.2f}%"
    hmc = found[runs[1]][HMC]["ood"]["notmnist"]["by_mutual_information"]  # six weight samples: mutual information
    assert 0 <= hmc["auroc"] <= 1
    assert (out / "ladder.png").stat().st_size > 0
