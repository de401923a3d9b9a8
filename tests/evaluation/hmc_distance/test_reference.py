"""A reference file: written and read back without pickle, its digest checked (an altered or damaged
file refused in one line), found by a shipped name, its image sets drawn again and checked."""
import zipfile

import numpy as np
import pytest
import torch

from bnn_zoo.core.errors import CheckpointError, DataError
from bnn_zoo.evaluation.hmc_distance.inputs import drawn_again, image_sets
from bnn_zoo.evaluation.hmc_distance.metrics import chain_floor
from bnn_zoo.evaluation.hmc_distance.reference import Reference


def hand_made(regression: bool = False, n: int = 300, seed: int = 0) -> tuple[Reference, torch.Tensor]:
    """A reference of two chains of 25 samples each, and their per-sample predictive: logits
    [50, N, 10] made into probabilities (classification), or draws [50, N] of y (regression)."""
    g = torch.Generator().manual_seed(seed)
    if regression:
        samples = torch.randn(50, n, generator=g) + torch.linspace(-3, 3, n)
        predictive, per_chain = samples, [samples[:25], samples[25:]]
    else:
        samples = (3 * torch.randn(1, n, 10, generator=g) + torch.randn(50, n, 10, generator=g)).softmax(-1)
        predictive, per_chain = samples.mean(0), [samples[:25].mean(0), samples[25:].mean(0)]
    test = {"spec": {"kind": "toy_test", "data": "polynomial"}, "inputs": n, "max_r_hat": 1.01, "min_ess": 40.0,
            "floor": chain_floor(per_chain, regression), "hmc": {}}
    recipe = {"task": "regression" if regression else "classification", "chains": [{"seed": 0}, {"seed": 1}],
              "seconds": 1.0, "sets": {"test": test}}
    x = {"test": torch.linspace(-2, 2, n).unsqueeze(-1)}
    return Reference("hand_made", recipe, {"test": predictive}, x, {"test": torch.arange(n) % 10}), samples


@pytest.mark.parametrize("regression", [False, True])
def test_a_reference_reads_back_as_written(regression, tmp_path):
    reference, _ = hand_made(regression)
    reference.write(tmp_path / "mine.npz")
    found = Reference.read(tmp_path / "mine.npz")
    assert found.name == "mine" and found.recipe == reference.recipe and found.regression == regression
    assert torch.equal(found.predictive["test"], reference.predictive["test"].half().float())  # 3 digits kept
    assert torch.equal(found.inputs("test"), reference.x["test"]) and torch.equal(found.y["test"], reference.y["test"])
    assert found.floor("test") == reference.recipe["sets"]["test"]["floor"]
    with pytest.raises(ValueError, match="holds no set 'fog'; its sets: test"):
        found.floor("fog")


