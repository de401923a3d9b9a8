"""A run's posteriors fitted after training (RUN_DIR/fitted.pt, and each ensemble member's): each
kind's state, with the record of its fit, the digest and epoch of the twin it was fitted around
and what the fit cost. A fit holds for the twin it was fitted around and no other, as a certificate
holds for the weights it certified: a twin trained on makes it stale, and stale fits are never
served (``fitted_states`` refuses them by name) but fitted again (``read_fits`` tells which).

Usage::

    fits, stale = read_fits(run.dir / FITTED, trained)   # {name: Fit}, {name: why not}
    kinds = held(stored_fits(run.dir / FITTED))            # what a resume keeps; give it to read_fits(stored=)
    write_fits(run.dir / FITTED, trained.run, {**fits, "swag": Fit.of(state, trained, seconds, peak_mb)})
    trained.fitted = fitted_states(run.dir / FITTED, trained)   # what load serves; stale ones refused
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ...core.errors import CheckpointError
from ...posterior import KINDS
from .checkpoint import MEMBERS, digest, read, save_atomic
from .trained import Trained


@dataclass(frozen=True)
class Fit:
    """One kind's fit: its state, and the twin it was fitted around (``twin``: the digest of the
    twin's weights; ``twin_epoch``: the epochs it had trained), its seconds and peak MB."""

    state: dict
    twin: str
    twin_epoch: Optional[int]
    seconds: Optional[float]
    peak_mb: Optional[float]

    @classmethod
    def of(cls, state: dict, trained: Trained, seconds: float, peak_mb: Optional[float]) -> "Fit":
        return cls(state, twin_digest(trained), trained.twin_epoch, seconds, peak_mb)

    @property
    def cost(self) -> dict:
        """What metrics.json says of the fit."""
        return {"seconds": self.seconds, "peak_mb": self.peak_mb}


def twin_digest(trained: Trained) -> Optional[str]:
    """The digest of the weights of a trained run's twin (None: it has none): what a fit holds for."""
    return None if trained.twin is None else digest(trained.twin.state_dict())


def stored_fits(path: Path, device="cpu") -> Optional[dict]:
    """What a fitted.pt holds, read once (None: there is none); ``held`` and ``read_fits`` take it."""
    return read(path, device) if path.is_file() else None


def read_fits(path: Path, trained: Trained, device="cpu", stored: Optional[dict] = None
              ) -> tuple[dict[str, Fit], dict[str, str]]:
    """The fits ``path`` holds (``stored``: what it held when read before, not read again) that hold
    for ``trained``'s twin as it is now, each state one its kind reads; and why each other fit it
    holds does not ({name: a clause}). Kinds this process has not registered are refused by name
    (their module must be imported)."""
    stored = stored if stored is not None else stored_fits(path, device)
    if stored is None:
        return {}, {}
    check_registered(stored["posteriors"], path)
    records = stored.get("fits") if isinstance(stored.get("fits"), dict) else {}
    ours, twin = stored.get("run") == trained.run, twin_digest(trained)
    fits, stale = {}, {}
    for name, state in stored["posteriors"].items():
        record = records.get(name)
        if not ours:
            stale[name] = "fitted around another run's twin (their run ids differ)"
        elif twin is None:
            stale[name] = "fitted around a twin the run no longer holds"
        elif not isinstance(record, dict) or not isinstance(record.get("twin"), str):
            stale[name] = "it does not say which twin it was fitted around (fitted by an earlier bnn-zoo)"
        elif record["twin"] != twin:
            epochs = (record.get("twin_epoch"), trained.twin_epoch)
            stale[name] = (f"fitted around the twin of epoch {epochs[0]}, which has trained on to epoch {epochs[1]}"
                           if epochs[0] != epochs[1] else "fitted around other twin weights than the run holds now")
        else:
            problem = _state_problem(name, state, trained)
            if problem:
                stale[name] = f"its state is not one bnn-zoo wrote ({problem})"
            else:
                fits[name] = Fit(state, twin, record.get("twin_epoch"), _number(record.get("seconds")),
                                 _number(record.get("peak_mb")))
    return fits, stale


def fitted_states(path: Path, trained: Trained, device="cpu") -> dict[str, dict]:
    """The states of the posteriors fitted after training that ``path`` holds ({} where it holds
    none), each fitted around ``trained``'s twin as it is now; a CheckpointError naming every other
    one, why, and the command that fits it again or drops it."""
    fits, stale = read_fits(path, trained, device)
    if stale:
        run_dir, names = run_of(path), ",".join(stale)
        reasons = "; ".join(f"{name}: {why}" for name, why in stale.items())
        raise CheckpointError(f"{path} holds posteriors fitted after training that cannot serve this run ({reasons}): "
                              f"fit them again with python -m bnn_zoo.train resume={run_dir}, or drop them with "
                              f"python -m bnn_zoo.train resume={run_dir} 'train.drop_posteriors=[{names}]'")
    return {name: fit.state for name, fit in fits.items()}


def write_fits(path: Path, run: Optional[str], fits: dict[str, Fit]) -> None:
    """``path`` holding ``fits`` alone (none: the file goes)."""
    if not fits:
        path.unlink(missing_ok=True)
        return
    save_atomic({"run": run, "posteriors": {name: fit.state for name, fit in fits.items()},
                 "fits": {name: {k: v for k, v in asdict(fit).items() if k != "state"} for name, fit in fits.items()}},
                path)


def held(stored: Optional[dict]) -> list[str]:
    """The kinds a fitted.pt holds (``stored_fits``'s), in its order; [] where there is none."""
    return list(stored["posteriors"]) if stored is not None else []


def run_of(path: Path) -> Path:
    """The run a fitted.pt belongs to: its folder, or the ensemble's where it is a member's
    (RUN/members/N/fitted.pt), which a resume names."""
    folder = path.parent
    return folder.parent.parent if folder.parent.name == MEMBERS and folder.name.isdigit() else folder


def _state_problem(name: str, state, trained: Trained) -> Optional[str]:
    """Why ``state`` is not one the kind ``name`` reads for this twin (its ``from_state`` refuses
    it), or None."""
    try:
        KINDS[name].from_state(trained.twin, state)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RuntimeError) as err:
        return str(err).splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return None


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def check_registered(names, path: Path) -> None:
    """Refuse a run holding a kind of posterior this process has not registered (another process
    registered it: its module must be imported here too), or one named by no string."""
    if any(not isinstance(name, str) for name in names):
        raise CheckpointError(f"{path} names a posterior fitted after training by something other than a word: "
                              "it is not a file bnn-zoo wrote; delete it, and fit its posteriors again")
    unknown = sorted(name for name in names if name not in KINDS)
    if unknown:
        raise CheckpointError(f"{path} holds the posterior {unknown[0]}, which no kind registered here reads: import "
                              f"the module that registers it (registered: {', '.join(KINDS)})")
