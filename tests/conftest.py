import os
from contextlib import contextmanager
from pathlib import Path

import pyro
import pytest
import torch

from bnn_zoo.core.networks.architectures import ARCHITECTURES, TABLE
from bnn_zoo.runs.plans.checks import pick_device
from bnn_zoo.runs.plans.config import make_config, resolved

# The registered recipes with data sets of their own (table_mlp reads yours: test_loop and test_train train it)
ZOO = [name for name in ARCHITECTURES if name != TABLE]
SHARED_DATA = Path(os.environ.get("BNN_ZOO_DATA")
                   or Path(__file__).resolve().parents[2] / "shared" / "data")
NO_MNIST = (f"no MNIST in {SHARED_DATA}: set BNN_ZOO_DATA=DIR, DIR holding MNIST/raw (and FashionMNIST/raw, "
            "notMNIST/raw) as torchvision lays them out")
# A small hidden layer for the MLPs keeps the Pyro-client tests fast; LeNet's shape is fixed.
SMALL = {"toy_mlp": [16], "mnist_mlp": [32], "lenet": None}
# Where training and the command lines run by default (device=auto): a test that recomputes their
# random draws must draw on the same device.
DEVICE = pick_device("auto")


def pytest_collection_modifyitems(config, items):
    """Tests marked cuda skip, with the reason, where this machine has no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (python scripts/gpu_check.py runs these on a GPU)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def own_trust_list(tmp_path_factory):
    """The networks by name the tests trust live in a folder of the session's (bnn_zoo.cli.trust),
    and so do the steps training compiles (bnn_zoo.runs.training.compile_cache): train.capture=auto chooses
    alike in every session."""
    os.environ["BNN_ZOO_HOME"] = str(tmp_path_factory.mktemp("bnn_zoo_home"))
    os.environ["BNN_ZOO_CACHE"] = str(tmp_path_factory.mktemp("bnn_zoo_cache"))


@pytest.fixture(autouse=True)
def fresh_pyro():
    """Every test starts with an empty param store, the same seeds and Pyro's default settings."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    before = pyro.settings.get()
    yield
    assert pyro.settings.get() == before, "a test left Pyro's settings changed"


@contextmanager
def param_mode(mode: str):
    """Pyro's global parameter store ("global", its default) or module-local parameters ("local")."""
    with pyro.settings.context(module_local_params=mode == "local"):
        yield


@pytest.fixture
def shared_data() -> Path:
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    return SHARED_DATA


def example_batch(arch: str, n: int = 8):
    """Random inputs and targets of an architecture's shape."""
    spec = ARCHITECTURES[arch]
    x = torch.randn(n, *spec.input_shape)
    y = torch.randint(0, 10, (n,)) if spec.likelihood == "categorical" else torch.randn(n)
    return x, y


def tiny_config(arch: str, **overrides):
    """A resolved config for quick in-process runs."""
    base = {"arch": arch, "train": {"progress": False, "val_samples": 2, "test_samples": 4}}
    if arch != "toy_mlp":
        base["data"] = {"train_limit": 256, "val_size": 128, "test_limit": 128}
    cfg = make_config(base)
    return resolved(make_config(cfg, [f"{k}={v}" for k, v in overrides.items()]))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A small mnist_mlp trained for two epochs on 1,000 MNIST images, about 83% accurate (skips
    without the data)."""
    from bnn_zoo.cli.train import train

    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    run_dir = tmp_path_factory.mktemp("tiny_mnist")
    train(tiny_config("mnist_mlp", **{"run_dir": str(run_dir), "data.root": str(SHARED_DATA),
                                      "model.hidden": "[32]", "data.train_limit": 1000,
                                      "train.epochs": 2, "train.lr": 0.01}))
    return run_dir


def adam_first_step_moved_every_parameter(before: dict, params: dict, lr: float) -> bool:
    """Adam's first step moves each coordinate by lr |g| / (|g| + 1e-8): by lr where it got a
    gradient (a little less for gradients near 1e-8), not at all where it got none."""
    for name, p in params.items():
        moved = (p.detach() - before[name]).abs()
        if not (moved.min() > 0.5 * lr and moved.max() < lr * (1 + 1e-3)):
            raise AssertionError(f"{name} moved by {moved.min().item():.3g}..{moved.max().item():.3g}, not {lr}")
    return True


@pytest.fixture(scope="session")
def certified_run(tiny_run, tmp_path_factory):
    """A copy of the tiny run with rules certified at a risk its 128 validation images can bear."""
    import shutil

    from bnn_zoo.evaluation.certification import certify_run

    run_dir = tmp_path_factory.mktemp("certified") / "run"
    shutil.copytree(tiny_run, run_dir)
    found = certify_run(run_dir, risk=0.4, delta=0.2, max_refusal=0.1, samples=4)
    assert "rule" in found["bayes"] and "rule" in found["twin"], found
    return run_dir


@pytest.fixture(scope="session")
def uncertified_run(tiny_run, tmp_path_factory):
    """A copy of the tiny run whose 128 validation images certify no rule at its risk (0.01), so its
    conformal sets answer: calibrated at 80% coverage on 4 posterior samples (a class or a few each)."""
    import shutil

    from bnn_zoo.evaluation.certification import certify_run

    run_dir = tmp_path_factory.mktemp("uncertified") / "run"
    shutil.copytree(tiny_run, run_dir)
    found = certify_run(run_dir, alpha=0.2, samples=4)
    assert "rule" not in found["bayes"] and found["bayes"]["sets"]["threshold"] is not None, found
    return run_dir


def splits_of(cfg, device="cpu"):
    """The splits a resolved config's plan reads (``load_splits`` of its data section)."""
    from bnn_zoo.data.sets import load_splits
    from bnn_zoo.runs.plans.plan import Plan

    plan = Plan.of(cfg)
    return load_splits(plan.data, plan.categorical, plan.seed, device)
