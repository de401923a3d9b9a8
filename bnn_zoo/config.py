"""Run configuration: typed defaults, YAML files that hold only what differs, dotted overrides.

Usage: ``cfg = load_config("lenet", ["train.epochs=1", "data.root=/data"])``
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .abstention import Rule
from .calibration import check_settings
from .errors import ConfigError
from .guides import GUIDES
from .likelihoods import NOISE_MODES
from .priors import PRIORS
from .zoo import ARCHITECTURES


MAX_SAMPLES = 10000  # posterior samples per input, for any figure


@dataclass
class ModelConfig:
    # Hidden widths of the MLPs; null takes the architecture's default (toy_mlp: [50, 50],
    # mnist_mlp: [400, 400]). LeNet-5's shape is fixed.
    hidden: Optional[list[int]] = None
    # Prior on every weight and bias: gaussian, N(0, prior_scale^2), or scale_mixture, Bayes by
    # Backprop's mixture_pi N(0, mixture_scale1^2) + (1 - mixture_pi) N(0, mixture_scale2^2).
    prior: str = "gaussian"
    prior_scale: float = 1.0
    mixture_pi: float = 0.25
    mixture_scale1: float = 0.75
    mixture_scale2: float = 0.1
    # Empirical Bayes: learn the prior's hyperparameters (shared by all layers) with the ELBO.
    learn_prior: bool = False
    # Initial posterior standard deviation of AutoNormal. Small (0.01, not Pyro's 0.1) so the
    # first steps see nearly the deterministic network: on mnist_mlp, 0.1 gave 34% / 49%
    # validation accuracy after epochs 1 / 2, against 95.8% / 96.3% with 0.01.
    init_scale: float = 0.01
    # The posterior approximation: meanfield (an independent Normal per weight), lowrank (a Normal
    # with guide_rank correlation factors) or delta (point weights: the MAP estimate).
    guide: str = "meanfield"
    guide_rank: int = 10
    # weights: draw one weight set per minibatch. local: each example its own weights, drawn as
    # pre-activations (local reparameterization) in linear layers and by Flipout in convolutions.
    reparam: str = "weights"
    # Regression only. noise: fixed (noise_scale), homoscedastic (one learned scale, starting at
    # noise_scale) or heteroscedastic (the network predicts the scale at each input).
    noise: str = "fixed"
    noise_scale: float = 1.0


@dataclass
class DataConfig:
    # mnist, fashion_mnist (classifiers) or polynomial, sinusoid (toy_mlp); null: the
    # architecture's default.
    name: Optional[str] = None
    # Folder holding <Name>/raw/ as torchvision lays it out; null: $BNN_ZOO_DATA, else ./data.
    root: Optional[str] = None
    download: bool = True
    # Images held out of the training set for validation and threshold calibration.
    val_size: int = 5000
    # Use only the first N training / test images (quick runs and tests); null: all.
    train_limit: Optional[int] = None
    test_limit: Optional[int] = None


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    # constant, cosine (to lr * lr_min_factor over the run) or step (x lr_gamma every lr_step epochs)
    lr_schedule: str = "constant"
    lr_min_factor: float = 0.01
    lr_step: int = 10
    lr_gamma: float = 0.5
    num_particles: int = 1
    # The negative ELBO (bnn_zoo.elbo.SplitELBO), logged as data fit + KL. meanfield: the KL in
    # closed form where the prior has one (gaussian), by Monte Carlo where not (scale_mixture), as
    # Pyro's TraceMeanField_ELBO; trace: Monte Carlo throughout, as Pyro's Trace_ELBO.
    elbo: str = "meanfield"
    # Tempering: minimize data fit + kl_weight x KL (1: the ELBO, the Bayesian posterior).
    kl_weight: float = 1.0
    # Posterior samples used for the validation figures after each epoch and the final test.
    val_samples: int = 20
    test_samples: int = 100
    # Evaluate on the validation set (and checkpoint) every N epochs.
    eval_every: int = 1
    # Also train the deterministic twin (same network, point weights, maximum likelihood).
    twin: bool = True
    twin_epochs: Optional[int] = None  # null: same as epochs
    twin_lr: Optional[float] = None  # null: same as lr
    # MC dropout: train the twin with dropout at this rate after its hidden layers (LeNet-5: the fully
    # connected ones) and sample it with dropout on (bnn_zoo.ladder.DropoutPosterior); 0: a plain twin.
    twin_dropout: float = 0.0
    # An ensemble: train this many copies of the network and of its twin, whose weights start from
    # seeds seed, seed + 1, ... on the same data; the posterior is their mixture, the twins' a deep
    # ensemble. Member 0 is the run itself, member N lives in RUN_DIR/members/N.
    members: int = 1
    member: int = 0  # which member a run is (set by training for RUN_DIR/members/N)
    progress: bool = True
    # Stop early once the validation accuracy reaches this (checked every eval_every epochs).
    stop_at_accuracy: Optional[float] = None


@dataclass
class MCMCConfig:
    # NUTS over the whole training set, started at the plain network's initialization.
    num_samples: int = 300
    warmup_steps: int = 300
    max_tree_depth: int = 8
    target_accept: float = 0.8


@dataclass
class AbstentionConfig:
    # After training a classifier, certify the abstention rule on the validation split
    # (bnn_zoo.calibration, written to calibration.json and used by predict, evaluate and the
    # scripts): with probability at least 1 - delta, at most `risk` errors among accepted inputs;
    # the epistemic gate is the strictest that refuses at most max_refusal of validation.
    calibrate: bool = True
    risk: float = 0.01
    delta: float = 0.05
    max_refusal: float = 0.02
    # The Bayesian network's gate: mutual_information or entropy (bits). The twin's is entropy
    # (a single softmax has no mutual information).
    signal: str = "mutual_information"
    quantile: float = 0.5
    samples: int = 100  # posterior samples per validation input


@dataclass
class Config:
    arch: str = "toy_mlp"
    # svi: variational inference (the guide of model.guide). nuts: also draw an HMC posterior (NUTS,
    # settings under mcmc) and compare its predictive with the mean-field one's.
    infer: str = "svi"
    run_dir: Optional[str] = None  # null: runs/<arch>
    seed: int = 0
    device: str = "auto"  # auto (CUDA when available), cpu, cuda, cuda:1, ...
    resume: Optional[str] = None  # a run directory to continue
    overwrite: bool = False  # replace the run already in run_dir (else a new run there stops)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mcmc: MCMCConfig = field(default_factory=MCMCConfig)
    abstention: AbstentionConfig = field(default_factory=AbstentionConfig)


def config_path(name: str) -> Path:
    """Find a config by path, or by name among the shipped configs (``configs/NAME.yaml``)."""
    path = Path(name)
    # A path if it looks like one; a bare name is a shipped config even when the working
    # directory holds a folder of that name (a run directory, say).
    if path.suffix in (".yaml", ".yml") or path.is_file() or len(path.parts) > 1:
        if not path.is_file():
            raise ConfigError(f"config file {name!r} does not exist")
        return path
    for folder in config_dirs():
        if (folder / f"{name}.yaml").is_file():
            return folder / f"{name}.yaml"
    raise ConfigError(f"no config named {name!r}; shipped configs: {', '.join(config_names())}; "
                      "or give a path to a .yaml file")


def config_dirs() -> list[Path]:
    """Where config names are looked up: the installed package's data, then a source checkout's."""
    dirs = [Path(str(resources.files("bnn_zoo"))) / "configs",
            Path(__file__).resolve().parent.parent / "configs"]
    return [d for d in dirs if d.is_dir()]


def config_names() -> list[str]:
    return sorted({p.stem for d in config_dirs() for p in d.glob("*.yaml")})


def make_config(base: Any = None, overrides: list[str] | dict | None = None) -> DictConfig:
    """Merge ``base`` (a dict or DictConfig) and overrides onto the typed defaults.

    Unknown keys and values of the wrong type raise ConfigError naming the key.
    """
    cfg = OmegaConf.structured(Config)
    if base is not None and not isinstance(base, (dict, DictConfig)):
        raise ConfigError(f"a config is a mapping of sections (arch: lenet, train: {{epochs: 3}}, ...), "
                          f"not a {type(base).__name__}")
    try:
        if base is not None:
            _check_sections(base)
            cfg = OmegaConf.merge(cfg, base)
        if isinstance(overrides, dict):
            _check_sections(overrides)
            cfg = OmegaConf.merge(cfg, overrides)
        elif overrides:
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ConfigError(f"override {bad[0]!r} is not of the form key=value "
                                  "(for example train.epochs=3)")
            dotted = OmegaConf.from_dotlist(list(overrides))
            _check_sections(dotted)
            cfg = OmegaConf.merge(cfg, dotted)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        raise ConfigError(f"bad config key {key!r}: {err.msg if hasattr(err, 'msg') else err}"
                          .split("\n    full_key")[0]) from None
    _check(cfg)
    return cfg


def _check_sections(base) -> None:
    """Each section (model, data, train, mcmc, abstention) must be a mapping of its keys."""
    for section in ("model", "data", "train", "mcmc", "abstention"):
        value = base.get(section) if hasattr(base, "get") else None
        if value is not None and not isinstance(value, (dict, DictConfig)):
            raise ConfigError(f"bad config section {section!r}: a mapping of its keys (for example "
                              f"{section}: {{{_example(section)}}}), not {value!r}")


def _example(section: str) -> str:
    return next(f"{k}: {v}" for k, v in OmegaConf.to_container(OmegaConf.structured(Config)[section]).items()
                if v is not None)


def load_config(name: str | None = None, overrides: list[str] | None = None) -> DictConfig:
    """Defaults, then the named or given YAML file, then ``key=value`` overrides."""
    base = None
    if name is not None:
        path = config_path(name)
        try:
            base = OmegaConf.load(path)
        except Exception as err:  # YAML syntax errors come in many types
            raise ConfigError(f"cannot read config {str(path)!r}: {err}") from None
        if not isinstance(base, DictConfig):
            raise ConfigError(f"config {str(path)!r} holds a {type(base).__name__} at its top level; a config "
                              "is a mapping of sections (arch: lenet, train: {epochs: 3}, ...)")
    return make_config(base, overrides)


def _check(cfg: DictConfig) -> None:
    if cfg.arch not in ARCHITECTURES:
        raise ConfigError(f"bad config key 'arch': unknown architecture {cfg.arch!r}; "
                          f"choose one of {', '.join(ARCHITECTURES)}")
    spec = ARCHITECTURES[cfg.arch]
    if cfg.data.name is not None and cfg.data.name not in spec.datasets:
        raise ConfigError(f"bad config key 'data.name': {cfg.data.name!r} does not suit "
                          f"{cfg.arch}; choose one of {', '.join(spec.datasets)}")
    if cfg.model.hidden is not None and not spec.has_hidden:
        raise ConfigError(f"bad config key 'model.hidden': {cfg.arch} has a fixed shape")
    choices = {"model.prior": (cfg.model.prior, PRIORS), "model.noise": (cfg.model.noise, NOISE_MODES),
               "model.reparam": (cfg.model.reparam, ("weights", "local")),
               "model.guide": (cfg.model.guide, GUIDES), "infer": (cfg.infer, ("svi", "nuts")),
               "train.elbo": (cfg.train.elbo, ("meanfield", "trace"))}
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise ConfigError(f"bad config key {key!r}: choose {' or '.join(allowed)}, not {value!r}")
    if not 0 < cfg.model.mixture_pi < 1:
        raise ConfigError(f"bad config key 'model.mixture_pi': must lie strictly between 0 and 1, "
                          f"got {cfg.model.mixture_pi}")
    if cfg.train.lr_schedule not in ("constant", "cosine", "step"):
        raise ConfigError("bad config key 'train.lr_schedule': choose constant, cosine or step, "
                          f"not {cfg.train.lr_schedule!r}")
    positive = {"model.prior_scale": cfg.model.prior_scale, "model.init_scale": cfg.model.init_scale,
                "model.mixture_scale1": cfg.model.mixture_scale1,
                "model.mixture_scale2": cfg.model.mixture_scale2,
                "model.noise_scale": cfg.model.noise_scale, "train.epochs": cfg.train.epochs,
                "train.batch_size": cfg.train.batch_size, "train.lr": cfg.train.lr,
                "train.lr_step": cfg.train.lr_step, "train.lr_gamma": cfg.train.lr_gamma,
                "train.kl_weight": cfg.train.kl_weight,
                "train.num_particles": cfg.train.num_particles,
                "train.val_samples": cfg.train.val_samples,
                "train.test_samples": cfg.train.test_samples, "train.eval_every": cfg.train.eval_every,
                "model.guide_rank": cfg.model.guide_rank, "train.members": cfg.train.members,
                "mcmc.num_samples": cfg.mcmc.num_samples,
                "mcmc.max_tree_depth": cfg.mcmc.max_tree_depth, "abstention.samples": cfg.abstention.samples}
    # null means "the default" for these; a number must be a real one
    positive.update({key: value for key, value in (
        ("train.twin_epochs", cfg.train.twin_epochs), ("train.twin_lr", cfg.train.twin_lr),
        ("data.train_limit", cfg.data.train_limit), ("data.test_limit", cfg.data.test_limit))
        if value is not None})
    for key, value in positive.items():
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"bad config key {key!r}: must be a positive number, got {value}")
    for key in ("train.val_samples", "train.test_samples", "abstention.samples"):
        if OmegaConf.select(cfg, key) > MAX_SAMPLES:
            raise ConfigError(f"bad config key {key!r}: at most {MAX_SAMPLES} posterior samples (the "
                              f"predictive holds samples x inputs x classes numbers), got "
                              f"{OmegaConf.select(cfg, key)}")
    if cfg.model.hidden is not None and not (len(cfg.model.hidden) and all(w > 0 for w in cfg.model.hidden)):
        raise ConfigError(f"bad config key 'model.hidden': give one or more positive widths (for example "
                          f"[400, 400]), or null for the architecture's default; got {list(cfg.model.hidden)}")
    if cfg.data.val_size < 0 or cfg.mcmc.warmup_steps < 0:
        key = "data.val_size" if cfg.data.val_size < 0 else "mcmc.warmup_steps"
        raise ConfigError(f"bad config key {key!r}: must be >= 0, got {OmegaConf.select(cfg, key)}")
    if not 0 <= cfg.train.lr_min_factor <= 1:
        raise ConfigError(f"bad config key 'train.lr_min_factor': must lie in [0, 1], got {cfg.train.lr_min_factor}")
    if not 0 <= cfg.train.twin_dropout < 1:
        raise ConfigError(f"bad config key 'train.twin_dropout': a dropout rate in [0, 1), got {cfg.train.twin_dropout}")
    fewest = min(cfg.train.test_samples, cfg.abstention.samples)
    if cfg.train.members > fewest:  # a mixture draws at least one sample from every member
        raise ConfigError(f"bad config key 'train.members': an ensemble of {cfg.train.members} needs at least "
                          f"as many posterior samples; train.test_samples and abstention.samples are {fewest} "
                          "at the least: raise them or use fewer members")
    if cfg.train.member < 0 or (cfg.train.member and cfg.train.members > 1):
        raise ConfigError(f"bad config key 'train.member': set by training for an ensemble's members; leave it "
                          f"out (got member {cfg.train.member} of members {cfg.train.members})")
    if not 0 <= cfg.seed < 2 ** 32:
        raise ConfigError(f"bad config key 'seed': must lie in [0, 2^32), got {cfg.seed}")
    for key in ("run_dir", "resume"):
        value = OmegaConf.select(cfg, key)
        if value is not None and Path(value).exists() and not Path(value).is_dir():
            raise ConfigError(f"bad config key {key!r}: {value} is a file; a run directory is a folder")
    a = cfg.abstention
    try:  # the checks certify and Rule make, before any training
        check_settings(a.risk, a.delta, a.max_refusal)
        Rule(a.quantile, signal=a.signal)
    except ValueError as err:
        raise ConfigError(f"bad config section 'abstention': {err}") from None
    if not 0 < cfg.mcmc.target_accept < 1:
        raise ConfigError(f"bad config key 'mcmc.target_accept': must lie strictly between 0 and 1, "
                          f"got {cfg.mcmc.target_accept}")


def resolved(cfg: DictConfig) -> DictConfig:
    """Fill the architecture's defaults (``null`` entries) so a checkpoint rebuilds exactly."""
    cfg = cfg.copy()
    spec = ARCHITECTURES[cfg.arch]
    if cfg.model.hidden is None and spec.has_hidden:
        cfg.model.hidden = list(spec.default_hidden)
    if cfg.data.name is None:
        cfg.data.name = spec.datasets[0]
    if cfg.run_dir is None:
        cfg.run_dir = f"runs/{cfg.arch}"
    return cfg


def pick_device(name: str) -> torch.device:
    """The device a config or command line names: auto (CUDA when available), cpu, cuda, cuda:N."""
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
