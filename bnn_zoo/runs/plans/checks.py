"""The checks a config passes before anything runs: names from their lists, every number in its
range, keys that must agree; each failure one line naming the key, the value it quotes shortened.

Usage: ``check(cfg)  # ConfigError("bad value for train.lr: must be a positive number, got -1.0")``
(the layout of a config's keys, before they are merged, is ``bnn_zoo.runs.plans.layout``'s)
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

import torch
from omegaconf import DictConfig, OmegaConf

from ...abstain.certify import check_settings
from ...abstain.conformal import SCORES as SET_SCORES
from ...abstain.rule import DENSITY
from ...core.networks.architectures import ARCHITECTURES, TOY_DATA, make_net
from ...core.fast.captured_step import MODES as CAPTURE_MODES
from ...core.errors import ConfigError, short_quotes, show
from ...core.networks.guides import GUIDES
from ...core.networks.likelihoods import NOISE_MODES
from ...core.networks.nets import ImageTooSmall
from ...core.networks.priors import PRIORS
from ...data.shifted.augment import misfit as augment_misfit
from ...data.shifted.augment import problem as augment_problem
from ...data.shifted.outliers import KINDS as OUTLIER_KINDS
from ...data.shifted.ood_sets import own_set_problem
from ...data.shifted.outliers import problem as outliers_problem
from ...data.own import OWN_DATA, ROWS, name_problem
from ...posterior import KINDS as POSTERIORS
from ...posterior import fitted_kinds
from .data_keys import check_fits, data_kind
from .factory import build_twin
from .plan import Plan, recipe

MAX_SAMPLES = 10000  # posterior samples per input, for any figure
MAX_COUNT = 10 ** 9  # the largest whole number a count (epochs, batch size, width, ...) may be
DEVICES = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


HIDDEN = "give one or more whole positive widths (for example [400, 400]), or null for the architecture's default"


COUNT, SIZE = (1, MAX_COUNT), (0, MAX_COUNT)
# The whole-number keys: (least, most); null, where allowed, means a default
WHOLE = {"model.guide_rank": COUNT, "data.val_size": SIZE, "data.image_size": COUNT, "data.channels": (1, 3),
         "data.train_limit": COUNT, "data.test_limit": COUNT,
         "train.epochs": COUNT, "train.steps": COUNT, "train.patience": COUNT, "train.batch_size": COUNT,
         "train.lr_step": COUNT, "train.num_particles": COUNT, "train.threads": COUNT,
         "train.val_samples": (1, MAX_SAMPLES), "train.test_samples": (1, MAX_SAMPLES), "train.eval_every": COUNT,
         "train.twin_epochs": COUNT, "train.members": COUNT, "mcmc.num_samples": COUNT,
         "mcmc.warmup_steps": SIZE, "mcmc.max_tree_depth": COUNT, "abstention.samples": (1, MAX_SAMPLES),
         "seed": (0, 2 ** 32 - 1)}
# Keys that must be finite positive numbers
POSITIVE = ("model.prior_scale", "model.mixture_scale1", "model.mixture_scale2", "model.init_scale",
            "model.noise_scale", "train.lr", "train.lr_gamma", "train.kl_weight", "train.twin_lr")
# Keys that are fractions, and the interval of 0 and 1 each must lie in (the abstention section's
# rule settings are checked by bnn_zoo.abstain.certify)
FRACTIONS = {"model.mixture_pi": "(0, 1)", "train.lr_min_factor": "[0, 1]", "train.twin_dropout": "[0, 1)",
             "train.stop_at_accuracy": "(0, 1]", "mcmc.target_accept": "(0, 1)", "abstention.alpha": "(0, 1)"}


def check(cfg: DictConfig) -> None:
    """What types cannot say: names from a list, ranges, and keys that must agree."""
    spec = recipe(cfg)
    suits = (*spec.datasets, *(OWN_DATA if spec.likelihood == "categorical" else ROWS))  # a folder holds classes
    if cfg.data.name is not None and cfg.data.name not in suits:
        raise ConfigError(f"bad value for data.name: {show(cfg.data.name)} does not suit "
                          f"{cfg.arch}; choose one of {', '.join(suits)}")
    fitted = fitted_kinds()
    unknown = next((name for name in cfg.train.posteriors if name not in fitted), None)
    if unknown is not None:
        raise ConfigError(f"bad value for train.posteriors: {show(unknown)} is no posterior fitted after training; "
                          f"choose from {', '.join(fitted)} (or register one: bnn_zoo.posterior.register)")
    for key in ("train.posteriors", "train.drop_posteriors"):
        named = list(OmegaConf.select(cfg, key))
        twice = next((name for name in named if named.count(name) > 1), None)
        if twice is not None:
            raise ConfigError(f"bad config key {key!r}: {show(twice)} is named {named.count(twice)} times; name each "
                              "kind once")
    if cfg.train.drop_posteriors and not cfg.resume:
        raise ConfigError("bad config key 'train.drop_posteriors': it deletes fitted posteriors a run holds, with "
                          "resume=RUN; a new run fits those train.posteriors names and no others")
    if cfg.train.posteriors and not cfg.train.twin:
        raise ConfigError("bad config key 'train.posteriors': they are fitted around the twin; train it too (train.twin=true)")
    data = cfg.data.name or _told(cfg.data.path) or spec.datasets[0]  # table_mlp's default is a table of yours
    if data in OWN_DATA and not cfg.data.path:
        raise ConfigError(f"bad config key 'data.path': data.name={data} reads your own data; give "
                          "its folder or file as data.path=PATH")
    for trouble in (augment_problem(cfg.augment), outliers_problem(cfg.outliers)):  # a bad value first, whatever data
        if trouble is not None:
            raise ConfigError(trouble)
    if spec.likelihood != "categorical" and any(cfg.outliers[kind] is not None for kind in OUTLIER_KINDS):
        raise ConfigError(f"bad config key 'outliers': outliers are observed as 'no class', and {cfg.arch} regresses "
                          "(no classes): leave it out")
    check_fits(cfg, data)
    if cfg.model.noise_scale is None and spec.likelihood == "gaussian" and data not in OWN_DATA:
        raise ConfigError(f"bad config key 'model.noise_scale': null starts the noise where a least-squares line "
                          f"leaves it, which needs your own table; {data} takes a number (for example 0.1)")
    if cfg.model.hidden is not None and not spec.has_hidden:
        raise ConfigError(f"bad config key 'model.hidden': {cfg.arch} has a fixed shape")
    if cfg.train.twin_dropout and cfg.arch not in ARCHITECTURES:
        raise ConfigError(f"bad config key 'train.twin_dropout': {cfg.arch} keeps its own layers; MC dropout is "
                          "for the registered recipes (put dropout in your network instead)")
    choices = {"model.prior": PRIORS, "model.noise": NOISE_MODES, "model.reparam": ("weights", "local"),
               "model.guide": GUIDES, "infer": ("svi", "nuts"), "train.elbo": ("meanfield", "trace"),
               "train.capture": ("auto", *CAPTURE_MODES), "abstention.set_score": SET_SCORES,
               "train.lr_schedule": ("constant", "cosine", "step")}
    for key, allowed in choices.items():
        if OmegaConf.select(cfg, key) not in allowed:
            raise ConfigError(f"bad value for {key}: choose {' or '.join(allowed)}, "
                              f"not {show(OmegaConf.select(cfg, key))}")
    check_device_name(cfg.device)  # whether this machine has it is pick_device's to say
    for key, (least, most) in WHOLE.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and not least <= value <= most:
            raise ConfigError(f"bad value for {key}: must be a whole number from {least} to {most}, "
                              f"got {show(value)}")
    t = cfg.train
    if (t.epochs is None) == (t.steps is None):
        raise ConfigError("bad config key 'train.steps': give train.epochs or train.steps, not both (train.epochs=null "
                          "plans the run in steps, train.steps=null in epochs)" if t.steps is not None else
                          "bad config key 'train.epochs': give train.epochs=N or train.steps=N, the run's length")
    if t.patience is not None and (cfg.data.val_size == 0 or data in TOY_DATA):
        fix = f"the {data} set has none: drop it (train.patience=null)" if data in TOY_DATA else \
            "data.val_size=0 holds none out: give data.val_size=N or train.patience=null"
        raise ConfigError(f"bad config key 'train.patience': early stopping watches the validation NLL, and {fix}")
    if cfg.data.channels == 2:
        raise ConfigError("bad value for data.channels: choose 1 (gray) or 3 (RGB), not 2")
    for key in POSITIVE:
        value = OmegaConf.select(cfg, key)
        if value is not None and not 0 < value < float("inf"):
            raise ConfigError(f"bad value for {key}: must be a positive number, got {show(value)}")
    for key, interval in FRACTIONS.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and not ((value > 0 if interval[0] == "(" else value >= 0) and
                                      (value < 1 if interval[-1] == ")" else value <= 1)):
            raise ConfigError(f"bad value for {key}: must lie in {interval}, got {show(value)}")
    for key in ("data.classes", "data.features"):  # a stored config's names are printed as they are
        problem = next(filter(None, map(name_problem, map(str, OmegaConf.select(cfg, key) or []))), None)
        if problem is not None:
            raise ConfigError(f"bad value for {key}: {problem}")
    hidden = cfg.model.hidden
    if hidden is not None and not (len(hidden) and all(isinstance(w, int) and 0 < w <= MAX_COUNT for w in hidden)):
        raise ConfigError(f"bad value for model.hidden: {HIDDEN}; got {show(OmegaConf.to_container(hidden))}")
    fewest = min(cfg.train.test_samples, cfg.abstention.samples)
    if cfg.train.members > fewest:  # a mixture draws at least one sample from every member
        raise ConfigError(f"bad config key 'train.members': an ensemble of {cfg.train.members} needs at least "
                          f"as many posterior samples; train.test_samples and abstention.samples are {fewest} "
                          "at the least: raise them or use fewer members")
    last = cfg.seed + cfg.train.members - 1  # member i's seed is seed + i
    if last >= 2 ** 32:
        raise ConfigError(f"bad config key 'seed': with train.members={cfg.train.members} the members use seeds "
                          f"{cfg.seed}..{last}; seed + members - 1 must be below 2^32")
    for key in ("run_dir", "resume"):
        value = OmegaConf.select(cfg, key)
        try:
            is_file = value is not None and Path(value).exists() and not Path(value).is_dir()
        except OSError as err:  # a name too long, say
            raise ConfigError(f"bad config key {key!r}: cannot use {show(value)} ({err.strerror})") from None
        if is_file:
            raise ConfigError(f"bad config key {key!r}: {value} is a file; a run directory is a folder")
    a = cfg.abstention
    if a.signal == DENSITY:
        raise ConfigError("bad config key 'abstention.signal': choose mutual_information or entropy; a feature-density "
                          "gate is certified in Python (bnn_zoo.abstain.certify.certify(..., density=...)), not by a run")
    try:  # the checks certify and Rule make, before any training
        check_settings(a.risk, a.delta, a.max_refusal, a.quantile, a.signal, a.after_alarm_refusal,
                       a.after_alarm_quantile)
    except ValueError as err:
        raise ConfigError(f"bad config section 'abstention': {short_quotes(str(err))}") from None


def _told(path: str | None) -> str | None:
    """The kind of data ``data.path`` holds, where data.name is left out and its path tells it
    (``resolved`` names a path that does not); None where it does not."""
    try:
        return data_kind(path) if path else None
    except ConfigError:
        return None


def check_network_fits(plan: Plan) -> None:
    """The network a plan names must be built, and take its data's shape: a network by name (its
    factory called, under ``bnn_zoo.core.networks.network_names``' guard) or one on your own data, once its
    shape is found; built once, before a run starts, not at every config that names it, and from a
    fork of torch's random stream (the run's draws stay as they were)."""
    if plan.data.input_shape is None and ":" not in plan.arch:  # MNIST's and the toy sets' shapes are the recipes' own
        return
    try:
        with torch.random.fork_rng(devices=[]):
            make_net(plan.networks.recipe, plan.networks.hidden, plan.networks.model.noise)
    except ImageTooSmall as err:  # what resizes them, and a network that takes any size
        resize = (f"resize them with data.image_size=N, N at least {err.least}" if plan.data.name == "folder" else
                  f"give images of at least {err.least}x{err.least}")
        raise ConfigError(f"bad config key 'arch': {err}: {resize}, or train arch=mnist_mlp, which takes images of "
                          "any size") from None
    except ValueError as err:
        raise ConfigError(f"bad config key 'arch': {short_quotes(str(err))}") from None


def cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system tells it; else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_threads(threads: int | None) -> None:
    """``train.threads`` no more than the cores this process has (``cores``): said before the run
    folder is made (a billion ran the OpenMP runtime out of memory after it was; a thousand on two
    cores trained 94 times slower, without a word)."""
    have = cores()
    if threads is not None and threads > have:
        raise ConfigError(f"bad value for train.threads: {threads} CPU threads, and this process has {have} CPU "
                          f"core{'s' if have > 1 else ''}: give at most train.threads={have}, or train.threads=null "
                          "(chosen from a step's work)")


def check_on_machine(plan: Plan) -> None:
    """What a plan asks of this machine, said before anything is written: no more train.threads than
    its cores (``check_threads``), data.ood's folders of images (``check_own_sets``)."""
    check_threads(plan.train.threads)
    check_own_sets(plan.data.ood)


