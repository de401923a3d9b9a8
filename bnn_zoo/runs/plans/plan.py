"""A run's plan: its config turned, once, at the command's boundary, into frozen typed sections
(the schema's dataclasses) and what they resolve to: the architecture's recipe and the networks it
builds. Below the boundary the loop, the phases, the factory and the data readers take their own
sections, never the config.

Usage::

    plan = Plan.of(cfg)                           # cfg: a resolved config (bnn_zoo.runs.plans.config)
    plan.train.epochs, plan.data.path, plan.networks.recipe.input_shape
    plan = Plan.of(cfg, held_beside(splits.profile)); plan.data.mean; plan.stored()   # your own data's
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from ...core.networks.architectures import Recipe, architecture
from ...core.errors import ConfigError, short_quotes, show
from ...data.shifted.augment import AugmentConfig
from ...data.shifted.outliers import OutliersConfig
from ...data.config import HELD_BESIDE, DataConfig
from .schema import AbstentionConfig, MCMCConfig, ModelConfig, TrainConfig


def held_beside(found) -> dict:
    """The keys of HELD_BESIDE that ``found`` (a typed data section, a DataProfile) holds: what a run's
    config holds beside it."""
    return {key: getattr(found, key) for key in HELD_BESIDE if getattr(found, key, None) is not None}


def recipe(cfg: DictConfig) -> Recipe:
    """The recipe ``cfg.arch`` names (with ``model.kwargs`` and ``model.likelihood`` for a network by
    name, imported here; for your own data, its input shape and classes), or a ConfigError that says
    why there is none."""
    kwargs = OmegaConf.to_container(cfg.model.kwargs)
    if cfg.model.likelihood not in (None, "categorical", "gaussian"):
        raise ConfigError(f"bad value for model.likelihood: choose categorical or gaussian (or null), not "
                          f"{show(cfg.model.likelihood)}")
    try:
        spec = architecture(cfg.arch, kwargs, cfg.model.likelihood)
    except ValueError as err:
        raise ConfigError(f"bad config key 'arch': {short_quotes(str(err))}") from None
    if cfg.data.input_shape is None:
        return spec
    classes = spec.classes if cfg.data.classes is None else len(cfg.data.classes)  # your own data's
    return replace(spec, input_shape=tuple(cfg.data.input_shape), classes=classes)


@dataclass(frozen=True)
class Networks:
    """What a run's networks are built from (``bnn_zoo.runs.plans.factory``): the architecture's recipe,
    the model section, and, for a regression on your own data, its targets' mean and sd (the
    networks learn them standardized); the twin's dropout rate."""

    recipe: Recipe
    model: ModelConfig
    target_stats: Optional[tuple[float, float]] = None
    dropout: float = 0.0

    @property
    def hidden(self) -> Optional[list[int]]:
        return None if self.model.hidden is None else list(self.model.hidden)


@dataclass(frozen=True)
class Plan:
    """A resolved config as frozen typed sections (``Plan.of``); ``config`` is the config itself,
    which checkpoints store and which rebuilds the plan."""

    config: DictConfig
    arch: str
    networks: Networks
    data: DataConfig
    augment: AugmentConfig
    outliers: OutliersConfig
    train: TrainConfig
    mcmc: MCMCConfig
    abstention: AbstentionConfig
    seed: int
    infer: str
    device: str
    run_dir: Optional[str]
    resume: Optional[str]
    overwrite: bool

    @classmethod
    def of(cls, cfg: DictConfig, beside: dict | None = None) -> "Plan":
        """The plan of ``cfg``, its data section holding the keys held ``beside`` the config (HELD_BESIDE)."""
        sections = {name: OmegaConf.to_object(cfg[name])
                    for name in ("model", "data", "augment", "outliers", "train", "mcmc", "abstention")}
        sections["data"] = replace(sections["data"], **(beside or {}))
        stats = cfg.data.target_stats
        networks = Networks(recipe(cfg), sections["model"], None if stats is None else tuple(stats),
                            cfg.train.twin_dropout)
        return cls(cfg, cfg.arch, networks, sections["data"], sections["augment"], sections["outliers"],
                   sections["train"], sections["mcmc"],
                   sections["abstention"], cfg.seed, cfg.infer, cfg.device, cfg.run_dir, cfg.resume, cfg.overwrite)

    def stored(self) -> dict:
        """The config as a checkpoint and metrics.json store it: the keys held beside it in its data section."""
        config = OmegaConf.to_container(self.config, resolve=True)
        config["data"].update(held_beside(self.data))
        return config

    @property
    def categorical(self) -> bool:
        """Whether the run classifies (a categorical likelihood), as against regressing."""
        return self.networks.recipe.likelihood == "categorical"
