import pyro
import pytest
import torch
from conftest import ZOO, example_batch, tiny_config
from pyro.infer import Trace_ELBO

from bnn_zoo import load, predict
from bnn_zoo.abstain.certify import CUTS
from bnn_zoo.core.errors import CheckpointError, ConfigError
from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, HMC_SAMPLES, TWIN_CHECKPOINT, digest, save_atomic, save_bayes, save_twin
from bnn_zoo.runs.plans.factory import build_networks, build_twin
from bnn_zoo.runs.plans.plan import Plan

LEARNED = {"model.prior": "scale_mixture", "model.learn_prior": True, "model.noise": "homoscedastic"}
OPTIONS = {"default": {}, "learned_mixture": LEARNED, "lowrank": {"model.guide": "lowrank"},
           "delta": {"model.guide": "delta"}}


def _trained_run(arch, options, run_dir, steps=3):
    cfg = tiny_config(arch, **options)
    model, guide = build_networks(Plan.of(cfg).networks, num_data=64)
    optimizer = torch.optim.Adam([*guide.parameters(), *model.parameters()], lr=1e-2)
    x, y = example_batch(arch, 16)
    loss_fn = Trace_ELBO()(model, guide)
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(x, y).backward()
        optimizer.step()
    save_bayes(run_dir / CHECKPOINT, cfg, "run-1", steps, 64, model, guide, optimizer, [])
    twin = build_twin(Plan.of(cfg).networks)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.1)  # not its initialization
    save_twin(run_dir / TWIN_CHECKPOINT, cfg, "run-1", 1, twin, optimizer, [])
    return model, guide, twin, x


@pytest.mark.parametrize("options", OPTIONS, ids=list(OPTIONS))
@pytest.mark.parametrize("arch", ZOO)
def test_checkpoint_round_trip_gives_identical_predictions(arch, options, tmp_path):
    with pyro.settings.context(module_local_params=True):  # as training builds its pairs
        model, guide, twin, x = _trained_run(arch, OPTIONS[options], tmp_path)
    # weights_only: plain tensors and containers, no pickled code
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["epoch"] == 3
    trained = load(tmp_path)
    assert trained.model.likelihood.num_data == 64 and trained.epoch == 3 and trained.samples is None
    assert trained.model.hyperparameters == model.hyperparameters
    if options == "learned_mixture":  # learned hyperparameters moved and came back
        assert model.hyperparameters["prior/pi"] != 0.25
    pyro.set_rng_seed(7)
    before = predict(model, guide, x, num_samples=5)
    pyro.set_rng_seed(7)
    assert torch.equal(predict(trained.model, trained.guide, x, num_samples=5), before)
    assert torch.equal(twin(x), trained.twin(x))


def _as_format_1(state: dict) -> dict:
    """A checkpoint as bnn-zoo wrote it up to commit 766a886: no format or digest, the noise scale under
    "noise.", a twin's state the plain network's (classifier) or Sequential(net, noise)'s."""
    state = {k: v for k, v in state.items() if k not in ("format", "digest")}
    if "model" in state:
        state["model"] = {k.replace("likelihood.", "noise.", 1): v for k, v in state["model"].items()}
    if "net" in state:
        regression = any(k.startswith("likelihood.") for k in state["net"])
        state["net"] = {(k.replace("net.", "0.", 1).replace("likelihood.", "1.", 1) if regression
                         else k[len("net."):]): v for k, v in state["net"].items()}
    return state


@pytest.mark.parametrize("arch", ["toy_mlp", "lenet"])
def test_format_1_checkpoints_load(arch, tmp_path):
    options = {"model.noise": "homoscedastic"} if arch == "toy_mlp" else {}
    with pyro.settings.context(module_local_params=True):
        model, guide, twin, x = _trained_run(arch, options, tmp_path)
    for name in (CHECKPOINT, TWIN_CHECKPOINT):
        torch.save(_as_format_1(torch.load(tmp_path / name, weights_only=True)), tmp_path / name)
    assert "format" not in torch.load(tmp_path / CHECKPOINT, weights_only=True)
    trained = load(tmp_path)
    pyro.set_rng_seed(7)
    before = predict(model, guide, x, num_samples=5)
    pyro.set_rng_seed(7)
    assert torch.equal(predict(trained.model, trained.guide, x, num_samples=5), before)
    assert torch.equal(twin(x), trained.twin(x))


