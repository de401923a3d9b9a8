import os
import re
import subprocess
import sys
from dataclasses import is_dataclass
from typing import get_type_hints

import pytest
import torch
from omegaconf import OmegaConf

from bnn_zoo.core.errors import CheckpointError, ConfigError, show
from bnn_zoo.runs.storage.checkpoint import stored_config
from bnn_zoo.runs.plans.checks import pick_device
from bnn_zoo.runs.plans.config import Config, config_names, load_config, make_config, resolved
from bnn_zoo.runs.plans.plan import recipe


def test_shipped_configs_load_and_hold_only_differences():
    assert {"toy_mlp", "toy_sinusoid", "mnist_mlp", "lenet", "table_regression", "table_classification"} <= \
        set(config_names())
    for name in config_names():
        cfg = resolved(load_config(name, ["data.path=t.csv"] if name.startswith("table_") else []))
        assert cfg.run_dir == f"runs/{cfg.arch}"
    assert load_config("lenet").arch == "lenet"
    assert resolved(load_config("mnist_mlp")).model.hidden == [400, 400]


def test_overrides_and_paths(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("arch: mnist_mlp\nmodel:\n  hidden: [32]\n")
    cfg = load_config(str(path), ["train.epochs=3", "model.prior_scale=0.5"])
    assert (cfg.arch, cfg.model.hidden, cfg.train.epochs, cfg.model.prior_scale) == \
        ("mnist_mlp", [32], 3, 0.5)


@pytest.mark.parametrize("overrides, message", [
    (["train.epoch=3"], "train.epoch"),
    (["train.epochs=many"], "train.epochs"),
    (["arch=resnet"], "unknown architecture 'resnet'"),
    (["train.epochs"], "key=value"),
    (["model.prior_scale=-1"], "model.prior_scale.*positive"),
    (["arch=lenet", "model.hidden=[10]"], "fixed shape"),
    (["data.name=mnist"], "does not suit toy_mlp"),
    (["train.lr_schedule=linear"], "train.lr_schedule"),
    (["model.guide=laplace"], "bad value for model.guide:.*meanfield or lowrank or delta"),
    (["model.guide_rank=0"], "bad value for model.guide_rank: must be a whole number from 1 to 1000000000, got 0"),
    (["train.kl_weight=0"], "train.kl_weight.*positive"),
    (["abstention.risk=0"], "'abstention': risk must lie strictly between 0 and 1, got 0"),
    (["abstention.delta=1"], "'abstention': delta must lie strictly between 0 and 1, got 1"),
    (["abstention.max_refusal=1.5"], "'abstention': max_refusal must lie in \\[0, 1\\], got 1.5"),
    (["abstention.quantile=1.5"], "'abstention': quantile must lie in \\[0, 1\\], got 1.5"),
    (["abstention.signal=variance"], "'abstention': signal must be one of mutual_information, entropy"),
    (["abstention.samples=0"], "bad value for abstention.samples: must be a whole number from 1 to 10000, got 0"),
    (["infer=mcmc"], "bad value for infer:.*svi or nuts"),
    (["mcmc.target_accept=1.5"], "mcmc.target_accept"),
    (["mcmc.warmup_steps=-1"], "bad value for mcmc.warmup_steps: must be a whole number from 0 to 1000000000, got -1"),
    (["arch=mnist_mlp", "model.hidden=[]"], r"bad value for model.hidden: give one or more whole positive widths.*got \[\]"),
    (["arch=mnist_mlp", "model.hidden=[0]"], r"bad value for model.hidden: give one or more whole positive widths.*got \[0\]"),
    (["data.train_limit=0"], "bad value for data.train_limit: must be a whole number from 1 to 1000000000, got 0"),
    (["data.train_limit=-1"], "bad value for data.train_limit: must be a whole number from 1 to 1000000000, got -1"),
    (["data.test_limit=-100"], "bad value for data.test_limit: must be a whole number from 1 to 1000000000, got -100"),
    (["train.lr=inf"], "bad value for train.lr: must be a positive number, got inf"),
    (["model.prior_scale=inf"], "bad value for model.prior_scale: must be a positive number, got inf"),
    (["train.twin_lr=-1"], "bad value for train.twin_lr: must be a positive number"),
    (["train.twin_epochs=-3"], "bad value for train.twin_epochs: must be a whole number from 1 to 1000000000, got -3"),
    (["train.lr_step=0"], "bad value for train.lr_step: must be a whole number from 1 to 1000000000, got 0"),
    (["seed=-1"], "bad value for seed: must be a whole number from 0 to 4294967295, got -1"),
    (["train.test_samples=100000000"], "bad value for train.test_samples: must be a whole number from 1 to 10000, got 100000000"),
    (["train=5"], "section 'train': a mapping of its keys .*not 5"),
])
def test_bad_configs_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("toy_mlp", overrides)


def test_unknown_config_name_lists_the_shipped_ones(tmp_path):
    with pytest.raises(ConfigError, match="no config named 'lenett'.*lenet, lenet_fashion, mnist_mlp"):
        load_config("lenett")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {epochs: 1\n")
    with pytest.raises(ConfigError, match="cannot read config") as err:
        load_config(str(bad))
    assert "\n" not in str(err.value)  # YAML's message spans lines
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("optimiser: sgd\n")
    with pytest.raises(ConfigError, match="optimiser"):
        load_config(str(unknown))


def test_a_name_is_a_shipped_config_even_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    (tmp_path / "lenet").mkdir()  # e.g. a run directory
    monkeypatch.chdir(tmp_path)
    assert load_config("lenet").arch == "lenet"


def test_resolved_fills_architecture_defaults():
    cfg = resolved(make_config({"arch": "toy_mlp"}))
    assert cfg.model.hidden == [50, 50] and cfg.data.name == "polynomial"
    assert resolved(make_config({"arch": "lenet"})).model.hidden is None


def test_data_path_without_data_name_tells_the_kind_of_data_by_its_path(tmp_path):
    """data.path given alone was ignored (the run trained on MNIST): its kind is told by the path, a
    folder, a .csv, a .pt or .npz, and refused in one line where neither says."""
    (tmp_path / "pngs").mkdir()
    kinds = {str(tmp_path / "pngs"): "folder", "flowers.CSV": "csv", "d.pt": "tensors", "d.npz": "tensors"}
    for path, kind in kinds.items():
        assert resolved(make_config({"arch": "mnist_mlp"}, [f"data.path={path}"])).data.name == kind
    assert resolved(make_config({"arch": "mnist_mlp"}, ["data.path=d.pt", "data.name=csv"])).data.name == "csv"
    assert resolved(make_config({"arch": "mnist_mlp"})).data.name == "mnist"  # no path: the architecture's data
    (tmp_path / "notes.txt").write_text("")
    for path, held in ((tmp_path / "notes.txt", "a file of another kind"), (tmp_path / "gone", "not there")):
        with pytest.raises(ConfigError) as refused:
            resolved(make_config({"arch": "mnist_mlp"}, [f"data.path={path}"]))
        assert str(refused.value) == (f"bad config key 'data.name': left out, and data.path={show(str(path))} ({held}) "
                                      "is neither a folder nor a .csv, .pt or .npz file to tell its kind by: give "
                                      "data.name=folder, tensors or csv")
    with pytest.raises(ConfigError, match=r"'folder' does not suit toy_mlp; choose one of polynomial, sinusoid, "
                                          r"tensors, csv \(data.name=folder, inferred from data.path='/.*\)$"):
        resolved(make_config({"arch": "toy_mlp"}, [f"data.path={tmp_path / 'pngs'}"]))


def test_device_choice():
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="not a device"):
        pick_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            pick_device("cuda")


def test_config_files_and_run_dirs_of_the_wrong_kind_are_named(tmp_path):
    (tmp_path / "list.yaml").write_text("- arch\n- lenet\n")
    with pytest.raises(ConfigError, match="list.yaml' holds a ListConfig at its top level"):
        load_config(str(tmp_path / "list.yaml"))
    (tmp_path / "five.yaml").write_text("arch: toy_mlp\ntrain: 5\n")
    with pytest.raises(ConfigError, match="section 'train' in .*five.yaml: a mapping of its keys"):
        load_config(str(tmp_path / "five.yaml"))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="'run_dir': .*a_file is a file"):
        load_config("toy_mlp", [f"run_dir={tmp_path / 'a_file'}"])


