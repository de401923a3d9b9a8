"""Conformal prediction sets on a posterior predictive: with probability at least 1 - alpha, over
the calibration inputs and a new input drawn alike, the new input's true class is in its set.

Split conformal (Vovk et al. 2005; Angelopoulos & Bates 2021): a score says how unusual class c
is for input x under the predictive p (the mean of the posterior samples); the calibration inputs'
scores of their true class give a threshold, their ceil((n + 1)(1 - alpha))-th smallest; a set
holds every class scoring at or under it. A set may be empty: no class is plausible enough, which
is a refusal (``nonempty=True`` adds the most probable class instead, a superset, so it keeps the
guarantee and covers more than asked). Scores:

- ``thr``: 1 - p(c) (Sadinle et al. 2019): the smallest sets on average.
- ``aps``: the probability mass of the classes more probable than c, plus u times c's own, u
  uniform on (0, 1) per input (Romano et al. 2020): sets that grow where the predictive is unsure.
  Without the randomization (c's whole mass) a confident network's sets balloon: on a 97%-accurate
  mnist_mlp at alpha = 0.1 they held 4.4 classes on average.
- ``raps``: aps + lam * max(rank(c) - k_reg, 0) (Angelopoulos et al. 2021): aps without its long
  tail of unlikely classes.

Usage::

    sets = calibrate_sets(val_probs, val_labels, alpha=0.01)       # [S, N, C] or [N, C]; thr
    member = sets.predict(test_probs)                              # bool [N, C]
    coverage, size = sets.coverage_and_size(test_probs, test_labels)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SCORES = ("thr", "aps", "raps")


def mean_predictive(probs: torch.Tensor) -> torch.Tensor:
    """The predictive [N, C]: the mean over posterior samples of [S, N, C], or [N, C] as it is."""
    if probs.dim() == 3:
        return probs.mean(0)
    if probs.dim() != 2:
        raise ValueError(f"probs must be class probabilities [S, N, C] or [N, C], got shape {tuple(probs.shape)}")
    return probs


def class_scores(probs: torch.Tensor, score: str = "thr", lam: float = 0.01, k_reg: int = 5,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Every class's nonconformity score [N, C] under the predictive ``probs`` (higher: less
    fitting); aps and raps draw their u from ``generator`` (torch's default one when None)."""
    p = mean_predictive(probs)
    if score == "thr":
        return 1 - p
    if score not in ("aps", "raps"):
        raise ValueError(f"unknown conformal score {score!r}; choose one of {', '.join(SCORES)}")
    ordered, order = p.sort(dim=-1, descending=True)
    above = torch.empty_like(p).scatter_(-1, order, ordered.cumsum(-1) - ordered)  # mass of the classes above
    u = torch.rand(len(p), 1, generator=generator, dtype=p.dtype,
                   device=generator.device if generator is not None else p.device)
    mass = above + u.to(p.device) * p  # one u per input: its sets are nested, top class first
    if score == "aps":
        return mass
    rank = torch.empty_like(p).scatter_(-1, order, torch.arange(1, p.shape[-1] + 1, dtype=p.dtype,
                                                                  device=p.device).expand_as(p).contiguous())
    return mass + lam * (rank - k_reg).clamp_min(0)


