"""Checkpoints: plain tensors and dicts (``torch.load(weights_only=True)``) that store their config,
so a run directory rebuilds the exact model anywhere.

Usage: ``trained = load("runs/lenet"); trained.model, trained.guide, trained.twin, trained.samples``
"""
from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pyro
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from .abstention import Rule
from .bnn import BayesianNet
from .config import make_config
from .errors import CheckpointError
from .priors import make_prior
from .twin import Twin
from .zoo import architecture, build, make_twin

CHECKPOINT = "checkpoint.pt"
TWIN_CHECKPOINT = "twin.pt"
HMC_SAMPLES = "hmc.pt"
CALIBRATION = "calibration.json"  # the certified abstention rules (bnn_zoo.calibrate)
MEMBERS = "members"  # an ensemble's members 1, 2, ... live in RUN_DIR/members/N, member 0 in RUN_DIR
SHIPPED = Path(__file__).resolve().parent / "posteriors"  # trained posteriors inside the package
PARTS = ("bayes", "twin", "hmc")  # the posteriors a run can hold (bnn_zoo.ladder.posteriors)
# 2: likelihood objects (the noise scale under "likelihood."), twins as Twin(net, likelihood).
# Checkpoints without a format are 1 (up to commit 766a886) and are upgraded when loaded.
FORMAT = 2


def save_atomic(state: dict, path: Path) -> None:
    """Write to a temporary file and rename it over ``path``: a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": FORMAT, **state}, tmp)
    os.replace(tmp, path)


def save_bayes(path: Path, cfg: DictConfig, run: str, epoch: int, num_data: int, model, guide,
               optimizer, history: list) -> None:
    """The BNN's checkpoint: config, run id, weights' posterior, optimizer state, history, RNG
    state. (The learning-rate schedule is replayed from the config on resume.)"""
    save_atomic({"config": config_dict(cfg), "run": run, "epoch": epoch, "num_data": num_data,
                 "model": model.state_dict(), "guide": guide.state_dict(),
                 "optimizer": optimizer.state_dict(), "history": history,
                 **rng_state(next(guide.parameters()).device)}, path)


def rng_state(device: torch.device) -> dict:
    """The random state a resumed run continues from: torch's CPU generator ("rng"), and the GPU's
    ("cuda_rng") where the run trains on one."""
    state = {"rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(stored: dict, device: torch.device) -> None:
    """Set the generators ``rng_state`` saved (read with any map_location: the states go back as CPU
    byte tensors); a GPU state is used only when resuming on a GPU."""
    torch.set_rng_state(stored["rng"].cpu())
    if device.type == "cuda" and "cuda_rng" in stored:
        torch.cuda.set_rng_state(stored["cuda_rng"].cpu(), device)


def save_twin(path: Path, cfg: DictConfig, run: str, epoch: int, net: nn.Module, optimizer, history: list) -> None:
    """The twin's checkpoint, with the run id of the BNN it belongs to."""
    save_atomic({"config": config_dict(cfg), "run": run, "epoch": epoch, "net": net.state_dict(),
                 "optimizer": optimizer.state_dict(), "history": history}, path)


def restamp(path: Path, cfg: DictConfig) -> None:
    """Store ``cfg`` as the config of the checkpoint at ``path``: a resumed run's new plan (more
    epochs or members, other abstention settings) is what loading it rebuilds from then on."""
    state = read(path)
    if state["config"] != config_dict(cfg):
        state["config"] = config_dict(cfg)
        save_atomic({k: v for k, v in state.items() if k != "format"}, path)


def read(path: Path, device: str | torch.device = "cpu") -> dict:
    """A checkpoint's content, upgraded to the current format."""
    if not Path(path).is_file():
        raise CheckpointError(f"no checkpoint at {path}: train first "
                              "(python -m bnn_zoo.train CONFIG run_dir=DIR)")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path} holds more than tensors and plain values ({_first_line(err)}); "
                              "bnn-zoo loads no code from a checkpoint") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise CheckpointError(f"{path} is not a readable checkpoint ({_first_line(err)}): it is truncated "
                              "or not a bnn-zoo file; train again, or resume from a complete copy") from None
    if not isinstance(state, dict) or ("config" not in state and "net" not in state):
        raise CheckpointError(f"{path} is not a bnn-zoo checkpoint (no config or weights in it)")
    return state if state.get("format") == FORMAT else _upgrade(state, path)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return (text.splitlines()[0][:200] if text else "") or type(err).__name__


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
    return make_twin(cfg.arch, _hidden(cfg), cfg.model.noise, cfg.model.noise_scale,
                     cfg.train.twin_dropout).to(device)


@dataclass
class Trained:
    model: BayesianNet
    guide: torch.nn.Module
    config: DictConfig
    twin: Optional[Twin] = None  # the deterministic twin, when the run trained one
    epoch: int = 0
    samples: Optional[dict] = None  # HMC weight samples {site: [S, *shape]}, when infer=nuts
    # The abstention rule of each posterior ("bayes", "twin", "hmc"; see bnn_zoo.ladder): certified
    # on validation when the run holds calibration.json, else the seed's quantile rule, Rule().
    rules: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)  # calibration.json's content
    members: list = field(default_factory=list)  # an ensemble's other members (train.members), each a Trained

    @property
    def device(self) -> torch.device:
        """Where the run was loaded (its prior and noise tensors live there)."""
        return self.model.device

    def rules_for(self, rule: str = "calibrated", quantile: float = 0.5, threshold: float = 0.2) -> dict[str, Rule]:
        """Each model's rule: the run's certified one (``calibrated``; the seed's rule where the run
        holds none) or the quantile rule with the given knobs (``quantile``)."""
        if rule == "calibrated":
            return {part: self.rules.get(part, Rule()) for part in PARTS}
        if rule == "quantile":
            return {part: Rule(quantile, threshold) for part in PARTS}
        raise ValueError(f"rule must be calibrated or quantile, got {rule!r}")


