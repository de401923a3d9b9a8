"""Train a Bayesian network (SVI with the guide its config names) and its deterministic twin from a
config; with ``infer=nuts`` also draw an HMC posterior to compare with.

Usage::

    python -m bnn_zoo.train                                    # toy_mlp
    python -m bnn_zoo.train mnist_mlp train.epochs=3 data.root=DIR run_dir=runs/x
    python -m bnn_zoo.train toy_mlp infer=nuts                 # and NUTS, plotted beside VI
    python -m bnn_zoo.train resume=runs/x train.epochs=30      # continue a run, on a longer plan
    python -m bnn_zoo.train mnist_mlp run_dir=runs/x overwrite=true   # replace the run in runs/x
"""
from __future__ import annotations

import json
import statistics
import sys
import uuid
from contextlib import nullcontext
from pathlib import Path

import pyro
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from . import cli, plots
from .checkpoint import (CALIBRATION, CHECKPOINT, HMC_SAMPLES, TWIN_CHECKPOINT, config_dict, read, restamp, restore_rng, save_atomic,
                         save_bayes, save_twin)
from .trained import load, member_dirs
from .calibrate import calibrate_run, summary
from .factory import build_from_config, twin_from_config
from .config import load_config, make_config, pick_device, resolved
from .data import TOY_FUNCTIONS, TOY_PLOT_RANGES, Splits, TensorSet, load_splits
from .elbo import SplitELBO
from .errors import ConfigError, StorageError, TrainingError
from .ladder import SampledPosterior, posteriors
from .loop import adam, fit, make_scheduler, reached
from .mcmc import nuts_posterior
from .sampling import predict
from .reparam import LocalReparameterization
from .files import write_atomic
from .runs import claim, mark, remove_run_files


def bayes_objective(cfg, num_data: int, device):
    """(model, guide, ELBO, optimizer, loss_fn) as training uses them: ``loss_fn(x, y)`` is the
    negative ELBO of a minibatch (inside ``LocalReparameterization`` when model.reparam=local);
    Adam moves the guide's parameters and the model's own (learned prior or noise, point
    estimates). Build and run it with module-local parameters; training steps run without Pyro's
    argument validation (``without_validation()``)."""
    model, guide = build_from_config(cfg, num_data, device)
    elbo = SplitELBO(cfg.train.num_particles, closed_form_kl=cfg.train.elbo == "meanfield",
                     kl_weight=cfg.train.kl_weight)
    handler = LocalReparameterization if cfg.model.reparam == "local" else nullcontext

    def loss_fn(x, y):
        with handler():
            return elbo.differentiable_loss(model, guide, x, y)

    return model, guide, elbo, adam([*guide.parameters(), *model.parameters()], cfg.train.lr), loss_fn


def without_validation():
    """Pyro's and torch.distributions' argument checks off, for the training steps: they cost a
    third of a mnist_mlp step. The traced run of ``kl_estimators`` before training keeps them on."""
    return pyro.validation_enabled(False)


@pyro.settings.context(module_local_params=True)
def train(cfg: DictConfig) -> dict:
    """Train the run ``cfg`` describes and write its directory; returns metrics.json's content.

    A new run stops when its run_dir holds another run (unless ``overwrite=true``); ``resume=DIR``
    checks the overrides against the stored run before it writes anything."""
    cfg = resolved(cfg)
    device = pick_device(cfg.device)
    run_dir = Path(cfg.run_dir)
    members = member_configs(cfg, run_dir)  # every member's config checked before any trains
    with claim(run_dir, cfg.overwrite, resuming=bool(cfg.resume)):
        stored = read_for_resume(cfg, run_dir / CHECKPOINT, device) if cfg.resume else None
        pyro.set_rng_seed(cfg.seed + cfg.train.member)  # python, numpy and torch; each member its own
        splits = load_splits(cfg, device)
        if not cfg.resume:
            remove_run_files(run_dir)  # overwrite=true: the old run goes only now the new one can start
        mark(run_dir)
        for path in (run_dir / CHECKPOINT, run_dir / TWIN_CHECKPOINT) if stored else ():
            if path.is_file():
                restamp(path, cfg)
        write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg))
        return _train(cfg, stored, splits, device, run_dir, members)


