"""Train a Bayesian network (SVI with the guide its config names) and its deterministic twin from a
config; with ``train.members=K`` an ensemble of K, with ``infer=nuts`` also an HMC posterior.

How a run flows: the command line's config (``bnn_zoo.runs.config``, or a stored one for ``resume=``:
``bnn_zoo.runs.resume``) names a ``Run`` directory (``bnn_zoo.runs.run_dir``), which this process claims; each
phase (``bnn_zoo.runs.phases``: the Bayesian network, its twin; an ensemble's members are the same
phases in runs of their own, RUN_DIR/members/N) trains in the one loop (``bnn_zoo.runs.loop``) that
validates, checkpoints and resumes; then NUTS, the ensemble's test figures, the certified rules
(``bnn_zoo.cli.certify``), the toy plot, metrics.json and training.png.

Usage::

    python -m bnn_zoo.train                                    # toy_mlp
    python -m bnn_zoo.train mnist_mlp train.epochs=3 data.root=DIR run_dir=runs/x
    python -m bnn_zoo.train toy_mlp infer=nuts                 # and NUTS, plotted beside VI
    python -m bnn_zoo.train resume=runs/x train.epochs=30      # continue a run, on a longer plan
    python -m bnn_zoo.train mnist_mlp run_dir=runs/x overwrite=true   # replace the run in runs/x
    python -m bnn_zoo.train lenet data.name=folder data.path=DIR   # your own images, a subfolder per class
"""
from __future__ import annotations

import json
import sys
import uuid
from contextlib import ExitStack, nullcontext

import pyro
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from . import options as cli
from ..evaluation import plots
from ..evaluation.baseline import mark_no_better
from .certify import certify_run, summary
from ..core.captured_step import DESCRIBED
from ..runs.checkpoint import config_dict, replace_config, save_atomic
from ..runs.config import make_config, resolved
from ..runs.checks import check_network_fits, pick_device, recipe
from ..data.sets import TOY_FUNCTIONS, Splits, load_splits, with_profile
from ..runs.ranks import Ranks
from ..runs.factory import build_from_config
from ..data.inputs import class_names
from ..runs.trained import posteriors
from ..runs.loop import format_figures, prefixed, train_phase
from ..core.nuts import nuts_posterior
from ..core.network_names import imports_beside_you
from ..data.own import OWN_DATA
from ..runs.phases import BayesPhase, TwinPhase
from ..runs.resume import config_for_run, read_for_resume
from ..runs.run_dir import Run
from ..core.predictive import predict
from ..evaluation.toy_plot import plot_toy
from ..runs.trust_list import trust_given


def log(message: str) -> None:
    """A line above the progress bars, flushed so a log file keeps up."""
    tqdm.write(message)
    sys.stdout.flush()


