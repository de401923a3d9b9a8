"""Any network by name (arch: package.module:factory, bnn_zoo.core.networks.architectures): trained, stored, loaded and
refused the way the registered recipes are."""
import os
import sys
import textwrap

import pytest
import torch
from conftest import NO_MNIST, SHARED_DATA, tiny_config

from bnn_zoo import load
from bnn_zoo.core.networks.architectures import architecture, make_net
from bnn_zoo.core.errors import CheckpointError, ConfigError
from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, read
from bnn_zoo.runs.training.resume import config_for_run

NETS = '''
from torch import nn

def small_cnn(width=4):
    return nn.Sequential(nn.Conv2d(1, width, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(width * 12 * 12, 10))

def regressor(hidden=8):
    return nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, 1))

def not_a_network():
    return "a string"

def with_batchnorm():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 26 * 26, 10))

def thousand_classes():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1000))

def colour_images():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(10))

LAYERS = 3
print_twice = print
'''


@pytest.fixture
def own_nets(tmp_path, monkeypatch):
    """A module of the user's own networks, importable as ``own_nets`` (a file beside them)."""
    (tmp_path / "own_nets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "own_nets"
    sys.modules.pop("own_nets", None)


def test_a_network_by_name_is_built_with_its_keyword_arguments(own_nets):
    net = make_net(architecture(f"{own_nets}:small_cnn", {"width": 3}))
    assert net[0].out_channels == 3 and net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    regression = architecture(f"{own_nets}:regressor", {"hidden": 5}, "gaussian")
    assert regression.likelihood == "gaussian" and regression.datasets == ("polynomial", "sinusoid")
    assert make_net(regression)[0].out_features == 5


def test_the_check_of_a_factory_s_outputs_leaves_the_network_as_it_was_made(own_nets):
    net = make_net(architecture(f"{own_nets}:with_batchnorm"))
    norm = net[1]
    assert net.training and int(norm.num_batches_tracked) == 0
    assert torch.equal(norm.running_mean, torch.zeros(2)) and torch.equal(norm.running_var, torch.ones(2))


@pytest.mark.slow
def test_a_run_of_an_own_network_trains_stores_its_name_and_loads(own_nets, tmp_path):
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    from bnn_zoo.cli.train import train

    run_dir = tmp_path / "run"
    cfg = tiny_config(f"{own_nets}:small_cnn", **{"model.kwargs": "{width: 3}", "run_dir": str(run_dir),
                                                   "data.root": str(SHARED_DATA), "train.epochs": 1})
    metrics = train(cfg)
    stored = read(run_dir / CHECKPOINT)["config"]
    assert stored["arch"] == "own_nets:small_cnn" and stored["model"]["kwargs"] == {"width": 3}
    trained = load(run_dir)
    assert trained.twin.net[0].out_channels == 3 and "net.0.weight" in trained.guide.median()
    from bnn_zoo.data.sets import load_torchvision, normalize

    images, labels = load_torchvision("mnist", str(SHARED_DATA), train=False, download=False)
    with torch.no_grad():  # the loaded twin is the trained one: its test figure again
        right = (trained.twin(normalize(images[:128])).argmax(1) == labels[:128]).float().mean().item()
    assert metrics["twin"]["test/accuracy"] == pytest.approx(right)
    sys.modules.pop(own_nets)
    sys.path.remove(str(tmp_path))  # elsewhere, without the module: the message says what to do
    with pytest.raises(CheckpointError, match="cannot import own_nets .* never from the folder you stand in: install "
                                              "it, import it yourself first, or add its folder to PYTHONPATH") as err:
        load(run_dir)
    assert "train the run again" not in str(err.value)


@pytest.mark.parametrize("arch, overrides, message", [
    ("os:system", {"model.kwargs": "{command: ls}"}, "os is Python's own library, not a network"),
    ("builtins:exec", {}, "builtins is Python's own library"),
    ("torch:os.system", {}, "passes through the module os"),
    ("torch:nn.Linear", {}, "passes through the module torch.nn: name the factory in its own module"),
    ("no_such_module_here:net", {}, "cannot import no_such_module_here .* install it"),
    ("own_nets:missing", {}, "own_nets has no missing"),
    ("own_nets:LAYERS", {}, "own_nets:LAYERS is a int, not a callable"),
    ("own_nets:print_twice", {}, "is Python's own print, not a network"),
    ("own nets:small_cnn", {}, "is not package.module:factory"),
    ("own_nets:small_cnn", {"model.hidden": "[8]"}, "has a fixed shape"),
    ("own_nets:small_cnn", {"train.twin_dropout": 0.5}, "keeps its own layers"),
    ("own_nets:small_cnn", {"model.likelihood": "poisson"}, "choose categorical or gaussian"),
    ("own_nets:small_cnn", {"data.name": "sinusoid"}, "does not suit"),
    ("lenet", {"model.kwargs": "{width: 3}"}, "are for a network by name"),
])
def test_a_bad_network_name_is_refused_in_one_line(own_nets, arch, overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        config_for_run(None, [f"arch={arch}", *(f"{k}={v}" for k, v in overrides.items())])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("factory, kwargs, message", [
    ("small_cnn", {"depth": 2}, "does not take model.kwargs {'depth': 2} .*unexpected keyword argument 'depth'"),
    ("not_a_network", {}, "returned a str, not an nn.Module"),
    ("thousand_classes", {}, r"gives \[2, 1000\] for 2 inputs; its categorical likelihood needs \[2, 10\]"),
    ("colour_images", {}, r"cannot take inputs of shape \[1, 28, 28\]"),
])
def test_a_factory_that_does_not_fit_is_named_with_its_arguments(own_nets, factory, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_net(architecture(f"{own_nets}:{factory}", kwargs))


def test_a_module_that_fails_to_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_nets.py").write_text("def net(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="importing broken_nets failed: SyntaxError") as err:
        config_for_run(None, ["arch=broken_nets:net"])
    assert "\n" not in str(err.value)


def test_a_run_of_a_network_by_name_goes_to_runs_slash_its_factory(own_nets):
    from bnn_zoo.runs.plans.config import resolved

    assert resolved(config_for_run(None, [f"arch={own_nets}:small_cnn"])).run_dir == "runs/small_cnn"


@pytest.mark.slow
def test_a_stored_network_is_built_only_once_its_name_is_trusted(own_nets, tmp_path, monkeypatch, capsys):
    """A checkpoint is data: one naming a network by name is refused (load, resume) until the user
    trusts that name, because building it imports and calls code; training with a name trusts it."""
    import yaml

    from bnn_zoo.cli import trust
    from bnn_zoo.cli.train import train
    from bnn_zoo.runs.storage import trust_list
    from bnn_zoo.runs.storage.checkpoint import save_atomic
    from bnn_zoo.runs.training.resume import config_for_run

    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    train(tiny_config(f"{own_nets}:small_cnn", **{"run_dir": str(run_dir), "data.root": str(SHARED_DATA),
                                                   "train.epochs": 1, "train.twin": False}))
    assert trust_list.trusted() == ['{"arch": "own_nets:small_cnn", "kwargs": {}}']  # given by the user: trusted
    load(run_dir)
    capsys.readouterr()
    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "elsewhere"))  # another user, or another machine
    expected = (f"{run_dir / CHECKPOINT} names the network own_nets:small_cnn (kwargs {{}}), which runs code when "
                "it is built; if you trust it: python -m bnn_zoo.trust own_nets:small_cnn")
    for attempt in (lambda: load(run_dir), lambda: config_for_run(None, [f"resume={run_dir}"])):
        with pytest.raises(CheckpointError) as err:
            attempt()
        assert str(err.value) == expected
    assert trust.main(["own_nets:small_cnn"]) == 0
    assert capsys.readouterr().out.strip() == '{"arch": "own_nets:small_cnn", "kwargs": {}}'
    assert load(run_dir).model is not None
    # the name with other arguments is another network: asked for again, with the command that trusts it
    state = read(run_dir / CHECKPOINT)
    state["config"]["model"]["kwargs"] = {"width": 4}
    save_atomic(state, run_dir / CHECKPOINT)
    with pytest.raises(CheckpointError, match=r"""if you trust it: python -m bnn_zoo.trust own_nets:small_cnn --kwargs '\{"width": 4\}'"""):
        load(run_dir)
    assert trust.main(["own_nets:small_cnn", "--kwargs", '{"width": 4}']) == 0
    capsys.readouterr()
    # an interpolation, which bnn-zoo never writes, is an edit: refused before it can name anything
    state["config"]["arch"], state["config"]["run_dir"] = "torch${run_dir}", ":os.system"
    save_atomic(state, run_dir / CHECKPOINT)
    with pytest.raises(CheckpointError, match=r"holds a config with an interpolation \(\$\{...\}\), which bnn-zoo never writes"):
        load(run_dir)
    # a forged checkpoint naming a function of an installed library is refused before anything is imported
    state = read(run_dir / CHECKPOINT)
    state["config"]["arch"] = "yaml:unsafe_load"
    state["config"]["model"]["kwargs"] = {"stream": "!!python/object/apply:os.system ['true']"}
    save_atomic(state, run_dir / CHECKPOINT)
    monkeypatch.setattr(yaml, "unsafe_load", lambda **k: pytest.fail("the forged network was built"))
    with pytest.raises(CheckpointError, match="names the network yaml:unsafe_load .* if you trust it"):
        load(run_dir)
    assert trust.main(["not-a-network"]) == 2 and "is not a network by name" in capsys.readouterr().err
    assert trust.main(["a:b", "--kwargs", "[1]"]) == 2 and "must be a JSON object" in capsys.readouterr().err


def test_a_trust_list_others_may_write_is_refused(tmp_path, monkeypatch, capsys):
    from bnn_zoo.runs.storage import trust_list

    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "home"))
    trust_list.trust("own_nets:small_cnn", {})
    (tmp_path / "home" / "trusted_networks").chmod(0o666)
    with pytest.raises(CheckpointError, match=r"trusted_networks is not yours alone to write: make it so \(chmod go-w"):
        trust_list.trusted()
    (tmp_path / "home" / "trusted_networks").chmod(0o644)
    assert trust_list.trusted() == ['{"arch": "own_nets:small_cnn", "kwargs": {}}']
    said = []
    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "a_file"))
    (tmp_path / "a_file").write_text("")
    trust_list.trust_given("own_nets:small_cnn", {}, said.append)  # training goes on, and says why
    assert said and said[0].startswith("warning: own_nets:small_cnn is not recorded as trusted")
    trust_list.trust_given("lenet", {}, said.append)
    assert len(said) == 1  # a registered recipe needs no trust


