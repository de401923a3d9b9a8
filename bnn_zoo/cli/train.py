"""Train a Bayesian network (SVI with the guide its config names) and its deterministic twin from a
config; with ``train.members=K`` an ensemble of K, with ``infer=nuts`` also an HMC posterior.

How a run flows: the command line's config (``bnn_zoo.runs.plans.config``, or a stored one for ``resume=``:
``bnn_zoo.runs.training.resume``) names a ``Run`` directory (``bnn_zoo.runs.storage.run_dir``), which this process claims; each
phase (``bnn_zoo.runs.training.phases``: the Bayesian network, its twin; an ensemble's members are the same
phases in runs of their own, RUN_DIR/members/N) trains in the one loop (``bnn_zoo.runs.training.loop``) that
validates, checkpoints and resumes; then NUTS, the ensemble's test figures, the certified rules
(``bnn_zoo.cli.certify``), the toy plot, metrics.json and training.png.

Usage::

    python -m bnn_zoo.train                                    # toy_mlp
    python -m bnn_zoo.train mnist_mlp train.epochs=3 data.root=DIR run_dir=runs/x
    python -m bnn_zoo.train toy_mlp infer=nuts                 # and NUTS, plotted beside VI
    python -m bnn_zoo.train resume=runs/x train.epochs=30      # continue a run, on a longer plan
    python -m bnn_zoo.train lenet data.name=folder data.path=DIR   # your own images, a subfolder per class
"""
from __future__ import annotations

import json
import sys
import textwrap
import uuid
from contextlib import ExitStack, nullcontext
from dataclasses import replace

import pyro
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from ..core.fast.captured_step import DESCRIBED
from ..core.networks.network_names import imports_beside_you
from ..core.inference.nuts import nuts_posterior
from ..core.inference.predictive import predict
from ..data.shifted.augment import Augment
from ..data.shifted.outliers import Outliers
from ..data.inputs import class_names
from ..data.own import OWN_DATA
from ..data.sets import TOY_FUNCTIONS, Splits, load_splits
from ..evaluation.figures import plots
from ..evaluation.baseline import mark_no_better
from ..evaluation.figures.toy_plot import plot_toy
from ..posterior import KINDS, held_part
from ..runs.storage.checkpoint import config_dict, replace_config, save_atomic, stored_beside
from ..runs.plans.checks import check_augment, check_fitted_kinds, check_network_fits, check_on_machine, pick_device
from ..runs.training.compile_cache import compile_cache, described
from ..runs.plans.config import make_config, resolved, with_profile
from ..runs.training.cost import Cost
from ..runs.plans.factory import build_networks, build_twin
from ..runs.storage.fits import Fit, read_fits, stored_fits, write_fits
from ..runs.training.loop import format_figures, prefixed, train_phase
from ..runs.training.phases import BayesPhase, TwinPhase
from ..runs.plans.plan import Plan, held_beside
from ..runs.training.ranks import Ranks
from ..runs.training.resume import config_for_run, posteriors_kept, read_for_resume
from ..runs.storage.run_dir import Run
from ..runs.training.threads import step_threads
from ..runs.storage.trained import posteriors
from ..runs.storage.trust_list import trust_given
from . import options as cli
from ..evaluation.certification import certify_run, summary


def log(message: str) -> None:
    """A line above the progress bars, flushed so a log file keeps up."""
    tqdm.write(message)
    sys.stdout.flush()


