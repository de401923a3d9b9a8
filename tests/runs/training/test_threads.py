"""The CPU threads a run trains on (bnn_zoo.runs.training.threads): train.threads, or one thread where a
step's work is too small for a second to pay, torch's own choice above it; the log says which."""
import pytest
import torch
from conftest import tiny_config

from bnn_zoo.runs.plans.config import load_config, resolved
from bnn_zoo.runs.plans.factory import build_twin
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.training.threads import PAYS_FROM, step_flops, step_threads

CPU = torch.device("cpu")


def _plain(name: str, *overrides: str):
    plan = Plan.of(resolved(load_config(name, list(overrides))))
    return build_twin(plan.networks), plan.networks.recipe.input_shape, plan.train.batch_size


def test_a_step_s_work_is_its_forward_pass_s_arithmetic():
    """mnist_mlp's 784-400-400-10: 2 x (784 x 400 + 400 x 400 + 400 x 10) FLOPs an input, 128 inputs a step."""
    net, shape, batch = _plain("mnist_mlp")
    assert step_flops(net, shape, batch) == 2 * (784 * 400 + 400 * 400 + 400 * 10) * 128
    state = torch.get_rng_state()
    step_flops(net, shape, 1)
    assert torch.equal(torch.get_rng_state(), state)  # the run's draws as they were


@pytest.mark.parametrize("name, batch, threads", [("toy_mlp", 6, 1), ("mnist_mlp", 128, None), ("lenet", 128, None)])
def test_the_default_threads_follow_the_step_s_work(name, batch, threads):
    net, shape, _ = _plain(name)
    chosen, why = step_threads(None, net, shape, batch, CPU)
    assert chosen == threads and (step_flops(net, shape, batch) < PAYS_FROM) == (threads == 1)
    assert why.startswith("1 CPU thread (train.threads=null: a step's forward pass is 0.031 million FLOPs" if threads
                          else f"{torch.get_num_threads()} CPU thread{'s' * (torch.get_num_threads() > 1)}, torch's own "
                          "(train.threads=null")
    assert step_threads(2, net, shape, batch, CPU) == (2, "2 CPU threads (train.threads)")


def test_the_toy_run_trains_on_one_thread_and_says_so(tmp_path, monkeypatch, capsys):
    """Issue 47: the default toy run took 122-126 s on a shared 2-core machine on torch's two
    threads, 30.7 s on one."""
    from bnn_zoo.cli.train import train

    set_to = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (set_to.append(n), real(n)))
    before = torch.get_num_threads()
    train(tiny_config("toy_mlp", **{"run_dir": str(tmp_path / "run"), "train.epochs": 3}))
    assert set_to[:2] == [1, before] and set_to.count(1) == 2  # each phase on one thread, then torch's own again
    assert "; 1 CPU thread (train.threads=null: a step's forward pass is 0.031 million FLOPs, under the 10 million " \
           "from which a second pays)\n" in capsys.readouterr().out


def test_the_log_advises_one_thread_only_where_torch_s_own_choice_is_more():
    """Issue 51: on one thread already (one core, OMP_NUM_THREADS=1) the log said "1 CPU threads,
    torch's own (...; on a shared machine train.threads=1)"."""
    net, shape, batch = _plain("mnist_mlp")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert step_threads(None, net, shape, batch, CPU) == (
            None, "1 CPU thread, torch's own (train.threads=null: a step's forward pass is 122 million FLOPs)")
        torch.set_num_threads(2)
        assert step_threads(None, net, shape, batch, CPU)[1] == (
            "2 CPU threads, torch's own (train.threads=null: a step's forward pass is 122 million FLOPs; on a shared "
            "machine train.threads=1)")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [3, 1000, 10 ** 9])
def test_more_threads_than_the_process_has_cores_are_refused_before_the_run_folder(tmp_path, monkeypatch, capsys,
                                                                                  threads):
    """Issue 51: train.threads=1000000000 ran the OpenMP runtime out of memory after the run folder
    was made (then the corrected command was refused: the folder held a run); 1000 on two cores
    trained 94 times slower without a word."""
    from bnn_zoo.cli.train import main
    from bnn_zoo.runs.plans import checks

    monkeypatch.setattr(checks.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    run = tmp_path / "run"
    assert main(["toy_mlp", f"run_dir={run}", f"train.threads={threads}", "train.epochs=1", "train.progress=false"]) == 2
    assert capsys.readouterr().err == (f"error: bad value for train.threads: {threads} CPU threads, and this process "
                                       "has 2 CPU cores: give at most train.threads=2, or train.threads=null (chosen "
                                       "from a step's work)\n")
    assert not run.exists()
    assert checks.cores() == 2
    checks.check_threads(2)  # as many as it has: trained