class Payload:
    """What a pickle may hold: unpickled, it writes the marker file (code that ran)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("arch, kwargs, refused", [
    ("torch:load", {"weights_only": False}, "opens {file}"),
    ("numpy:load", {"allow_pickle": True}, "opens {file}"),
    ("yaml:unsafe_load", {"stream": "!!python/object/apply:os.system ['touch {marker}']"}, r"starts a program \(os.system\)"),
])
def test_a_loader_named_as_a_network_is_refused_before_it_runs_anything(arch, kwargs, refused, tmp_path, monkeypatch):
    """A config handed to you may name a loader with arguments that open a file (torch.load, numpy.load
    unpickle it) or decode an object: built under the guard, it reads nothing, runs nothing, and is not
    trusted after."""
    import pickle

    from bnn_zoo.runs.storage import trust_list

    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "home"))
    marker, file = tmp_path / "ran", tmp_path / "weights.pt"
    file.write_bytes(pickle.dumps(Payload(str(marker))))
    kwargs = {k: v.format(marker=marker) if isinstance(v, str) else v for k, v in kwargs.items()}
    kwargs = {**kwargs, **({"f": str(file)} if arch == "torch:load" else {"file": str(file)} if arch == "numpy:load" else {})}
    from bnn_zoo.cli.train import train
    from bnn_zoo.runs.plans.config import make_config, resolved

    cfg = resolved(make_config({"arch": arch, "run_dir": str(tmp_path / "run"), "model": {"kwargs": kwargs},
                                "train": {"epochs": 1, "progress": False}}))

    with pytest.raises(ConfigError, match=f"{arch}.* {refused.format(file=file)} while it is built; a network by name is "
                                          "built from its code alone") as err:
        train(cfg)
    assert "\n" not in str(err.value) and not marker.exists()
    assert not (tmp_path / "run").exists() and trust_list.trusted() == []


def test_an_installed_network_builds_under_the_guard():
    import torchvision

    from bnn_zoo.core.networks.network_names import build_network, import_factory

    net = build_network("torchvision.models:resnet18", import_factory("torchvision.models:resnet18"), {"num_classes": 3})
    assert isinstance(net, torchvision.models.ResNet) and net.fc.out_features == 3


def test_a_factory_that_catches_the_refusal_is_refused_all_the_same(tmp_path, monkeypatch):
    (tmp_path / "sly_nets.py").write_text(textwrap.dedent('''
        from torch import nn

        def net(path="secrets.txt"):
            try:
                open(path).read()
            except OSError:
                pass
            return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))

        class NotANet:
            pass

        def annotated() -> int:
            return 3
        '''))
    (tmp_path / "secrets.txt").write_text("x")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"sly_nets:net\(\*\*\{\}\) opens .*secrets.txt while it is built"):
            make_net(architecture("sly_nets:net"))
        for name, says in (("NotANet", "returns a NotANet"), ("annotated", "returns a int")):
            with pytest.raises(ValueError, match=f"sly_nets:{name} {says}, not a network"):
                architecture(f"sly_nets:{name}")
    finally:
        sys.modules.pop("sly_nets", None)


@pytest.mark.slow
def test_a_handed_run_never_imports_a_module_from_the_folder_you_stand_in(own_nets, tmp_path, monkeypatch):
    """cd into a run someone handed you and ask it: its mynets.py is not imported (the name you
    trusted is your module, from installed packages or PYTHONPATH), and the line says so."""
    import subprocess

    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    from bnn_zoo.cli.train import train

    run_dir = tmp_path / "handed"
    train(tiny_config(f"{own_nets}:small_cnn", **{"run_dir": str(run_dir), "data.root": str(SHARED_DATA),
                                                   "train.epochs": 1, "train.twin": False, "abstention.certify": False}))
    marker = tmp_path / "ran"
    (run_dir / "own_nets.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + textwrap.dedent(NETS))
    from PIL import Image

    Image.new("L", (28, 28)).save(run_dir / "digit.png")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.predict", ".", "digit.png", "--samples", "2"], cwd=run_dir,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and not marker.exists(), done.stderr
    assert "cannot import own_nets (No module named 'own_nets'); a stored run's network comes from installed packages " \
           "or PYTHONPATH, never from the folder you stand in" in done.stderr
    env["PYTHONPATH"] = str(tmp_path)  # the module you chose, named: answered
    (tmp_path / "own_nets.py").write_text(textwrap.dedent(NETS))
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.predict", ".", "digit.png", "--samples", "2"], cwd=run_dir,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0 and not marker.exists(), done.stderr


def test_a_network_that_cannot_be_built_leaves_nothing_and_is_not_trusted(own_nets, tmp_path, monkeypatch):
    from bnn_zoo.cli.train import train
    from bnn_zoo.runs.storage import trust_list

    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "home"))
    (tmp_path / "run").mkdir()  # a folder of your own, where the run would go
    with pytest.raises(ConfigError, match="returned a str, not an nn.Module"):
        train(tiny_config(f"{own_nets}:not_a_network", run_dir=str(tmp_path / "run")))
    assert list((tmp_path / "run").iterdir()) == [] and trust_list.trusted() == []


@pytest.mark.slow
def test_the_trust_list_survives_a_shared_umask_concurrent_writers_and_bad_bytes(tmp_path, monkeypatch):
    import subprocess

    from bnn_zoo.runs.storage import trust_list

    monkeypatch.setenv("BNN_ZOO_HOME", str(tmp_path / "home"))
    old = os.umask(0o002)  # a group-writable default: the folder made must still be yours alone
    try:
        trust_list.trust("a:net", {})
    finally:
        os.umask(old)
    assert trust_list.trusted() == ['{"arch": "a:net", "kwargs": {}}']
    code = "import sys; from bnn_zoo.runs.storage.trust_list import trust; trust(f'n{sys.argv[1]}:net', {})"
    started = [subprocess.Popen([sys.executable, "-c", code, str(i)]) for i in range(8)]
    assert all(p.wait(timeout=120) == 0 for p in started)
    assert sorted(trust_list.trusted()) == sorted(['{"arch": "a:net", "kwargs": {}}',
                                                   *(f'{{"arch": "n{i}:net", "kwargs": {{}}}}' for i in range(8))])
    (tmp_path / "home" / "trusted_networks").write_bytes(b'{"arch": "a:net"}\n\xff\xfe\n')
    with pytest.raises(CheckpointError, match=r"trusted_networks is not a list bnn-zoo wrote \(byte 18 is not UTF-8\): "
                                              "delete it and trust your networks again"):
        trust_list.trusted()
    with pytest.raises(ConfigError, match="os is Python's own library"):
        trust_list.trust("os:system", {})


@pytest.mark.slow
def test_python_m_bnn_zoo_trust_warns_of_nothing(tmp_path):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "bnn_zoo.trust"], capture_output=True, text=True,
                          env={**os.environ, "BNN_ZOO_HOME": str(tmp_path)})
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith("no trusted networks")


def test_a_forged_checkpoint_naming_python_s_own_library_is_not_offered_trust(tmp_path):
    from bnn_zoo.runs.storage.trust_list import check_trusted

    with pytest.raises(CheckpointError) as err:
        check_trusted({"arch": "os:system", "model": {"kwargs": {"command": "ls"}}}, tmp_path / "checkpoint.pt")
    assert str(err.value) == (f"{tmp_path / 'checkpoint.pt'} names os:system, which is no network (os:system: os is "
                              "Python's own library, not a network; name a factory of your own); bnn-zoo never stores "
                              "such a name: the file was forged or edited; use the run it came from")
    assert "bnn_zoo.cli.trust" not in str(err.value)