def _train(cfg: DictConfig, stored: dict | None, splits: Splits, device, run_dir: Path,
           members: list[DictConfig]) -> dict:
    def log(message: str) -> None:  # above the progress bars, flushed so a log file keeps up
        tqdm.write(message)
        sys.stdout.flush()

    log(f"{cfg.arch} on {cfg.data.name} ({len(splits.train)} training examples), device {device}, "
        f"guide {cfg.model.guide}, run directory {run_dir}")
    run_id = stored["run"] if stored else uuid.uuid4().hex
    metrics = {"config": config_dict(cfg), "bayes": train_bayes(cfg, splits, device, run_dir, log, stored, run_id)}
    if cfg.train.twin:
        metrics["twin"] = train_twin(cfg, splits, device, run_dir, log, stored and stored["twin"], run_id)
    if members:
        metrics["members"] = train_members(members, log)
    if cfg.infer == "nuts":
        metrics["hmc"] = run_hmc(cfg, splits, run_dir, log)
    if cfg.train.members > 1:
        metrics["ensemble"] = test_ensemble(cfg, splits, run_dir, device, log)
    stale = (run_dir / CALIBRATION).is_file()  # it certified the weights this run has just changed
    if (cfg.abstention.calibrate or stale) and splits.val is not None and cfg.data.name not in TOY_FUNCTIONS:
        found = calibrate_run(run_dir, str(device), seed=cfg.seed, data_root=cfg.data.root)  # cfg.abstention
        metrics["calibration"] = found
        log(summary(found))
    if cfg.data.name in TOY_FUNCTIONS:
        metrics["epistemic_sd_within_data"] = spread = plot_toy(cfg, splits, run_dir, device)
        log(f"largest epistemic sd inside the training x range: {_figures(spread)}")
    write_atomic(run_dir / "metrics.json", json.dumps(metrics, indent=2))
    plots.training_curve(metrics, run_dir / "training.png")
    return metrics


def member_configs(cfg: DictConfig, run_dir: Path) -> list[DictConfig]:
    """The configs of an ensemble's members 1, 2, ..., each a run of its own in RUN_DIR/members/N:
    continued where it has a checkpoint (a resumed or extended ensemble trains only what is
    missing), started afresh where it has none (a member interrupted before its first checkpoint)."""
    found = []
    for i, member_dir in enumerate(member_dirs(run_dir, cfg.train.members), start=1):
        started = (member_dir / CHECKPOINT).is_file()
        found.append(make_config(config_dict(cfg), {
            "run_dir": str(member_dir), "resume": str(member_dir) if started else None, "overwrite": not started,
            "train": {"members": 1, "member": i}, "abstention": {"calibrate": False}}))
    return found


def train_members(members: list[DictConfig], log) -> list[dict]:
    """Train an ensemble's members 1, 2, ... (``member_configs``); their test figures."""
    found = []
    for member in members:
        log(f"ensemble member {member.train.member} of {len(members) + 1} (seed {member.seed + member.train.member}) "
            f"in {member.run_dir}")
        figures = train(member)
        found.append({part: {k: v for k, v in figures[part].items() if k != "history"}
                      for part in ("bayes", "twin") if part in figures})
    return found


@torch.no_grad()
def test_ensemble(cfg: DictConfig, splits: Splits, run_dir: Path, device, log) -> dict:
    """The test figures of the ensemble's mixtures (guides, and twins: the deep ensemble)."""
    found = {}
    trained = load(run_dir, device)
    for part, posterior in posteriors(trained).items():
        probs = posterior.predict(splits.test.x, cfg.train.test_samples)
        figures = _prefixed("test", trained.model.likelihood.metrics(probs, splits.test.y))
        found[part] = {"label": posterior.label, **figures}
        log(f"{posterior.label} test: {_figures(figures)}")
    return found


# What a resumed run may change: how long and how fast it trains from here, how it reports, where
# it runs and reads data, the abstention calibrated at its end, and how many members an ensemble
# has (the new ones are trained). The rest defines the model.
RESUMABLE = ("train.members", "train.epochs", "train.twin_epochs", "train.lr", "train.twin_lr", "train.lr_schedule",
             "train.lr_min_factor", "train.lr_step", "train.lr_gamma", "train.eval_every",
             "train.val_samples", "train.test_samples", "train.progress", "train.stop_at_accuracy",
             "train.twin", "device", "resume", "overwrite", "run_dir", "infer", "data.root", "data.download",
             "abstention", "mcmc")


