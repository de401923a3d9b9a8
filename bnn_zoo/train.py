"""Train a Bayesian network (SVI, Trace_ELBO) and its deterministic twin from a config.

Usage::

    python -m bnn_zoo.train                                    # toy_mlp
    python -m bnn_zoo.train mnist_mlp train.epochs=3 data.root=DIR run_dir=runs/x
    python -m bnn_zoo.train resume=runs/x                      # continue an interrupted run
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import pyro
import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from pyro.distributions.kl import kl_divergence
from pyro.distributions.util import scale_and_mask
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.util import is_validation_enabled
from pyro.poutine.util import prune_subsample_sites
from pyro.util import check_model_guide_match
from tqdm.auto import tqdm

from . import plots
from .checkpoint import (
    CHECKPOINT,
    TWIN_CHECKPOINT,
    build_from_config,
    config_dict,
    read,
    save_bayes,
    save_twin,
    twin_from_config,
)
from .config import ConfigError, load_config, make_config, resolved
from .data import TOY_FUNCTIONS, TOY_PLOT_RANGES, DataError, Splits, TensorSet, load_splits
from .metrics import predictive_metrics
from .predict import predict
from .zoo import architecture, hyperparameters


class DataFitLog:
    """Mixin for a Pyro ELBO that also sums its data-fit part, -log p(y | w) (scaled to the full
    data set), so the loss splits into data fit and KL (loss - data fit) at no extra cost."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.data_fit = 0.0

    def _log_data_fit(self, model_trace) -> None:
        observed = [s["log_prob_sum"] for s in model_trace.nodes.values()
                    if s["type"] == "sample" and s["is_observed"]]
        self.data_fit -= sum(observed).detach() / self.num_particles

    def pop_data_fit(self) -> float:
        total, self.data_fit = float(self.data_fit), 0.0
        return total


class LoggedTrace_ELBO(DataFitLog, Trace_ELBO):
    """Trace_ELBO (every KL term by Monte Carlo) that logs its data-fit part."""

    def _differentiable_loss_particle(self, model_trace, guide_trace):
        self._log_data_fit(model_trace)
        return super()._differentiable_loss_particle(model_trace, guide_trace)


class LoggedTraceMeanField_ELBO(DataFitLog, TraceMeanField_ELBO):
    """TraceMeanField_ELBO (closed-form KL where one exists) that logs its data-fit part, and
    computes log-densities only where the loss uses them: the observed sites, and the latent sites
    whose KL has no closed form. (Pyro's computes every site's prior and posterior log-density,
    then discards those of the closed-form sites.)"""

    def _get_trace(self, model, guide, args, kwargs):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        if is_validation_enabled():
            check_model_guide_match(model_trace, guide_trace, self.max_plate_nesting)
        model_trace, guide_trace = prune_subsample_sites(model_trace), prune_subsample_sites(guide_trace)
        model_trace.compute_log_prob(lambda _name, site: site["is_observed"])
        return model_trace, guide_trace

    def _differentiable_loss_particle(self, model_trace, guide_trace):
        self._log_data_fit(model_trace)
        elbo = 0.0
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample":
                continue
            if site["is_observed"]:
                elbo = elbo + site["log_prob_sum"]
                continue
            q = guide_trace.nodes[name]
            try:
                kl = kl_divergence(q["fn"], site["fn"])
            except NotImplementedError:  # Monte Carlo: log q(w) - log p(w) at the drawn w
                kl = q["fn"].log_prob(q["value"]) - site["fn"].log_prob(site["value"])
            elbo = elbo - scale_and_mask(kl, q["scale"], q["mask"]).sum()
        for name, q in guide_trace.nodes.items():  # auxiliary guide sites (e.g. Pyro's AutoNormal)
            if q["type"] == "sample" and name not in model_trace.nodes:
                elbo = elbo - scale_and_mask(q["fn"].log_prob(q["value"]), q["scale"], q["mask"]).sum()
        return -elbo.detach(), -elbo


ELBOS = {"meanfield": LoggedTraceMeanField_ELBO, "trace": LoggedTrace_ELBO}


