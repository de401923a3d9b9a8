"""The scoreboard's shift figures: the test set under each of MNIST-C's corruptions
(``bnn_zoo.data.shifted.corruptions``), each set answered by each posterior as one stream of its inputs in a
seeded order (``Trained.stream``: its rule, and from the input that sounds the shift alarm on, the
after-alarm rule), with the wrong answers before and after the alarm; and where the shift alarm
(``bnn_zoo.abstain.shift``) sounds on a stream of a set's inputs. A user pays for the inputs answered
wrong, so that is the figure kept beside the refusals.

Usage: ``figures = streamed(trained.stream("bayes"), probs, labels, gate, seed=0, rule=answer)``;
``shifted(probs, labels, answer, gate)``; ``alarm_result(trained, "bayes", probs, seed=0)``;
``seen_in_training(trained.config)  # ("translate", "rotate", ...): the corruptions its augmentation covers``;
``seen_as_outliers(trained.config)  # ("noise", "overlaid"): the OOD sets its outliers cover``
"""
from __future__ import annotations

import torch
from omegaconf import OmegaConf

from ..abstain.after_alarm import Stream
from ..abstain.rule import Decision, Rule
from ..core.errors import DataError
from ..data.shifted.augment import AugmentConfig, covered
from ..data.config import DataConfig
from ..data.shifted.corruptions import CORRUPTIONS, corrupt
from ..data.shifted.outliers import OutliersConfig
from ..data.shifted.outliers import covered as covered_by_outliers
from ..data.inputs import pixel_inputs
from ..data.sets import TORCHVISION_SETS, load_torchvision
from ..runs.storage.trained import Trained
from .results import AlarmResult, BeforeAfter, ShiftResult
from .set_answers import SetAnswer

STREAM = 500  # inputs an alarm watches per set, and corrupted images per corruption


def seen_as_outliers(config) -> tuple[str, ...]:
    """The OOD sets a run's declared outliers (its config's ``outliers`` section) showed it in
    training, made the same way: reported apart, as seen in training (none without such a section)."""
    section = config.get("outliers")
    return covered_by_outliers(OutliersConfig(**OmegaConf.to_container(section))) if section else ()


def seen_in_training(config) -> tuple[str, ...]:
    """The corruptions a run's declared augmentation (its config's ``augment`` section) showed it in
    training: reported apart, as seen in training, not as a shift (none where it has no such section)."""
    section = config.get("augment")
    return covered(AugmentConfig(**OmegaConf.to_container(section))) if section else ()


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
    return _figures(answer(probs, gate), probs, labels.to(probs.device))


def _figures(decision: Decision, probs: torch.Tensor, labels: torch.Tensor) -> ShiftResult:
    answered, right = ~decision.refused, decision.prediction == labels
    return ShiftResult(refused=decision.refused.float().mean().item(),
                       accuracy_accepted=right[answered].float().mean().item() if answered.any() else float("nan"),
                       wrong=(answered & ~right).float().mean().item(),
                       accuracy=(probs.mean(0).argmax(1) == labels).float().mean().item(), images=len(labels))


def streamed(stream: Stream, probs: torch.Tensor, labels: torch.Tensor, gate: torch.Tensor | None = None,
             seed: int = 0, rule=None, inputs: torch.Tensor | None = None) -> ShiftResult:
    """``shifted``'s figures of a corrupted set answered by ``stream`` as one stream of its inputs
    (sampled predictions ``probs`` [S, N, C]; ``inputs``: the inputs themselves, whose repeats its alarm
    counts) in a seeded random order, with where its alarm sounded
    and the inputs answered wrong and refused before it and from it on (``BeforeAfter``); ``rule``: what
    the caller answers with (``Stream.decide``'s), None for the stream's certified rule."""
    order = torch.randperm(probs.shape[1], generator=torch.Generator().manual_seed(seed)).to(probs.device)
    probs, labels = probs[:, order], labels.to(probs.device)[order]
    answered = stream.decide(probs, None if gate is None else gate[order], rule=rule,
                             inputs=None if inputs is None else inputs[order.to(inputs.device)])
    result = _figures(answered.decision, probs, labels)
    if stream.alarm is None:
        return result
    alarm = stream.alarm
    result.alarm = AlarmResult(alarm.seen, alarm.alarm_at, alarm.alpha)
    after = answered.after_alarm
    wrong, alone = _wrong(answered.decision, labels), _wrong(answered.ordinary, labels)
    count = lambda mask: int(mask.sum())  # noqa: E731
    result.by_alarm = BeforeAfter(
        acting=stream.acting, before=count(~after), wrong_before=count(wrong & ~after), after=count(after),
        wrong_after=count(wrong & after), refused_after=count(answered.decision.refused & after),
        wrong_after_alone=count(alone & after), refused_after_alone=count(answered.ordinary.refused & after),
        refused_alone=answered.ordinary.refused.float().mean().item(), wrong_alone=alone.float().mean().item())
    return result


def _wrong(decision: Decision, labels: torch.Tensor) -> torch.Tensor:
    """[N] bool: answered, and not with the label."""
    return ~decision.refused & (decision.prediction != labels)


def alarm_result(trained: Trained, part: str, probs: torch.Tensor, stream: int = STREAM, seed: int = 0,
                 density: torch.Tensor | None = None, inputs: torch.Tensor | None = None) -> AlarmResult | None:
    """Where ``part``'s shift alarm sounds on a stream of at most ``stream`` of the inputs of
    ``probs`` [S, N, C] (``density``: their feature density scores, for a density gate; ``inputs``: the
    inputs themselves, whose repeats it counts), taken in a seeded random order; None where the run
    holds no reference."""
    alarm = trained.alarm(part)
    if alarm is None:
        return None
    order = torch.randperm(probs.shape[1], generator=torch.Generator().manual_seed(seed))[:stream]
    alarm.observe(probs[:, order.to(probs.device)], None if density is None else density[order.to(density.device)],
                  None if inputs is None else inputs[order.to(inputs.device)])
    return AlarmResult(alarm.seen, alarm.alarm_at, alarm.alpha)
