"""The ladder against HMC: each problem's runs hold every rung its task can fit, each posterior of a
run is scored on every set of the reference, and the table puts the chains' floor first."""
import pytest
import torch
from conftest import tiny_config
from test_reference import hand_made

from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.evaluation.hmc_distance.ladder import PROBLEMS, Row, markdown, run_dir, run_overrides, score_runs
from bnn_zoo.evaluation.hmc_distance.score import set_distance
from bnn_zoo.runs.plans.checks import check_fitted_kinds
from bnn_zoo.runs.plans.config import load_config, resolved
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.storage.loading import load
from bnn_zoo.runs.storage.trained import posteriors

TRAINING = {"toy_mlp": 6, "toy_sinusoid": 32, "mnist_mlp_hmc": 5000}  # the problems' training examples


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_each_problem_s_runs_hold_every_rung_its_task_can_fit(name):
    problem = PROBLEMS[name]
    plans = {run: Plan.of(resolved(load_config(problem.config, run_overrides(problem, run, "out"))))
             for run in problem.runs}
    for run, plan in plans.items():
        check_fitted_kinds(plan, TRAINING[name])  # none refused before its first epoch
        assert plan.run_dir == run_dir(problem, run, "out") == f"out/{problem.config}_{run}" and plan.overwrite
        assert plan.infer == "svi" and plan.categorical != problem.regression
    fitted = {"swag"} if problem.regression else {"laplace_last_layer", "laplace_kfac", "swag", "sgmcmc"}
    assert set(plans["ladder"].train.posteriors) == fitted and plans["ladder"].train.twin
    assert plans["ensemble"].train.members == 5 and plans["ensemble"].train.posteriors == ["swag"]  # MultiSWAG
    low = plans["lowrank"]
    assert (low.networks.model.guide, low.networks.model.guide_rank, low.train.twin_dropout) == ("lowrank", 10, 0.5)
    reference = Plan.of(resolved(load_config(problem.config)))  # the network and data the reference's chains see
    for plan in plans.values():
        assert (plan.networks.hidden, plan.data, plan.networks.model.prior) == (
            reference.networks.hidden, reference.data, reference.networks.model.prior)


def test_the_table_puts_the_chains_floor_first_and_each_rung_s_distance_beside_its_multiple():
    reference, _ = hand_made()
    reference.recipe["sets"]["test"]["hmc"] = {"accuracy": 0.9, "nll": 0.3}
    floor = reference.floor("test")
    rows = [Row("runs/x/mnist_mlp_hmc_ladder", "bayes", "mean-field VI",
                {"test": {"agreement": 0.95, "total_variation": 2 * floor["held_out_total_variation"], "times_floor": 2.0,
                          "accuracy": 0.91, "nll": 0.25}}, seconds=61.0)]
    lines = markdown(rows, reference).splitlines()
    assert lines[0] == "| posterior | accuracy | NLL | training s | test: agreement | test: TV (x floor) |"
    assert lines[2] == (f"| HMC, 2 chains (distances: chain to chain) | 90.00% | 0.3000 | 1 (all chains) | "
                        f"{floor['agreement']:.4f} | {floor['total_variation']:.4f} |")
    assert lines[3] == (f"| HMC: a chain to the others' pool (the floor) |  |  |  | {floor['held_out_agreement']:.4f} | "
                        f"{floor['held_out_total_variation']:.4f} |")
    assert lines[4] == (f"| mnist_mlp_hmc_ladder: mean-field VI | 91.00% | 0.2500 | 61 | 0.9500 | "
                        f"{2 * floor['held_out_total_variation']:.4f} (2.0x) |")
    reference.recipe["sets"]["test"]["floor"] = {k: v for k, v in floor.items() if not k.startswith("held_out_")}  # kept before
    assert markdown(rows, reference).splitlines()[3].startswith("| mnist_mlp_hmc_ladder: ")


def test_every_posterior_of_a_run_is_scored_on_every_set(tmp_path):
    from bnn_zoo.cli.train import train

    train(tiny_config("toy_mlp", **{"model.hidden": "[4]", "train.epochs": 20, "run_dir": str(tmp_path / "run"),
                                    "train.twin_dropout": 0.5}))
    reference, _ = hand_made(regression=True, n=30)
    rows = score_runs([str(tmp_path / "run")], reference, num_samples=8, limit=20, seed=2,
                      seconds={str(tmp_path / "run"): {"bayes": 4.0}})
    found = posteriors(load(tmp_path / "run"))
    assert [(row.kind, row.label, row.seconds) for row in rows] == [
        (kind, p.label, 4.0 if kind == "bayes" else None) for kind, p in found.items()]
    x, y = reference.x["test"][:20], reference.y["test"][:20]
    for row in rows:
        with seeded(2):
            outputs = found[row.kind].predict(x, 8)
        expected = set_distance(reference, "test", outputs, seed=2)
        assert row.sets["test"]["w1"] == pytest.approx(expected.w1) and row.sets["test"]["inputs"] == 20
        assert row.sets["test"]["times_floor"] == pytest.approx(expected.times_floor)
        assert row.sets["test"]["rmse"] == pytest.approx((outputs[..., 0].mean(0) - y).pow(2).mean().sqrt().item())
    assert "dropout" in rows[-1].label and len({r.sets["test"]["w1"] for r in rows}) == len(rows)
    assert torch.isfinite(torch.tensor([r.sets["test"]["nll"] for r in rows])).all()
