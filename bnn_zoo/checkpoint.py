"""Checkpoints: plain tensors and dicts (``torch.load(weights_only=True)``) that store their config,
so a run directory rebuilds the exact model anywhere.

Usage: ``trained = load("runs/lenet"); trained.model, trained.guide, trained.twin, trained.samples``
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pyro
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from .bnn import BayesianNet
from .config import make_config
from .errors import CheckpointError
from .priors import make_prior
from .twin import Twin
from .zoo import architecture, build, make_twin

CHECKPOINT = "checkpoint.pt"
TWIN_CHECKPOINT = "twin.pt"
HMC_SAMPLES = "hmc.pt"
# 2: likelihood objects (the noise scale under "likelihood."), twins as Twin(net, likelihood).
# Checkpoints without a format are 1 (up to commit 766a886) and are upgraded when loaded.
FORMAT = 2


def save_atomic(state: dict, path: Path) -> None:
    """Write to a temporary file and rename it over ``path``: a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": FORMAT, **state}, tmp)
    os.replace(tmp, path)


def save_bayes(path: Path, cfg: DictConfig, epoch: int, num_data: int, model, guide,
               optimizer, scheduler, history: list) -> None:
    """The BNN's checkpoint: config, weights' posterior, optimizer state, history, RNG state."""
    save_atomic({"config": config_dict(cfg), "epoch": epoch, "num_data": num_data,
                 "model": model.state_dict(), "guide": guide.state_dict(),
                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "history": history, "rng": torch.get_rng_state()}, path)


def save_twin(path: Path, cfg: DictConfig, epoch: int, net: nn.Module, optimizer, scheduler,
              history: list) -> None:
    save_atomic({"config": config_dict(cfg), "epoch": epoch, "net": net.state_dict(),
                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "history": history}, path)


def read(path: Path, device: str | torch.device = "cpu") -> dict:
    """A checkpoint's content, upgraded to the current format."""
    if not Path(path).is_file():
        raise CheckpointError(f"no checkpoint at {path}: train first "
                              "(python -m bnn_zoo.train CONFIG run_dir=DIR)")
    state = torch.load(path, map_location=device, weights_only=True)
    return state if state.get("format") == FORMAT else _upgrade(state, path)


def _upgrade(state: dict, path: Path) -> dict:
    """Format 1 to 2: rename the noise scale's keys; wrap a twin's net as Twin(net, likelihood)."""
    if state.get("format", 1) != 1:
        raise CheckpointError(f"{path} has checkpoint format {state['format']}; this bnn-zoo reads "
                              f"formats 1 and {FORMAT}: upgrade bnn-zoo")
    if "model" in state:
        state["model"] = {k.replace("noise.", "likelihood.", 1): v for k, v in state["model"].items()}
    if "net" in state:
        regression = any(k.startswith("0.") for k in state["net"])
        state["net"] = {(f"net.{k[2:]}" if k.startswith("0.") else f"likelihood.{k[2:]}") if regression
                        else f"net.{k}": v for k, v in state["net"].items()}
    return state


def build_from_config(cfg: DictConfig, num_data: Optional[int] = None,
                      device: str | torch.device = "cpu"):
    """The (model, guide) pair a resolved config describes, on ``device``, guide parameters created.

    Built with module-local parameters, so the pair also runs with Pyro's global parameter store
    (built with the global store, a PyroModule cannot run with module-local parameters).
    """
    m = cfg.model
    with pyro.settings.context(module_local_params=True):
        prior = make_prior(m.prior, m.prior_scale, m.mixture_pi, m.mixture_scale1, m.mixture_scale2,
                           m.learn_prior)
        model, guide = build(cfg.arch, num_data=num_data, hidden=_hidden(cfg), prior=prior,
                             init_scale=m.init_scale, noise=m.noise, noise_scale=m.noise_scale,
                             guide=m.guide, rank=m.guide_rank)
        model.to(device)
        guide(torch.zeros(1, *architecture(cfg.arch).input_shape, device=device))  # creates its parameters
    return model, guide


def _hidden(cfg: DictConfig) -> Optional[list[int]]:
    return list(cfg.model.hidden) if cfg.model.hidden is not None else None


def twin_from_config(cfg: DictConfig, device: str | torch.device = "cpu") -> Twin:
    return make_twin(cfg.arch, _hidden(cfg), cfg.model.noise, cfg.model.noise_scale).to(device)


@dataclass
class Trained:
    model: BayesianNet
    guide: torch.nn.Module
    config: DictConfig
    twin: Optional[Twin] = None  # the deterministic twin, when the run trained one
    epoch: int = 0
    samples: Optional[dict] = None  # HMC weight samples {site: [S, *shape]}, when infer=nuts

    @property
    def device(self) -> torch.device:
        """Where the run was loaded (its prior and noise tensors live there)."""
        return self.model.device


def _load_state(module: nn.Module, state: dict, path: Path) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"{path} does not fit the model its config describes "
                              f"({str(err).splitlines()[0]}): it was written by an incompatible "
                              "bnn-zoo; train the run again") from None


def load(run_dir: str | Path, device: str | torch.device = "cpu") -> Trained:
    """Rebuild a trained run's model, guide, deterministic twin and HMC samples from its files."""
    run_dir = Path(run_dir)
    state = read(run_dir / CHECKPOINT, device)
    cfg = make_config(state["config"])
    model, guide = build_from_config(cfg, state.get("num_data"), device)
    _load_state(model, state["model"], run_dir / CHECKPOINT)
    _load_state(guide, state["guide"], run_dir / CHECKPOINT)
    model.eval(), guide.eval()
    twin = None
    if (run_dir / TWIN_CHECKPOINT).is_file():
        twin = twin_from_config(cfg, device)
        _load_state(twin, read(run_dir / TWIN_CHECKPOINT, device)["net"], run_dir / TWIN_CHECKPOINT)
        twin.eval()
    samples = read(run_dir / HMC_SAMPLES, device)["samples"] if (run_dir / HMC_SAMPLES).is_file() else None
    return Trained(model, guide, cfg, twin, state["epoch"], samples)


def config_dict(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)
