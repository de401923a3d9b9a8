"""A posterior: sampled predictions [S, N, ...] behind one interface (class probabilities, or a
regression's (mean, noise sd)), memory beyond the result bounded by chunk_size x batch_size
activations; the registry of the kinds a run can hold, each one class registered by name; and
``Mixture``, an equally weighted ensemble of posteriors (K guides, the deep ensemble of K twins).

A kind gives ``name`` (the key of its rule, sets and figures), ``title`` (its column in the
reports) and ``of_run(trained)``: its posterior of a trained run, None where the run holds none.
A kind fitted after training around the twin (``fitted = True``: Laplace, SWAG) also gives
``fit(twin, x_train, y_train, x_held, y_held)``, ``state()`` and ``from_state(twin, state)`` (which
refuses, with a ValueError saying why, a state it did not write: ``state_tensor``,
``state_number``), and may give ``cannot_fit(twin, num_data)``, why it cannot be fitted around a
twin (a run checks it before its first epoch); a run names the ones to fit in ``train.posteriors``.
A kind that samples the run's posterior (``takes_prior = True``: SG-MCMC) is given the run's prior
as ``fit(..., prior=model.prior)``; Laplace fits its own prior precision and SWAG has none.

Usage::

    @register
    class MyPosterior(Posterior):
        name, title, fitted = "mine", "mine", True
        ...
    KINDS["mine"].of_run(trained).predict(x, num_samples=100)
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar, Generator

import torch
from torch import nn

from ..core.errors import show
from ..core.inference.inputs import check_inputs
from ..core.inference.predictive import Chunk, fill_predictions, positive_sizes

KINDS: dict[str, type["Posterior"]] = {}  # name -> kind, in the order registered: the reports' order
# The share of validation (its first inputs) a held-out kind fits its setting on (the twin's
# temperature, Laplace's prior precision); it is certified on the rest.
HELD_SHARE = 0.2


def register(kind: type["Posterior"]) -> type["Posterior"]:
    """Add a kind of posterior to the registry under its ``name`` (a class decorator)."""
    if not kind.name or not kind.name.isidentifier():
        raise ValueError(f"a posterior's name is a word a config can hold (letters, digits, _), got {kind.name!r}")
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"a posterior named {kind.name!r} is registered already ({KINDS[kind.name].__qualname__})")
    KINDS[kind.name] = kind
    return kind


def held_part(n: int) -> slice:
    """The first HELD_SHARE of ``n`` validation inputs: what a held-out kind fits its setting on."""
    return slice(0, math.ceil(HELD_SHARE * n))


def certifying(name: str, n: int) -> slice:
    """Which of ``n`` validation inputs certify the posterior ``name``: all of them, but for a kind
    that fitted a setting on validation (``held_out``) the ones it did not see, so its guarantee
    holds as the others' do."""
    held_out = name in KINDS and KINDS[name].held_out
    return slice(held_part(n).stop, n) if held_out else slice(0, n)


def fitted_kinds() -> list[str]:
    """The registered kinds a run fits after training (``train.posteriors``)."""
    return [name for name, kind in KINDS.items() if kind.fitted]


class Posterior(ABC):
    """What any posterior offers: sampled predictions, a label, and how many numbers it stores."""

    name: ClassVar[str] = ""  # its registered name; "" for a part of another (an ensemble's member)
    title: ClassVar[str] = ""  # its column in the reports: "Bayesian", "deterministic", ...
    fitted: ClassVar[bool] = False  # fitted after training around the twin, its state kept in the run
    held_out: ClassVar[bool] = False  # fits a setting on validation's first fifth, which certifying leaves out
    takes_prior: ClassVar[bool] = False  # samples the run's own posterior: fit takes its prior (``prior=model.prior``)
    label: str
    stochastic: bool = True  # False: one prediction per input (a point estimate)
    networks: tuple = ()  # the models and twins it runs, which must take x's shape (``check_inputs``)

    @classmethod
    def of_run(cls, trained) -> "Posterior | None":
        """This kind's posterior of a trained run (``bnn_zoo.runs.storage.trained.Trained``), None where it
        holds none. A fitted kind's: from the state it stored around each member's twin, an
        ensemble's mixed (MultiSWAG, say)."""
        runs = [trained, *trained.members]
        states = [run.fitted.get(cls.name) for run in runs]
        if not cls.fitted or any(state is None for state in states):
            return None
        return mixed([cls.from_state(run.twin, state) for run, state in zip(runs, states)])

    def predict(self, x: torch.Tensor, num_samples: int = 100, chunk_size: int = 10,
                batch_size: int = 500) -> torch.Tensor:
        """Sampled predictions [S, N, ...] on ``x``: S = num_samples, or 1 for a point estimate,
        filled chunk by chunk by ``bnn_zoo.core.inference.predictive.fill_predictions``."""
        x = check_inputs(x, *self.networks)  # in the dtype of the networks' weights
        rows = self.rows(num_samples)
        positive_sizes(rows, chunk_size, batch_size)
        return fill_predictions(x, self.chunks(x, num_samples, chunk_size), rows, batch_size)

    @abstractmethod
    def chunks(self, x: torch.Tensor, num_samples: int, chunk_size: int) -> Generator[Chunk, None, None]:
        """The chunks of ``rows(num_samples)`` predictions, in ``fill_predictions``'s format."""

    @property
    @abstractmethod
    def parameters_stored(self) -> int:
        """The numbers a saved copy of this posterior holds (what prediction needs)."""

    def rows(self, num_samples: int) -> int:
        """How many predictions per input ``predict`` returns for ``num_samples``."""
        return num_samples if self.stochastic else 1

    @classmethod
    def training_seconds(cls, metrics: list[dict]) -> float | None:
        """Seconds this kind took to obtain (its cost on the scoreboard), from the metrics.json of a
        run and of each of its ensemble members: for a fitted kind, the twins' training and the fits;
        None where the metrics do not say."""
        twin, fits = phase_seconds(metrics, "twin"), metrics[0].get("fitted", {}).get(cls.name) if metrics else None
        if not cls.fitted or twin is None or fits is None or any(fit.get("seconds") is None for fit in fits):
            return None
        return twin + sum(fit["seconds"] for fit in fits)

    def features(self, x: torch.Tensor) -> torch.Tensor | None:
        """[N, D]: the penultimate features of ``x`` under this posterior's point network (the input
        of its last ``nn.Linear``; ``bnn_zoo.abstain.density``), None where it has none."""
        return None

    # a fitted kind's
    @classmethod
    def cannot_fit(cls, twin, num_data: int) -> str | None:
        """Why this kind cannot be fitted around ``twin`` on ``num_data`` training inputs (a clause:
        "fits classifiers only, and this run regresses"), None where it can: what a run checks of
        each kind it names before its first epoch."""
        return None

    @classmethod
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held: torch.Tensor, y_held: torch.Tensor) -> "Posterior":
        raise TypeError(f"{cls.__name__} is not fitted after training")

    def state(self) -> dict:
        raise TypeError(f"{type(self).__name__} keeps no state of its own")

    @classmethod
    def from_state(cls, twin, state: dict) -> "Posterior":
        raise TypeError(f"{cls.__name__} is not fitted after training")


