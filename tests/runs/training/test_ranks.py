"""Training on several ranks (bnn_zoo.runs.training.ranks): two gloo processes on this CPU."""
import gc
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyro
import pytest
import torch
import torch.multiprocessing as mp
from conftest import tiny_config
from helpers import first_by_default

from bnn_zoo import load
from bnn_zoo.core.errors import ConfigError, TrainingError
from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, read
from bnn_zoo.runs.training.loop import adam
from bnn_zoo.runs.training.phases import BayesPhase, TwinPhase
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.training.ranks import Ranks

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(n: int = 10):
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def _config(kind: str):
    """A small mnist_mlp; ``traced``: its Bayesian step replayed from a trace (bnn_zoo.core.fast.captured_step)."""
    return tiny_config("mnist_mlp", **{"model.hidden": "[8]", "train.capture": "trace" if kind == "traced" else "eager"})


def _phase(kind: str, cfg):
    pyro.set_rng_seed(0)  # the same initial parameters in every process
    with pyro.settings.context(module_local_params=True):
        networks = Plan.of(cfg).networks
        return TwinPhase(networks, cfg.train, 1000, CPU) if kind == "twin" else BayesPhase(networks, cfg.train, num_data=1000, device=CPU)


def _one_step(rank: int, port: int, kind: str, out: str) -> None:
    """Rank ``rank`` of two: one step of ``kind`` on its share of the batch, through DDP."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    cfg = _config(kind)
    world = Ranks.from_env(cfg.seed)
    with world.joined(CPU), pyro.settings.context(module_local_params=True):
        phase = _phase(kind, cfg)
        loss_fn = world.wrap(phase.modules(), phase.loss, CPU)
        optimizer = adam(phase.parameters(), 0.01)
        x, y = world.share(*_batch())
        with world.draws(0), phase.stepping():
            loss = loss_fn(x, y)
        loss.backward()
        grads = [p.grad.clone() for p in phase.parameters()]
        optimizer.step()
        torch.save({"loss": loss.detach(), "grads": grads, "params": [p.detach().clone() for p in phase.parameters()]},
                   Path(out) / f"{rank}.pt")


@pytest.mark.parametrize("kind", first_by_default(["bayes", "traced", "twin"]))
def test_one_step_on_two_ranks_is_the_single_process_step_on_the_global_batch(kind, tmp_path):
    """Two gloo ranks, each on its half of a minibatch of 10 with its own draws: after DDP's
    averaging, their gradients and Adam's update are those of one process taking the mean of the
    two halves' losses under the same draws; and with one draw shared, that mean is the loss of
    the whole minibatch (each half's likelihood is scaled by num_data over its own size)."""
    mp.spawn(_one_step, args=(_free_port(), kind, str(tmp_path)), nprocs=2)
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    cfg = _config(kind)
    with pyro.settings.context(module_local_params=True):
        phase = _phase(kind, cfg)
        optimizer = adam(phase.parameters(), 0.01)
        x, y = _batch()
        with phase.stepping():
            for rank in range(2):
                world = Ranks(rank, 2, rank, cfg.seed)
                with world.draws(0):
                    loss = phase.loss(*world.share(x, y))
                assert torch.allclose(loss.detach(), ranks[rank]["loss"], rtol=1e-6)
                (loss / 2).backward()
        for p, a, b in zip(phase.parameters(), ranks[0]["grads"], ranks[1]["grads"]):
            assert torch.allclose(p.grad, a, rtol=1e-5, atol=1e-7) and torch.equal(a, b)  # DDP's mean, on both
        optimizer.step()
        for p, a, b in zip(phase.parameters(), ranks[0]["params"], ranks[1]["params"]):
            assert torch.allclose(p.detach(), a, rtol=1e-6, atol=1e-7) and torch.equal(a, b)
        with phase.stepping():
            halves = []
            for xs, ys in ((x[:5], y[:5]), (x[5:], y[5:])):
                torch.manual_seed(3)
                halves.append(phase.loss(xs, ys))
            torch.manual_seed(3)
            whole = phase.loss(x, y)
    assert torch.allclose((halves[0] + halves[1]) / 2, whole, rtol=1e-6)


def _torchrun(*args, **env):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), "-m", "bnn_zoo.train", *args]
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _rank_pids(run_dir: Path, rank: int) -> list[int]:
    """The processes of rank ``rank`` training into ``run_dir`` (read from /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and f"run_dir={run_dir}".encode() in (proc / "cmdline").read_bytes()
                    and f"RANK={rank}\0".encode() in (proc / "environ").read_bytes()
                    and b"LOCAL_RANK" in (proc / "environ").read_bytes()):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_two_rank_run_killed_resumes_to_the_uninterrupted_one(tmp_path):
    """A two-rank toy run whose rank 1 is killed (kill -9) after a checkpoint stops with torchrun's
    word on which rank died; its checkpoint loads, and resuming on two ranks ends at the weights of
    a two-rank run never interrupted (the order and the draws come from seed, epoch and step)."""
    settings = ["toy_mlp", "train.epochs=600", "train.eval_every=50", "train.progress=false"]
    whole = _torchrun(*settings, f"run_dir={tmp_path / 'whole'}")
    assert whole.wait(timeout=300) == 0, whole.stdout.read()
    killed_dir = tmp_path / "killed"
    killed = _torchrun(*settings, f"run_dir={killed_dir}")
    deadline = time.time() + 120
    while not (killed_dir / CHECKPOINT).is_file() and time.time() < deadline:
        time.sleep(0.05)
    pids = _rank_pids(killed_dir, 1)
    assert pids, "rank 1 not found"
    os.kill(pids[0], signal.SIGKILL)
    out = killed.communicate(timeout=300)[0]
    assert killed.returncode != 0 and "Signal 9 (SIGKILL)" in out, out
    stopped_at = read(killed_dir / CHECKPOINT)["epoch"]
    assert 50 <= stopped_at < 600 and load(killed_dir).epoch == stopped_at  # the last checkpoint is whole
    resumed = _torchrun(f"resume={killed_dir}", "train.progress=false")
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    a, b = read(tmp_path / "whole" / CHECKPOINT), read(killed_dir / CHECKPOINT)
    assert a["epoch"] == b["epoch"] == 600
    for name, value in a["guide"].items():
        assert torch.allclose(value, b["guide"][name], atol=1e-6), name


@pytest.mark.slow
def test_an_ensemble_trains_each_member_on_every_rank(tmp_path):
    """``torchrun ... lenet`` with the recipe's three members: each member trains in turn on all the
    ranks, from its own seed. On one rank each member ends at the weights of the plain run's, draw for
    draw; on two, rank 0 alone says and writes each, and the ensemble is tested and certified."""
    settings = ["toy_mlp", "train.members=2", "train.epochs=30", "train.eval_every=15", "train.progress=false",
                "train.twin=false"]
    one = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(_free_port()),
           "-m", "bnn_zoo.train", *settings, f"run_dir={tmp_path / 'ranked'}"]
    done = subprocess.run(one, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    plain = subprocess.run([sys.executable, "-m", "bnn_zoo.train", *settings, f"run_dir={tmp_path / 'plain'}"], cwd=ROOT,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    for folder in (Path(), Path("members") / "1"):
        a, b = read(tmp_path / "ranked" / folder / CHECKPOINT), read(tmp_path / "plain" / folder / CHECKPOINT)
        assert all(torch.equal(value, b["guide"][name]) for name, value in a["guide"].items()), folder
    two = _torchrun(*settings, f"run_dir={tmp_path / 'two'}")
    out = two.communicate(timeout=300)[0]
    assert two.returncode == 0, out
    assert out.count("ensemble member 1 (seed 1)") == 1 and "ensemble" in json.loads(
        (tmp_path / "two" / "metrics.json").read_text())
    member, first = read(tmp_path / "two" / "members" / "1" / CHECKPOINT), read(tmp_path / "two" / CHECKPOINT)
    name = next(iter(first["guide"]))
    assert member["epoch"] == 30 and not torch.equal(member["guide"][name], first["guide"][name])  # its own seed


@pytest.mark.slow
def test_one_rank_under_torchrun_trains_through_ddp_as_one_process_trains(tmp_path):
    """torchrun with one rank takes the distributed path (a process group, DDP; NCCL on a GPU, which
    scripts/gpu_check.py runs): it ends at the weights of the plain run, draw for draw."""
    settings = ["toy_mlp", "train.epochs=40", "train.eval_every=20", "train.progress=false", "train.twin=false"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port",
               str(_free_port()), "-m", "bnn_zoo.train", *settings, f"run_dir={tmp_path / 'ranked'}"]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert done.returncode == 0 and ", rank 0 of 1 (torchrun)" in done.stdout, done.stdout + done.stderr
    plain = subprocess.run([sys.executable, "-m", "bnn_zoo.train", *settings, f"run_dir={tmp_path / 'plain'}"], cwd=ROOT,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert plain.returncode == 0 and "(torchrun)" not in plain.stdout, plain.stderr
    a, b = read(tmp_path / "ranked" / CHECKPOINT), read(tmp_path / "plain" / CHECKPOINT)
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]
    assert all(torch.equal(value, b["guide"][name]) for name, value in a["guide"].items())


@pytest.mark.slow
def test_a_run_directory_rank_0_refuses_stops_every_rank_in_one_line_in_all(tmp_path):
    """Rank 0 alone claims the run directory; where it refuses (another run's files there), it says
    why in one line and rank 1 stops with it, quietly (issue 47: torchrun's ranks share one terminal,
    where each said it), not with a broken connection's traceback; both exit with code 2. The two
    ranks are started as torchrun starts them, without torchrun: it would stop rank 1 as soon as it
    saw rank 0 fail."""
    (tmp_path / "config.yaml").write_text("arch: toy_mlp\n")
    port = str(_free_port())
    ranks = [subprocess.Popen([sys.executable, "-m", "bnn_zoo.train", "toy_mlp", "train.epochs=2", f"run_dir={tmp_path}"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                                   "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
             for rank in (0, 1)]
    said = [rank.communicate(timeout=300)[0] for rank in ranks]
    refusal = f"run directory {tmp_path} holds config.yaml, which no bnn-zoo run wrote"
    assert [rank.returncode for rank in ranks] == [2, 2], said
    assert said[0].startswith(f"error: {refusal}") and said[0].count("\n") == 1, said[0]  # met at once: no wait said
    assert said[1] == "", said[1]
    assert (tmp_path / "config.yaml").read_text() == "arch: toy_mlp\n"


@pytest.mark.slow
def test_torchrun_without_the_data_stops_every_rank_with_one_line_and_exit_code_2(tmp_path):
    """Issue 47: ``torchrun --nproc_per_node 4 -m bnn_zoo.train lenet`` without MNIST printed each
    rank's line, then torchrun's report. The first rank of the machine says it, once, before any
    rank leaves; every rank stops with exit code 2, the first to leave the root cause of torchrun's
    report (which stops the others as one leaves, reports any rank's non-zero exit with its own log
    lines and traceback, and exits 1: no rank can change that)."""
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_free_port()), "-m", "bnn_zoo.train", "lenet", "data.download=false",
                           f"run_dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "BNN_ZOO_DATA": str(tmp_path / "nodata")})
    ours, theirs = done.stderr.split("\n", 1)
    assert ours.startswith(f"error: MNIST not found in {tmp_path / 'nodata'}/MNIST/raw and downloads are off"), done.stderr
    assert done.stdout == "" and "error:" not in theirs and "waits for" not in theirs, done.stderr
    codes = re.findall(r"^\s+exitcode\s+: (\S+)", theirs, flags=re.M)  # each rank's: 2, or -15 where torchrun stopped it first
    assert len(codes) == 2 and set(codes) <= {"2", "-15"} and "2" in codes, theirs
    assert re.search(r"Root Cause \(first observed failure\):\n.*\n(.*\n)*?\s*exitcode\s*: 2 ", theirs), theirs
    assert done.returncode != 0 and not (tmp_path / "run").exists()


def test_what_several_ranks_cannot_do_is_named():
    Ranks(0, 2).check(infer="svi")  # an ensemble too: its members train one after another on every rank
    with pytest.raises(ConfigError, match=r"^torchrun trains by SVI on 2 ranks; infer=nuts runs in one process"):
        Ranks(1, 2).check(infer="nuts")
    Ranks().check(infer="nuts")  # one process: all of it
    for env, message in (({"WORLD_SIZE": "two"}, "must be integers"), ({"WORLD_SIZE": "2", "RANK": "2"}, "is no rank")):
        with pytest.raises(ConfigError, match=message):
            os.environ.update(env)
            try:
                Ranks.from_env(0)
            finally:
                for key in env:
                    os.environ.pop(key)


def test_ranks_on_cpus_say_how_many_share_the_cores_and_what_it_costs(monkeypatch):
    """Issue 51: torchrun --nproc_per_node 4 on a machine without a GPU started four CPU ranks on two
    cores without a word."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    four = Ranks(0, 4, 0, launched=True)
    assert four.on_cpus(CPU, 1) == (
        "; 4 CPU ranks on 2 cores, 1 thread each: more threads than cores, so they take turns on them and train no "
        "faster than 2 ranks would; DDP on CPUs is for trying the ranks' path before GPUs, each rank holding its own "
        "copy of the data")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert Ranks(0, 4, 0, launched=True).on_cpus(CPU, 1) == (  # two machines of two ranks each
        "; 2 CPU ranks on 2 cores, 1 thread each; DDP on CPUs is for trying the ranks' path before GPUs, each rank "
        "holding its own copy of the data")
    assert "take turns on them and train no faster than 1 rank would;" in Ranks(0, 4, 0, launched=True).on_cpus(CPU, 2)
    assert four.on_cpus(torch.device("cuda", 0), 1) == "" and Ranks(0, 1, launched=True).on_cpus(CPU, 1) == ""
    assert Ranks().on_cpus(CPU, 2) == ""


@pytest.mark.slow
def test_four_cpu_ranks_on_fewer_cores_say_so_in_rank_0_s_first_line(tmp_path):
    """Issue 51, as a user ran it: torchrun --nproc_per_node 4 -m bnn_zoo.train on a CPU machine."""
    cores = len(os.sched_getaffinity(0))
    if cores >= 4:
        pytest.skip("four ranks fit this machine's cores")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port",
               str(_free_port()), "-m", "bnn_zoo.train", "toy_mlp", "train.epochs=2", "train.progress=false",
               "train.twin=false", "abstention.certify=false", f"run_dir={tmp_path / 'four'}"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # torchrun's own default, as a user has it
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    first = next(line for line in done.stdout.splitlines() if line.startswith("toy_mlp on "))
    assert first.endswith(f", rank 0 of 4 (torchrun); 4 CPU ranks on {cores} core{'s' * (cores > 1)}, 1 thread each: "
                          f"more threads than cores, so they take turns on them and train no faster than {cores} "
                          f"rank{'s' * (cores > 1)} would; DDP on CPUs is for trying the ranks' path before GPUs, each "
                          "rank holding its own copy of the data"), first
    assert done.stdout.count("CPU ranks on") == 1  # rank 0's line alone


def test_every_rank_draws_the_same_order_and_the_shares_make_up_the_batch():
    ranks = [Ranks(r, 3, r, seed=4) for r in range(3)]
    orders = [torch.randperm(100, generator=w.order(2, CPU)) for w in ranks]
    assert all(torch.equal(orders[0], o) for o in orders) and not torch.equal(
        orders[0], torch.randperm(100, generator=ranks[0].order(3, CPU)))  # alike on every rank, new each epoch
    x, y = _batch(9)
    shares = [w.share(x, y) for w in ranks]
    assert torch.equal(torch.cat([s[0] for s in shares]), x) and torch.equal(torch.cat([s[1] for s in shares]), y)
    assert [len(w.share(*_batch(11))[0]) for w in ranks] == [3, 3, 3]  # the last two of 11 left out
    draws = []
    for w in ranks[:2]:
        with w.draws(7):
            draws.append(torch.rand(3))
    assert not torch.equal(*draws)  # each rank its own weights


def test_one_process_is_left_as_it_was():
    """Ranks() changes nothing: the whole batch, torch's own order and draws, the loss itself."""
    world, x, y = Ranks(), *_batch()
    assert world.share(x, y) == (x, y) and world.order(3, CPU) is None and world.mean(torch.tensor(2.0)) == 2.0
    state = torch.get_rng_state()
    with world.draws(5):
        pass
    assert torch.equal(torch.get_rng_state(), state)
    loss = lambda a, b: a.sum()  # noqa: E731
    assert world.wrap([], loss, CPU) is loss


def _first_fails(rank: int, port: int, out: str) -> None:
    from bnn_zoo.core.errors import DataError

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    world = Ranks.from_env(0)
    loaded = []

    def load():
        loaded.append(rank)
        raise DataError("no MNIST under /nowhere")

    with world.joined(CPU):
        try:
            world.first(load)
        except DataError as err:
            (Path(out) / f"{rank}.txt").write_text(f"{loaded} {err}")


@pytest.mark.slow
def test_a_first_rank_that_cannot_load_the_data_stops_every_rank(tmp_path):
    """The first rank of a machine loads (downloads) first; where it fails, the others do not try
    the same download again but stop, naming its error."""
    mp.spawn(_first_fails, args=(_free_port(), str(tmp_path)), nprocs=2)
    assert (tmp_path / "0.txt").read_text() == "[0] no MNIST under /nowhere"
    assert (tmp_path / "1.txt").read_text() == "[] another rank could not load the data (DataError: no MNIST under /nowhere)"


def _fit(loss, fails: bool) -> None:
    """One step through a DDP that only this frame holds, as loop.fit holds it; where ``fails``, a
    non-finite loss after it."""
    loss(torch.ones(2, 2), torch.zeros(2, 1)).backward()
    if fails:
        raise TrainingError("a non-finite loss")


def _ddp_step(world: Ranks, fails: bool) -> None:
    net = torch.nn.Linear(2, 1)
    try:
        _fit(world.wrap([net], lambda x, y: (net(x) - y).pow(2).mean(), CPU), fails)
    except TrainingError:  # re-raised as LastCheckpoint does: the first error, with _fit's frame, its context
        raise ConfigError("stopped while the DDP lives") from None


def _gloo_threads_after(rank: int, port: int, out: str, fails: bool) -> None:
    """Rank ``rank`` of two: a DDP step inside ``Ranks.joined`` (that raises, where ``fails``, as a
    non-finite loss would); then the names of the threads left."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    world = Ranks.from_env(0)
    gc.disable()  # as in a run whose collector has not come round since training
    threads = lambda: sorted((task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir())  # noqa: E731
    try:
        with world.joined(CPU):
            _ddp_step(world, fails)  # its DDP goes with the call, as train_phase's does
        left = threads()
    except ConfigError:
        left = threads()  # the error still held, as cli.run holds it while it prints
    (Path(out) / f"{rank}.txt").write_text(" ".join(left))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the threads from Linux's /proc")
@pytest.mark.parametrize("fails", [False, True], ids=["ends", "raises"])
def test_leaving_the_ranks_joins_gloo_s_threads(tmp_path, fails):
    """After a DDP step, leaving the process group ends gloo's threads, whether the block ended or
    raised: one left running as Python exits may drop a collective's tensors then, which aborts the
    process (it failed CI once; 3 runs of about 25 under load)."""
    mp.spawn(_gloo_threads_after, args=(_free_port(), str(tmp_path), fails), nprocs=2)
    for rank in "01":
        assert "gloo" not in (tmp_path / f"{rank}.txt").read_text(), (tmp_path / f"{rank}.txt").read_text()


def test_a_training_set_smaller_than_the_ranks_is_refused():
    from bnn_zoo.data.sets import TensorSet
    from bnn_zoo.runs.training.loop import fit

    cfg = tiny_config("toy_mlp", **{"train.batch_size": 4})
    with pytest.raises(ConfigError, match="1 training examples cannot be shared among 2 ranks"):
        fit("bayes", lambda x, y: x.sum(), None, None, TensorSet(torch.zeros(1, 1), torch.zeros(1)), cfg.train, 1,
            [], 1.0, lambda record, due: False, Ranks(0, 2))
