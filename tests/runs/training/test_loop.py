"""The one training loop's plan and early stopping, for both phases: the epochs train.steps makes,
evaluations about 50 times a run, the CPU threads it trains on, a stop after train.patience
evaluations without a better validation NLL with the best evaluation's weights kept, a resumed
run that stopped early, and an epoch's steps that read no tensor on the host."""
import itertools

import pytest
import torch
from conftest import tiny_config
from helpers import these_by_default
from torch.utils._python_dispatch import TorchDispatchMode

from bnn_zoo.cli.train import config_for_run, train
from bnn_zoo.data.sets import TensorSet
from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, TWIN_CHECKPOINT, read
from bnn_zoo.runs.plans.config import make_config, resolved
from bnn_zoo.runs.training.loop import evaluation_interval
from bnn_zoo.runs.training.phases import BayesPhase, TwinPhase
from bnn_zoo.runs.plans.plan import Plan

# a table of 100 rows: 64 to train on, 16 to validate (a fifth of the 80 left), 20 to test
ROWS, TRAIN_ROWS = 100, 64


def noise_table(path, rows=ROWS, seed=0):
    """Targets of pure noise: nothing to learn, so the validation NLL soon stops falling."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(rows, 2, generator=g), torch.randn(rows, generator=g)
    path.write_text("\n".join(["a,b,y", *(f"{a:.5f},{b:.5f},{t:.5f}" for (a, b), t in zip(x.tolist(), y.tolist()))]))
    return path


def table_config(tmp_path, **overrides):
    """A small table_mlp regression of the noise table, quick to train."""
    return resolved(make_config({"arch": "table_mlp", "run_dir": str(tmp_path / "run"),
                                 "model": {"likelihood": "gaussian", "hidden": [8]},
                                 "data": {"path": str(noise_table(tmp_path / "t.csv"))},
                                 "train": {"progress": False, "val_samples": 2, "test_samples": 4}},
                                [f"{k}={v}" for k, v in overrides.items()]))


def test_train_steps_plan_the_epochs_from_the_training_rows(tmp_path):
    # 64 rows in minibatches of 16 make 4 steps an epoch: 10 steps take 3 epochs (12 steps), both phases
    metrics = train(table_config(tmp_path, **{"train.epochs": "null", "train.steps": 10, "train.batch_size": 16}))
    for part in ("bayes", "twin"):
        assert [(h["epoch"], h["steps"]) for h in metrics[part]["history"]] == [(1, 4), (2, 4), (3, 4)]
    assert metrics["config"]["data"]["val_size"] == 16 and metrics["config"]["train"]["epochs"] is None
    cfg = table_config(tmp_path, **{"train.epochs": "null", "train.steps": 10, "train.batch_size": 16,
                                    "train.twin_epochs": 5})
    plan = Plan.of(cfg)
    assert BayesPhase(plan.networks, plan.train, TRAIN_ROWS, "cpu").epochs == 3
    assert TwinPhase(plan.networks, plan.train, TRAIN_ROWS, "cpu").epochs == 5
    cfg = table_config(tmp_path, **{"train.epochs": "null", "train.steps": 1, "train.batch_size": 1000})
    plan = Plan.of(cfg)
    assert BayesPhase(plan.networks, plan.train, 10 ** 6, "cpu").epochs == 1  # a plan shorter than an epoch trains one


def test_eval_every_null_evaluates_about_50_times_a_run():
    cfg = tiny_config("toy_mlp", **{"train.eval_every": "null"})
    assert [evaluation_interval(cfg.train, epochs) for epochs in (1, 30, 99, 100, 1000)] == [1, 1, 1, 2, 20]
    assert evaluation_interval(tiny_config("toy_mlp", **{"train.eval_every": 7}).train, 1000) == 7


def test_train_threads_sets_torch_s_threads_while_a_phase_trains(tmp_path, monkeypatch):
    seen, loss, before = set(), TwinPhase.loss, torch.get_num_threads()
    monkeypatch.setattr(TwinPhase, "loss", lambda self, x, y: seen.add(torch.get_num_threads()) or loss(self, x, y))
    torch.set_num_threads(2)
    try:
        train(table_config(tmp_path, **{"train.epochs": 2, "train.threads": 1}))
        assert seen == {1} and torch.get_num_threads() == 2  # and back after
    finally:
        torch.set_num_threads(before)


# the validation NLL each evaluation reports: best at the third, then four that are not better
SCRIPTED = [3.0, 2.0, 1.0, 1.5, 1.0, 2.5, 1.2, 0.5]


@pytest.mark.parametrize("part", ["bayes", "twin"])
def test_patience_stops_after_evaluations_without_a_better_nll_and_keeps_the_best(part, tmp_path, monkeypatch):
    """Both phases stop in the one loop: after train.patience=4 evaluations no better than the third
    (an equal NLL is no better), with the third's weights in the checkpoint and the test figures."""
    phase = {"bayes": BayesPhase, "twin": TwinPhase}[part]
    nlls, seen, original = iter(SCRIPTED), [], phase.metrics

    def scripted(self, data, samples):  # the weights each evaluation sees, and the NLL it reports
        seen.append({k: v.clone() for k, v in self.state()[{"bayes": "guide", "twin": "net"}[part]].items()})
        figures = original(self, data, samples)
        return {**figures, "nll": next(nlls)} if len(data) == 16 else figures  # validation's, not the test's
    monkeypatch.setattr(phase, "metrics", scripted)
    metrics = train(table_config(tmp_path, **{"train.epochs": 20, "train.patience": 4, "train.lr": 0.05}))
    history = metrics[part]["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3, 4, 5, 6, 7] and metrics[part]["best_epoch"] == 3
    stored = read(tmp_path / "run" / {"bayes": CHECKPOINT, "twin": TWIN_CHECKPOINT}[part])
    kept = stored["guide" if part == "bayes" else "net"]
    assert stored["epoch"] == 3 and [h["epoch"] for h in stored["history"]] == [1, 2, 3]
    assert all(torch.equal(kept[k], seen[2][k]) for k in kept)  # the third evaluation's weights
    assert not all(torch.equal(kept[k], seen[6][k]) for k in kept)  # not the last's
    assert all(torch.equal(kept[k], seen[7][k]) for k in kept)  # the test ran on the kept weights


def test_without_patience_the_checkpoint_follows_the_run(tmp_path, monkeypatch):
    nlls, original = itertools.cycle(SCRIPTED), TwinPhase.metrics
    monkeypatch.setattr(TwinPhase, "metrics", lambda self, data, samples: {**original(self, data, samples),
                                                                           "nll": next(nlls)})
    metrics = train(table_config(tmp_path, **{"train.epochs": 8}))
    assert len(metrics["twin"]["history"]) == 8 and "best_epoch" not in metrics["twin"]
    assert read(tmp_path / "run" / TWIN_CHECKPOINT)["epoch"] == 8


@pytest.mark.slow
def test_a_run_stopped_early_resumes_from_its_best_evaluation_to_the_same_end(tmp_path):
    """Resumed as it was, it replays from the best evaluation (the checkpoint's epoch, weights,
    optimizer and random state) to the same stop and the same figures; with more patience it
    goes on from there."""
    metrics = train(table_config(tmp_path, **{"train.epochs": 200, "train.patience": 3, "train.lr": 0.05}))
    best, stopped = metrics["bayes"]["best_epoch"], len(metrics["bayes"]["history"])
    assert stopped < 200 and stopped == best + 3  # nothing to learn: it stopped early
    again = train(config_for_run(None, [f"resume={tmp_path / 'run'}"]))
    for part in ("bayes", "twin"):
        figures = {k: v for k, v in metrics[part].items() if k.startswith("test/") or k == "best_epoch"}
        assert {k: again[part][k] for k in figures} == figures
        assert [(h["loss"], h["val/nll"]) for h in again[part]["history"]] == \
            [(h["loss"], h["val/nll"]) for h in metrics[part]["history"]]
    longer = train(config_for_run(None, [f"resume={tmp_path / 'run'}", "train.patience=6"]))
    assert longer["bayes"]["history"][:best] == metrics["bayes"]["history"][:best]
    assert len(longer["bayes"]["history"]) >= min(200, best + 6)


class NoHostReads(TorchDispatchMode):
    """Fails on any read of a tensor's value on the host (``.item()``, ``float()``, a branch on a
    tensor, ``.tolist()``: each is ``aten._local_scalar_dense``, a wait for the GPU there)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            raise AssertionError("a tensor's value was read on the host between two steps of an epoch")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("capture", these_by_default(["eager", "trace", "compile"], kept=["eager", "trace"]))
def test_nothing_reads_a_tensor_on_the_host_between_the_steps_of_an_epoch(capture, tmp_path, monkeypatch, capsys):
    """The real loop (both phases, 8 steps an epoch) with every epoch after the first (where the step
    is captured and compiled) run under a dispatch mode that fails on a host read: the loop, the
    captured step with Adam's update and the twin's plain step read nothing until the epoch ends,
    where its figures are read once. Pyro's own step (eager) reads nothing either."""
    batches, watched = TensorSet.batches, []

    def watching(self, *args, **kwargs):
        watched.append(len(watched) % 3 != 0)  # 3 epochs a phase: not the first
        if not watched[-1]:
            yield from batches(self, *args, **kwargs)
            return
        with NoHostReads():
            yield from batches(self, *args, **kwargs)

    monkeypatch.setattr(TensorSet, "batches", watching)
    metrics = train(table_config(tmp_path, **{"train.epochs": 3, "train.batch_size": 8, "train.capture": capture}))
    assert [h["steps"] for h in metrics["bayes"]["history"] + metrics["twin"]["history"]] == [8] * 6
    assert watched == [False, True, True] * 2
    log = capsys.readouterr().out
    assert "runs uncompiled" not in log and "runs uncaptured" not in log
    assert f"train.capture={capture}" in log


def test_each_phase_trains_on_its_minibatches_augmented_with_the_epoch_s_draws(shared_data, tmp_path, monkeypatch):
    """train with an augment section: every step of both phases gets its minibatch as the loop sliced
    it, then augmented by the run's Augment with its epoch's generator (one per epoch, in step order:
    what a resumed run and every rank draw alike); validation and test read the images as they are."""
    from bnn_zoo.data.shifted.augment import Augment, AugmentConfig
    from bnn_zoo.data.config import DataConfig

    sliced, seen, recorded = [], [], TensorSet.batches

    def batches(self, batch_size, shuffle=True, generator=None):
        for xb, yb in recorded(self, batch_size, shuffle, generator):
            sliced.append(xb.clone())
            yield xb, yb

    monkeypatch.setattr(TensorSet, "batches", batches)
    for phase in (BayesPhase, TwinPhase):
        monkeypatch.setattr(phase, "loss", lambda self, x, y, loss=phase.loss: seen.append(x.clone()) or loss(self, x, y))
    cfg = tiny_config("lenet", **{"run_dir": str(tmp_path / "run"), "data.root": str(shared_data), "train.epochs": 2,
                                  "train.batch_size": 128, "train.capture": "eager", "augment.rotate": 20,
                                  "augment.noise": 0.1, "abstention.certify": "false", "seed": 4})
    train(cfg)
    assert len(sliced) == len(seen) == 2 * 2 * 2  # two phases, two epochs, two minibatches of the 256 images
    augment = Augment.of(AugmentConfig(rotate=20.0, noise=0.1), DataConfig(name="mnist"), seed=4)
    for first in range(0, 8, 2):  # an epoch's two steps draw from its generator in turn
        draws = augment.generator(first // 2 % 2)
        for i in (first, first + 1):
            assert torch.equal(seen[i], augment(sliced[i], draws))


def test_the_outliers_term_enters_each_phase_s_loss_with_its_weight_once_per_training_example():
    """With the minibatch's outliers, a phase's loss grows by the section's weight times minus the mean
    log-probability of the classes at them, taken as many times as the training set has examples
    (the Bayesian network's: at its drawn weights, the KL as it was), the twin's per example; worked
    by hand on a small MLP."""
    import pyro
    import pyro.poutine as poutine

    cfg = tiny_config("mnist_mlp", **{"model.hidden": "[8]", "outliers.noise": 0.5, "outliers.weight": 0.3,
                                      "train.capture": "eager"})
    plan, num_data = Plan.of(cfg), 1000
    g = torch.Generator().manual_seed(5)
    x, y, outliers = torch.randn(6, 1, 28, 28, generator=g), torch.arange(6), torch.randn(3, 1, 28, 28, generator=g)
    with pyro.settings.context(module_local_params=True):
        bayes = BayesPhase(plan.networks, plan.train, num_data, "cpu", outliers=plan.outliers)
        losses = []
        for extra in ((), (outliers,)):
            pyro.set_rng_seed(1)
            losses.append(bayes.loss(x, y, *extra))
        pyro.set_rng_seed(1)
        drawn = bayes.guide(x)  # the guide draws first in the ELBO: the weights both losses drew
        trace = poutine.trace(poutine.condition(bayes.model, drawn)).get_trace(x, y, outliers=outliers,
                                                                              outlier_weight=0.3)
    logits = bayes.model.forward_with({name[len("net."):]: w for name, w in drawn.items()}, outliers)
    by_hand = -0.3 * num_data / 3 * logits.log_softmax(-1).mean(-1).sum()
    assert (losses[1] - losses[0]).item() == pytest.approx(by_hand.item(), rel=1e-4)
    assert trace.nodes["no_class"]["scale"] == pytest.approx(num_data / 3)  # the plate of num_data over the 3
    twin = TwinPhase(plan.networks, plan.train, num_data, "cpu", outliers=plan.outliers)
    twin_by_hand = -0.3 * twin.twin.net(outliers).log_softmax(-1).mean(-1).mean()
    assert (twin.loss(x, y, outliers) - twin.loss(x, y)).item() == pytest.approx(twin_by_hand.item(), rel=1e-4)


def test_each_phase_trains_with_its_minibatch_s_outliers_and_the_run_records_and_reports_them(
        shared_data, tmp_path, monkeypatch, capsys):
    """train with an outliers section: every step of both phases gets, beside its minibatch as
    augmented, the outliers the run's Outliers made from it with its epoch's generator; the run's
    config holds the section, its log says so, and evaluate reports the OOD sets its kinds cover apart."""
    from bnn_zoo.data.config import DataConfig
    from bnn_zoo.data.shifted.augment import Augment, AugmentConfig
    from bnn_zoo.data.shifted.outliers import Outliers, OutliersConfig
    from bnn_zoo.evaluation.evaluate import evaluate_run
    from bnn_zoo.evaluation.summary import summary

    sliced, seen, recorded = [], [], TensorSet.batches

    def batches(self, batch_size, shuffle=True, generator=None):
        for xb, yb in recorded(self, batch_size, shuffle, generator):
            sliced.append((xb.clone(), yb.clone()))
            yield xb, yb

    monkeypatch.setattr(TensorSet, "batches", batches)
    for phase in (BayesPhase, TwinPhase):
        monkeypatch.setattr(phase, "loss", lambda self, x, y, outliers=None, loss=phase.loss:
                            seen.append(outliers) or loss(self, x, y, outliers))
    run = tmp_path / "run"
    train(tiny_config("lenet", **{"run_dir": str(run), "data.root": str(shared_data), "train.epochs": 2,
                                  "train.batch_size": 128, "train.capture": "eager", "outliers.noise": 0.25,
                                  "outliers.mixed": 0.125, "augment.rotate": 20, "abstention.certify": "false",
                                  "seed": 4}))
    assert "outliers observed as no class in each minibatch (noise 0.25, mixed 0.125, weight 0.5)" in capsys.readouterr().out
    assert len(sliced) == len(seen) == 2 * 2 * 2  # two phases, two epochs, two minibatches of the 256 images
    outliers = Outliers.of(OutliersConfig(noise=0.25, mixed=0.125), DataConfig(name="mnist"), seed=4)
    augment = Augment.of(AugmentConfig(rotate=20.0), DataConfig(name="mnist"), seed=4)
    for first in range(0, 8, 2):  # an epoch's two steps draw from its generators in turn
        draws, turned = outliers.generator(first // 2 % 2), augment.generator(first // 2 % 2)
        for i in (first, first + 1):
            x, y = sliced[i]
            assert len(seen[i]) == 32 + 16 and torch.equal(seen[i], outliers(augment(x, turned), y, draws))
    assert "  noise: 0.25\n  scrambled: null\n  mixed: 0.125\n" in (run / "config.yaml").read_text()
    evaluation = evaluate_run(run, 2, ood=("noise", "overlaid", "constant"), ood_size=20, test_size=50, shift=(),
                              references=False)
    assert evaluation.ood_seen_in_training == ("noise", "overlaid")
    titles = [line.split("  ")[0] for line in summary(evaluation).splitlines() if line.startswith("OOD set")]
    assert titles == ["OOD set noise (seen in training: outliers), 20 images",
                      "OOD set overlaid (seen in training: outliers), 20 images", "OOD set constant, 20 images"]


def test_each_member_of_an_ensemble_augments_and_makes_outliers_from_its_own_seed(shared_data, tmp_path, monkeypatch):
    """The members of an ensemble draw their augmentation and outliers as their weights: from the run's
    seed + their index (member 0 the run's own), so no two members see the same digits and outliers."""
    from bnn_zoo.data.shifted.augment import Augment
    from bnn_zoo.data.shifted.outliers import Outliers
    seeds = []
    for made in (Augment, Outliers):
        monkeypatch.setattr(made, "of", classmethod(lambda cls, section, data, seed, of=made.of.__func__:
                                                    seeds.append((cls.__name__, seed)) or of(cls, section, data, seed)))
    train(tiny_config("lenet", **{"run_dir": str(tmp_path / "run"), "data.root": str(shared_data), "train.epochs": 1,
                                  "data.train_limit": 128, "train.members": 3, "train.twin": "false", "seed": 7,
                                  "outliers.noise": 0.25, "augment.rotate": 20, "abstention.certify": "false"}))
    assert seeds == [("Augment", 7), ("Outliers", 7), ("Augment", 8), ("Outliers", 8), ("Augment", 9), ("Outliers", 9)]
