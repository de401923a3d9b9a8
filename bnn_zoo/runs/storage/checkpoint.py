"""Checkpoints: plain tensors and dicts (``torch.load(weights_only=True)``) that store their config,
so a run directory rebuilds the exact model anywhere (``bnn_zoo.runs.storage.loading.load``), and a digest of
their contents, so a damaged file is refused instead of answering with damaged weights.

Usage: ``save_atomic({"config": ..., "model": model.state_dict(), ...}, path); state = read(path)``
"""
from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ...core.errors import CheckpointError, ConfigError
from ...data.config import HELD_BESIDE
from ...data.own import name_problem
from ..plans.config import renamed
from .files import write_atomic
from ..plans.layout import check_layout
from ..plans.schema import Config
from .trust_list import check_trusted

CHECKPOINT = "checkpoint.pt"
TWIN_CHECKPOINT = "twin.pt"
HMC_SAMPLES = "hmc.pt"
CALIBRATION = "calibration.json"  # the certified abstention rules (bnn_zoo.cli.certify)
CERTIFIED_WEIGHTS = "certified_weights"  # calibration.json's record of the weights it certified
MEMBERS = "members"  # an ensemble's members 1, 2, ... live in RUN_DIR/members/N, member 0 in RUN_DIR
FITTED = "fitted.pt"  # the posteriors fitted after training, each bound to its twin (bnn_zoo.runs.storage.fits)
# 2: likelihood objects (the noise scale under "likelihood."), twins as Twin(net, likelihood).
# 3: a SHA-256 digest of the contents ("digest"), checked when read.
# 4: data.target_stats in the config (a regression on your own data learns its targets standardized;
#    a format 3 run has none, and keeps its targets' units).
# Checkpoints without a format are 1 (up to commit 766a886) and are upgraded when loaded.
FORMAT = 4
# What each file must hold besides its config: {key: what it is}
DENSITIES = "density.pt"  # the feature densities a certified density gate reads (bnn_zoo.cli.certify --twin-signal)
REQUIRED = {CHECKPOINT: ("config", "epoch", "model", "guide"), TWIN_CHECKPOINT: ("net",), HMC_SAMPLES: ("samples",),
            DENSITIES: ("densities",), FITTED: ("posteriors",)}


def save_atomic(state: dict, path: Path) -> None:
    """Write ``state`` with its format and digest, whole (``bnn_zoo.runs.storage.files.write_atomic``): a crash
    never leaves half a file, and damage to the file is found when it is read."""
    state = {"format": FORMAT, **{k: v for k, v in state.items() if k not in ("format", "digest")}}
    state["digest"] = digest(state)
    write_atomic(path, lambda f: torch.save(state, f))


def digest(value) -> str:
    """SHA-256 of a checkpoint's contents (nested dicts and lists of tensors and plain values),
    wherever its tensors live: the same for the same numbers, whatever map_location read them."""
    h = hashlib.sha256()
    _feed(h, value)
    return h.hexdigest()


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"tensor {t.dtype} {tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        h.update(f"dict {len(value)};".encode())
        for key in sorted(value, key=repr):
            _feed(h, key), _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _feed(h, item)
    else:
        h.update(f"{type(value).__name__} {value!r};".encode())


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


def replace_config(path: Path, config: dict) -> None:
    """Store ``config`` (``Plan.stored``) as the config of the checkpoint at ``path``: a resumed run's
    new plan (more epochs or members, other abstention settings) is what loading it rebuilds from then on."""
    state = read(path)
    if state["config"] != config:
        state["config"] = config
        save_atomic(state, path)