def kl_estimators(elbo: str, model, guide, x: torch.Tensor, y: torch.Tensor) -> dict[str, list[str]]:
    """Which weight sites' KL terms the ELBO takes in closed form and which by Monte Carlo."""
    model_trace, guide_trace = LoggedTraceMeanField_ELBO()._get_trace(model, guide, (x, y), {})
    found: dict[str, list[str]] = {"closed_form": [], "monte_carlo": []}
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"]:
            continue
        closed = elbo == "meanfield" and _has_closed_form_kl(guide_trace.nodes[name]["fn"], site["fn"])
        found["closed_form" if closed else "monte_carlo"].append(name)
    return found


def _has_closed_form_kl(q, p) -> bool:
    try:
        kl_divergence(q, p)
    except NotImplementedError:  # torch's signal that no closed form is registered
        return False
    return True


def _kl_line(elbo: str, found: dict[str, list[str]]) -> str:
    parts = [f"{kind.replace('_', ' ')} for {len(names)} weight sites"
             for kind, names in found.items() if names]
    base = "TraceMeanField_ELBO" if elbo == "meanfield" else "Trace_ELBO"
    return f"ELBO {base}: KL {', '.join(parts)}"


class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss); the last good checkpoint is kept."""


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"bad config key 'device': {name!r} is not a device "
                          "(auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"bad config key 'device': {name} asked for but CUDA is not available; "
                          "use device=auto or device=cpu")
    return device


def make_scheduler(optimizer: torch.optim.Optimizer, t: DictConfig, epochs: int):
    """Per-epoch learning-rate schedule."""
    if t.lr_schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs, t.lr * t.lr_min_factor)
    if t.lr_schedule == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, t.lr_step, t.lr_gamma)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def fit(label: str, loss_fn: Callable, optimizer, scheduler, train_set: TensorSet,
        t: DictConfig, epochs: int, history: list, per_example: float,
        after_epoch: Callable[[dict, bool], Optional[bool]]) -> None:
    """The epoch loop shared by the BNN and its twin: minibatches on the device, a progress bar,
    a check for non-finite losses, then ``after_epoch(record, due)``, where ``due`` says it is
    time to evaluate and checkpoint (every ``t.eval_every`` epochs and the last); it returns True
    to stop early.

    ``loss_fn(x, y)`` returns a scalar; ``per_example`` converts it to nats per training example.
    """
    steps = math.ceil(len(train_set) / t.batch_size)
    # One bar per epoch; for one-step epochs (the toy sets) one bar over the epochs instead.
    over_epochs = tqdm(range(len(history), epochs), desc=label, dynamic_ncols=True,
                       disable=not t.progress or steps > 1, initial=len(history), total=epochs)
    for epoch in over_epochs:
        start = time.perf_counter()
        total = torch.zeros((), device=train_set.x.device)
        bar = tqdm(train_set.batches(t.batch_size), total=steps, leave=False, dynamic_ncols=True,
                   desc=f"{label} epoch {epoch + 1}/{epochs}", disable=not t.progress or steps == 1)
        for i, (xb, yb) in enumerate(bar):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(xb, yb)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            if i % 25 == 0 and not bar.disable:
                bar.set_postfix(loss=f"{total.item() / (i + 1) * per_example:.4f}", refresh=False)
        mean_loss = total.item() / steps * per_example
        seconds = time.perf_counter() - start
        if not math.isfinite(mean_loss):
            raise TrainingError(
                f"{label}: the loss became {mean_loss} in epoch {epoch + 1}; stopped, and the last "
                "good checkpoint is kept. Lower train.lr or model.init_scale and resume.")
        scheduler.step()
        record = {"epoch": epoch + 1, "steps": steps, "seconds": seconds, "loss": mean_loss,
                  "lr": optimizer.param_groups[0]["lr"]}
        if not over_epochs.disable:
            over_epochs.set_postfix(loss=f"{mean_loss:.4f}", refresh=False)
        if after_epoch(record, (epoch + 1) % t.eval_every == 0 or epoch + 1 == epochs):
            break


def train(cfg: DictConfig) -> dict:
    """Train the run ``cfg`` describes and write its directory; returns metrics.json's content."""
    cfg = resolved(cfg)
    device = pick_device(cfg.device)
    pyro.set_rng_seed(cfg.seed)  # python, numpy and torch
    run_dir = Path(cfg.run_dir)
    splits = load_splits(cfg, device)
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / "config.yaml")

    def log(message: str) -> None:  # above the progress bars, flushed so a log file keeps up
        tqdm.write(message)
        sys.stdout.flush()

    log(f"{cfg.arch} on {cfg.data.name} ({len(splits.train)} training examples), device {device}, "
        f"run directory {run_dir}")
    metrics = {"config": config_dict(cfg), "bayes": train_bayes(cfg, splits, device, run_dir, log)}
    if cfg.train.twin:
        metrics["twin"] = train_twin(cfg, splits, device, run_dir, log)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plots.training_curve(metrics, run_dir / "training.png")
    if cfg.data.name in TOY_FUNCTIONS:
        plot_toy(cfg, splits, run_dir, device)
    return metrics