class Mixture(Posterior):
    """An equally weighted ensemble: num_samples split as evenly as possible over the members
    (a point estimate gives its one prediction), their predictions stacked."""

    def __init__(self, members: list[Posterior], label: str):
        if len(members) < 2:
            raise ValueError("a mixture needs at least two members")
        self.members, self.label = members, label
        self.networks = tuple(network for member in members for network in member.networks)

    def _shares(self, num_samples: int) -> list[int]:
        k = len(self.members)
        if num_samples < k and any(m.stochastic for m in self.members):
            raise ValueError(f"an ensemble of {k} members needs at least {k} samples, got {num_samples}")
        return [m.rows(num_samples // k + (i < num_samples % k)) for i, m in enumerate(self.members)]

    def rows(self, num_samples: int) -> int:
        return sum(self._shares(num_samples))

    def chunks(self, x, num_samples, chunk_size):
        for member, n in zip(self.members, self._shares(num_samples)):
            yield from member.chunks(x, n, chunk_size)

    @property
    def parameters_stored(self) -> int:
        return sum(m.parameters_stored for m in self.members)


def mixed(found: list[Posterior], label: str | None = None) -> Posterior:
    """One posterior, or the ``Mixture`` of several (labelled "ensemble of K <the first's label>")."""
    return found[0] if len(found) == 1 else Mixture(found, label or f"ensemble of {len(found)} {found[0].label}")


def phase_seconds(metrics: list[dict], phase: str) -> float | None:
    """A trained phase's seconds ("bayes", "twin"), summed over a run's members: its epochs x its
    median seconds per epoch (robust to epochs that shared the CPU); None where it did not train."""
    if not metrics or phase not in metrics[0]:
        return None
    return sum(m[phase]["seconds_per_epoch"] * len(m[phase]["history"]) for m in metrics if phase in m)


def state_tensor(state: dict, key: str, shape: tuple[int | None, ...], least: float = -math.inf) -> torch.Tensor:
    """``state[key]``: a tensor of finite floats of ``shape`` (None: any size on that axis), none
    below ``least``; a ValueError naming the key and what it holds otherwise (a state written by
    something else: ``from_state`` refuses it)."""
    value = state.get(key) if isinstance(state, dict) else None
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        held = "nothing" if value is None else f"a {type(value).__name__}" + (
            f" of {value.dtype}" if isinstance(value, torch.Tensor) else "")
        raise ValueError(f"its {key!r} is {held}, not a tensor of floats")
    if value.dim() != len(shape) or any(s is not None and s != v for s, v in zip(shape, value.shape)):
        wanted = ", ".join("any" if s is None else str(s) for s in shape)
        raise ValueError(f"its {key!r} has shape [{', '.join(map(str, value.shape))}], not [{wanted}]")
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"its {key!r} holds NaN or inf")
    if not bool((value >= least).all()):
        raise ValueError(f"its {key!r} holds numbers below {least:g}")
    return value


def state_number(state: dict, key: str, whole: bool = False) -> float:
    """``state[key]``: a positive finite number (a whole one where ``whole``); a ValueError naming
    the key otherwise."""
    value = state.get(key) if isinstance(state, dict) else None
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value < math.inf:
        raise ValueError(f"its {key!r} is {show(value)}, not a positive {'whole number' if whole else 'number'}")
    return value


def count(*modules: nn.Module) -> int:
    """The numbers the modules' parameters hold."""
    return sum(p.numel() for m in modules for p in m.parameters())
