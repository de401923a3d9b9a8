"""Bring your own posterior, see how far it is from HMC: ``against_hmc`` scores predictive samples,
any posterior of the zoo, or a Pyro model and guide against an HMC reference (``Reference``) by
the competition's metrics, beside the floor HMC's own chains set.

Usage::

    distance = bnn_zoo.against_hmc(model, guide, reference="mnist_mlp_hmc")   # draws the predictive itself
    distance = bnn_zoo.against_hmc(probs, reference="mnist_mlp_hmc")          # [S, N, C] on its test inputs
    distance["test"].total_variation, distance["test"].times_floor; print(distance)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Union

import torch

from ...core.inference.predictive import predict, seeded
from ...posterior import Posterior
from .metrics import agreement, floor_prefix, predictive_draws, total_variation, wasserstein_1
from .reference import Reference


@dataclass(frozen=True)
class SetDistance:
    """How far a predictive is from HMC's on one set of inputs: top-1 agreement and total variation
    (classification) or the 1-Wasserstein distance (regression), and the same between HMC's own
    chains (``floor``); ``times_floor``: the distance (total variation, or W1) over the floor's from a
    chain to the pool of the others (a reference built before that was kept: from chain to chain)."""

    inputs: int
    floor: dict
    agreement: Optional[float] = None
    total_variation: Optional[float] = None
    w1: Optional[float] = None

    @property
    def metric(self) -> str:
        """The distance ``times_floor`` divides: "w1" or "total_variation"."""
        return "w1" if self.w1 is not None else "total_variation"

    @property
    def floor_value(self) -> float:
        """The floor ``times_floor`` divides by: a chain's distance to the others' pool, where recorded."""
        return self.floor[floor_prefix(self.floor) + self.metric]

    @property
    def times_floor(self) -> float:
        return getattr(self, self.metric) / self.floor_value if self.floor_value > 0 else float("inf")

    def __str__(self) -> str:
        times = f"{self.times_floor:.1f}x a chain's {self.floor_value:.4f} from the others"
        if self.w1 is not None:
            return f"W1 {self.w1:.4f} ({times})"
        return (f"agreement {self.agreement:.4f}, total variation {self.total_variation:.4f} ({times}; "
                f"chain to chain {self.floor['total_variation']:.4f}, agreement {self.floor['agreement']:.4f})")


@dataclass(frozen=True)
class HMCDistance:
    """``SetDistance`` by set of the reference's inputs: ``distance["test"]``."""

    reference: str
    sets: dict[str, SetDistance]

    def __getitem__(self, name: str) -> SetDistance:
        return self.sets[name]

    def __str__(self) -> str:
        return "\n".join(f"{self.reference} {name} ({found.inputs} inputs): {found}"
                         for name, found in self.sets.items())

    def to_dict(self) -> dict:
        sets = {name: {**asdict(found), "times_floor": found.times_floor} for name, found in self.sets.items()}
        return {"reference": self.reference, "sets": sets}


def set_distance(reference: Reference, name: str, outputs: torch.Tensor, seed: int = 0) -> SetDistance:
    """How far predictive samples ``outputs`` on set ``name``'s inputs (its first N, where N is fewer)
    are from the reference: [S, N, C] class probabilities, or a regression's [S, N, 2] (mean, noise
    sd: as many draws of y from their mixture as the reference holds, from ``seed``) or [D, N] draws of y."""
    floor = reference.floor(name)  # a set the reference does not hold refused here, naming those it holds
    hmc = reference.predictive[name]
    outputs = outputs.detach().cpu()
    if reference.regression:
        draws = predictive_draws(outputs, len(hmc), seed) if outputs.dim() == 3 else outputs
        if draws.dim() != 2 or not 0 < draws.shape[1] <= hmc.shape[1]:
            raise ValueError(f"the reference's {name} set holds {hmc.shape[1]} inputs: give [S, N, 2] (mean, noise "
                             f"sd) or [S, N] draws of y on N of them, got {list(outputs.shape)}")
        return SetDistance(draws.shape[1], floor, w1=wasserstein_1(draws, hmc[:, :draws.shape[1]]))
    if outputs.dim() != 3 or outputs.shape[-1] != hmc.shape[-1] or not 0 < outputs.shape[1] <= len(hmc):
        raise ValueError(f"the reference's {name} set holds {len(hmc)} inputs of {hmc.shape[-1]} classes: give "
                         f"predictive samples [S, N, {hmc.shape[-1]}] on N of them, got {list(outputs.shape)}")
    if outputs.min() < 0 or not torch.allclose(outputs.sum(-1), torch.ones(()), atol=1e-3):
        raise ValueError("the predictive samples are not class probabilities (each sample's row sums to 1): give "
                         "softmax(logits), as bnn_zoo.predict returns them")
    mean, hmc = outputs.mean(0), hmc[:outputs.shape[1]]
    return SetDistance(len(mean), floor, agreement(mean, hmc), total_variation(mean, hmc))


Scored = Union[torch.Tensor, dict, Posterior, torch.nn.Module]


def against_hmc(predictive: Scored, guide=None, *, reference: Union[str, Path, Reference],
                sets: Optional[tuple[str, ...]] = None, num_samples: int = 100, data_root: Optional[str] = None,
                seed: int = 0) -> HMCDistance:
    """How far a posterior predictive is from an HMC reference (a shipped name, the path of a .npz
    that scripts/hmc_reference.py wrote, or a ``Reference``), on each of its ``sets`` (None: every
    set the reference holds; predictive samples alone score its test set). ``predictive`` is

    - predictive samples on the reference's inputs (its first N of them): [S, N, C] class
      probabilities, or a regression's [S, N, 2] (mean, noise sd) or [S, N] draws of y; or a dict
      of them by set;
    - a Pyro model of the network with ``guide``, any guide or weight samples ``bnn_zoo.predict``
      takes, or a posterior of the zoo (``bnn_zoo.posteriors(trained)[name]``): ``num_samples``
      drawn from ``seed`` on each set's inputs (read from ``data_root``, else $BNN_ZOO_DATA, where
      the reference does not hold them).
    """
    reference = reference if isinstance(reference, Reference) else Reference.read(reference)
    if isinstance(predictive, torch.Tensor):
        if sets is not None and len(sets) != 1:
            raise ValueError(f"one tensor of predictive samples scores one set, not {len(sets)}: pass a dict "
                             "{set: samples}, or sets=(NAME,)")
        predictive = {(sets or ("test",))[0]: predictive}
    if isinstance(predictive, dict):
        return HMCDistance(reference.name, {name: set_distance(reference, name, outputs, seed)
                                            for name, outputs in predictive.items()})
    if guide is None and not isinstance(predictive, Posterior):
        raise ValueError("against_hmc takes predictive samples, a posterior of the zoo, or a model with its guide: "
                         "pass the guide (against_hmc(model, guide))")
    found = {}
    for name in sets or reference.sets:
        network = predictive.networks[0] if isinstance(predictive, Posterior) else predictive
        device = next(iter([*network.parameters(), *network.buffers()]), torch.zeros(())).device
        x = reference.inputs(name, data_root).to(device)
        with seeded(seed, device):
            outputs = (predictive.predict(x, num_samples) if isinstance(predictive, Posterior) else
                       predict(predictive, guide, x, num_samples))
        found[name] = set_distance(reference, name, outputs, seed)
    return HMCDistance(reference.name, found)