def read(path: Path, device: str | torch.device = "cpu") -> dict:
    """A checkpoint's content, its digest checked, its keys and weights checked, upgraded to the
    current format; a damaged, foreign or incomplete file is a CheckpointError naming it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: train first "
                              "(python -m bnn_zoo.train CONFIG run_dir=DIR)")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path} holds more than tensors and plain values ({_first_line(err)}); "
                              "bnn-zoo loads no code from a checkpoint") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, AttributeError, TypeError) as err:
        raise CheckpointError(f"{path} is not a readable checkpoint ({_first_line(err)}): it is damaged, "
                              "truncated or not a bnn-zoo file; train again, or resume from a complete copy") from None
    if not isinstance(state, dict) or not any(key in state for key in ("config", "net", "densities", "posteriors")):
        raise CheckpointError(f"{path} is not a bnn-zoo checkpoint (no config or weights in it)")
    if state.get("format", 1) not in (1, 2, 3, FORMAT):
        raise CheckpointError(f"{path} has checkpoint format {state['format']}; this bnn-zoo reads "
                              f"formats 1 to {FORMAT}: upgrade bnn-zoo")
    if state.get("format") in (3, FORMAT):
        _check_digest(state, path)
    _check_contents(state, path)
    return state if state.get("format") == FORMAT else _upgrade(state, path)


def _check_digest(state: dict, path: Path) -> None:
    if state.get("digest") != digest({k: v for k, v in state.items() if k != "digest"}):
        raise CheckpointError(f"{path} is damaged: its contents no longer match the digest written with them "
                              "(bit rot, a partial copy or an edit); restore it from a copy, or train again")


def _check_contents(state: dict, path: Path) -> None:
    """The keys ``path``'s kind of file must hold (by its name), with finite tensors."""
    kind = TWIN_CHECKPOINT if path.name.endswith("_twin.pt") else path.name  # a shipped NAME_twin.pt is a twin
    for key in REQUIRED.get(kind, REQUIRED[CHECKPOINT]):
        if key not in state:
            raise CheckpointError(f"{path} lacks {key!r}: it is not a complete bnn-zoo checkpoint; train again, "
                                  "or restore it from a copy")
        expected = int if key == "epoch" else dict  # config, weights and samples are dicts
        if not isinstance(state[key], expected):
            raise CheckpointError(f"{path} holds a {type(state[key]).__name__} under {key!r} where a "
                                  f"{expected.__name__} belongs; train again, or restore it from a copy")
    for key in ("model", "guide", "net", "samples"):
        for name, value in (state.get(key) or {}).items():
            if not isinstance(value, torch.Tensor):
                raise CheckpointError(f"{path} holds a {type(value).__name__} as {key} {name!r}, not a tensor; "
                                      "train again, or restore it from a copy")
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise CheckpointError(f"{path} holds non-finite numbers (NaN or inf) in {key} {name!r}; resume "
                                      "from an earlier copy, or train again with a lower train.lr")


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return (text.splitlines()[0][:200] if text else "") or type(err).__name__


def _upgrade(state: dict, path: Path) -> dict:
    """An older checkpoint as the current format reads it: format 3 differs only by its config's
    missing data.target_stats, 2 by having no digest either; format 1's noise-scale keys are renamed
    and a twin's net wrapped as Twin(net, likelihood)."""
    if state.get("format") in (2, 3):
        return state
    if "model" in state:
        state["model"] = {k.replace("noise.", "likelihood.", 1): v for k, v in state["model"].items()}
    if "net" in state:
        regression = any(k.startswith("0.") for k in state["net"])
        state["net"] = {(f"net.{k[2:]}" if k.startswith("0.") else f"likelihood.{k[2:]}") if regression
                        else f"net.{k}": v for k, v in state["net"].items()}
    return state


# Config keys that earlier bnn-zoo wrote and this one no longer has: train.member (an ensemble
# member's index, now the member's place in RUN_DIR/members/N and its checkpoint's "member").
RETIRED_KEYS = {"train": ("member",)}


def stored_config(state: dict, source: str | Path = "a checkpoint") -> dict:
    """The config a checkpoint (read from ``source``) stores, without the keys this bnn-zoo retired and
    those it holds beside it (``stored_beside``; ``make_config`` reads it); one naming a network by
    name this user does not trust is refused (``bnn_zoo.runs.storage.trust_list``: building it would run code)."""
    try:  # before anything reads it: a key of another kind would fail where it is read
        renamed(state["config"], notice=False)  # a key an earlier bnn-zoo wrote under its old name
        check_layout(state["config"], Config)
    except ConfigError as err:
        raise CheckpointError(f"{source} holds a config this bnn-zoo cannot use ({err}); train the run again") from None
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in state["config"].items()}
    check_trusted(config, source)
    for section, keys in {**RETIRED_KEYS, "data": HELD_BESIDE}.items():  # and the keys read by stored_beside
        for key in keys:
            if isinstance(config.get(section), dict):
                config[section].pop(key, None)
    return config


def stored_beside(state: dict, source: str | Path = "a checkpoint") -> dict:
    """The keys a checkpoint's config holds beside it (``HELD_BESIDE``: your own data's statistics and
    columns), as ``Plan.of`` takes them: kept out of the config, whose merges would take them one item
    at a time; a name that cannot be printed as it is refused."""
    data = state["config"].get("data")
    beside = {key: list(data[key]) for key in HELD_BESIDE if isinstance(data, dict) and data.get(key) is not None}
    problem = next(filter(None, map(name_problem, map(str, beside.get("features", [])))), None)
    if problem is not None:
        raise CheckpointError(f"{source} holds a config this bnn-zoo cannot use (bad config key 'data.features': "
                              f"{problem}); train the run again")
    return beside


def config_dict(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)