def read_for_resume(cfg: DictConfig, path: Path, device) -> dict:
    """The checkpoint ``resume=`` continues, once the config is known to fit it: overrides of
    anything but RESUMABLE keys, and fewer epochs than are done, are refused."""
    state = read(path, device)
    # the stored config on today's defaults: a key added since the run was written has its default
    differences = _differences(config_dict(make_config(state["config"])), config_dict(cfg))
    changed = sorted(key for key in differences if not any(key == k or key.startswith(k + ".") for k in RESUMABLE))
    if changed:
        raise ConfigError(f"resume={cfg.resume} cannot change what defines the run: " +
                          ", ".join(f"{k} ({differences[k][0]} -> {differences[k][1]})" for k in changed) +
                          "; drop those overrides, or start a new run with them (run_dir=NEW)")
    state.setdefault("run", None)
    twin_path = path.with_name(TWIN_CHECKPOINT)
    twin = read(twin_path, device) if twin_path.is_file() else None
    state["twin"] = twin if twin is not None and twin.get("run") == state["run"] else None  # not a replaced run's
    for key, label, done in (("train.epochs", "", state["epoch"]),
                             ("train.twin_epochs", "twin ", state["twin"]["epoch"] if state["twin"] else 0)):
        planned = cfg.train.epochs if key == "train.epochs" else cfg.train.twin_epochs or cfg.train.epochs
        if planned < done:
            raise ConfigError(f"bad config key {key!r}: the {label}run in {path.parent} has trained {done} "
                              f"epochs; resume with {key} >= {done}")
    return state


def _differences(old: dict, new: dict, prefix: str = "") -> dict[str, tuple]:
    """{dotted key: (old, new)} where two config dicts differ."""
    found = {}
    for key in old.keys() | new.keys():
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found.update(_differences(a, b, f"{prefix}{key}."))
        elif a != b:
            found[f"{prefix}{key}"] = (a, b)
    return found


def _prefixed(prefix: str, figures: dict) -> dict:
    return {f"{prefix}/{k}": v for k, v in figures.items()}


def _summary(history: list, test: dict) -> dict:
    return {"history": history, "seconds_per_epoch": statistics.median(h["seconds"] for h in history),
            **_prefixed("test", test)}


def train_bayes(cfg, splits: Splits, device, run_dir: Path, log, stored: dict | None, run_id: str) -> dict:
    t = cfg.train
    num_data = len(splits.train)
    model, guide, elbo, optimizer, loss_fn = bayes_objective(cfg, num_data, device)
    history: list = []
    kl = elbo.kl_estimators(model, guide, splits.train.x[:2], splits.train.y[:2])
    log(f"ELBO {'closed-form KL where one exists' if elbo.closed_form_kl else 'Monte Carlo KL'}: " +
        ", ".join(f"{kind.replace('_', ' ')} for {len(names)} sites" for kind, names in kl.items() if names))
    path = run_dir / CHECKPOINT
    if stored:
        model.load_state_dict(stored["model"]), guide.load_state_dict(stored["guide"])
        optimizer.load_state_dict(stored["optimizer"])
        history = stored["history"]
        restore_rng(stored, device)
        log(f"resumed {path} after epoch {stored['epoch']}")
    scheduler = make_scheduler(optimizer, t, t.epochs, t.lr, done=len(history))
    data_fit = torch.zeros((), device=device)
    kept = Kept(path, cfg, t.lr, stored["epoch"] if stored else None)

    def step(x, y):
        nonlocal data_fit
        loss = loss_fn(x, y)
        data_fit = data_fit + elbo.last_parts["data_fit"]
        return loss

    def after_epoch(record: dict, due: bool) -> None:
        nonlocal data_fit
        fitted = data_fit.item() / record["steps"] / num_data
        data_fit = torch.zeros((), device=device)
        record.update(data_fit=fitted, kl=record["loss"] - fitted, **model.hyperparameters)
        history.append(record)
        if not due:
            return
        if splits.val is not None:
            record.update(_prefixed("val", model.likelihood.metrics(
                predict(model, guide, splits.val.x, t.val_samples), splits.val.y)))
        log(_line("bayes", record))
        kept.check("bayes", record["epoch"], [*model.parameters(), *guide.parameters()])
        save_bayes(path, cfg, run_id, record["epoch"], num_data, model, guide, optimizer, history)
        kept.epoch = record["epoch"]
        return reached(record, t.stop_at_accuracy)

    with without_validation(), kept:
        fit("bayes", step, optimizer, scheduler, splits.train, t, t.epochs, history, 1.0 / num_data, after_epoch)
    test = model.likelihood.metrics(predict(model, guide, splits.test.x, t.test_samples), splits.test.y)
    log(f"bayes test ({t.test_samples} posterior samples): {_figures(test)}")
    return {**_summary(history, test), "kl_estimator": kl}