@dataclass(frozen=True)
class ConformalSets:
    """Sets with coverage at least ``1 - alpha``: every class whose ``score`` is at or under
    ``threshold``, calibrated on ``n`` inputs. aps and raps draw a new u at each call: measure a
    set's coverage and size on one draw (``coverage_and_size``)."""

    score: str
    alpha: float
    threshold: float
    n: int
    lam: float = 0.01
    k_reg: int = 5
    samples: int | None = None  # posterior samples per input it was calibrated with (None: not recorded)

    def predict(self, probs: torch.Tensor, generator: torch.Generator | None = None,
                nonempty: bool = False) -> torch.Tensor:
        """Which classes are in each input's set: bool [N, C] (aps, raps: u from ``generator``);
        with ``nonempty`` the most probable class is in every set."""
        member = class_scores(probs, self.score, self.lam, self.k_reg, generator) <= self.threshold
        if nonempty:
            member = member.scatter(-1, mean_predictive(probs).argmax(-1, keepdim=True), True)
        return member

    def certified_at(self, samples: int) -> bool:
        """Whether a predictive of ``samples`` posterior samples is what these sets were certified on
        (sets that do not record their count: any)."""
        return self.samples is None or self.samples == samples

    def answer(self, probs: torch.Tensor, seed: int = 0) -> list[list[int]]:
        """Each input's set as a list of classes, never empty (the most probable class joins an
        empty one), aps and raps drawing each input's u from a generator of its own seeded ``seed``,
        so an input's set does not depend on the inputs beside it."""
        if probs.dim() == 2:
            probs = probs[None]
        return [self.predict(probs[:, i:i + 1], torch.Generator(device=probs.device).manual_seed(seed),
                             nonempty=True)[0].nonzero().flatten().tolist() for i in range(probs.shape[1])]

    def coverage_and_size(self, probs: torch.Tensor, labels: torch.Tensor, generator: torch.Generator | None = None,
                          nonempty: bool = False) -> tuple[float, float]:
        """(the share of inputs whose true class is in their set, the mean set size), of one draw."""
        member = self.predict(probs, generator, nonempty)
        return (member.gather(-1, labels.reshape(-1, 1)).float().mean().item(),
                member.sum(-1).float().mean().item())

    def to_dict(self) -> dict:
        """As calibration.json stores it (an infinite threshold as null: JSON has no infinity)."""
        return {"score": self.score, "alpha": self.alpha, "n": self.n, "lam": self.lam, "k_reg": self.k_reg,
                "threshold": self.threshold if math.isfinite(self.threshold) else None, "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict) -> "ConformalSets":
        """What ``to_dict`` wrote; ValueError (or KeyError, TypeError) where it is not."""
        if d["score"] not in SCORES or not 0 < d["alpha"] < 1 or not isinstance(d["n"], int):
            raise ValueError(f"not conformal sets: {d}")
        threshold = math.inf if d["threshold"] is None else float(d["threshold"])
        samples = d.get("samples")
        return cls(d["score"], float(d["alpha"]), threshold, d["n"], float(d["lam"]), int(d["k_reg"]),
                   None if samples is None else int(samples))


def percent(coverage: float) -> str:
    """A coverage (1 - alpha) as a person writes it, to the digits it has: 90%, 95%, 99.9%; never
    rounded up to 100% (a set at 99.9% may leave a class out, one at 100% never does)."""
    return f"{round(100 * coverage, 8):.10g}%"


def fewest_inputs(alpha: float) -> int:
    """The fewest calibration inputs that give sets at coverage 1 - ``alpha`` a finite threshold, so
    that a set can be smaller than every class: n >= 1/alpha - 1 (below it ceil((n + 1)(1 - alpha))
    exceeds n, and every set is every class)."""
    return math.ceil((1 - alpha) / alpha - 1e-9)


def calibrate_sets(probs: torch.Tensor, labels: torch.Tensor, alpha: float = 0.01, score: str = "thr",
                   lam: float = 0.01, k_reg: int = 5, generator: torch.Generator | None = None) -> ConformalSets:
    """Split conformal calibration on held-out inputs (never the training data): ``probs`` their
    predictive ([S, N, C] samples or [N, C]), ``labels`` their classes [N]. With fewer than
    ``fewest_inputs(alpha)`` inputs no finite threshold covers: every set is then every class."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}: sets cover the true class with "
                         "probability 1 - alpha")
    p = mean_predictive(probs)
    if not (p.isfinite().all() and torch.allclose(p.sum(-1), torch.ones((), dtype=p.dtype, device=p.device),
                                                  atol=1e-3)):
        raise ValueError("probs must be class probabilities, finite and summing to 1 over the last dim "
                         "(predict()'s output of a classifier)")
    if labels.shape != p.shape[:1]:
        raise ValueError(f"{len(labels)} labels for {len(p)} inputs: give one class per calibration input")
    n = len(labels)
    if n == 0:
        raise ValueError("no calibration inputs: give the validation split's predictive and labels")
    true = class_scores(p, score, lam, k_reg, generator).gather(-1, labels.reshape(-1, 1)).squeeze(-1)
    rank = math.ceil((n + 1) * (1 - alpha) - 1e-9)  # the k-th smallest of n scores: exchangeability's +1
    threshold = math.inf if rank > n else true.sort().values[rank - 1].item()
    return ConformalSets(score, alpha, threshold, n, lam, k_reg, probs.shape[0] if probs.dim() == 3 else None)