def check_own_sets(ood: Mapping[str, str]) -> None:
    """Each of ``data.ood``'s sets of your own (name: folder of images) as evaluate's --ood checks
    NAME=FOLDER (``own_set_problem``): said before the run folder is made, not when it is evaluated."""
    for name, folder in ood.items():
        if (problem := own_set_problem(name, folder, "data.ood={{{name}: {folder}}}")) is not None:
            raise ConfigError(f"bad value for data.ood: {{{name}: {folder}}}: {problem}")


def check_augment(plan: Plan) -> None:
    """An augment section turned on transforms images: refused, once the run's own data is read and
    before the run folder is made, where that data holds rows (a tensors file of [N, features])."""
    if (trouble := augment_misfit(plan.augment, plan.data)) is not None:
        raise ConfigError(f"bad config key 'augment': it {trouble}")


def check_fitted_kinds(plan: Plan, num_data: int) -> None:
    """Each kind ``train.posteriors`` names can be fitted around the plan's twin on ``num_data``
    training inputs (its ``cannot_fit``): said in one line before the first epoch, not after the
    run. The twin is built once, from a fork of torch's random stream."""
    if not plan.train.posteriors:
        return
    with torch.random.fork_rng(devices=[]):
        twin = build_twin(plan.networks)
    why = {name: POSTERIORS[name].cannot_fit(twin, num_data) for name in fitted_kinds()}
    refused = next((name for name in plan.train.posteriors if why.get(name)), None)
    if refused is not None:
        fits = [name for name in fitted_kinds() if not why[name]]
        raise ConfigError(f"bad config key 'train.posteriors': {refused} {why[refused]}; leave it out" +
                          (f" (for this run: {', '.join(fits)})" if fits else ""))


def check_device_name(name: str) -> None:
    """A device's name must be one of pick_device's forms, whatever this machine has."""
    if not DEVICES.fullmatch(name):
        raise ConfigError(f"bad value for device: {show(name)} is not a device; choose auto, cpu, cuda, "
                          "cuda:N or mps")


def pick_device(name: str) -> torch.device:
    """The device a config or command line names: auto (CUDA when available), cpu, cuda, cuda:N, mps."""
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = name.partition(":")
    if kind != "cpu" and not (torch.cuda if kind == "cuda" else torch.backends.mps).is_available():
        raise ConfigError(f"bad config key 'device': {name} asked for but {kind.upper()} is not available; "
                          "use device=auto or device=cpu")
    count = torch.cuda.device_count()
    if index and int(index) >= count:
        raise ConfigError(f"bad config key 'device': {name} asked for but this machine has {count} CUDA "
                          f"device(s); use cuda:0 to cuda:{count - 1}")
    return torch.device(name)