class Kept:
    """The epoch a checkpoint file holds, and what a stopped run says about it: a checkpoint is
    written only from finite parameters, and a TrainingError (divergence) or StorageError (a full
    disk, a folder gone read-only) raised inside ``with kept:`` ends with which epoch the file holds
    and how to resume from it."""

    def __init__(self, path: Path, cfg: DictConfig, lr: float, epoch: int | None):
        self.path, self.cfg, self.lr, self.epoch = path, cfg, lr, epoch

    def check(self, label: str, epoch: int, parameters) -> None:
        if not all(bool(torch.isfinite(p).all()) for p in parameters):
            raise TrainingError(f"{label}: parameters became non-finite in epoch {epoch}")

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        run_dir = self.path.parent
        if isinstance(err, StorageError):
            advice = (f"{self.path} holds epoch {self.epoch}: free space (or make {run_dir} writable) and resume: "
                      f"python -m bnn_zoo.train resume={run_dir}" if self.epoch is not None else
                      "no checkpoint was written: free space (or make the folder writable) and train again")
            raise StorageError(f"{err}; stopped. {advice}") from None
        if not isinstance(err, TrainingError):
            return False
        if self.epoch is None:
            advice = (f"no checkpoint was written (the first would have followed epoch "
                      f"{self.cfg.train.eval_every}): train again with a lower learning rate, e.g. "
                      f"train.lr={min(self.lr / 10, 1e-3):g} overwrite=true")
        else:
            advice = (f"{self.path} holds epoch {self.epoch}, the last with finite parameters: resume it with "
                      f"a lower learning rate: python -m bnn_zoo.train resume={run_dir} train.lr={min(self.lr / 10, 1e-3):g}")
        raise TrainingError(f"{err}; stopped. {advice}") from None


def train_twin(cfg, splits: Splits, device, run_dir: Path, log, stored: dict | None, run_id: str) -> dict:
    t = cfg.train
    epochs, lr = t.twin_epochs or t.epochs, t.twin_lr or t.lr
    twin = twin_from_config(cfg, device)
    optimizer = adam(twin.parameters(), lr)
    history: list = []
    path = run_dir / TWIN_CHECKPOINT
    if stored:
        twin.load_state_dict(stored["net"]), optimizer.load_state_dict(stored["optimizer"])
        history = stored["history"]
    scheduler = make_scheduler(optimizer, t, epochs, lr, done=len(history))
    kept = Kept(path, cfg, lr, stored["epoch"] if stored else None)

    @torch.no_grad()
    def evaluate(data: TensorSet) -> dict:  # in eval mode: dropout off (MC dropout is bnn_zoo.ladder's)
        twin.eval()
        try:
            return twin.likelihood.metrics(twin(data.x).unsqueeze(0), data.y)
        finally:
            twin.train()

    def after_epoch(record: dict, due: bool) -> None:
        history.append(record)
        if not due:
            return
        if splits.val is not None:
            record.update(_prefixed("val", evaluate(splits.val)))
        log(_line("twin", record))
        kept.check("twin", record["epoch"], twin.parameters())
        save_twin(path, cfg, run_id, record["epoch"], twin, optimizer, history)
        kept.epoch = record["epoch"]
        return reached(record, t.stop_at_accuracy)

    with kept:
        fit("twin", twin.loss, optimizer, scheduler, splits.train, t, epochs, history, 1.0, after_epoch)
    test = evaluate(splits.test)
    log(f"twin test: {_figures(test)}")
    return _summary(history, test)


def run_hmc(cfg, splits: Splits, run_dir: Path, log) -> dict:
    """NUTS over the training set with a fresh model of the run's config; samples to hmc.pt."""
    m = cfg.mcmc
    model, _ = build_from_config(cfg, len(splits.train), splits.train.x.device)
    log(f"NUTS: {m.warmup_steps} warm-up steps, {m.num_samples} samples, tree depth <= {m.max_tree_depth}")
    samples, diagnostics = nuts_posterior(model, splits.train.x, splits.train.y, m.num_samples,
                                          m.warmup_steps, m.max_tree_depth, m.target_accept, cfg.train.progress)
    test = model.likelihood.metrics(predict(model, samples, splits.test.x, None), splits.test.y)
    save_atomic({"config": config_dict(cfg), "samples": samples, "diagnostics": diagnostics}, run_dir / HMC_SAMPLES)
    log(f"hmc test ({m.num_samples} samples): {_figures(test)}; {_figures(diagnostics)}")
    return {**diagnostics, **_prefixed("test", test)}


