"""Continuing a run: the config a ``resume=DIR`` command line asks for, and the checkpoint it
continues once the overrides are known to fit it (what defines the model cannot change; how long,
how fast and where it trains can).

Usage::

    cfg = config_for_run(None, ["resume=runs/x", "train.epochs=30"])
    stored = read_for_resume(cfg, Run(cfg.run_dir).checkpoint, device)
    cfg = posteriors_kept(cfg, stored, Run(cfg.run_dir).fitted, fits)   # what it holds (fits: stored_fits's), and what is asked
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from omegaconf import Container, DictConfig, OmegaConf

from ...core.errors import ConfigError
from ..storage.checkpoint import CHECKPOINT, TWIN_CHECKPOINT, config_dict, read, stored_config
from ..plans.config import load_config, make_config
from ..storage.fits import held
from .phases import planned_epochs

# What a resumed run may change: how long and how fast it trains from here, how it reports, where
# it runs and reads data, how its posteriors read an input (data.remade: training reads them as
# given) and the abstention certified at its end, and how many members an ensemble has (the new ones
# are trained). The rest defines the model.
RESUMABLE = ("train.members", "train.epochs", "train.steps", "train.patience", "train.twin_epochs", "train.lr",
             "train.twin_lr", "train.lr_schedule", "train.lr_min_factor", "train.lr_step", "train.lr_gamma",
             "train.eval_every", "train.val_samples", "train.test_samples", "train.progress", "train.stop_at_accuracy",
             "train.capture", "train.posteriors", "train.drop_posteriors", "train.threads",
             "train.twin", "device", "resume", "overwrite", "run_dir", "infer", "data.root", "data.download",
             "data.path", "data.test_path", "data.ood", "data.remade",
             "abstention", "mcmc")


def read_for_resume(cfg: DictConfig, path: Path, device) -> dict:
    """The checkpoint ``resume=`` continues, once the config is known to fit it: overrides of
    anything but RESUMABLE keys, and fewer epochs than are done, are refused."""
    state = read(path, device)
    # the stored config on today's defaults: a key added since the run was written has its default
    differences = _differences(config_dict(make_config(stored_config(state, path))), config_dict(cfg))
    _refuse_defining(cfg.resume, {key: change for key, change in differences.items() if not resumable(key)})
    state.setdefault("run", None)
    twin_path = path.with_name(TWIN_CHECKPOINT)
    twin = read(twin_path, device) if twin_path.is_file() else None
    state["twin"] = twin if twin is not None and twin.get("run") == state["run"] else None  # not a replaced run's
    for key, label, done in (("train.epochs", "", state["epoch"]),
                             ("train.twin_epochs", "twin ", state["twin"]["epoch"] if state["twin"] else 0)):
        if planned_epochs(cfg.train, state["num_data"], twin=bool(label)) < done:
            least = done
            if cfg.train.steps and not (label and cfg.train.twin_epochs):  # the epochs follow the steps
                key, least = "train.steps", done * math.ceil(state["num_data"] / cfg.train.batch_size)
            raise ConfigError(f"bad config key {key!r}: the {label}run in {path.parent} has trained {done} "
                              f"epochs; resume with {key} >= {least}")
    return state


def resumable(key: str) -> bool:
    """Whether a resume may change the dotted config key ``key`` (RESUMABLE's, or one inside them)."""
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE)


def _refuse_defining(resume, changes: dict[str, tuple]) -> None:
    """A ConfigError naming each key that defines the run which a resume would change ({key: (old, new)})."""
    if changes:
        raise ConfigError(f"resume={resume} cannot change what defines the run: " +
                          ", ".join(f"{k} ({changes[k][0]} -> {changes[k][1]})" for k in sorted(changes)) +
                          "; drop those overrides, or start a new run with them (run_dir=NEW)")