@pyro.settings.context(module_local_params=True)
def train(cfg: DictConfig) -> dict:
    """Train the run ``cfg`` describes and write its directory; returns metrics.json's content.

    The config becomes a plan (``bnn_zoo.runs.plans.plan.Plan``) here, once, and again once your own data's
    profile is known; below, every part takes its own typed section. A new run stops where another
    run lives (unless ``overwrite=true``); ``resume=DIR`` checks the overrides against the stored run,
    and every ensemble member's config, before anything trains."""
    inferred = None if cfg.data.name else cfg.data.path  # resolved() tells data.name by data.path's kind
    cfg = resolved(cfg)
    plan = Plan.of(cfg)
    check_on_machine(plan)  # its cores, the folders data.ood names: before anything is written
    if plan.data.name not in OWN_DATA:  # its shape is known: a network that cannot be built stops before the run directory
        check_network_fits(plan)
    ranks = Ranks.from_env(plan.seed)
    ranks.check(plan.infer)
    device = ranks.device(pick_device(plan.device))
    run = Run(plan.run_dir)
    # the compile cache checked before the run directory is claimed: a folder refused leaves nothing behind
    with ranks.joined(device), compile_cache(plan.train.compile_cache, ranks.said(log)), ExitStack() as held:
        ranks.on_main(lambda: held.enter_context(run.claim(plan.overwrite, resuming=bool(plan.resume))))
        stored = read_for_resume(cfg, run.checkpoint, device) if plan.resume else None
        fits = stored_fits(run.fitted, device) if stored else None  # fitted.pt, read once
        if stored:  # what the run holds, and what this command adds or drops; its own data's columns checked
            cfg = posteriors_kept(cfg, stored, run.fitted, fits)
            plan = Plan.of(cfg, stored_beside(stored, run.checkpoint))
        pyro.set_rng_seed(plan.seed)  # python, numpy and torch
        splits = ranks.first(lambda: load_splits(plan.data, plan.categorical, plan.seed, device))  # before the old run goes
        # your own data's shape, classes and statistics, for the checkpoint, checked before the run directory is touched
        plan = Plan.of(make_config(with_profile(cfg, splits)), held_beside(splits.profile))
        if plan.data.name in OWN_DATA:
            check_network_fits(plan)
        check_fitted_kinds(plan, len(splits.train))  # before the first epoch, not after the run
        check_augment(plan)  # images only: a tensors file of rows is a table
        if ranks.main:
            _begin(run, plan, stored)
            trust_given(plan.arch, dict(plan.networks.model.kwargs), log)  # built, and started: its runs rebuild it
        # which members have begun, as rank 0 finds them after the old run's files went (overwrite=true)
        started = ranks.shared([run.member(i).checkpoint.is_file() for i in range(1, plan.train.members)])
        members = [member_plan(plan, run.member(i), begun) for i, begun in enumerate(started, 1)]
        if not ranks.main:  # rank 0 writes the run directory, and alone goes on after training
            results = train_network(plan, run, splits, device, stored, ranks)
            for i, member in enumerate(members, 1):
                train_member(member, i, splits, device, ranks)
            return results
        if inferred:
            log(f"data.name={plan.data.name}, inferred from data.path={inferred} (data.name=folder, tensors or csv "
                "says otherwise)")
        target = f", target column {plan.data.target!r}" if plan.data.target else ""  # a table's: what it predicts
        log(f"{plan.arch} on {plan.data.name} ({len(splits.train)} training examples{target}), device {device}, "
            f"guide {plan.networks.model.guide}, run directory {run.dir}{ranks}"
            f"{ranks.on_cpus(device, plan.train.threads or torch.get_num_threads())}")
        metrics = {"config": plan.stored(), **train_network(plan, run, splits, device, stored, ranks)}
        if members:
            metrics["members"] = [train_member(member, i, splits, device, ranks) for i, member in enumerate(members, 1)]
        if plan.infer == "nuts":
            metrics["hmc"] = run_hmc(plan, splits, run)
        if plan.train.posteriors or run.fitted.is_file():
            metrics["fitted"] = fit_posteriors(plan.train.posteriors, run, splits, device, fits)
        if members or plan.train.posteriors:
            metrics["ensemble"] = test_posteriors(plan.train.test_samples, splits, run, device)
        classes = class_names(plan.data) if plan.categorical else None
        for warning in mark_no_better(metrics, splits, classes, plan.data.name):  # no better than ignoring the inputs
            log(warning)
        stale = run.calibration.is_file()  # it certified the weights this run has just changed
        if (plan.abstention.certify or stale) and splits.val is not None and plan.categorical:
            metrics["calibration"] = certify_run(run.dir, str(device), seed=plan.seed, data_root=plan.data.root)
            log(summary(metrics["calibration"], run.dir))
        if plan.data.name in TOY_FUNCTIONS:
            metrics["epistemic_sd_within_data"] = spread = plot_toy(plan, splits, run.dir, device)
            log(f"largest epistemic sd inside the training x range: {format_figures(spread)}")
        _finish(run, metrics)
        return metrics