def _load_state(module: nn.Module, state: dict, path: Path) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"{path} does not fit the model its config describes "
                              f"({str(err).splitlines()[0]}): it was written by an incompatible "
                              "bnn-zoo; train the run again") from None


def shipped_names() -> list[str]:
    """The trained posteriors that ship inside the package (``load(name)`` takes them)."""
    return sorted(p.stem for p in SHIPPED.glob("*.pt") if not p.stem.endswith("_twin"))


def ship(run_dir: str | Path, name: str, folder: Path | None = None, dtype: torch.dtype = torch.float16) -> list[Path]:
    """Write a run's posterior (config, guide means and scales in ``dtype``, prior buffers,
    calibration) to ``folder/NAME.pt`` and its twin to ``folder/NAME_twin.pt`` (folder: the
    package's posteriors); returns the paths."""
    run_dir, folder = Path(run_dir), Path(folder or SHIPPED)
    state = read(run_dir / CHECKPOINT)
    small = lambda d: {k: v.to(dtype) if v.is_floating_point() else v for k, v in d.items()}  # noqa: E731
    written = [folder / f"{name}.pt"]
    save_atomic({"config": state["config"], "run": state.get("run"), "epoch": state["epoch"], "num_data": state["num_data"],
                 "model": state["model"], "guide": small(state["guide"]),
                 "calibration": read_calibration(run_dir / CALIBRATION)}, written[0])
    if (run_dir / TWIN_CHECKPOINT).is_file():
        written.append(folder / f"{name}_twin.pt")
        twin = read(run_dir / TWIN_CHECKPOINT)
        save_atomic({"run": twin.get("run"), "net": small(twin["net"])}, written[1])
    return written


def load(run_dir: str | Path, device: str | torch.device = "cpu") -> Trained:
    """Rebuild a trained run's model, guide, deterministic twin, HMC samples and abstention rules
    from its files; or, given the name of a shipped posterior (``shipped_names()``), that one."""
    if not Path(run_dir).exists() and str(run_dir) in shipped_names():
        state = read(SHIPPED / f"{run_dir}.pt", device)
        twin = SHIPPED / f"{run_dir}_twin.pt"
        return _assemble(state, SHIPPED / f"{run_dir}.pt", twin, device, None, state["calibration"])
    run_dir = Path(run_dir)
    samples = read(run_dir / HMC_SAMPLES, device)["samples"] if (run_dir / HMC_SAMPLES).is_file() else None
    trained = _assemble(read(run_dir / CHECKPOINT, device), run_dir / CHECKPOINT, run_dir / TWIN_CHECKPOINT,
                        device, samples, read_calibration(run_dir / CALIBRATION))
    for member in member_dirs(run_dir, trained.config.train.members):
        if not (member / CHECKPOINT).is_file():
            raise CheckpointError(f"{run_dir} is an ensemble of {trained.config.train.members}, but member "
                                  f"{member.name} has no checkpoint: finish it with python -m bnn_zoo.train "
                                  f"resume={run_dir}")
        trained.members.append(load(member, device))
    return trained


def member_dirs(run_dir: Path, members: int) -> list[Path]:
    """Where an ensemble's members 1 .. members-1 live (member 0 is the run itself)."""
    return [Path(run_dir) / MEMBERS / str(i) for i in range(1, members)]


def _assemble(state: dict, path: Path, twin_path: Path, device, samples, calibration: dict) -> Trained:
    """A Trained from a checkpoint's state (half-precision tensors of a shipped one made float)."""
    full = lambda d: {k: v.float() if v.is_floating_point() else v for k, v in d.items()}  # noqa: E731
    cfg = make_config(state["config"])
    model, guide = build_from_config(cfg, state.get("num_data"), device)
    _load_state(model, state["model"], path)
    _load_state(guide, full(state["guide"]), path)
    model.eval(), guide.eval()
    twin = None
    if twin_path.is_file():
        twin_state = read(twin_path, device)
        if twin_state.get("run") != state.get("run"):
            raise CheckpointError(f"{twin_path} is the twin of another run than {path} (their run ids "
                                  "differ): delete it, or train the twin again with this run")
        twin = twin_from_config(cfg, device)
        _load_state(twin, full(twin_state["net"]), twin_path)
        twin.eval()
    return Trained(model, guide, cfg, twin, state["epoch"], samples, _rules(calibration), calibration)


def _rules(calibration: dict) -> dict[str, Rule]:
    return {part: Rule.from_dict(calibration[part]["rule"]) if "rule" in calibration.get(part, {}) else Rule()
            for part in PARTS}


def read_calibration(path: Path) -> dict:
    """calibration.json's content, {} when there is none."""
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text())
        for part in found.values():
            if "rule" in part:
                Rule.from_dict(part["rule"])
        return found
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{path} is not a calibration bnn-zoo wrote ({err}); delete it or "
                              "write it again: python -m bnn_zoo.calibrate RUN_DIR") from None


def config_dict(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)
