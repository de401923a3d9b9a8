import pyro
import pytest
import torch
from conftest import SMALL, ZOO, example_batch

from bnn_zoo import build, load, predict
from bnn_zoo.core.networks.likelihoods import Categorical
from bnn_zoo.core.networks.pruning import posterior_loc_scale, prune_masks, weight_scores
from bnn_zoo.data.sets import load_torchvision, normalize


def _trained_like(arch):
    """A fresh pair whose posterior sds vary, as after training."""
    model, guide = build(arch, num_data=100, hidden=SMALL[arch])
    x, y = example_batch(arch)
    guide(x, y)
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return model, guide, x


@pytest.mark.parametrize("arch", ZOO)
def test_masks_drop_exactly_the_lowest_scores(arch):
    _, guide, _ = _trained_like(arch)
    for by in ("snr", "magnitude"):
        scores = weight_scores(guide, by)
        flat = torch.cat([s.flatten() for s in scores.values()])
        keep = prune_masks(guide, 0.3, by)
        kept = torch.cat([k.flatten() for k in keep.values()])
        assert (~kept).sum() == round(0.3 * len(flat))
        assert flat[~kept].max() <= flat[kept].min()
    loc, scale = posterior_loc_scale(guide)[next(iter(scores))]
    assert torch.equal(weight_scores(guide, "snr")[next(iter(scores))], loc.abs() / scale)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        prune_masks(guide, 1.5)
    with pytest.raises(ValueError, match="unknown pruning score"):
        prune_masks(guide, 0.5, by="random")


@pytest.mark.parametrize("arch", ZOO)
def test_pruning_nothing_leaves_predictions_unchanged(arch):
    model, guide, x = _trained_like(arch)
    pyro.set_rng_seed(3)
    plain = predict(model, guide, x, 4)
    pyro.set_rng_seed(3)
    assert torch.equal(predict(model, guide, x, 4, keep=prune_masks(guide, 0.0)), plain)
    pyro.set_rng_seed(3)
    assert not torch.equal(predict(model, guide, x, 4, keep=prune_masks(guide, 0.5)), plain)


def test_pruning_everything_gives_chance_accuracy(tiny_run, shared_data):
    trained = load(tiny_run)
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    x, labels = normalize(images[:1000]), labels[:1000]
    full = Categorical().metrics(predict(trained.model, trained.guide, x, 5), labels)
    probs = predict(trained.model, trained.guide, x, 5, keep=prune_masks(trained.guide, 1.0))
    assert torch.allclose(probs, torch.full_like(probs, 0.1))  # every logit is zero
    pruned = Categorical().metrics(probs, labels)
    assert full["accuracy"] > 0.3 and 0.05 < pruned["accuracy"] < 0.15  # a 1-epoch model, against chance


def test_pruning_needs_a_mean_field_posterior():
    _, guide = build("toy_mlp", hidden=[4], guide="lowrank")
    guide(torch.zeros(2, 1))
    with pytest.raises(ValueError, match="mean-field posterior.*AutoLowRankMultivariateNormal"):
        prune_masks(guide, 0.5)