def train_network(plan: Plan, run: Run, splits: Splits, device, stored: dict | None, ranks: Ranks = Ranks()) -> dict:
    """The phases of one network: the Bayesian network, then its twin (``train.twin``), on every
    rank of ``ranks``; only rank 0 logs."""
    say, config = ranks.said(log), plan.stored()
    with torch.random.fork_rng(devices=[]):  # the plain network's step, to weigh (the run's draws as they were)
        plain = build_twin(plan.networks)
    threads, why = step_threads(plan.train.threads, plain, plan.networks.recipe.input_shape,
                                min(plan.train.batch_size, len(splits.train)), device)
    t = replace(plan.train, threads=threads)  # what the phases train on; the stored config keeps null
    run_id = stored["run"] if stored else uuid.uuid4().hex
    bayes = BayesPhase(plan.networks, t, len(splits.train), device, run.checkpoint, say, plan.outliers)
    kl = bayes.elbo.kl_estimators(bayes.model, bayes.guide, splits.train.x[:2], splits.train.y[:2])
    say(f"ELBO {'closed-form KL where one exists' if bayes.elbo.closed_form_kl else 'Monte Carlo KL'}: " +
        ", ".join(f"{kind.replace('_', ' ')} for {len(names)} sites" for kind, names in kl.items() if names) +
        f"; the training step: {DESCRIBED[bayes.capture]} ({bayes.capture_reason}); {why}")
    # seeded as its weights' draws (the run's seed + a member's index): each member its own digits and outliers
    augment = Augment.of(plan.augment, plan.data, ranks.seed)
    if augment is not None:
        say(f"training images augmented ({plan.augment.describe()})")
    outliers = Outliers.of(plan.outliers, plan.data, ranks.seed)
    if outliers is not None:
        say(f"outliers observed as no class in each minibatch ({plan.outliers.describe()})")
    results = {"bayes": {**train_phase(bayes, t, config, splits, run_id, say, stored, ranks, augment, outliers),
                         "kl_estimator": kl}}
    if t.twin:
        twin = TwinPhase(plan.networks, t, len(splits.train), device, run.twin_checkpoint, plan.outliers)
        results["twin"] = train_phase(twin, t, config, splits, run_id, say, stored and stored["twin"], ranks, augment,
                                      outliers)
    return results


def member_plan(plan: Plan, member: Run, started: bool) -> Plan:
    """The plan of an ensemble member: the ensemble's, in its own run directory, continued where
    it has ``started`` (a checkpoint: a resumed or extended ensemble trains only what is missing) and
    started afresh where not (a member interrupted before its first checkpoint)."""
    return Plan.of(make_config(config_dict(plan.config), {
        "run_dir": str(member.dir), "resume": str(member.dir) if started else None, "overwrite": not started,
        "train": {"members": 1, "posteriors": []}, "abstention": {"certify": False}}), held_beside(plan.data))


def train_member(plan: Plan, index: int, splits: Splits, device, ranks: Ranks = Ranks()) -> dict:
    """Ensemble member ``index`` (its ``member_plan``): the same phases as member 0, seeded
    seed + index, on the same data and the same ranks (rank 0 writes its run); its test figures."""
    run = Run(plan.run_dir)
    ranks.said(log)(f"ensemble member {index} (seed {plan.seed + index}) in {run.dir}")
    with ExitStack() as held:
        ranks.on_main(lambda: held.enter_context(run.claim(plan.overwrite, resuming=bool(plan.resume))))
        stored = read_for_resume(plan.config, run.checkpoint, device) if plan.resume else None
        pyro.set_rng_seed(plan.seed + index)
        if ranks.main:
            _begin(run, plan, stored)
        results = train_network(plan, run, splits, device, stored, ranks.of_member(index))
        if ranks.main:
            _finish(run, {"config": plan.stored(), **results})
    return {part: {k: v for k, v in figures.items() if k != "history"} for part, figures in results.items()}


