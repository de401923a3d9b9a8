"""A run's plan (bnn_zoo.runs.plans.plan): the keys as long as a run's inputs are wide (a table's columns,
their means and scales) travel beside the config, typed, never through its merges."""
import json

from omegaconf import DictConfig, OmegaConf

from bnn_zoo.cli.predict import main as predict_main
from bnn_zoo.cli.train import main as train_main
from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, read
from bnn_zoo.runs.storage.loading import load

COLUMNS = 300


def longest_list(value) -> int:
    """The longest list anywhere in a config layer (a dict, a DictConfig)."""
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=False)
    if isinstance(value, dict):
        return max(map(longest_list, value.values()), default=0)
    if isinstance(value, list):
        return max([len(value), *map(longest_list, value)])
    return 0


def test_a_wide_table_s_columns_and_statistics_stay_out_of_the_config_s_merges(tmp_path, monkeypatch, capsys):
    """Issue 47: a CSV of 10,000 columns trained in 65 s and each predict took 56 s (4 columns: 41 s):
    its features, means and scales were OmegaConf lists, merged and checked item by item at every
    config built. They are held beside the config: no merge takes them, in training, a resume or
    predict; the checkpoint and metrics.json store them; predict reads the rows by them."""
    names = [f"f{i}" for i in range(COLUMNS)]
    rows = [[round((i * 7 + j) % 11 / 10, 1) for j in range(COLUMNS)] + [i % 2] for i in range(40)]
    (tmp_path / "wide.csv").write_text("\n".join(",".join(map(str, r)) for r in [[*names, "label"], *rows]) + "\n")
    (tmp_path / "ask.csv").write_text("\n".join(",".join(map(str, r)) for r in [names[::-1], rows[0][:COLUMNS][::-1]]))
    merged, merge = [], OmegaConf.merge
    monkeypatch.setattr(OmegaConf, "merge", lambda *layers: merged.append(max(map(longest_list, layers))) or
                        merge(*layers))
    run = tmp_path / "run"
    common = ["train.patience=null", "train.progress=false", "device=cpu", "train.test_samples=4",
              "abstention.samples=4", "abstention.risk=0.4"]
    assert train_main(["table_classification", f"data.path={tmp_path / 'wide.csv'}", f"run_dir={run}",
                       "train.steps=2", *common]) == 0
    assert train_main([f"resume={run}", "train.steps=4", *common]) == 0  # its data checked against the stored run
    capsys.readouterr()
    assert predict_main([str(run), str(tmp_path / "ask.csv"), "--json", "--samples", "4", "--device", "cpu"]) == 0
    assert len(json.loads(capsys.readouterr().out)["answers"]) == 1  # read by name, in another column order
    assert merged and max(merged) < COLUMNS  # every merge, training to predict, took none of the columns
    stored = read(run / CHECKPOINT)["config"]["data"]
    assert stored["features"] == names and len(stored["mean"]) == len(stored["std"]) == COLUMNS
    assert json.loads((run / "metrics.json").read_text())["config"]["data"]["features"] == names
    trained = load(run)
    assert trained.config.data.features is None and trained.data.features == names  # beside the config, typed
    assert trained.data.mean == stored["mean"]