def message(overrides, base=None):
    with pytest.raises(ConfigError) as err:
        make_config(base, overrides)
    return str(err.value)


HIDDEN = ("bad value for model.hidden: give one or more whole positive widths (for example [400, 400]), "
          "or null for the architecture's default; got ")


@pytest.mark.parametrize("overrides, base, got", [
    (["model.hidden={a: 1}"], None, "{'a': 1}"),
    (None, {"arch": "mnist_mlp", "model": {"hidden": {"a": 1}}}, "{'a': 1}"),
    (["arch=mnist_mlp", "model.hidden=5"], None, "5"),
    (["arch=mnist_mlp", "model.hidden=[[1]]"], None, "[[1]]"),
    (["arch=mnist_mlp", "model.hidden=[10000000000]"], None, "[10000000000]"),
])
def test_hidden_widths_must_be_a_list_of_whole_numbers(overrides, base, got):
    assert message(overrides, base) == HIDDEN + got


KWARGS = "a mapping of the network's keyword arguments (for example {width: 16})"


@pytest.mark.parametrize("base, expected", [
    ({"model": {"kwargs": 5}}, f"bad value for model.kwargs: must be {KWARGS}, not 5"),
    ({"model": {"kwargs": "ab"}}, f"bad value for model.kwargs: must be {KWARGS}, not 'ab'"),
    ({"model": {"kwargs": [1]}}, f"bad value for model.kwargs: must be {KWARGS}, not [1]"),
    ({"model": {"kwargs": None}}, f"bad value for model.kwargs: must be {KWARGS}, not null"),
    ({"model": [1, 2]}, ("bad config section 'model': a mapping of its keys (for example model: {prior: gaussian}), "
                         "not [1, 2]")),
    ({"data": 3}, "bad config section 'data': a mapping of its keys (for example data: {download: True}), not 3"),
    ({"abstention": None}, ("bad config section 'abstention': a mapping of its keys (for example abstention: "
                            "{certify: True}), not null")),
    ({"train": {"epochs": [1]}}, "bad value for train.epochs: must be a whole number, not [1]"),
    ({"train": {"batch_size": None}}, "bad value for train.batch_size: must be a whole number, not null"),
    ({"arch": None}, "bad value for arch: must be a string, not null"),
    ({"data": {"ood": 5}}, ("bad value for data.ood: must be a mapping of names to folders of images (for example "
                            "{my_letters: DIR}), not 5")),
    ({"data": {"ood": {"a": [1]}}}, ("bad value for data.ood: must be a mapping of names to folders of images "
                                     "(for example {my_letters: DIR}), not {'a': [1]}")),
    ({"data": {"mean": {"a": 1}}}, "bad value for data.mean: must be a list of numbers, not {'a': 1}"),
    ({"data": {"classes": [[1]]}}, "bad value for data.classes: must be a list of strings, not [[1]]"),
    ({"data": {"input_shape": "ab"}}, "bad value for data.input_shape: must be a list of whole numbers, not 'ab'"),
    ([1, 2], "a config is a mapping of sections (arch: lenet, train: {epochs: 3}, ...), not a list"),
])
def test_a_key_of_another_kind_is_one_line_saying_what_it_must_be(base, expected):
    """What a key must hold is checked before anything reads it (a list where a mapping belongs
    would fail as a TypeError there); the config a file or a checkpoint holds names that file."""
    assert message(None, base) == expected
    path = "/runs/x/checkpoint.pt"
    with pytest.raises(CheckpointError) as err:
        stored_config({"config": base}, path)
    assert str(err.value) == f"{path} holds a config this bnn-zoo cannot use ({expected}); train the run again"