def _evaluate(samples_fn: Callable[[torch.Tensor], torch.Tensor], data: TensorSet, cfg) -> dict:
    return predictive_metrics(samples_fn(data.x), data.y, architecture(cfg.arch).likelihood)


def _prefixed(prefix: str, figures: dict) -> dict:
    return {f"{prefix}/{k}": v for k, v in figures.items()}


def _summary(history: list, test: dict) -> dict:
    return {"history": history, "seconds_per_epoch": statistics.median(h["seconds"] for h in history),
            **_prefixed("test", test)}


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam with its fused kernel (one pass over all parameters; CPU and CUDA)."""
    return torch.optim.Adam(list(params), lr=lr, fused=True)


def bayes_objective(cfg, num_data: int, device):
    """(model, guide, ELBO, optimizer) as training uses them: ``elbo(model, guide)`` is the loss
    module; Adam moves the guide's parameters and the model's own (learned prior, noise scale).
    Training steps run under ``without_validation()``."""
    model, guide = build_from_config(cfg, num_data, device)
    elbo = ELBOS[cfg.train.elbo](num_particles=cfg.train.num_particles)
    return model, guide, elbo, adam([*guide.parameters(), *model.parameters()], cfg.train.lr)


def without_validation():
    """Pyro's and torch.distributions' argument checks off, for the training steps: they cost a
    third of a mnist_mlp step. The traced run of ``kl_estimators`` before training keeps them on."""
    return pyro.validation_enabled(False)


def train_bayes(cfg, splits: Splits, device, run_dir: Path, log) -> dict:
    t = cfg.train
    num_data = len(splits.train)
    model, guide, elbo, optimizer = bayes_objective(cfg, num_data, device)
    scheduler = make_scheduler(optimizer, t, t.epochs)
    history: list = []
    kl = kl_estimators(t.elbo, model, guide, splits.train.x[:2], splits.train.y[:2])
    log(_kl_line(t.elbo, kl))
    path = run_dir / CHECKPOINT
    if cfg.resume:
        state = read(path, device)
        model.load_state_dict(state["model"]), guide.load_state_dict(state["guide"])
        optimizer.load_state_dict(state["optimizer"]), scheduler.load_state_dict(state["scheduler"])
        history = state["history"]
        torch.set_rng_state(state["rng"])
        log(f"resumed {path} after epoch {state['epoch']}")
    loss_fn = elbo(model, guide)
    sample = lambda x, n: predict(model, guide, x, n)  # noqa: E731

    def after_epoch(record: dict, due: bool) -> None:
        data_fit = elbo.pop_data_fit() / record["steps"] / num_data
        record.update(data_fit=data_fit, kl=record["loss"] - data_fit, **hyperparameters(model))
        history.append(record)
        if not due:
            return
        if splits.val is not None:
            record.update(_prefixed("val", _evaluate(lambda x: sample(x, t.val_samples), splits.val, cfg)))
        log(_line("bayes", record))
        save_bayes(path, cfg, record["epoch"], num_data, model, guide, optimizer, scheduler, history)
        return reached(record, t.stop_at_accuracy)

    with without_validation():
        fit("bayes", loss_fn, optimizer, scheduler, splits.train, t, t.epochs, history,
            1.0 / num_data, after_epoch)
    test = _evaluate(lambda x: sample(x, t.test_samples), splits.test, cfg)
    log(f"bayes test ({t.test_samples} posterior samples): {_figures(test)}")
    return {**_summary(history, test), "kl_estimator": kl}


def train_twin(cfg, splits: Splits, device, run_dir: Path, log) -> dict:
    t = cfg.train
    epochs, lr = t.twin_epochs or t.epochs, t.twin_lr or t.lr
    net = twin_from_config(cfg, device)
    optimizer = adam(net.parameters(), lr)
    scheduler = make_scheduler(optimizer, t, epochs)
    history: list = []
    path = run_dir / TWIN_CHECKPOINT
    if cfg.resume and path.is_file():
        state = read(path, device)
        net.load_state_dict(state["net"]), optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        history = state["history"]

    if architecture(cfg.arch).likelihood == "categorical":
        loss_fn = lambda x, y: F.cross_entropy(net(x), y)  # noqa: E731
        outputs = lambda x: net(x).softmax(-1).unsqueeze(0)  # noqa: E731
    else:  # the twin outputs (mean, noise scale): maximum likelihood of both
        loss_fn = lambda x, y: -torch.distributions.Normal(*net(x).unbind(-1)).log_prob(y).mean()  # noqa: E731
        outputs = lambda x: net(x).unsqueeze(0)  # noqa: E731
    evaluate = torch.no_grad()(lambda data: _evaluate(outputs, data, cfg))

    def after_epoch(record: dict, due: bool) -> None:
        history.append(record)
        if not due:
            return
        if splits.val is not None:
            record.update(_prefixed("val", evaluate(splits.val)))
        log(_line("twin", record))
        save_twin(path, cfg, record["epoch"], net, optimizer, scheduler, history)
        return reached(record, t.stop_at_accuracy)

    fit("twin", loss_fn, optimizer, scheduler, splits.train, t, epochs, history, 1.0, after_epoch)
    test = evaluate(splits.test)
    log(f"twin test: {_figures(test)}")
    return _summary(history, test)


def reached(record: dict, target: Optional[float]) -> bool:
    """Whether an epoch's validation accuracy reached ``target`` (never when target is None)."""
    return target is not None and record.get("val/accuracy", -1.0) >= target


