"""Where the ranks meet (bnn_zoo.runs.training.meeting): a rank whose peers do not come says so, and how to
launch them all; ranks that meet at once say nothing."""
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from bnn_zoo.core.errors import ConfigError
from bnn_zoo.runs.training import meeting
from bnn_zoo.runs.training.ranks import Ranks

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_rank_whose_peers_never_come_stops_in_one_line(tmp_path):
    """One rank of two started alone (the other never launched) waited 30 minutes in silence; it
    waits BNN_ZOO_RENDEZVOUS_SECONDS, then says who was missing where and how to launch them all.
    Rank 0 serves the meeting point; rank 1 finds nobody serving it. A wait of 2 s is over before a
    rank would say that it waits (WAIT_NOTICE): the line that ends it is the only one."""
    ports = [str(_free_port()) for _ in (0, 1)]
    command = [sys.executable, "-m", "bnn_zoo.train", "toy_mlp", "train.epochs=1", f"run_dir={tmp_path / 'run'}"]
    alone = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": port, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                   "BNN_ZOO_RENDEZVOUS_SECONDS": "2"})
             for rank, port in zip((0, 1), ports)]
    said = [rank.communicate(timeout=300)[0] for rank in alone]
    assert [rank.returncode for rank in alone] == [2, 2], said
    for rank, (port, out) in enumerate(zip(ports, said)):
        assert out.startswith(f"error: WORLD_SIZE=2 expects 2 ranks at 127.0.0.1:{port}; rank {rank} waited 2 s "
                              "(BNN_ZOO_RENDEZVOUS_SECONDS) and not all came (") and out.count("\n") == 1, out
        assert out.endswith("): launch every rank, e.g. torchrun --nproc_per_node 2 -m bnn_zoo.train ..., or unset "
                            "WORLD_SIZE to train in one process\n"), out
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("rank, size", [(0, 2), (1, 3)])
def test_a_rank_that_has_waited_says_whom_it_waits_for_and_how_long(rank, size, monkeypatch, capsys):
    """A rank launched alone was silent for the whole rendezvous wait: once it has waited
    WAIT_NOTICE seconds it says whom it waits for and how long (rank 0 serving the meeting point,
    rank 1 reaching for it), then stops when nobody came."""
    port = str(_free_port())
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1"), monkeypatch.setenv("MASTER_PORT", port)
    monkeypatch.setenv("BNN_ZOO_RENDEZVOUS_SECONDS", "1.5")
    monkeypatch.setattr(meeting, "WAIT_NOTICE", 0.2)
    with pytest.raises(ConfigError, match=f"WORLD_SIZE={size} expects {size} ranks at 127.0.0.1:{port}; rank {rank} "
                                          "waited 1.5 s"):
        meeting.meet(rank, size, timedelta(minutes=1))
    others = "the other rank" if size == 2 else f"the other {size - 1} ranks"
    assert capsys.readouterr().err == (f"rank {rank} of {size} waits for {others} at 127.0.0.1:{port}, up to 1.5 s "
                                       "(BNN_ZOO_RENDEZVOUS_SECONDS)\n")


def test_the_rendezvous_bound_must_be_a_positive_number(monkeypatch):
    for value in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv("BNN_ZOO_RENDEZVOUS_SECONDS", value)
        with pytest.raises(ConfigError, match=f"^BNN_ZOO_RENDEZVOUS_SECONDS must be a positive number of seconds, "
                                              f"got '{value}'$"), Ranks(0, 2, launched=True).joined(torch.device("cpu")):
            pass
