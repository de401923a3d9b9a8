import pyro
import pytest
import torch
from conftest import ZOO, example_batch, tiny_config
from pyro.infer import Trace_ELBO

from bnn_zoo import load, predict
from bnn_zoo.checkpoint import CHECKPOINT, TWIN_CHECKPOINT, build_from_config, save_bayes, save_twin, twin_from_config
from bnn_zoo.train import make_scheduler
from bnn_zoo.zoo import hyperparameters

LEARNED = {"model.prior": "scale_mixture", "model.learn_prior": True, "model.noise": "homoscedastic"}


@pytest.mark.parametrize("options", [{}, LEARNED], ids=["default", "learned_mixture"])
@pytest.mark.parametrize("arch", ZOO)
def test_checkpoint_round_trip_gives_identical_predictions(arch, options, tmp_path):
    cfg = tiny_config(arch, **options)
    model, guide = build_from_config(cfg, num_data=64)
    optimizer = torch.optim.Adam([*guide.parameters(), *model.parameters()], lr=1e-2)
    x, y = example_batch(arch, 16)
    loss_fn = Trace_ELBO()(model, guide)
    for _ in range(3):
        optimizer.zero_grad()
        loss_fn(x, y).backward()
        optimizer.step()
    save_bayes(tmp_path / CHECKPOINT, cfg, 3, 64, model, guide, optimizer,
               make_scheduler(optimizer, cfg.train, 3), [])
    twin = twin_from_config(cfg)
    save_twin(tmp_path / TWIN_CHECKPOINT, cfg, 1, twin, optimizer,
              make_scheduler(optimizer, cfg.train, 3), [])

    # weights_only: plain tensors and containers, no pickled code
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["epoch"] == 3
    trained = load(tmp_path)
    assert trained.model.num_data == 64 and trained.epoch == 3
    assert hyperparameters(trained.model) == hyperparameters(model)
    if options:  # learned hyperparameters moved and came back
        assert hyperparameters(model)["prior/pi"] != 0.25
    pyro.set_rng_seed(7)
    before = predict(model, guide, x, num_samples=5)
    pyro.set_rng_seed(7)
    after = predict(trained.model, trained.guide, x, num_samples=5)
    assert torch.equal(before, after)
    assert torch.equal(twin(x), trained.twin(x))


def test_load_without_a_run_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*python -m bnn_zoo.train"):
        load(tmp_path)