def _figures(d: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in d.items())


def _line(label: str, record: dict) -> str:
    shown = {k: v for k, v in record.items() if k not in ("epoch", "lr", "steps")}
    return f"{label} epoch {record['epoch']}: {_figures(shown)}"


@torch.no_grad()
def plot_toy(cfg, splits: Splits, run_dir: Path, device) -> None:
    """The toy run's predictive, epistemic and aleatoric bands, over ranges well beyond the data."""
    from .checkpoint import load

    trained = load(run_dir, device)
    truth_fn = TOY_FUNCTIONS[cfg.data.name]
    panels = []
    for lo, hi in TOY_PLOT_RANGES[cfg.data.name]:
        grid = torch.linspace(lo, hi, 801, device=device)
        samples = predict(trained.model, trained.guide, grid.unsqueeze(-1), cfg.train.test_samples)
        twin = trained.twin(grid.unsqueeze(-1)) if trained.twin is not None else None
        panels.append((grid, samples, twin, truth_fn(grid)))
    plots.toy_predictive(panels, splits.train.x.squeeze(-1), splits.train.y, run_dir / "predictive.png",
                         f"{cfg.arch} on {cfg.data.name} ({cfg.model.noise} noise)")


def config_for_run(name: str | None, overrides: list[str]) -> DictConfig:
    """The config a command line asks for; ``resume=DIR`` starts from DIR's stored config."""
    resume = [o for o in overrides if o.startswith("resume=")]
    if not resume:
        return load_config(name or "toy_mlp", overrides)
    run_dir = Path(resume[-1].split("=", 1)[1])
    if name is not None:
        raise ConfigError("resume=DIR continues DIR's own config: give no config name with it")
    stored = run_dir / "config.yaml"
    if not stored.is_file():
        raise ConfigError(f"bad config key 'resume': {stored} does not exist")
    cfg = make_config(OmegaConf.load(stored), [*overrides, f"run_dir={run_dir}"])
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bnn_zoo.train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="CONFIG is a name from configs/ (toy_mlp, mnist_mlp, lenet, ...) or a .yaml path;\n"
               "overrides are dotted key=value pairs, e.g. train.epochs=3 data.root=DIR "
               "run_dir=runs/x device=cpu")
    parser.add_argument("args", nargs="*", metavar="CONFIG | key=value")
    args = parser.parse_args(argv).args
    name, overrides = (args[0], args[1:]) if args and "=" not in args[0] else (None, args)
    try:
        train(config_for_run(name, overrides))
    except (ConfigError, DataError, TrainingError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
