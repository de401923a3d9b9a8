"""Run configuration: typed defaults, YAML files that hold only what differs, dotted overrides.

Usage: ``cfg = load_config("lenet", ["train.epochs=1", "data.root=/data"])``
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .checks import check, check_layout, data_kind, recipe, short_quotes, show
from ..core.errors import ConfigError
from ..core.architectures import CLASSIFIER_DATA


@dataclass
class ModelConfig:
    # Hidden widths of the MLPs; null takes the architecture's default (toy_mlp: [50, 50],
    # mnist_mlp: [400, 400], table_mlp: [50]). LeNet-5's shape is fixed.
    hidden: Optional[list[int]] = None
    # Prior on every weight and bias: gaussian, N(0, prior_scale^2); fan_in, N(0, prior_scale^2 / fan_in)
    # on a weight of a layer with fan_in inputs and N(0, prior_scale^2) on a bias (functions that spread
    # about prior_scale at any width); or scale_mixture, Bayes by Backprop's mixture_pi N(0,
    # mixture_scale1^2) + (1 - mixture_pi) N(0, mixture_scale2^2).
    prior: str = "gaussian"
    prior_scale: float = 1.0
    mixture_pi: float = 0.25
    mixture_scale1: float = 0.75
    mixture_scale2: float = 0.1
    # Empirical Bayes: learn the prior's hyperparameters (shared by all layers) with the ELBO.
    learn_prior: bool = False
    # Initial posterior sd of AutoNormal: small (0.01, not Pyro's 0.1), so the first steps see nearly the
    # deterministic network (mnist_mlp validation after epochs 1 / 2: 34% / 49% with 0.1, 95.8% / 96.3% with 0.01).
    init_scale: float = 0.01
    # The posterior approximation: meanfield (an independent Normal per weight), lowrank (a Normal
    # with guide_rank correlation factors) or delta (point weights: the MAP estimate).
    guide: str = "meanfield"
    guide_rank: int = 10
    # weights: draw one weight set per minibatch. local: each example its own weights, drawn as
    # pre-activations (local reparameterization) in linear layers and by Flipout in convolutions.
    reparam: str = "weights"
    # Regression only. noise: fixed (noise_scale), homoscedastic (one learned scale, starting at noise_scale)
    # or heteroscedastic (the network predicts it at each input); in standard units of data.target_stats.
    # noise_scale null, for your own data: the residual sd a least-squares line through the training
    # split leaves (small where the inputs nearly fix the target, near 1 where they hardly explain it).
    noise: str = "fixed"
    noise_scale: Optional[float] = 1.0
    # arch: package.module:factory: its keyword arguments. Its outputs' likelihood, and table_mlp's:
    # categorical or gaussian (null: categorical)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    likelihood: Optional[str] = None


@dataclass
class DataConfig:
    # mnist, fashion_mnist (classifiers), polynomial, sinusoid (toy_mlp), or your own (bnn_zoo.data.own):
    # folder (a subfolder of images per class), tensors (.pt or .npz of x and y) or csv; null: told by
    # data.path where given (a folder, .csv, .pt or .npz), else the architecture's default.
    name: Optional[str] = None
    # Folder holding <Name>/raw/ as torchvision lays it out; null: $BNN_ZOO_DATA, else ./data.
    root: Optional[str] = None
    download: bool = True
    # Your own data: its folder or file; its test set's (null: PATH/test beside PATH/train, else a fifth held out)
    path: Optional[str] = None
    test_path: Optional[str] = None
    # folder: images resized to image_size x image_size (null: as they are, one size), 1 (gray) or 3 (RGB) channels
    image_size: Optional[int] = None
    channels: int = 1
    target: Optional[str] = None  # csv: the target column (null: one named target/label/class/y, else the last)
    ood: Dict[str, str] = field(default_factory=dict)  # {name: folder of images} evaluate and the scoreboard score
    # DataProfile in your own data's training split when a run starts; its checkpoint answers without the data
    input_shape: Optional[List[int]] = None
    classes: Optional[List[str]] = None
    features: Optional[List[str]] = None  # csv: the feature columns the network reads, in order
    mean: Optional[List[float]] = None  # per channel of images, per feature of rows
    std: Optional[List[float]] = None
    target_stats: Optional[List[float]] = None  # a regression's target mean and sd: its network learns them standardized
    digest: Optional[str] = None  # of every example: data changed since the run trained is refused
    # Examples held out of the training set for validation and threshold calibration (null: 5000 of
    # MNIST's, a fifth of your own data's).
    val_size: Optional[int] = None
    # Use only the first N training / test images (quick runs and tests); null: all.
    train_limit: Optional[int] = None
    test_limit: Optional[int] = None


@dataclass
class TrainConfig:
    # The run's length: epochs, or optimizer steps (minibatches of batch_size) from which the epochs
    # follow, ceil(steps / minibatches per epoch) by the training split's size, so a table of 300 rows
    # and one of a million learn for about as long. Give one of the two (epochs=null plans in steps).
    epochs: Optional[int] = 10
    steps: Optional[int] = None
    batch_size: int = 128
    lr: float = 1e-3
    # constant, cosine (to lr * lr_min_factor over the run) or step (x lr_gamma every lr_step epochs)
    lr_schedule: str = "constant"
    lr_min_factor: float = 0.01
    lr_step: int = 10
    lr_gamma: float = 0.5
    num_particles: int = 1
    # The negative ELBO (bnn_zoo.core.elbo.TraceKL_ELBO), logged as data fit + KL. meanfield: the KL in
    # closed form where the prior has one (gaussian, fan_in), by Monte Carlo where not (scale_mixture), as
    # Pyro's TraceMeanField_ELBO; trace: Monte Carlo throughout, as Pyro's Trace_ELBO.
    elbo: str = "meanfield"
    # Tempering: minimize data fit + kl_weight x KL (1: the ELBO, the Bayesian posterior).
    kl_weight: float = 1.0
    # Posterior samples used for the validation figures after each epoch and the final test.
    val_samples: int = 20
    test_samples: int = 100
    # Evaluate on the validation set (and checkpoint) every N epochs; null: about 50 times a run
    # (every planned epochs // 50, at least every epoch).
    eval_every: Optional[int] = 1
    # Early stopping: stop once the validation NLL has not fallen below its best for this many
    # evaluations in a row. The checkpoint is then written only at a new best, so it holds the best
    # evaluation's weights, and the test figures are theirs. null: train the whole plan.
    patience: Optional[int] = None
    # Also train the deterministic twin (same network, point weights, maximum likelihood).
    twin: bool = True
    twin_epochs: Optional[int] = None  # null: as many as the Bayesian network's (epochs, or those steps make)
    twin_lr: Optional[float] = None  # null: same as lr
    # MC dropout: train the twin with dropout at this rate after its hidden layers (LeNet-5: the fully
    # connected ones) and sample it with dropout on (bnn_zoo.posterior.DropoutPosterior); 0: a plain twin.
    twin_dropout: float = 0.0
    # An ensemble: train this many copies of the network and of its twin, whose weights start from
    # seeds seed, seed + 1, ... on the same data; the posterior is their mixture, the twins' a deep
    # ensemble. Member 0 is the run itself, member N lives in RUN_DIR/members/N.
    members: int = 1
    progress: bool = True
    # CPU threads torch's operations use while a phase trains and validates (null: torch's own
    # choice, one per core). A small network's steps gain nothing from a second thread and lose much
    # when other work shares the cores: the table configs take 1.
    threads: Optional[int] = None
    # The Bayesian network's training step captured once and replayed (bnn_zoo.core.captured_step): compile
    # (torch.compile fuses it; on CUDA in a CUDA graph), trace (replayed op by op, no compiler),
    # eager (Pyro's Python every step), auto (compile from 3,000 planned steps, trace from 300,
    # eager below: bnn_zoo.core.captured_step.choose). The same draws either way.
    capture: str = "auto"
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
    # (bnn_zoo.abstain.certify, written to calibration.json and used by predict, evaluate and the
    # scripts): with probability at least 1 - delta, at most `risk` errors among accepted inputs;
    # the epistemic gate is the strictest that refuses at most max_refusal of validation.
    certify: bool = True
    risk: float = 0.01
    delta: float = 0.05
    max_refusal: float = 0.02
    # The Bayesian network's gate: mutual_information or entropy (bits). The twin's is entropy
    # (a single softmax has no mutual information).
    signal: str = "mutual_information"
    quantile: float = 0.5
    samples: int = 100  # posterior samples per validation input
    # Conformal prediction sets (bnn_zoo.abstain.conformal), calibrated on the same validation split: over
    # the inputs, refused or not, a set holds the true class with probability at least 1 - alpha
    # (predict and the page show an accepted input's). set_score: thr (the smallest sets), aps or raps.
    alpha: float = 0.01
    set_score: str = "thr"


@dataclass
class Config:
    arch: str = "toy_mlp"
    # svi: variational inference (the guide of model.guide). nuts: also draw an HMC posterior (NUTS,
    # settings under mcmc) and compare its predictive with the mean-field one's.
    infer: str = "svi"
    run_dir: Optional[str] = None  # null: runs/<arch> (runs/<factory> for package.module:factory)
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
            raise ConfigError(f"config file {show(name)} does not exist")
        return path
    for folder in config_dirs():
        if (folder / f"{name}.yaml").is_file():
            return folder / f"{name}.yaml"
    raise ConfigError(f"no config named {show(name)}; shipped configs: {', '.join(config_names())}; "
                      "or give a path to a .yaml file")


def config_dirs() -> list[Path]:
    """Where config names are looked up: the installed package's data, then a source checkout's."""
    dirs = [Path(str(resources.files("bnn_zoo"))) / "configs",
            Path(__file__).resolve().parents[2] / "configs"]
    return [d for d in dirs if d.is_dir()]


def config_names() -> list[str]:
    return sorted({p.stem for d in config_dirs() for p in d.glob("*.yaml")})


def make_config(base: Any = None, overrides: list[str] | dict | None = None,
                source: Optional[str] = None) -> DictConfig:
    """Merge ``base`` (a dict or DictConfig) and overrides onto the typed defaults, interpolations
    resolved.

    Unknown keys and values of the wrong type raise ConfigError naming the key, and for ``base``'s
    the ``source`` it came from (a file) where given.
    """
    cfg = OmegaConf.structured(Config)
    layers = [base, overrides] if isinstance(overrides, dict) else [base, *map(_parse, overrides or ())]
    origin = source  # where the layer being merged came from
    try:
        for layer in layers:
            if layer is not None:
                check_layout(layer, Config, origin)
                cfg = OmegaConf.merge(cfg, layer)
            origin = None
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise _explained(err, origin) from None
    check(cfg)
    return cfg


# What a key must be, for OmegaConf's messages on a value it cannot convert
_KINDS = {"to Integer": "a whole number", "to Float": "a number", "valid bool": "true or false",
          "to string": "a string"}


def _explained(err: OmegaConfBaseException, source: Optional[str] = None) -> ConfigError:
    """OmegaConf's error as one line naming the key (and the file it came from), the values it
    quotes shortened."""
    reason = str(getattr(err, "msg", err)).split("\n")[0]
    kind = next((kind for words, kind in _KINDS.items() if words in reason), None)
    reason = f"must be {kind}, not {show(err.value)}" if kind else short_quotes(reason)
    where = f" in {source}" if source else ""
    return ConfigError(f"bad config key {show(getattr(err, 'full_key', None))}{where}: {reason}")


def _parse(override: str) -> DictConfig:
    """One ``key=value`` override as a config."""
    if "=" not in override:
        raise ConfigError(f"override {show(override)} is not of the form key=value (for example train.epochs=3)")
    try:
        return renamed(OmegaConf.from_dotlist([override]))
    except (yaml.YAMLError, ValueError) as err:  # YAML syntax, or an integer of too many digits
        raise ConfigError(f"override {show(override)}: cannot read its value ({_one_line(err)})") from None


# Keys that were renamed, old -> new (section, key): a config file or override with an old one gets
# the new one and a one-line notice; a stored config, silently (bnn_zoo.runs.checkpoint).
RENAMED = {("abstention", "calibrate"): ("abstention", "certify")}


def renamed(layer, notice: bool = True):
    """``layer`` (a dict or DictConfig) with each renamed key under its new name."""
    for (section, old), (_, new) in RENAMED.items():
        held = layer.get(section) if isinstance(layer, (dict, DictConfig)) else None
        if isinstance(held, (dict, DictConfig)) and old in held:
            held[new] = held.pop(old)
            if notice:
                print(f"note: {section}.{old} is now {section}.{new}", file=sys.stderr)
    return layer


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def load_config(name: str | None = None, overrides: list[str] | None = None) -> DictConfig:
    """Defaults, then the named or given YAML file, then ``key=value`` overrides."""
    base = None
    if name is not None:
        path = config_path(name)
        try:
            base = OmegaConf.load(path)
        except Exception as err:  # YAML syntax errors come in many types
            raise ConfigError(f"cannot read config {str(path)!r}: {_one_line(err)}") from None
        if not isinstance(base, DictConfig):
            raise ConfigError(f"config {str(path)!r} holds a {type(base).__name__} at its top level; a config "
                              "is a mapping of sections (arch: lenet, train: {epochs: 3}, ...)")
        renamed(base)
    return make_config(base, overrides, None if name is None else str(path))


def resolved(cfg: DictConfig) -> DictConfig:
    """Fill the architecture's defaults (``null`` entries) so a checkpoint rebuilds exactly; your own
    data's kind from its path where ``data.name`` is left out (``data_kind``)."""
    cfg = cfg.copy()
    spec = recipe(cfg)
    if cfg.model.hidden is None and spec.has_hidden:
        cfg.model.hidden = list(spec.default_hidden)
    if cfg.data.name is None and cfg.data.path:
        cfg.data.name = data_kind(cfg.data.path)
        try:  # the kind must suit the network: said before any data is read
            check(cfg)
        except ConfigError as err:
            inferred = f"data.name={cfg.data.name}, inferred from data.path={show(cfg.data.path)}"
            raise ConfigError(f"{err} ({inferred})") from None
    if cfg.data.name is None:
        cfg.data.name = spec.datasets[0]
    if cfg.data.val_size is None and cfg.data.name in CLASSIFIER_DATA:
        cfg.data.val_size = 5000
    if cfg.run_dir is None:  # a network by name: runs/<its factory's name>
        cfg.run_dir = f"runs/{cfg.arch.rpartition(':')[2]}"
    return cfg
