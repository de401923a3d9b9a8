import pytest

from bnn_zoo.config import config_names, load_config, make_config, pick_device, resolved
from bnn_zoo.errors import ConfigError


def test_shipped_configs_load_and_hold_only_differences():
    assert {"toy_mlp", "toy_sinusoid", "mnist_mlp", "lenet"} <= set(config_names())
    for name in config_names():
        cfg = resolved(load_config(name))
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
    (["model.guide=laplace"], "'model.guide'.*meanfield or lowrank or delta"),
    (["model.guide_rank=0"], "model.guide_rank.*positive"),
    (["train.kl_weight=0"], "train.kl_weight.*positive"),
    (["abstention.risk=0"], "'abstention': risk must lie strictly between 0 and 1, got 0"),
    (["abstention.delta=1"], "'abstention': delta must lie strictly between 0 and 1, got 1"),
    (["abstention.max_refusal=1.5"], "'abstention': max_refusal must lie in \\[0, 1\\], got 1.5"),
    (["abstention.quantile=1.5"], "'abstention': quantile must lie in \\[0, 1\\], got 1.5"),
    (["abstention.signal=variance"], "'abstention': signal must be one of mutual_information, entropy"),
    (["abstention.samples=0"], "abstention.samples.*positive"),
    (["infer=mcmc"], "'infer'.*svi or nuts"),
    (["mcmc.target_accept=1.5"], "mcmc.target_accept"),
    (["mcmc.warmup_steps=-1"], "mcmc.warmup_steps.*>= 0"),
    (["arch=mnist_mlp", "model.hidden=[]"], r"'model.hidden': give one or more positive widths.*got \[\]"),
    (["arch=mnist_mlp", "model.hidden=[0]"], r"'model.hidden': give one or more positive widths.*got \[0\]"),
    (["data.train_limit=0"], "'data.train_limit': must be a positive number, got 0"),
    (["data.train_limit=-1"], "'data.train_limit': must be a positive number, got -1"),
    (["data.test_limit=-100"], "'data.test_limit': must be a positive number, got -100"),
    (["train.lr=inf"], "'train.lr': must be a positive number, got inf"),
    (["model.prior_scale=inf"], "'model.prior_scale': must be a positive number, got inf"),
    (["train.twin_lr=-1"], "'train.twin_lr': must be a positive number"),
    (["train.twin_epochs=-3"], "'train.twin_epochs': must be a positive number"),
    (["train.lr_step=0"], "'train.lr_step': must be a positive number"),
    (["seed=-1"], r"'seed': must lie in \[0, 2\^32\)"),
    (["train.test_samples=100000000"], "'train.test_samples': at most 10000 posterior samples"),
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
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(str(bad))
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


def test_device_choice():
    import torch

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
    with pytest.raises(ConfigError, match="section 'train': a mapping of its keys"):
        load_config(str(tmp_path / "five.yaml"))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="'run_dir': .*a_file is a file"):
        load_config("toy_mlp", [f"run_dir={tmp_path / 'a_file'}"])
