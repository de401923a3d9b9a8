"""Run configuration: typed defaults, YAML files that hold only what differs, dotted overrides.

Usage: ``cfg = load_config("lenet", ["train.epochs=1", "data.root=/data"])``
"""
from __future__ import annotations

from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ...core.networks.architectures import CLASSIFIER_DATA
from ...core.errors import ConfigError, say_once, short_quotes, show
from ...data.config import HELD_BESIDE
from ...data.own import holds_rows
from ...data.profile import least_squares_sd
from ...data.sets import Splits
from .checks import check
from .data_keys import TENSOR_ROWS, data_kind, fitted_to_data
from .layout import check_layout
from .plan import recipe
from .schema import Config


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
            Path(__file__).resolve().parents[3] / "configs"]
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
    cfg = _writable(OmegaConf.structured(Config))
    if not isinstance(overrides, dict):
        _check_renamed_pairs(overrides or [])
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


def _writable(cfg: DictConfig) -> DictConfig:
    """A config of the frozen schema that merges and overrides can write (the plan's sections,
    made from it, stay frozen)."""
    OmegaConf.set_readonly(cfg, False)
    for key in cfg:
        if isinstance(cfg._get_node(key), DictConfig):
            _writable(cfg._get_node(key))
    return cfg


# What a key must be, for OmegaConf's messages on a value it cannot convert
_KINDS = {"to Integer": "a whole number", "to Float": "a number", "valid bool": "true or false",
          "to string": "a string"}


def _explained(err: OmegaConfBaseException, source: Optional[str] = None) -> ConfigError:
    """OmegaConf's error as one line naming the key (and the file it came from), the values it
    quotes shortened."""
    reason = str(getattr(err, "msg", err)).split("\n")[0]
    kind = next((kind for words, kind in _KINDS.items() if words in reason), None)
    where, key = f" in {source}" if source else "", getattr(err, "full_key", None)
    if kind:  # a known key, a value it cannot take
        return ConfigError(f"bad value for {key}{where}: must be {kind}, not {show(err.value)}")
    return ConfigError(f"bad config key {show(key)}{where}: {short_quotes(reason)}")


def _parse(override: str) -> DictConfig:
    """One ``key=value`` override as a config."""
    if "=" not in override:
        raise ConfigError(f"override {show(override)} is not of the form key=value (for example train.epochs=3)")
    try:
        return renamed(OmegaConf.from_dotlist([override]))
    except (yaml.YAMLError, ValueError) as err:  # YAML syntax, or an integer of too many digits
        raise ConfigError(f"override {show(override)}: cannot read its value ({_one_line(err)})") from None


# Keys that were renamed, old -> new (section, key): a config file or override with an old one gets
# the new one and a one-line notice (once a process); a stored config, silently
# (bnn_zoo.runs.storage.checkpoint). Both names in one file, or on one command line, are refused.
RENAMED = {("abstention", "calibrate"): ("abstention", "certify")}


def renamed(layer, notice: bool = True):
    """``layer`` (a dict or DictConfig) with each renamed key under its new name."""
    for (section, old), (_, new) in RENAMED.items():
        held = layer.get(section) if isinstance(layer, (dict, DictConfig)) else None
        if isinstance(held, (dict, DictConfig)) and old in held:
            if new in held:
                _both(section, old, new)
            held[new] = held.pop(old)
            if notice:
                say_once(f"note: {section}.{old} is now {section}.{new}")
    return layer


def _both(section: str, old: str, new: str) -> None:
    raise ConfigError(f"bad config key '{section}.{old}': it is the old name of {section}.{new}, which is given "
                      f"too; give {section}.{new} alone")


def _check_renamed_pairs(overrides: list[str]) -> None:
    """Refuse a command line that gives a renamed key under both its names (which would win?)."""
    keys = {override.partition("=")[0].strip() for override in overrides}
    for (section, old), (_, new) in RENAMED.items():
        if f"{section}.{old}" in keys and f"{section}.{new}" in keys:
            _both(section, old, new)


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
        shown = f"configs/{path.name}" if path.parent in config_dirs() else str(path)  # a shipped recipe, or yours
        base = fitted_to_data(base, overrides or [], shown, lambda: _run_data(base, overrides or []))
    return make_config(base, overrides, None if name is None else str(path))


def _run_data(base: DictConfig, overrides: list[str]) -> Optional[str]:
    """The data a run of a recipe's ``base`` and the command line's ``overrides`` reads: data.name,
    else data.path's kind, else the recipe's set (a tensors file of rows: ``TENSOR_ROWS``, a table);
    None where they cannot tell it (a mistake that make_config names)."""
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), base, *map(_parse, overrides))
        data = cfg.data.name or (data_kind(cfg.data.path) if cfg.data.path else recipe(cfg).datasets[0])
    except (ConfigError, OmegaConfBaseException):
        return None
    return TENSOR_ROWS if data == "tensors" and cfg.data.path and holds_rows(cfg.data.path) else data


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


def with_profile(cfg: DictConfig, splits: Splits) -> DictConfig:
    """``cfg`` holding what its own data's training split showed (input shape, classes, validation
    size; a regression's noise sd to start from where model.noise_scale=null; its normalization and
    columns are held beside it: ``HELD_BESIDE``), so its checkpoint answers without the data; its
    data.ood folders made absolute, so they are found from anywhere."""
    cfg = cfg.copy()
    for name, folder in cfg.data.ood.items():
        cfg.data.ood[name] = str(Path(folder).expanduser().resolve())
    if splits.profile is None:
        return cfg
    for name, value in asdict(splits.profile).items():  # each of DataProfile's fields is the data key of its name,
        if name not in HELD_BESIDE:  # but for those held beside the config (Plan.of(cfg, held_beside(profile)))
            cfg.data[name] = value
    cfg.data.val_size = 0 if splits.val is None else len(splits.val)
    if cfg.model.noise_scale is None and splits.profile.target_stats is not None:
        mean, sd = splits.profile.target_stats
        cfg.model.noise_scale = least_squares_sd(splits.train.x, (splits.train.y - mean) / sd)
    cfg.data.path = str(Path(cfg.data.path).expanduser().resolve())  # the run's data, wherever it is asked from
    if cfg.data.test_path:
        cfg.data.test_path = str(Path(cfg.data.test_path).expanduser().resolve())
    return cfg