def _begin(run: Run, plan: Plan, stored: dict | None) -> None:
    """Inside the run's claim, once it can start: mark the folder, write the config, and store a
    resumed run's new plan in its checkpoints (what loading them rebuilds from then on)."""
    run.start(OmegaConf.to_yaml(plan.config), fresh=not plan.resume)
    for path in (run.checkpoint, run.twin_checkpoint) if stored else ():
        if path.is_file():
            replace_config(path, plan.stored())


def _finish(run: Run, metrics: dict) -> None:
    run.write_metrics(json.dumps(metrics, indent=2))
    plots.training_curve(metrics, run.dir / "training.png")


def run_hmc(plan: Plan, splits: Splits, run: Run) -> dict:
    """NUTS over the training set with a fresh model of the run's plan; samples to hmc.pt."""
    m = plan.mcmc
    model, _ = build_networks(plan.networks, len(splits.train), splits.train.x.device)
    log(f"NUTS: {m.warmup_steps} warm-up steps, {m.num_samples} samples, tree depth <= {m.max_tree_depth}")
    samples, diagnostics = nuts_posterior(model, splits.train.x, splits.train.y, m.num_samples,
                                          m.warmup_steps, m.max_tree_depth, m.target_accept, plan.train.progress)
    test = model.likelihood.metrics(predict(model, samples, splits.test.x, None), splits.test.y)
    save_atomic({"config": plan.stored(), "samples": samples, "diagnostics": diagnostics}, run.hmc_samples)
    log(f"hmc test ({m.num_samples} samples): {format_figures(test)}; {format_figures(diagnostics)}")
    return {**diagnostics, **prefixed("test", test)}


def fit_posteriors(names: list[str], run: Run, splits: Splits, device, run_fits: dict | None = None) -> dict:
    """The kinds of posterior fitted after training (``train.posteriors``), around each member's twin, on
    the training split (a held-out kind's setting on validation's first fifth, which its certificate leaves
    out), in RUN_DIR/fitted.pt (and each member's): a fit the file holds for the twin as it is now is kept,
    the others fitted (again, where the twin trained on since), and the kinds ``names`` leaves out deleted
    (``train.drop_posteriors`` asked for it); their cost. ``run_fits``: the run's own fitted.pt as read."""
    trained = run.load(device, fitted=False)
    held = held_part(len(splits.val)) if splits.val is not None else slice(0, 0)
    x_held, y_held = (splits.val.x[held], splits.val.y[held]) if splits.val is not None else (None, None)
    folders = [run, *(run.member(i) for i in range(1, 1 + len(trained.members)))]
    costs = {}
    for member, folder in zip((trained, *trained.members), folders):
        fits, stale = read_fits(folder.fitted, member, device, stored=run_fits if folder is run else None)
        kept = {name: fits[name] for name in names if name in fits}
        for name in (n for n in [*fits, *stale] if n not in names):
            log(f"{name}: dropped from {folder.dir} with its certificate (train.drop_posteriors)")
        for name in names:
            if name in kept:
                continue
            given = {"prior": member.model.prior} if KINDS[name].takes_prior else {}  # a sampler of the run's posterior
            with Cost(device) as cost:
                state = KINDS[name].fit(member.twin, splits.train.x, splits.train.y, x_held, y_held, **given).state()
            kept[name] = Fit.of(state, member, cost.seconds, cost.peak_mb)
            again = f" again ({stale[name]})" if name in stale else ""
            log(f"{name}: fitted{again} around {folder.dir}'s twin in {cost.seconds:.1f} s")
        if stale or set(fits) != set(names):
            write_fits(folder.fitted, member.run, {name: kept[name] for name in names})
        for name in names:
            costs.setdefault(name, []).append(kept[name].cost)
    return costs


@torch.no_grad()
def test_posteriors(samples: int, splits: Splits, run: Run, device) -> dict:
    """The test figures of every posterior the run holds: an ensemble's mixtures (guides, and twins:
    the deep ensemble), the posteriors fitted after training."""
    results, trained = {}, run.load(device)
    for part, posterior in posteriors(trained).items():
        probs = posterior.predict(splits.test.x, samples)
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
    cache = textwrap.fill(described(), 100, break_long_words=False, break_on_hyphens=False)  # the folder whole
    parser.epilog = f"{parser.epilog}\n\n{cache}\n\n{cli.config_keys()}"
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
