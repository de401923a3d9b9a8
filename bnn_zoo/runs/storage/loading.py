"""A trained run from its files (``load``: a run directory, or a shipped posterior's name), the
check that its calibration certified the weights it holds, and posteriors written into the
package (``ship``), which carry no folder of the machine that built them
(``bnn_zoo.runs.storage.portable``).

Usage: ``trained = load("runs/lenet")  # or load("lenet"), the shipped one``
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from ...abstain.after_alarm import check_after_alarm
from ...abstain.conformal import ConformalSets
from ...abstain.density import FeatureDensity
from ...abstain.rule import Rule
from ...core.errors import CheckpointError, ConfigError, show
from ...core.inference.predictive import seeded
from ...posterior import KINDS, TWIN_SCALED
from .checkpoint import CALIBRATION, CERTIFIED_WEIGHTS, CHECKPOINT, DENSITIES, FITTED, HMC_SAMPLES, MEMBERS, TWIN_CHECKPOINT
from .checkpoint import read, save_atomic, stored_beside, stored_config
from ..plans.checks import pick_device
from ..plans.config import make_config
from ..plans.factory import build_networks, build_twin
from .files import read_json
from .fits import check_registered, fitted_states
from ..plans.plan import Plan
from .portable import check_portable, portable
from .trained import Trained, weights_digest

SHIPPED = Path(__file__).resolve().parents[2] / "shipped"  # trained posteriors inside the package


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
    """Write a run's posterior (config without this machine's folders: ``portable``; guide means and
    scales in ``dtype``, prior buffers, an ensemble's members, calibration, feature densities) to
    ``folder/NAME.pt`` and its twins to ``folder/NAME_twin.pt`` (folder: the package's posteriors);
    returns the paths."""
    run_dir, folder = Path(run_dir), Path(folder or SHIPPED)
    trained = load(run_dir)
    if trained.calibration_problem:
        raise CheckpointError(trained.calibration_problem)
    small = lambda d: {k: v.to(dtype) if v.is_floating_point() else v for k, v in d.items()}  # noqa: E731
    states = [read(d / CHECKPOINT) for d in [run_dir, *member_dirs(run_dir, trained.config.train.members)]]
    shipped = [{"run": s.get("run"), "epoch": s["epoch"], "model": s["model"], "guide": small(s["guide"])} for s in states]
    densities = read(run_dir / DENSITIES)["densities"] if (run_dir / DENSITIES).is_file() else {}
    written = [folder / f"{name}.pt"]
    state = {"config": portable(states[0]["config"]), "num_data": states[0]["num_data"], **shipped[0],
             "members": shipped[1:], "calibration": read_calibration(run_dir / CALIBRATION), "densities": densities}
    check_portable(state, run_dir)
    save_atomic(state, written[0])
    twins = [d / TWIN_CHECKPOINT for d in [run_dir, *member_dirs(run_dir, len(states))]]
    if all(path.is_file() for path in twins):
        written.append(folder / f"{name}_twin.pt")
        nets = [{"run": t.get("run"), "net": small(t["net"])} for t in map(read, twins)]
        save_atomic({**nets[0], "members": nets[1:]}, written[1])
    else:
        (folder / f"{name}_twin.pt").unlink(missing_ok=True)  # a twin shipped before is not this posterior's
    return written


def is_shipped(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` names a shipped posterior: one of ``shipped_names()`` written as a bare
    name (a string: ``lenet`` is the shipped one even beside a folder lenet/, which ``./lenet``
    names)."""
    return isinstance(run_dir, str) and run_dir in shipped_names()


def shadowed(run_dir: str | Path) -> str | None:
    """The line a command says where a bare shipped name is also a folder where it runs (None: it
    is not): which of the two answers."""
    if is_shipped(run_dir) and Path(run_dir).exists():
        return f"note: {run_dir} is the shipped posterior {run_dir}; for the folder {run_dir} here, write ./{run_dir}"
    return None


def run_folder(run_dir: str | Path) -> Path:
    """The folder of the run ``run_dir`` names (it, or its checkpoint.pt); a CheckpointError on what was given."""
    path = Path(run_dir).parent if Path(run_dir).name == CHECKPOINT and Path(run_dir).is_file() else Path(run_dir)
    if not path.is_dir():
        what = (f"is a file; give a run directory (the folder that holds {CHECKPOINT}) or a shipped posterior ("
                if path.exists() else "is neither a run directory nor a shipped posterior (those are ")
        raise CheckpointError(f"{run_dir} {what}{', '.join(shipped_names())})")
    return path


def load(run_dir: str | Path, device: str | torch.device = "cpu", fitted: bool = True) -> Trained:
    """Rebuild a trained run's model, guide, deterministic twin, HMC samples, posteriors fitted
    after training (refused where fitted around other twin weights than it holds:
    ``bnn_zoo.runs.storage.fits``) and abstention rules from its files (``run_folder(run_dir)``); or, given
    the name of a shipped posterior (``is_shipped``: ``lenet`` is the shipped one, ``./lenet`` a
    folder of that name), that one. ``device``: a torch.device, or auto, cpu, cuda, cuda:N.
    ``fitted=False``: without the posteriors fitted after training (what fitting them again starts from)."""
    device = pick_device(device) if isinstance(device, str) else device
    if is_shipped(run_dir):
        return _shipped(str(run_dir), device)
    run_dir = run_folder(run_dir)
    samples = read(run_dir / HMC_SAMPLES, device)["samples"] if (run_dir / HMC_SAMPLES).is_file() else None
    twin = run_dir / TWIN_CHECKPOINT
    calibration = _calibration_file(run_dir / CALIBRATION)
    trained = _assemble(read(run_dir / CHECKPOINT, device), run_dir / CHECKPOINT, read(twin, device) if twin.is_file() else None,
                        twin, device, samples, calibration)
    for member in member_dirs(run_dir, trained.config.train.members):
        if not (member / CHECKPOINT).is_file():
            raise CheckpointError(f"{run_dir} is an ensemble of {trained.config.train.members}, but member "
                                  f"{member.name} has no checkpoint: finish it with python -m bnn_zoo.train "
                                  f"resume={run_dir}")
        trained.members.append(load(member, device, fitted))
    if (run_dir / DENSITIES).is_file():
        trained.densities = _densities(read(run_dir / DENSITIES, device)["densities"])
    trained.fitted = fitted_states(run_dir / FITTED, trained, device) if fitted else {}
    trained.run_dir = str(run_dir)
    if trained.calibration:
        trained.calibration_problem = _calibration_problem(trained, run_dir)
        if trained.calibration_problem:  # fitted to other weights: not for these
            trained._sets, trained.temperature, trained.densities = {}, None, {}
    return trained


def _calibration_problem(trained: Trained, run_dir: Path) -> Optional[str]:
    """Why ``run_dir``'s calibration cannot be used with the weights it holds now, or None."""
    record, path = trained.calibration.get(CERTIFIED_WEIGHTS), run_dir / CALIBRATION
    fix = f"re-certify with python -m bnn_zoo.certify {run_dir}, or use the quantile rule (--rule quantile)"
    if not isinstance(record, dict):
        return f"{path} does not say which weights it certified (it predates that record): {fix}"
    if record.get("digest") != weights_digest(trained):
        return (f"{path} certified other weights (epoch {record.get('epoch')}, {record.get('members')} member(s)) "
                f"than the run holds now (epoch {trained.epoch}, {1 + len(trained.members)} member(s)): {fix}")
    return None


def member_dirs(run_dir: Path, members: int) -> list[Path]:
    """Where an ensemble's members 1 .. members-1 live (member 0 is the run itself)."""
    return [Path(run_dir) / MEMBERS / str(i) for i in range(1, members)]


def _shipped(name: str, device) -> Trained:
    """A shipped posterior (``ship``'s two files) with its members, twins and densities."""
    path, twin_path = SHIPPED / f"{name}.pt", SHIPPED / f"{name}_twin.pt"
    state = read(path, device)
    twins = read(twin_path, device) if twin_path.is_file() else None
    members, twin_members = state.get("members", []), twins.get("members", []) if twins else []
    if twins is not None and (len(twin_members) != len(members) or
                              not all(isinstance(t, dict) and isinstance(t.get("net"), dict) for t in twin_members)):
        raise CheckpointError(f"{twin_path} does not hold a twin for each of the {1 + len(members)} members of "
                              f"{path}: ship them again together (scripts/ship_posterior.py)")
    damaged = "the file that shipped is damaged: install bnn-zoo again"
    calibration = (state["calibration"], f"{path}'s calibration", damaged)
    trained = _assemble(state, path, twins, twin_path, device, None, calibration)
    for i, member in enumerate(members):
        if not isinstance(member, dict) or any(key not in member for key in ("epoch", "model", "guide")):
            raise CheckpointError(f"{path}'s member {i + 1} lacks its epoch, model or guide: ship it again "
                                  "(scripts/ship_posterior.py)")
        own = {"config": state["config"], "num_data": state["num_data"], **member}
        trained.members.append(_assemble(own, path, twin_members[i] if twins else None, twin_path, device, None))
    trained.densities = _densities(state.get("densities", {}))
    return trained


def _densities(states: dict) -> dict[str, FeatureDensity]:
    return {part: FeatureDensity.from_state(state) for part, state in states.items()}


def _assemble(state: dict, path: Path, twin_state: dict | None, twin_path: Path, device, samples,
              calibration: tuple[object, str, str] = ({}, "", "")) -> Trained:
    """A Trained from a checkpoint's state and its twin's (half-precision tensors of a shipped one made float),
    with ``calibration`` (its content, where it came from, how to fix it), checked."""
    full = lambda d: {k: v.float() if v.is_floating_point() else v for k, v in d.items()}  # noqa: E731
    config = stored_config(state, path)
    fitted = config.get("train", {}).get("posteriors") if isinstance(config.get("train"), dict) else None
    check_registered(fitted if isinstance(fitted, list) else [], path)
    try:
        cfg = make_config(config)
    except ConfigError as err:
        by_name = ":" in str(config.get("arch"))  # a network by name: its module must import here
        raise CheckpointError(f"{path} holds a config this bnn-zoo cannot use ({err})" +
                              ("" if by_name else "; train the run again")) from None
    plan = Plan.of(cfg, stored_beside(state, path))
    networks = plan.networks
    calibration = checked_calibration(*calibration) if calibration[0] != {} else {}
    with seeded(None, device):  # the initial weights, about to be replaced, are drawn from no caller's stream
        model, guide = build_networks(networks, state.get("num_data"), device)
    _load_state(model, state["model"], path)
    _load_state(guide, full(state["guide"]), path)
    model.eval(), guide.eval()
    twin = None
    if twin_state is not None:
        if twin_state.get("run") != state.get("run"):
            raise CheckpointError(f"{twin_path} is the twin of another run than {path} (their run ids "
                                  "differ): delete it, or train the twin again with this run")
        with seeded(None, device):
            twin = build_twin(networks, device)
        _load_state(twin, full(twin_state["net"]), twin_path)
        twin.eval()
    return Trained(model, guide, cfg, twin, state["epoch"], samples, _rules(calibration), _sets(calibration),
                   calibration, _temperature(calibration), run=state.get("run"),
                   twin_epoch=twin_state.get("epoch") if twin_state is not None else None, data=plan.data)


def _rules(calibration: dict) -> dict[str, Rule]:
    return {part: Rule.from_dict(calibration[part]["rule"]) if "rule" in calibration.get(part, {}) else Rule()
            for part in KINDS}


def _temperature(calibration: dict) -> Optional[float]:
    """The scaled twin's temperature, where it was fitted on validation inputs its certificate did
    not use (``temperature_inputs``: an older calibration fitted it on all of them)."""
    scaled = calibration.get(TWIN_SCALED, {})
    return scaled.get("temperature") if "temperature_inputs" in scaled else None


def _sets(calibration: dict) -> dict[str, ConformalSets]:
    return {part: ConformalSets.from_dict(calibration[part]["sets"]) for part in KINDS
            if "sets" in calibration.get(part, {})}


def read_calibration(path: Path) -> dict:
    """calibration.json's content, {} when there is none; a CheckpointError where it is not one
    bnn-zoo wrote (``checked_calibration``)."""
    found = _calibration_file(path)
    return checked_calibration(*found) if found[0] != {} else {}


def _calibration_file(path: Path) -> tuple[object, str, str]:
    """calibration.json's content as read ({} when there is none), where it is, and how to fix it."""
    fix = f"delete it or write it again: python -m bnn_zoo.certify {path.parent}"
    return (read_json(path, "calibration bnn-zoo wrote", fix) if path.is_file() else {}), str(path), fix


def checked_calibration(calibration, where: str, fix: str) -> dict:
    """A run's or a shipped posterior's calibration (``where`` it came from), each posterior's entry
    checked: a mapping whose rules (each with the share of validation it refused), after-alarm entry
    (``check_after_alarm``), sets and temperature are ones bnn-zoo writes; else a CheckpointError saying ``fix``."""
    try:
        if not isinstance(calibration, dict):
            raise ValueError(f"it holds {show(calibration)}, not a mapping of posteriors")
        for part in KINDS:
            entry = calibration.get(part, {})
            if not isinstance(entry, dict):
                raise ValueError(f"its {part} entry is {show(entry)}, not a mapping")
            try:
                after = entry.get("after_alarm", {})
                if not isinstance(after, dict):
                    raise ValueError(f"its after-alarm entry is {show(after)}, not a mapping")
                for what, held in (("its rule", entry), ("its after-alarm rule", after)):
                    _checked_rule(held, what)
                check_after_alarm(entry)
                for what, held in (("its rule", entry), ("its after-alarm rule", after)):
                    if "rule" in held:  # the shift alarm watches its refusals against this rate
                        _checked_rate(held.get("validation"), what)
            except (ValueError, TypeError, AttributeError) as err:
                raise ValueError(f"{part}: {err}") from None
        _sets(calibration)
        temperature = calibration.get(TWIN_SCALED, {}).get("temperature", 1.0)
        if isinstance(temperature, bool) or not (isinstance(temperature, (int, float)) and 0 < temperature < math.inf):
            raise ValueError(f"temperature {show(temperature)} is not a positive number")
        return calibration
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as err:
        raise CheckpointError(f"{where} is not a calibration bnn-zoo wrote ({err}); {fix}") from None


def _checked_rate(validation, what: str) -> None:
    """A stored rule's validation figures hold the share of inputs it refused, a number from 0 to 1,
    or a ValueError naming ``what`` (the rule)."""
    refused = validation.get("refused") if isinstance(validation, dict) else None
    if isinstance(refused, bool) or not isinstance(refused, (int, float)) or not 0 <= refused <= 1:
        raise ValueError(f"{what}'s share of validation refused is {show(refused)}, not a number from 0 to 1")


def _checked_rule(held: dict, what: str) -> None:
    """The rule ``held`` holds (where it holds one) as Rule.from_dict reads it, or a ValueError naming ``what``."""
    if "rule" not in held:
        return
    try:
        Rule.from_dict(held["rule"])
    except KeyError as err:
        raise ValueError(f"{what} lacks {err}") from None
    except (TypeError, AttributeError):
        raise ValueError(f"{what} is {show(held['rule'])}, not a rule") from None
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None
