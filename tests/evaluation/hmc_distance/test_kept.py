"""An HMC reference's chains kept as each one ends: read back as written, named by the recipe that
drew them, and refused in one line where altered."""
import numpy as np
import pytest
import torch
from conftest import tiny_config

from bnn_zoo.core.errors import CheckpointError
from bnn_zoo.core.inference.chains import Chain
from bnn_zoo.data.sets import load_splits
from bnn_zoo.evaluation.hmc_distance.kept import KeptChains, recipe_key
from bnn_zoo.runs.plans.plan import Plan

SAMPLES = {"net.layers.0.weight": torch.randn(4, 3, 1), "net.layers.0.bias": torch.randn(4, 3)}
RUN = Chain(seed=7, seconds=1.5, acceptance_rate=0.75, divergences=2)


def _plan(**overrides):
    plan = Plan.of(tiny_config("toy_mlp", **{"model.hidden": "[3]", **overrides}))
    return plan, load_splits(plan.data, plan.categorical).train


def test_a_kept_chain_reads_back_as_written_and_only_those_kept_are_read(tmp_path):
    kept = KeptChains(tmp_path / "chains", "abc")
    assert kept.read(3) == {}
    kept.write(1, SAMPLES, RUN)
    (samples, run), = kept.read(3).values()
    assert list(kept.read(3)) == [1] and run == RUN and kept.read(1) == {}
    assert samples.keys() == SAMPLES.keys() and all(torch.equal(samples[k], SAMPLES[k]) for k in SAMPLES)
    assert KeptChains(tmp_path / "chains", "abd").read(3) == {}  # another recipe's: another name


def test_the_recipe_key_changes_with_what_the_samples_depend_on():
    plan, train = _plan()
    key = recipe_key(plan, train, 500, 300, 7)
    assert recipe_key(*_plan(), 500, 300, 7) == key and len(key) == 16
    other_data = type(train)(train.x + 1, train.y)
    assert len({key, recipe_key(plan, train, 501, 300, 7), recipe_key(plan, train, 500, 301, 7),
                recipe_key(plan, train, 500, 300, 8), recipe_key(plan, other_data, 500, 300, 7),
                recipe_key(*_plan(**{"model.prior_scale": 2.0}), 500, 300, 7),
                recipe_key(*_plan(seed=1), 500, 300, 7)}) == 7


def _alter(path):
    with np.load(path) as found:
        arrays = {name: found[name] for name in found.files}
    arrays["net.layers.0.bias"] = arrays["net.layers.0.bias"] + 1
    np.savez(path, **arrays)


@pytest.mark.parametrize("damage, message", [
    (_alter, "is not the kept chain its digest describes (altered or damaged): delete it to draw that chain again"),
    (lambda path: path.write_bytes(b"not a zip"), "is no kept chain numpy can read"),
])
def test_an_altered_or_damaged_chain_is_refused_in_one_line(tmp_path, damage, message):
    kept = KeptChains(tmp_path, "abc")
    kept.write(0, SAMPLES, RUN)
    damage(kept.path(0))
    with pytest.raises(CheckpointError) as refused:
        kept.read(1)
    assert message in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("key, c", [("xyz", 0), ("abc", 1)], ids=["another recipe's", "another chain's"])
def test_a_chain_renamed_to_another_recipe_or_chain_is_refused(tmp_path, key, c):
    kept = KeptChains(tmp_path, "abc")
    kept.write(0, SAMPLES, RUN)
    other = KeptChains(tmp_path, key)
    kept.path(0).rename(other.path(c))
    with pytest.raises(CheckpointError) as refused:
        other.read(2)
    assert str(refused.value) == (f"{other.path(c)} is another recipe's chain or another chain than its name says: "
                                  "delete it to draw that chain again")


def test_a_kept_chain_given_as_a_reference_is_refused_in_one_line(tmp_path):
    from bnn_zoo.evaluation.hmc_distance.reference import Reference

    kept = KeptChains(tmp_path, "abc")
    kept.write(0, SAMPLES, RUN)
    with pytest.raises(CheckpointError) as refused:
        Reference.read(kept.path(0))
    assert str(refused.value) == (f"{kept.path(0)} is no HMC reference (it holds no recipe): give the .npz that python "
                                  "scripts/hmc_reference.py CONFIG --out FILE.npz wrote")