def _defining_overrides(stored: dict, overrides: list[str]) -> dict[str, tuple]:
    """{key: (stored value, override's value)} for each override of a key that defines the run
    (not RESUMABLE) and would change it."""
    changes, base = {}, OmegaConf.create(stored)
    for override in overrides:
        key = override.partition("=")[0].strip()
        if "=" not in override or resumable(key):
            continue
        try:
            new = OmegaConf.select(OmegaConf.from_dotlist([override]), key)
            old = OmegaConf.select(base, key, default=None)
        except Exception:  # a value YAML cannot read: the merge names it better
            continue
        new, old = (OmegaConf.to_container(v) if isinstance(v, Container) else v for v in (new, old))
        if new != old:
            changes[key] = (old, new)
    return changes


def posteriors_kept(cfg: DictConfig, stored: dict, fitted: Path, fits: Optional[dict]) -> DictConfig:
    """A resumed run's config whose ``train.posteriors`` lists what the run holds (the kinds its
    stored config asked for and its ``fitted`` file holds: ``fits``, read once) and then those ``cfg`` asks for anew, less
    those ``train.drop_posteriors`` names, which must be ones it holds (the drop is done once: the
    key goes back to [])."""
    train = stored["config"].get("train") if isinstance(stored["config"].get("train"), dict) else {}
    before = [name for name in train.get("posteriors") or [] if isinstance(name, str)]
    holds = list(dict.fromkeys([*before, *held(fits)]))
    drop = list(cfg.train.drop_posteriors)  # none of them asked for too (config_for_run refuses that)
    missing = next((name for name in drop if name not in holds), None)
    if missing is not None:
        raise ConfigError(f"bad config key 'train.drop_posteriors': the run in {fitted.parent} holds no {missing} to "
                          f"drop (it holds {', '.join(holds) or 'no posterior fitted after training'})")
    kept = [name for name in dict.fromkeys([*holds, *cfg.train.posteriors]) if name not in drop]
    return make_config(cfg, {"train": {"posteriors": kept, "drop_posteriors": []}})


def _differences(old: dict, new: dict, prefix: str = "") -> dict[str, tuple]:
    """{dotted key: (old, new)} where two config dicts differ."""
    differences = {}
    for key in old.keys() | new.keys():
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences.update(_differences(a, b, f"{prefix}{key}."))
        elif a != b:
            differences[f"{prefix}{key}"] = (a, b)
    return differences


def config_for_run(name: str | None, overrides: list[str]) -> DictConfig:
    """The config a command line asks for; ``resume=DIR`` starts from the config stored in DIR's
    checkpoint (a kind both asked for in train.posteriors and dropped by train.drop_posteriors is refused)."""
    resume = [o for o in overrides if o.startswith("resume=")]
    if not resume:
        return load_config(name or "toy_mlp", overrides)
    run_dir = Path(resume[-1].split("=", 1)[1])
    if name is not None:
        raise ConfigError("resume=DIR continues DIR's own config: give no config name with it")
    elsewhere = [o.split("=", 1)[1] for o in overrides if o.startswith("run_dir=")]
    if elsewhere and Path(elsewhere[-1]).resolve() != run_dir.resolve():
        raise ConfigError(f"bad config key 'run_dir': resume={run_dir} continues the run in {run_dir}, not in "
                          f"{elsewhere[-1]}: drop run_dir=, or copy the run there first and resume={elsewhere[-1]}")
    if not (run_dir / CHECKPOINT).is_file():
        raise ConfigError(f"bad config key 'resume': nothing to resume in {run_dir}: it holds no {CHECKPOINT} "
                          "(the run stopped before its first checkpoint, or the path is wrong); start the run "
                          "again, with overwrite=true to replace what is there")
    stored = stored_config(read(run_dir / CHECKPOINT), run_dir / CHECKPOINT)
    try:
        cfg = make_config(stored, [*overrides, f"run_dir={run_dir}"])
    except ConfigError:  # arch=OTHER fails on the keys that followed it (model.hidden, data.name): name it
        _refuse_defining(resume[-1].split("=", 1)[1], _defining_overrides(stored, overrides))
        raise
    asked = any(o.partition("=")[0].strip() == "train.posteriors" for o in overrides)  # else the run's own list
    both = next((name for name in cfg.train.drop_posteriors if name in cfg.train.posteriors), None) if asked else None
    if both is not None:
        raise ConfigError(f"bad config key 'train.drop_posteriors': {both} is also asked for in train.posteriors; "
                          "drop it or fit it, not both")
    return cfg