def test_format_3_runs_load_in_their_targets_units(tmp_path):
    """A run written before data.target_stats (format 3: its config without the key, a digest)
    loads, its regression answering in the units it trained in."""
    with pyro.settings.context(module_local_params=True):
        model, guide, twin, x = _trained_run("toy_mlp", {"model.noise": "homoscedastic"}, tmp_path)
    for name in (CHECKPOINT, TWIN_CHECKPOINT):
        state = torch.load(tmp_path / name, weights_only=True)
        assert state["format"] == 4 and "target_stats" in state["config"]["data"]
        del state["config"]["data"]["target_stats"]
        state = {**{k: v for k, v in state.items() if k != "digest"}, "format": 3}
        torch.save({**state, "digest": digest(state)}, tmp_path / name)
    trained = load(tmp_path)
    assert trained.config.data.target_stats is None and float(trained.model.likelihood.target_sd) == 1.0
    pyro.set_rng_seed(7)
    before = predict(model, guide, x, num_samples=5)
    pyro.set_rng_seed(7)
    assert torch.equal(predict(trained.model, trained.guide, x, num_samples=5), before)
    torch.save({**state, "digest": "0" * 64}, tmp_path / TWIN_CHECKPOINT)  # format 3's digest is checked
    with pytest.raises(CheckpointError, match="is damaged"):
        load(tmp_path)