@pyro.settings.context(module_local_params=True)
def train(cfg: DictConfig) -> dict:
    """Train the run ``cfg`` describes and write its directory; returns metrics.json's content.

    A new run stops where another run lives (unless ``overwrite=true``); ``resume=DIR`` checks the
    overrides against the stored run, and every ensemble member's config, before anything trains."""
    inferred = None if cfg.data.name else cfg.data.path  # resolved() tells data.name by data.path's kind
    cfg = resolved(cfg)
    if cfg.data.name not in OWN_DATA:  # its shape is known: a network that cannot be built stops before the run directory
        check_network_fits(cfg)
    world = Ranks.from_env(cfg.seed)
    world.check(cfg.train.members, cfg.infer)
    device = world.device(pick_device(cfg.device))
    run = Run(cfg.run_dir)
    with world.joined(device), ExitStack() as held:
        world.on_main(lambda: held.enter_context(run.claim(cfg.overwrite, resuming=bool(cfg.resume))))
        stored = read_for_resume(cfg, run.checkpoint, device) if cfg.resume else None
        pyro.set_rng_seed(cfg.seed)  # python, numpy and torch
        splits = world.first(lambda: load_splits(cfg, device))  # before the old run goes: its data may be missing
        # your own data's shape, classes and statistics, for the checkpoint, checked before the run directory is touched
        cfg = make_config(with_profile(cfg, splits))
        if cfg.data.name in OWN_DATA:
            check_network_fits(cfg)
        if not world.main:  # rank 0 writes the run directory, and alone goes on after training
            return train_network(cfg, run, splits, device, stored, world)
        _begin(run, cfg, stored)
        trust_given(cfg.arch, OmegaConf.to_container(cfg.model.kwargs), log)  # built, and started: its runs rebuild it
        # after the old run's files went (overwrite=true), before any member trains
        members = [member_config(cfg, run.member(i)) for i in range(1, cfg.train.members)]
        if inferred:
            log(f"data.name={cfg.data.name}, inferred from data.path={inferred} (data.name=folder, tensors or csv "
                "says otherwise)")
        log(f"{cfg.arch} on {cfg.data.name} ({len(splits.train)} training examples), device {device}, "
            f"guide {cfg.model.guide}, run directory {run.dir}{world}")
        metrics = {"config": config_dict(cfg), **train_network(cfg, run, splits, device, stored, world)}
        if members:
            metrics["members"] = [train_member(member, i, splits, device) for i, member in enumerate(members, 1)]
        if cfg.infer == "nuts":
            metrics["hmc"] = run_hmc(cfg, splits, run)
        if members:
            metrics["ensemble"] = test_ensemble(cfg, splits, run, device)
        classes = class_names(cfg) if recipe(cfg).likelihood == "categorical" else None
        for warning in mark_no_better(metrics, splits, classes):  # a fit no better than ignoring the inputs says so
            log(warning)
        stale = run.calibration.is_file()  # it certified the weights this run has just changed
        if (cfg.abstention.certify or stale) and splits.val is not None and recipe(cfg).likelihood == "categorical":
            metrics["calibration"] = certify_run(run.dir, str(device), seed=cfg.seed, data_root=cfg.data.root)
            log(summary(metrics["calibration"], run.dir))
        if cfg.data.name in TOY_FUNCTIONS:
            metrics["epistemic_sd_within_data"] = spread = plot_toy(cfg, splits, run.dir, device)
            log(f"largest epistemic sd inside the training x range: {format_figures(spread)}")
        _finish(run, metrics)
        return metrics


def train_network(cfg: DictConfig, run: Run, splits: Splits, device, stored: dict | None,
                  world: Ranks = Ranks()) -> dict:
    """The phases of one network: the Bayesian network, then its twin (``train.twin``), on every
    rank of ``world``; only rank 0 logs."""
    say = world.said(log)
    run_id = stored["run"] if stored else uuid.uuid4().hex
    bayes = BayesPhase(cfg, len(splits.train), device, run.checkpoint, say)
    kl = bayes.elbo.kl_estimators(bayes.model, bayes.guide, splits.train.x[:2], splits.train.y[:2])
    say(f"ELBO {'closed-form KL where one exists' if bayes.elbo.closed_form_kl else 'Monte Carlo KL'}: " +
        ", ".join(f"{kind.replace('_', ' ')} for {len(names)} sites" for kind, names in kl.items() if names) +
        f"; the training step: {DESCRIBED[bayes.capture]} (train.capture={cfg.train.capture})")
    results = {"bayes": {**train_phase(bayes, cfg, splits, run_id, say, stored, world), "kl_estimator": kl}}
    if cfg.train.twin:
        twin = TwinPhase(cfg, len(splits.train), device, run.twin_checkpoint)
        results["twin"] = train_phase(twin, cfg, splits, run_id, say, stored and stored["twin"], world)
    return results



def member_config(cfg: DictConfig, member: Run) -> DictConfig:
    """The config of an ensemble member: the ensemble's, in its own run directory, continued where
    it has a checkpoint (a resumed or extended ensemble trains only what is missing) and started
    afresh where it has none (a member interrupted before its first checkpoint)."""
    started = member.checkpoint.is_file()
    return make_config(config_dict(cfg), {
        "run_dir": str(member.dir), "resume": str(member.dir) if started else None, "overwrite": not started,
        "train": {"members": 1}, "abstention": {"certify": False}})