def _figures(d: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in d.items())


def _line(label: str, record: dict) -> str:
    shown = {k: v for k, v in record.items() if k not in ("epoch", "lr", "steps")}
    return f"{label} epoch {record['epoch']}: {_figures(shown)}"


@torch.no_grad()
def plot_toy(cfg, splits: Splits, run_dir: Path, device) -> dict[str, float]:
    """The toy run's predictive, epistemic and aleatoric bands (its guide or ensemble, and HMC when
    the run drew it: every sample), over ranges well beyond the data. Returns each posterior's largest epistemic sd
    between the smallest and largest training x: the doubt between the data clusters."""
    trained = load(run_dir, device)
    shown = [p for part, p in posteriors(trained).items() if part != "twin"]  # the twin is drawn as a line
    panels = []
    for lo, hi in TOY_PLOT_RANGES[cfg.data.name]:
        grid = torch.linspace(lo, hi, 801, device=device).unsqueeze(-1)
        samples = {p.label: p.predict(grid, p.total if isinstance(p, SampledPosterior) else cfg.train.test_samples)
                   for p in shown}
        twin = trained.twin(grid) if trained.twin is not None else None
        panels.append((grid[:, 0], samples, twin, TOY_FUNCTIONS[cfg.data.name](grid[:, 0])))
    plots.toy_predictive(panels, splits.train.x.squeeze(-1), splits.train.y, run_dir / "predictive.png",
                         f"{cfg.arch} on {cfg.data.name} ({cfg.model.noise} noise)")
    grid, samples = panels[0][:2]
    inside = (grid >= splits.train.x.min()) & (grid <= splits.train.x.max())
    return {label: float(plots.variance_parts(s)["epistemic"][inside].max()) for label, s in samples.items()}


def config_for_run(name: str | None, overrides: list[str]) -> DictConfig:
    """The config a command line asks for; ``resume=DIR`` starts from the config stored in DIR's
    checkpoint."""
    resume = [o for o in overrides if o.startswith("resume=")]
    if not resume:
        return load_config(name or "toy_mlp", overrides)
    run_dir = Path(resume[-1].split("=", 1)[1])
    if name is not None:
        raise ConfigError("resume=DIR continues DIR's own config: give no config name with it")
    elsewhere = [o.split("=", 1)[1] for o in overrides if o.startswith("run_dir=")]
    if elsewhere and Path(elsewhere[-1]).resolve() != run_dir.resolve():
        raise ConfigError(f"bad config key 'run_dir': resume={run_dir} continues the run in {run_dir}, not in "
                          f"{elsewhere[-1]}: drop run_dir=, or copy the run there first and resume={elsewhere[-1]}")
    if not (run_dir / CHECKPOINT).is_file():
        raise ConfigError(f"bad config key 'resume': nothing to resume in {run_dir}: it holds no {CHECKPOINT} "
                          "(the run stopped before its first checkpoint, or the path is wrong); start the run "
                          "again, with overwrite=true to replace what is there")
    return make_config(read(run_dir / CHECKPOINT)["config"], [*overrides, f"run_dir={run_dir}"])


def main(argv: list[str] | None = None) -> int:
    """Train a Bayesian network and its deterministic twin from a config.

    CONFIG is a name from configs/ (toy_mlp, toy_sinusoid, mnist_mlp, lenet, ...) or a .yaml path;
    overrides are dotted key=value pairs, e.g. train.epochs=3 data.root=DIR run_dir=runs/x
    device=cpu model.guide=lowrank infer=nuts (every key is documented in bnn_zoo/config.py).
    """
    parser = cli.command_parser("python -m bnn_zoo.train", main.__doc__)
    parser.add_argument("args", nargs="*", metavar="CONFIG | key=value")
    args = parser.parse_args(argv).args
    name, overrides = (args[0], args[1:]) if args and "=" not in args[0] else (None, args)
    def command() -> int:
        train(config_for_run(name, overrides))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