def test_unloadable_runs_say_why(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at .*python -m bnn_zoo.train"):
        load(tmp_path)
    with pyro.settings.context(module_local_params=True):
        _trained_run("toy_mlp", {}, tmp_path)
    state = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    torch.save({**state, "format": 99}, tmp_path / CHECKPOINT)
    with pytest.raises(CheckpointError, match="format 99.*upgrade bnn-zoo"):
        load(tmp_path)
    state["guide"] = {k: v[..., :1] for k, v in state["guide"].items()}  # not this model's shapes
    save_atomic(state, tmp_path / CHECKPOINT)
    with pytest.raises(CheckpointError, match="does not fit the model its config describes"):
        load(tmp_path)


BROKEN = {  # what a checkpoint.pt holds instead of its own -> what loading it says
    "no model": (lambda s: s.pop("model"), "lacks 'model'"),
    "model a list": (lambda s: s.update(model=[1, 2]), "holds a list under 'model' where a dict belongs"),
    "epoch a string": (lambda s: s.update(epoch="3"), "holds a str under 'epoch' where a int belongs"),
    "weight a string": (lambda s: s["guide"].update({next(iter(s["guide"])): "w"}), "holds a str as guide"),
    "NaN weight": (lambda s: next(iter(s["guide"].values())).fill_(float("nan")), r"non-finite numbers \(NaN or inf\) in guide"),
    "bad config": (lambda s: s["config"]["train"].update(lr=-1), "holds a config this bnn-zoo cannot use .*train.lr"),
    "kwargs a number": (lambda s: s["config"]["model"].update(kwargs=5),
                        r"holds a config this bnn-zoo cannot use \(bad value for model.kwargs: must be a mapping"),
    "kwargs a string": (lambda s: s["config"]["model"].update(kwargs="ab"),
                        r"bad value for model.kwargs: must be a mapping .*not 'ab'"),
    "config model a list": (lambda s: s["config"].update(model=[1, 2]), r"section 'model': a mapping of its keys"),
    "config data a number": (lambda s: s["config"].update(data=3), r"section 'data': a mapping of its keys"),
    "a class name not printable": (lambda s: s["config"]["data"].update(classes=["a\x1b[2J", "b"]),
                                   r"bad value for data.classes: the class or column name 'a\\x1b\[2J' holds '\\x1b', a character"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_checkpoint_missing_what_it_needs_is_one_line_naming_the_file(tmp_path, case):
    with pyro.settings.context(module_local_params=True):
        _trained_run("toy_mlp", {}, tmp_path)
    state = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    damage, message = BROKEN[case]
    damage(state)
    save_atomic(state, tmp_path / CHECKPOINT)  # a consistent digest: the contents themselves are wrong
    with pytest.raises(CheckpointError, match=f"{tmp_path / CHECKPOINT} .*{message}"):
        load(tmp_path)


@pytest.mark.parametrize("name, key", [(TWIN_CHECKPOINT, "net"), (HMC_SAMPLES, "samples")])
def test_a_twin_or_hmc_file_without_its_weights_is_refused(tmp_path, name, key):
    with pyro.settings.context(module_local_params=True):
        _trained_run("toy_mlp", {}, tmp_path)
    save_atomic({"config": {}, "run": "run-1", "epoch": 1}, tmp_path / name)
    with pytest.raises(CheckpointError, match=f"{tmp_path / name} lacks '{key}'"):
        load(tmp_path)


def test_bit_rot_in_a_checkpoint_is_found_by_its_digest(tmp_path):
    """64 bytes flipped inside a stored weight tensor: torch reads the zip without complaint (its
    CRCs are not checked), so only the digest can tell."""
    with pyro.settings.context(module_local_params=True):
        _trained_run("toy_mlp", {}, tmp_path)
    path = tmp_path / CHECKPOINT
    raw = bytearray(path.read_bytes())
    state = torch.load(path, weights_only=True)
    weight = state["guide"][max(state["guide"], key=lambda k: state["guide"][k].numel())]
    at = bytes(raw).find(weight.numpy().tobytes()[:64])  # the tensor's bytes as stored in the zip
    assert at > 0
    raw[at:at + 64] = bytes(b ^ 0x5A for b in raw[at:at + 64])
    path.write_bytes(raw)
    assert not torch.equal(torch.load(path, weights_only=True)["guide"][max(state["guide"], key=lambda k:
                                                                            state["guide"][k].numel())], weight)
    with pytest.raises(CheckpointError, match=f"{path} is damaged: its contents no longer match the digest"):
        load(tmp_path)


def test_the_digest_depends_on_every_number_and_not_on_the_device_read_to():
    state = {"model": {"w": torch.arange(6.0).view(2, 3)}, "epoch": 3, "history": [{"loss": 0.5}]}
    same = {"history": [{"loss": 0.5}], "epoch": 3, "model": {"w": torch.arange(6.0).view(2, 3).clone()}}
    assert digest(state) == digest(same)
    for changed in ({**state, "epoch": 4}, {**state, "history": [{"loss": 0.25}]},
                    {**state, "model": {"w": torch.arange(6.0).view(3, 2)}},
                    {**state, "model": {"w": torch.arange(6.0).view(2, 3).double()}}):
        assert digest(changed) != digest(state)
    bumped = torch.arange(6.0).view(2, 3)
    bumped[1, 2] = torch.nextafter(bumped[1, 2], torch.tensor(10.0))  # one ulp in one number
    assert digest({**state, "model": {"w": bumped}}) != digest(state)


SHIPPED_DATA = {"mnist_mlp": "mnist", "lenet": "mnist", "lenet_fashion": "fashion_mnist"}


@pytest.mark.parametrize("name", list(SHIPPED_DATA))
def test_shipped_posteriors_load_by_name_and_classify(name, shared_data):
    from bnn_zoo.abstain.certify import density_cuts
    from bnn_zoo.abstain.rule import DENSITY
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.storage.loading import SHIPPED, shipped_names
    from bnn_zoo.runs.storage.trained import posteriors

    assert name in shipped_names()
    for path in (SHIPPED / f"{name}.pt", SHIPPED / f"{name}_twin.pt"):
        assert path.stat().st_size < 2 * 2 ** 20, path
    with pyro.settings.context(module_local_params=True):
        trained = load(name)
        assert trained.config.data.name == SHIPPED_DATA[name] and trained.twin is not None
        assert trained.rules["bayes"].signal == "mutual_information"
        for part in ("bayes", "twin"):  # certified: the chosen rule passed its test at the corrected level
            c = trained.calibration[part]
            density = c["rule"]["signal"] == DENSITY  # a density gate's cuts: density_cuts' 60 and no gate
            cuts = len(density_cuts(torch.arange(100.0))) if density else len(CUTS)
            assert c["validation"]["p_value"] <= c["validation"]["level"] == c["delta"] / cuts
            assert c["validation"]["risk"] <= c["risk"] and c["validation"]["size"] == 5000
            assert (part in trained.densities) == density  # a density gate ships with its density
        assert not any("alarm" in entry for entry in trained.calibration.values())  # no dead reference (fc66f38)
        images, labels = load_torchvision(SHIPPED_DATA[name], str(shared_data), train=False, download=False)
        probs = posteriors(trained)["bayes"].predict(normalize(images[:300]), 20)  # an ensemble's mixture
    decision = trained.rules["bayes"](probs)
    kept = ~decision.refused
    floor = 0.95 if SHIPPED_DATA[name] == "mnist" else 0.85
    assert (decision.prediction[kept] == labels[:300][kept]).float().mean() > floor
    assert (trained.twin(normalize(images[:300])).argmax(1) == labels[:300]).float().mean() > floor


@pytest.mark.parametrize("damage", ["truncated", "empty", "not_a_checkpoint"])
@pytest.mark.parametrize("name", [CHECKPOINT, TWIN_CHECKPOINT])
def test_broken_checkpoint_files_are_one_clear_error_everywhere(name, damage, tiny_run, tmp_path, capsys):
    import importlib
    import shutil

    calibrate, evaluate, predict_cli, train = (importlib.import_module(f"bnn_zoo.cli.{name}")
                                               for name in ("certify", "evaluate", "predict", "train"))

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    path = run_dir / name
    if damage == "not_a_checkpoint":
        torch.save([1, 2, 3], path)
    else:
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2] if damage == "truncated" else b"")
    message = f"{path} is not a" + (" bnn-zoo checkpoint" if damage == "not_a_checkpoint" else " readable checkpoint")
    with pytest.raises(CheckpointError, match=message):
        load(run_dir)
    for command in (lambda: predict_cli.main([str(run_dir), "x.png"]), lambda: evaluate.main([str(run_dir), "--ood"]),
                    lambda: calibrate.main([str(run_dir)]), lambda: train.main([f"resume={run_dir}"])):
        assert command() == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and str(path) in err, err


def test_a_twin_from_another_run_is_not_taken_for_this_run_s(tmp_path):
    with pyro.settings.context(module_local_params=True):
        _trained_run("toy_mlp", {}, tmp_path)
        twin = torch.load(tmp_path / TWIN_CHECKPOINT, weights_only=True)
        save_atomic({**twin, "run": "another-run"}, tmp_path / TWIN_CHECKPOINT)
        with pytest.raises(CheckpointError, match="twin of another run"):
            load(tmp_path)


def test_loading_on_a_device_this_machine_lacks_says_so(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pyro.settings.context(module_local_params=True):
        _trained_run("toy_mlp", {}, tmp_path)
    with pytest.raises(ConfigError, match="cuda asked for but CUDA is not available; use device=auto or device=cpu"):
        load(tmp_path, "cuda")


@pytest.mark.cuda
def test_a_checkpoint_written_on_cuda_answers_on_the_cpu_and_back(tmp_path):
    """Trained on the GPU, loaded on the CPU (its tensors mapped there), resumed on the CPU and
    loaded on the GPU again: the same weights, the same answers on the same draws."""
    from bnn_zoo.cli.train import train
    from bnn_zoo.runs.training.resume import config_for_run
    from bnn_zoo.runs.storage.trained import posteriors

    train(tiny_config("toy_mlp", run_dir=str(tmp_path), device="cuda", **{"train.epochs": 4, "train.eval_every": 2}))
    on_gpu, on_cpu = load(tmp_path, "cuda"), load(tmp_path, "cpu")
    x = torch.linspace(-2, 2, 9).unsqueeze(-1)
    for where, trained in (("cuda", on_gpu), ("cpu", on_cpu)):
        assert all(p.device.type == where for p in trained.guide.parameters())
    assert torch.equal(on_gpu.guide.median()["net.layers.1.weight"].cpu(), on_cpu.guide.median()["net.layers.1.weight"])
    twin = {where: posteriors(t)["twin"].predict(x.to(where)).cpu() for where, t in (("cuda", on_gpu), ("cpu", on_cpu))}
    assert torch.allclose(twin["cuda"], twin["cpu"], atol=1e-5)
    train(config_for_run(None, [f"resume={tmp_path}", "train.epochs=6", "device=cpu"]))
    back = load(tmp_path, "cuda")
    assert back.epoch == 6 and all(p.is_cuda for p in back.guide.parameters())
