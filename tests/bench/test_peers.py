"""The contenders scripts/peers.py times (``bnn_zoo.bench.peers``): each a working trainer, on the
CPU and on a GPU, and the module importable without the peers it times."""
import math
import subprocess
import sys

import pyro
import pytest
import torch
from helpers import first_by_default

from bnn_zoo.bench.peers import CONTENDERS, bayes_by_backprop, training_step

PEERS = ["zoo", "zoo_traced", "zoo_compiled", "bbb", "bbb_compiled", "tyxe", "bt_reparam", "bt_flipout", "blitz",
         "twin", "twin_compiled"]


@pytest.mark.cuda
@pytest.mark.parametrize("contender", PEERS)
def test_every_contender_of_the_peers_benchmark_steps_on_the_gpu(contender):
    """On the device it is given, every tensor of it (TyXe's prior too, which it would make on the
    CPU): two steps on CUDA give finite losses."""
    try:
        with pyro.settings.context(module_local_params=False,
                                   validate_distributions_torch=pyro.settings.get("validate_distributions_torch")):
            step = training_step(contender, "mnist_mlp", [32], 16, torch.device("cuda"))
            x, y = torch.randn(16, 1, 28, 28, device="cuda"), torch.randint(0, 10, (16,), device="cuda")
            losses = [float(step(x, y)) for _ in range(2)]
    except ModuleNotFoundError as err:
        pytest.skip(f"{err.name} is not installed (pip install -e .[bench])")
    assert all(map(math.isfinite, losses))


@pytest.mark.parametrize("contender", first_by_default(PEERS))
def test_every_contender_of_the_peers_benchmark_learns(contender):
    """Each step the speed table times is a working trainer: on y = 3 sin(3x) the tiny network's
    loss falls by more than 30% over 300 steps (it holds a constant: 0.92 nats an example for a Gaussian)."""
    try:
        # the zoo's contender sets module-local parameters, as train does; TorchDynamo's first compile
        # (bbb_compiled's) turns torch's distribution validation off process-wide: both come back
        with pyro.settings.context(module_local_params=False,
                                   validate_distributions_torch=pyro.settings.get("validate_distributions_torch")):
            step = training_step(contender, "toy_mlp", [16], 32, torch.device("cpu"))
            torch.manual_seed(0)
            x = torch.rand(32, 1) * 2 - 1
            losses = [float(step(x, 3 * torch.sin(3 * x[:, 0]))) for _ in range(300)]
    except ModuleNotFoundError as err:
        pytest.skip(f"{err.name} is not installed (pip install -e .[bench])")
    assert sum(losses[-20:]) < 0.7 * sum(losses[:20]), (losses[:3], losses[-3:])


def test_hand_written_bayes_by_backprop_learns():
    """The peers benchmark's baseline is a working BbB: on a separable problem its loss falls and
    its posterior means classify."""
    torch.manual_seed(0)
    x = torch.randn(256, 5)
    y = (x[:, 0] > 0).long()
    params, loss = bayes_by_backprop(torch.nn.Linear(5, 2))
    optimizer = torch.optim.Adam(params, lr=0.05)
    losses = []
    for _ in range(100):
        optimizer.zero_grad()
        value = loss(x, y, num_batches=1)
        value.backward()
        optimizer.step()
        losses.append(value.item())
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    weight, bias = params[:2]  # the posterior means
    assert ((x @ weight.T + bias).argmax(1) == y).float().mean() > 0.95


def test_the_benchmark_room_imports_without_the_peers():
    """The peers are the bench extra's (pip install -e .[bench]): importing the room, and the package,
    needs none of them (each is blocked here: importing one would fail)."""
    blocked = ("tyxe", "bayesian_torch", "blitz")
    code = ("import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked) +
            "import bnn_zoo, bnn_zoo.bench.peers, bnn_zoo.bench.processes, bnn_zoo.bench.provenance, "
            "bnn_zoo.bench.gpu_output, bnn_zoo.bench.gpu_report\nprint(bnn_zoo.bench.peers.CONTENDERS)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(CONTENDERS)


def test_a_peer_not_installed_fails_when_its_step_is_built(monkeypatch):
    """Its import waits for its step: a missing peer is a ModuleNotFoundError there (scripts/peers.py
    reports it as skipped, with the command that installs it)."""
    monkeypatch.setitem(sys.modules, "blitz", None)
    monkeypatch.setitem(sys.modules, "blitz.losses", None)
    with pytest.raises(ModuleNotFoundError, match="blitz"):
        training_step("blitz", "toy_mlp", [16], 4, torch.device("cpu"))