def test_a_config_file_s_key_of_another_kind_names_the_file(tmp_path):
    (tmp_path / "mine.yaml").write_text("arch: toy_mlp\nmodel: {kwargs: 5}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "mine.yaml"))
    assert str(err.value) == f"bad value for model.kwargs in {tmp_path / 'mine.yaml'}: must be {KWARGS}, not 5"
    (tmp_path / "mine.yaml").write_text("train: {epochs: many}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "mine.yaml"), ["train.lr=0.1"])
    assert str(err.value) == \
        f"bad value for train.epochs in {tmp_path / 'mine.yaml'}: must be a whole number, not 'many'"
    assert message(["train.epochs=many"]) == "bad value for train.epochs: must be a whole number, not 'many'"


NOT_A_DEVICE = "bad value for device: {} is not a device; choose auto, cpu, cuda, cuda:N or mps"


@pytest.mark.parametrize("device", ["meta", "cpu:1", "gpu0", "cuda:x", "5"])
def test_a_device_that_is_none_fails_in_the_config_check_and_in_pick_device(device):
    assert message([f"device={device}"]) == NOT_A_DEVICE.format(repr(device))
    with pytest.raises(ConfigError) as err:
        pick_device(device)
    assert str(err.value) == NOT_A_DEVICE.format(repr(device))


def test_pick_device_refuses_a_device_this_machine_lacks(monkeypatch):
    assert make_config(None, ["device=cuda:3"]).device == "cuda:3"  # a run trained elsewhere still loads
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError) as err:
        pick_device("mps")
    assert str(err.value) == ("bad config key 'device': mps asked for but MPS is not available; "
                              "use device=auto or device=cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError) as err:
        pick_device("cuda:2")
    assert str(err.value) == ("bad config key 'device': cuda:2 asked for but this machine has 2 CUDA device(s); "
                              "use cuda:0 to cuda:1")


@pytest.mark.parametrize("override, expected", [
    ("train.batch_size=1e23", "train.batch_size: must be a whole number, not 1e+23"),
    ("train.batch_size=2.5", "train.batch_size: must be a whole number, not 2.5"),
    ("train.batch_size=10000000000000000000000",
     "train.batch_size: must be a whole number from 1 to 1000000000, got 10000000000000000000000"),
    ("train.epochs=1000000001", "train.epochs: must be a whole number from 1 to 1000000000, got 1000000001"),
    ("data.val_size=1e30", "data.val_size: must be a whole number, not 1e+30"),
    ("mcmc.warmup_steps=1.5", "mcmc.warmup_steps: must be a whole number, not 1.5"),
    ("train.lr=fast", "train.lr: must be a number, not 'fast'"),
    ("train.twin=maybe", "train.twin: must be true or false, not 'maybe'"),
    ("arch=[1, 2]", "arch: must be a string, not [1, 2]"),
])
def test_numbers_must_be_of_the_key_s_kind_and_size(override, expected):
    assert message([override]) == f"bad value for {expected}"


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1.5"])
def test_stop_at_accuracy_lies_in_0_to_1(value):
    assert message([f"train.stop_at_accuracy={value}"]) == \
        f"bad value for train.stop_at_accuracy: must lie in (0, 1], got {float(value)}"
    assert make_config(None, ["train.stop_at_accuracy=1"]).train.stop_at_accuracy == 1


@pytest.mark.parametrize("overrides, expected", [
    (["train.steps=100"], ("'train.steps': give train.epochs or train.steps, not both (train.epochs=null plans the "
                           "run in steps, train.steps=null in epochs)")),
    (["train.epochs=null"], "'train.epochs': give train.epochs=N or train.steps=N, the run's length"),
    (["train.patience=3"], ("'train.patience': early stopping watches the validation NLL, and the polynomial set "
                            "has none: drop it (train.patience=null)")),
    (["arch=table_mlp", "data.path=t.csv", "data.val_size=0", "train.patience=3"],
     ("'train.patience': early stopping watches the validation NLL, and data.val_size=0 holds none out: give "
      "data.val_size=N or train.patience=null")),
    (["arch=table_mlp"], "'data.path': data.name=csv reads your own data; give its folder or file as data.path=PATH"),
    (["arch=mnist_mlp", "model.likelihood=gaussian"], ("'arch': model.likelihood is for table_mlp and a network by "
                                                       "name (package.module:factory); mnist_mlp has its own")),
])
def test_the_plan_s_length_and_early_stopping_are_checked(overrides, expected):
    assert message(overrides) == f"bad config key {expected}"
    plan = make_config(None, ["train.epochs=null", "train.steps=100", "train.patience=3", "data.name=csv",
                              "data.path=t.csv", "train.eval_every=null"]).train
    assert (plan.epochs, plan.steps, plan.patience, plan.eval_every) == (None, 100, 3, None)


def test_table_mlp_regresses_or_classifies_as_model_likelihood_says():
    for likelihood in ("gaussian", "categorical"):
        cfg = resolved(make_config(None, ["arch=table_mlp", f"model.likelihood={likelihood}", "data.path=t.csv"]))
        assert (recipe(cfg).likelihood, cfg.data.name, cfg.model.hidden) == (likelihood, "csv", [50])
    assert recipe(resolved(make_config(None, ["arch=table_mlp", "data.path=t.csv"]))).likelihood == "categorical"


def test_interpolations_are_resolved_or_named():
    cfg = make_config(None, ["train.epochs=3", "train.twin_epochs=${train.epochs}"])
    assert cfg.train.twin_epochs == 3 and not OmegaConf.is_interpolation(cfg.train, "twin_epochs")
    assert message(["train.epochs=${nope}"]) == "bad config key 'train.epochs': Interpolation key 'nope' not found"
    assert message(["train.epochs=${train.lr}"]) == "bad value for train.epochs: must be a whole number, not 0.001"


@pytest.mark.slow
def test_a_bad_override_on_the_command_line_is_one_line_and_exit_code_2():
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.train", "toy_mlp", "train.epochs=${nope}"],
                          capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert (done.returncode, done.stderr) == \
        (2, "error: bad config key 'train.epochs': Interpolation key 'nope' not found\n")


HUGE = "x" * 5_000_000
SHOWN = "'" + "x" * 59 + "..."  # the quoted value's first 60 characters


@pytest.mark.parametrize("overrides, base, expected", [
    (None, {"arch": HUGE}, (f"bad config key 'arch': unknown architecture {SHOWN}; "
                            "choose one of toy_mlp, mnist_mlp, lenet, table_mlp, or name a network factory as "
                            "package.module:factory")),
    ([f"data.name={HUGE}"], None, (f"bad value for data.name: {SHOWN} does not suit toy_mlp; "
                                   "choose one of polynomial, sinusoid, tensors, csv")),
    ([f"model.prior={HUGE}"], None, ("bad value for model.prior: choose gaussian or fan_in or scale_mixture, "
                                     f"not {SHOWN}")),
    ([f"device={HUGE}"], None, NOT_A_DEVICE.format(SHOWN)),
    ([f"train.epochs={HUGE}"], None, f"bad value for train.epochs: must be a whole number, not {SHOWN}"),
    ([f"train.{HUGE}=1"], None, f"bad config key 'train.{'x' * 53}...: Key {SHOWN} not in 'TrainConfig'"),
    (None, {"train": HUGE}, ("bad config section 'train': a mapping of its keys (for example train: {epochs: 10}), "
                             f"not {SHOWN}")),
    ([f"abstention.signal={HUGE}"], None, ("bad config section 'abstention': signal must be one of "
                                           f"mutual_information, entropy or None, got {SHOWN}")),
    ([f"run_dir={HUGE}"], None, f"bad config key 'run_dir': cannot use {SHOWN} (File name too long)"),
    ([HUGE], None, f"override {SHOWN} is not of the form key=value (for example train.epochs=3)"),
])
def test_a_huge_value_is_shortened_in_the_message(overrides, base, expected):
    assert message(overrides, base) == expected


def test_a_huge_value_in_a_config_file_is_shortened(tmp_path):
    (tmp_path / "huge.yaml").write_text(f'arch: "{HUGE}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "huge.yaml"))
    assert str(err.value) == f"bad config key 'arch': unknown architecture {SHOWN}; choose one of toy_mlp, " \
                             "mnist_mlp, lenet, table_mlp, or name a network factory as package.module:factory"


def test_every_member_s_seed_must_be_below_2_to_the_32():
    assert message(["seed=4294967295", "train.members=2"]) == (
        "bad config key 'seed': with train.members=2 the members use seeds 4294967295..4294967296; "
        "seed + members - 1 must be below 2^32")
    assert make_config(None, ["seed=4294967294", "train.members=2"]).seed == 4294967294


def test_the_after_alarm_settings_are_checked_before_training():
    assert message(["abstention.after_alarm_quantile=0.7"]) == (
        "bad config section 'abstention': after_alarm_quantile must lie in [0, quantile] (the after-alarm rule is "
        "the stricter: quantile is 0.5), got 0.7")
    assert message(["abstention.after_alarm_refusal=1.5"]) == (
        "bad config section 'abstention': after_alarm_refusal must lie in [0, 1], got 1.5")
    assert make_config(None, ["abstention.after_alarm_quantile=0.5"]).abstention.after_alarm_quantile == 0.5


def test_an_ensemble_member_s_index_is_no_config_key():
    """Members are indexed by their place (RUN_DIR/members/N); configs stored with the index load."""
    assert message(["train.member=1"]) == "bad config key 'train.member': Key 'member' not in 'TrainConfig'. Did you mean: 'members'?"
    stored = {"config": {"arch": "toy_mlp", "train": {"members": 1, "member": 2}}}
    assert make_config(stored_config(stored)).train.members == 1


def numeric_keys(cls=Config, prefix="", kinds=(int, float)):
    """Every key of the config whose type is one of ``kinds`` (or null), found from the dataclasses."""
    for name, kind in get_type_hints(cls).items():
        if is_dataclass(kind):
            yield from numeric_keys(kind, f"{prefix}{name}.", kinds)
        elif kind in kinds or kind in [k | None for k in kinds]:
            yield prefix + name


@pytest.mark.parametrize("key", list(numeric_keys()))
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
def test_every_numeric_key_refuses_non_finite_and_negative_values(key, value):
    section, _, name = key.rpartition(".")
    named = f"bad config section 'abstention': {name} " if section == "abstention" and name not in ("samples", "alpha") \
        else f"bad value for {key}: "
    assert message([f"{key}={value}"]).startswith(named)


@pytest.mark.parametrize("key", list(numeric_keys(kinds=(int,))))
@pytest.mark.parametrize("value", ["1e23", "10000000000000000000000"])
def test_every_whole_number_key_refuses_huge_values(key, value):
    assert message([f"{key}={value}"]).startswith(f"bad value for {key}: must be a whole number")


def test_a_renamed_key_given_under_both_its_names_is_refused(tmp_path):
    """Issue 40: abstention.calibrate (the old name) and abstention.certify together: which wins?"""
    refused = ("bad config key 'abstention.calibrate': it is the old name of abstention.certify, which is given too; "
               "give abstention.certify alone")
    with pytest.raises(ConfigError, match=re.escape(refused)):
        load_config("mnist_mlp", ["abstention.certify=false", "abstention.calibrate=true"])
    both = tmp_path / "both.yaml"
    both.write_text("arch: mnist_mlp\nabstention:\n  calibrate: true\n  certify: false\n")
    with pytest.raises(ConfigError, match=re.escape(refused)):
        load_config(str(both))
    assert load_config("mnist_mlp", ["abstention.calibrate=false"]).abstention.certify is False  # alone, it is certify


def test_remaking_inputs_as_mnist_s_digits_is_for_mnist_runs():
    assert message(["arch=lenet", "data.name=fashion_mnist", "data.remade=true"]) == (
        "bad config key 'data.remade': it reads inputs as MNIST's digits were made, and this run reads "
        "fashion_mnist: leave it out (data.remade=false)")
    assert make_config(None, ["arch=lenet", "data.remade=true"]).data.remade


def test_a_bad_value_is_called_a_bad_value_and_says_what_is_allowed():
    """Issue 51: train.lr=-0.001 read "bad config key 'train.lr'": the key is right, its value is not."""
    assert message(["train.lr=-0.001"]) == "bad value for train.lr: must be a positive number, got -0.001"
    assert message(["train.lr_schedule=linear"]) == \
        "bad value for train.lr_schedule: choose constant or cosine or step, not 'linear'"
    assert message(["train.lrr=0.1"]).startswith("bad config key 'train.lrr': Key 'lrr' not in 'TrainConfig'")


@pytest.mark.parametrize("value, shown", [("2", "2"), ("1", "1"), ("0", "0"), ("nope", "'nope'"), ("null", "null")])
def test_a_boolean_is_true_or_false_and_nothing_else(value, shown, tmp_path):
    """Issue 51: data.remade=2 was read as true, where data.remade=nope was refused."""
    assert message(["arch=lenet", f"data.remade={value}"]) == f"bad value for data.remade: must be true or false, not {shown}"
    (tmp_path / "mine.yaml").write_text(f"arch: lenet\ndata: {{remade: {value}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "mine.yaml"))
    assert str(err.value) == f"bad value for data.remade in {tmp_path / 'mine.yaml'}: must be true or false, not {shown}"
    assert make_config(None, ["arch=lenet", "data.remade=true"]).data.remade is True