def _rewrite(path, change) -> None:
    """The .npz at ``path`` with one of its arrays changed, its digest kept."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {name: f[name] for name in f.files}
    change(arrays)
    np.savez_compressed(path, **arrays)


@pytest.mark.parametrize("change", [
    lambda a: a["test.predictive"].__setitem__((0, 0), a["test.predictive"][0, 0] + np.float16(0.01)),
    lambda a: a.__setitem__("recipe", np.frombuffer(a["recipe"].tobytes().replace(b'"seconds": 1.0', b'"seconds": 2.0'),
                                                    np.uint8)),
    lambda a: a.pop("test.y"),
    lambda a: a.pop("digest")], ids=["a probability", "the recipe", "an array gone", "the digest gone"])
def test_an_altered_reference_is_refused_in_one_line(change, tmp_path):
    path = tmp_path / "mine.npz"
    hand_made()[0].write(path)
    _rewrite(path, change)
    with pytest.raises(CheckpointError) as refused:
        Reference.read(path)
    assert str(refused.value) == (f"{path} is not the HMC reference its digest describes (altered or damaged): build "
                                  "it again (scripts/hmc_reference.py) or install bnn-zoo again")


def test_a_damaged_file_or_one_that_needs_pickle_is_refused_in_one_line(tmp_path):
    path = tmp_path / "mine.npz"
    hand_made()[0].write(path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 64] = bytes(64)  # a stretch of the file zeroed
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"^\S+mine.npz is no(t the)? HMC reference") as refused:
        Reference.read(path)
    assert "\n" not in str(refused.value)
    np.savez(path, recipe=np.array([{"task": "classification"}], dtype=object))  # an object array: pickle
    with pytest.raises(CheckpointError, match="is no HMC reference numpy can read .*allow_pickle"):
        Reference.read(path)
    path.write_text("not a zip")
    with pytest.raises(CheckpointError, match="is no HMC reference numpy can read"):
        Reference.read(path)
    assert not zipfile.is_zipfile(path)


def test_an_unknown_name_says_what_can_be_given():
    with pytest.raises(CheckpointError) as refused:
        Reference.read("nope")
    assert str(refused.value) == ("no HMC reference 'nope': give a shipped one (mnist_mlp_hmc, toy_mlp_hmc, toy_sinusoid_hmc), or the "
                                  "path of a .npz that python scripts/hmc_reference.py CONFIG --out FILE.npz wrote")


def test_image_sets_are_drawn_again_and_refused_where_the_pixels_differ(shared_data):
    sets = image_sets("mnist", str(shared_data), test_size=20, ood="notmnist", ood_size=10, corruption="fog",
                      shift_size=10)
    assert [(s.name, len(s.x)) for s in sets] == [("test", 20), ("notmnist", 10), ("fog", 10)]
    assert sets[1].y is None and sets[0].x.shape == (20, 1, 28, 28)
    for found in sets:
        x, y = drawn_again(found.name, found.spec, str(shared_data))
        assert torch.equal(x, found.x) and (y is None or torch.equal(y, found.y))
    other = {**sets[2].spec, "seed": 1}  # other images, corrupted with other draws: not the reference's
    with pytest.raises(DataError, match="the fog images found here .* are not the ones the reference was drawn on"):
        drawn_again("fog", other, str(shared_data))


def test_a_reference_of_mnist_s_test_set_and_two_shifted_sets_stays_under_a_megabyte(tmp_path):
    """The competition's 10,000 x 10 probabilities, with 2,000 notMNIST and 2,000 corrupted images'
    beside them and the labels, as the reduced MNIST MLP's reference holds them."""
    g = torch.Generator().manual_seed(0)
    sizes = {"test": 10000, "notmnist": 2000, "fog": 2000}
    probs = {name: (4 * torch.randn(n, 10, generator=g)).softmax(-1) for name, n in sizes.items()}
    labels = {name: torch.randint(0, 10, (n,), generator=g) for name, n in sizes.items() if name != "notmnist"}
    sets = {name: {"spec": {}, "inputs": n, "floor": {}, "hmc": {}} for name, n in sizes.items()}
    Reference("big", {"task": "classification", "sets": sets}, probs, {}, labels).write(tmp_path / "big.npz")
    assert (tmp_path / "big.npz").stat().st_size < 1e6
    assert torch.equal(Reference.read(tmp_path / "big.npz").y["fog"], labels["fog"])


@pytest.mark.parametrize("name", ["mnist_mlp_hmc", "toy_mlp_hmc", "toy_sinusoid_hmc"])
def test_each_shipped_reference_reads_under_a_megabyte_with_both_floors_and_scores_itself_at_zero(name):
    """What ships: found by name, its digest checked on reading, under 1 MB, every set's floors (chain to
    chain, and a chain to the others' pool, which sits nearer: the pool is between its chains), and its
    own predictive scored against it at agreement 1 and distance 0."""
    from bnn_zoo.evaluation.hmc_distance.reference import shipped_references
    from bnn_zoo.evaluation.hmc_distance.score import set_distance
    from bnn_zoo.runs.storage.loading import SHIPPED

    assert name in shipped_references() and (SHIPPED / f"{name}.npz").stat().st_size < 1e6
    reference = Reference.read(name)
    assert len(reference.recipe["chains"]) == 4
    for set_name in reference.sets:
        floor = reference.floor(set_name)
        metric = "w1" if reference.regression else "total_variation"
        assert 0 < floor[f"held_out_{metric}"] <= floor[metric]
        own = reference.predictive[set_name]
        found = set_distance(reference, set_name, own if reference.regression else own.unsqueeze(0))
        assert found.times_floor == 0.0 and (reference.regression or found.agreement == 1.0)
    if name == "mnist_mlp_hmc":  # the competition's published form: MNIST's whole test set, 10 classes
        assert reference.predictive["test"].shape == (10000, 10) and reference.sets == ["test", "notmnist", "fog"]
        assert torch.allclose(reference.predictive["test"].sum(-1), torch.ones(10000), atol=1e-2)
