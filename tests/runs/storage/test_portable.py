"""Nothing shipped holds a folder of the machine that built it: the files in the package, what
``ship`` writes, and what ``portable`` keeps of a run's config."""
import re
from pathlib import Path

import pytest
import torch

from bnn_zoo.core.errors import CheckpointError
from bnn_zoo.runs.storage.loading import SHIPPED, load, ship
from bnn_zoo.runs.storage.portable import check_portable, portable

SHIPPED_FILES = sorted(SHIPPED.glob("*.pt"))


def paths_in(value) -> list[str]:
    """Every string in a loaded file that is a path from a machine's root (/..., ~..., C:\\...),
    walked as the hooks walk it."""
    if isinstance(value, dict):
        return [p for item in value.values() for p in paths_in(item)]
    if isinstance(value, (list, tuple)):
        return [p for item in value for p in paths_in(item)]
    return [value] if isinstance(value, str) and re.match(r"[/~]|[A-Za-z]:[\\/]", value) else []


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=[p.name for p in SHIPPED_FILES])
def test_no_shipped_file_holds_a_path_of_the_machine_that_built_it(path):
    """lenet and lenet_fashion held the builder's data.root, which evaluate read before the user's
    $BNN_ZOO_DATA; all three held the run folders they were trained in."""
    assert paths_in(torch.load(path, map_location="cpu", weights_only=True)) == []


def test_a_shipped_config_holds_no_folder_and_the_rest_as_it_trained():
    config = {"arch": "lenet", "run_dir": "/home/me/runs/lenet", "resume": "/home/me/runs/lenet", "seed": 3,
              "data": {"name": "csv", "root": "/home/me/data", "path": "/home/me/tables/prices.csv",
                       "test_path": "C:\\Users\\me\\test.csv", "ood": {"letters": "/home/me/letters/"}, "val_size": 9},
              "train": {"epochs": 4}}
    shipped = portable(config)
    assert shipped == {"arch": "lenet", "run_dir": None, "resume": None, "seed": 3,
                       "data": {"name": "csv", "root": None, "path": "prices.csv", "test_path": "test.csv",
                                "ood": {"letters": "letters"}, "val_size": 9}, "train": {"epochs": 4}}
    assert config["data"]["root"] == "/home/me/data"  # the run's own config is left as it was
    assert portable({"arch": "lenet", "data": {"name": "mnist"}}) == {"arch": "lenet", "data": {"name": "mnist"}}


def test_a_path_portable_cannot_read_is_refused_by_name():
    state = {"config": portable({"arch": "pkg.nets:make", "model": {"kwargs": {"vocabulary": "/home/me/words.txt"}}})}
    with pytest.raises(CheckpointError, match=r"^runs/x holds the path /home/me/words.txt under config.model.kwargs."
                                              r"vocabulary: a shipped posterior carries no folder of the machine"):
        check_portable(state, "runs/x")


def test_ship_writes_no_folder_of_the_machine_that_built_it(certified_run, shared_data, tmp_path, monkeypatch):
    """The run trained with an absolute data.root and run_dir; shipped, it holds neither, loads, and
    holds its config otherwise as the run does."""
    from bnn_zoo.runs.storage import loading

    monkeypatch.setattr(loading, "SHIPPED", tmp_path)
    run = load(certified_run)
    assert Path(run.config.data.root).is_absolute()
    for path in ship(certified_run, "tiny"):
        assert paths_in(torch.load(path, map_location="cpu", weights_only=True)) == [], path.name
    shipped = load("tiny").config
    assert shipped.data.root is None and shipped.run_dir is None
    assert {**shipped, "run_dir": None, "data": {**shipped.data, "root": None}} == \
           {**run.config, "run_dir": None, "data": {**run.config.data, "root": None}}
