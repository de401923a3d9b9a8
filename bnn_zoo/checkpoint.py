"""Checkpoints: plain tensors and dicts (``torch.load(weights_only=True)``) that store their config.

Usage: ``trained = load("runs/lenet"); trained.model, trained.guide, trained.twin, trained.config``
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from .config import make_config
from .zoo import BayesianNet, architecture, build, make_prior, make_twin

CHECKPOINT = "checkpoint.pt"
TWIN_CHECKPOINT = "twin.pt"


def save_atomic(state: dict, path: Path) -> None:
    """Write to a temporary file and rename it over ``path``: a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
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
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: train first "
                                "(python -m bnn_zoo.train CONFIG run_dir=DIR)")
    return torch.load(path, map_location=device, weights_only=True)


def build_from_config(cfg: DictConfig, num_data: Optional[int] = None,
                      device: str | torch.device = "cpu"):
    """The (model, guide) pair a resolved config describes, on ``device``, guide parameters created."""
    spec = architecture(cfg.arch)
    m = cfg.model
    prior = make_prior(m.prior, m.prior_scale, m.mixture_pi, m.mixture_scale1, m.mixture_scale2,
                       m.learn_prior)
    model, guide = build(cfg.arch, num_data=num_data, hidden=_hidden(cfg), prior=prior,
                         init_scale=m.init_scale, noise=m.noise, noise_scale=m.noise_scale,
                         local_reparam=m.reparam == "local")
    model.to(device)
    guide(torch.zeros(1, *spec.input_shape, device=device))  # creates the guide's parameters
    return model, guide


def _hidden(cfg: DictConfig) -> Optional[list[int]]:
    return list(cfg.model.hidden) if cfg.model.hidden is not None else None


def twin_from_config(cfg: DictConfig, device: str | torch.device = "cpu") -> nn.Module:
    return make_twin(cfg.arch, _hidden(cfg), cfg.model.noise, cfg.model.noise_scale).to(device)


@dataclass
class Trained:
    model: BayesianNet
    guide: torch.nn.Module
    config: DictConfig
    twin: Optional[nn.Module] = None  # the deterministic twin, when the run trained one
    epoch: int = 0

    @property
    def device(self) -> torch.device:
        """Where the run was loaded (its prior and noise tensors live there)."""
        return self.model.device


def load(run_dir: str | Path, device: str | torch.device = "cpu") -> Trained:
    """Rebuild a trained run's model, guide and deterministic twin from its checkpoints."""
    run_dir = Path(run_dir)
    state = read(run_dir / CHECKPOINT, device)
    cfg = make_config(state["config"])
    model, guide = build_from_config(cfg, state.get("num_data"), device)
    model.load_state_dict(state["model"])
    guide.load_state_dict(state["guide"])
    model.eval(), guide.eval()
    twin = None
    if (run_dir / TWIN_CHECKPOINT).is_file():
        twin = twin_from_config(cfg, device)
        twin.load_state_dict(read(run_dir / TWIN_CHECKPOINT, device)["net"])
        twin.eval()
    return Trained(model, guide, cfg, twin, state["epoch"])


def config_dict(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)