def train_member(cfg: DictConfig, index: int, splits: Splits, device) -> dict:
    """Ensemble member ``index`` (its ``member_config``): the same phases as member 0, seeded
    seed + index, on the same data; its test figures."""
    run = Run(cfg.run_dir)
    log(f"ensemble member {index} (seed {cfg.seed + index}) in {run.dir}")
    with run.claim(cfg.overwrite, resuming=bool(cfg.resume)):
        stored = read_for_resume(cfg, run.checkpoint, device) if cfg.resume else None
        pyro.set_rng_seed(cfg.seed + index)
        _begin(run, cfg, stored)
        results = train_network(cfg, run, splits, device, stored)
        _finish(run, {"config": config_dict(cfg), **results})
    return {part: {k: v for k, v in figures.items() if k != "history"} for part, figures in results.items()}


def _begin(run: Run, cfg: DictConfig, stored: dict | None) -> None:
    """Inside the run's claim, once it can start: mark the folder, write the config, and store a
    resumed run's new plan in its checkpoints (what loading them rebuilds from then on)."""
    run.start(OmegaConf.to_yaml(cfg), fresh=not cfg.resume)
    for path in (run.checkpoint, run.twin_checkpoint) if stored else ():
        if path.is_file():
            replace_config(path, cfg)


def _finish(run: Run, metrics: dict) -> None:
    run.write_metrics(json.dumps(metrics, indent=2))
    plots.training_curve(metrics, run.dir / "training.png")


def run_hmc(cfg: DictConfig, splits: Splits, run: Run) -> dict:
    """NUTS over the training set with a fresh model of the run's config; samples to hmc.pt."""
    m = cfg.mcmc
    model, _ = build_from_config(cfg, len(splits.train), splits.train.x.device)
    log(f"NUTS: {m.warmup_steps} warm-up steps, {m.num_samples} samples, tree depth <= {m.max_tree_depth}")
    samples, diagnostics = nuts_posterior(model, splits.train.x, splits.train.y, m.num_samples,
                                          m.warmup_steps, m.max_tree_depth, m.target_accept, cfg.train.progress)
    test = model.likelihood.metrics(predict(model, samples, splits.test.x, None), splits.test.y)
    save_atomic({"config": config_dict(cfg), "samples": samples, "diagnostics": diagnostics}, run.hmc_samples)
    log(f"hmc test ({m.num_samples} samples): {format_figures(test)}; {format_figures(diagnostics)}")
    return {**diagnostics, **prefixed("test", test)}


@torch.no_grad()
def test_ensemble(cfg: DictConfig, splits: Splits, run: Run, device) -> dict:
    """The test figures of the ensemble's mixtures (guides, and twins: the deep ensemble)."""
    results = {}
    trained = run.load(device)
    for part, posterior in posteriors(trained).items():
        probs = posterior.predict(splits.test.x, cfg.train.test_samples)
        test = prefixed("test", trained.model.likelihood.metrics(probs, splits.test.y))
        results[part] = {"label": posterior.label, **test}
        log(f"{posterior.label} test: {format_figures(test)}")
    return results


def main(argv: list[str] | None = None) -> int:
    """Train a Bayesian network and its deterministic twin from a config.

    CONFIG is a name from configs/ (toy_mlp, toy_sinusoid, mnist_mlp, lenet, ...) or a .yaml path;
    overrides are dotted key=value pairs, e.g. train.epochs=3 data.root=DIR device=cpu. The run goes
    to run_dir (default runs/ARCH); resume=DIR continues the run in DIR; overwrite=true replaces it.
    """
    parser = cli.command_parser("python -m bnn_zoo.train", main.__doc__)
    parser.epilog = f"{parser.epilog}\n\n{cli.config_keys()}"
    parser.add_argument("args", nargs="*", metavar="CONFIG | key=value")
    args = parser.parse_args(argv).args
    name, overrides = (args[0], args[1:]) if args and "=" not in args[0] else (None, args)
    def command() -> int:
        resuming = any(o.startswith("resume=") for o in overrides)  # a stored run's network: never from beside you
        with nullcontext() if resuming else imports_beside_you():
            train(config_for_run(name, overrides))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
