"""The scoreboard's shift figures: the test set under each of MNIST-C's corruptions
(``bnn_zoo.data.corruptions``), answered by each posterior under its rule, and where the shift
alarm (``bnn_zoo.abstain.shift``) sounds on a stream of a set's inputs. A user pays for the inputs
answered wrong, so that is the figure kept beside the refusals.

Usage: ``figures = shifted(probs, labels, answer, gate)``; ``alarm_result(trained, "bayes", probs, seed=0)``
"""
from __future__ import annotations

import torch

from ..abstain.rule import Rule
from ..core.errors import DataError
from ..data.config import DataConfig
from ..data.corruptions import CORRUPTIONS, corrupt
from ..data.inputs import pixel_inputs
from ..data.sets import TORCHVISION_SETS, load_torchvision
from ..runs.trained import Trained
from .results import AlarmResult, ShiftResult
from .set_answers import SetAnswer

STREAM = 500  # inputs an alarm watches per set, and corrupted images per corruption


def default_shift(data: DataConfig) -> tuple[str, ...]:
    """The corruptions a run is scored under: all fifteen for MNIST and FashionMNIST (they are
    image operations on 28x28 gray images, white on black), none for other data."""
    return CORRUPTIONS if data.name in TORCHVISION_SETS else ()


def corrupted_sets(data: DataConfig, names: tuple[str, ...], root: str | None, size: int, seed: int = 0,
                   limit: int | None = None):
    """(name, inputs as the run's network sees them, labels) for each corruption ``names`` of the
    same seeded sample of ``size`` test images (of the first ``limit``), one set at a time."""
    if not names:
        return
    if data.name not in TORCHVISION_SETS:
        raise DataError(f"the corruptions are of 28x28 MNIST-like images; a {data.name} run has none to score "
                        "(leave out --shift)")
    images, labels = load_torchvision(data.name, root, train=False, download=data.download)
    images, labels = images[:limit], labels[:limit]
    chosen = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:size]
    for name in names:
        yield name, pixel_inputs(data, corrupt(images[chosen], name, seed)), labels[chosen]


def shifted(probs: torch.Tensor, labels: torch.Tensor, answer: Rule | SetAnswer,
            gate: torch.Tensor | None = None) -> ShiftResult:
    """Refusals, accuracy among the answered, the share of all inputs answered wrong, and the
    forced accuracy of sampled predictions ``probs`` [S, N, C] of a corrupted set."""
    decision = answer(probs, gate)
    labels = labels.to(probs.device)
    answered, right = ~decision.refused, decision.prediction == labels
    return ShiftResult(refused=decision.refused.float().mean().item(),
                       accuracy_accepted=right[answered].float().mean().item() if answered.any() else float("nan"),
                       wrong=(answered & ~right).float().mean().item(),
                       accuracy=(probs.mean(0).argmax(1) == labels).float().mean().item())


def alarm_result(trained: Trained, part: str, probs: torch.Tensor, stream: int = STREAM,
                 seed: int = 0) -> AlarmResult | None:
    """Where ``part``'s shift alarm sounds on a stream of at most ``stream`` of the inputs of
    ``probs`` [S, N, C], taken in a seeded random order; None where the run holds no reference."""
    alarm = trained.alarm(part, seed=seed)
    if alarm is None:
        return None
    order = torch.randperm(probs.shape[1], generator=torch.Generator().manual_seed(seed))[:stream]
    alarm.observe(probs[:, order.to(probs.device)])
    return AlarmResult(alarm.seen, alarm.alarm_at, alarm.alpha)
