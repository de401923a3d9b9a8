"""An evaluation's figures as text (``bnn_zoo.evaluation.evaluate``'s ``Evaluation``): a summary
that fits a screen, each block headed by how many images it was measured on, and the table of
every figure, a row per figure (named by its path in eval.json).

Usage: ``print(summary(evaluation))``; ``print(table(evaluation))``
"""
from __future__ import annotations

import math

from .results import AlarmResult, Evaluation, PosteriorResult, ShiftResult

ALARM_WITHIN = 50  # the summary counts the corruptions whose alarm sounded by this input, as the scoreboard does


def summary(evaluation: Evaluation) -> str:
    """What a user asks first, a column per posterior: on the test set accuracy, NLL, refusals,
    the certified sets and the shift alarm; per OOD set refusals (one by one and in a stream),
    AUROC, the FPR at 95% TPR by each signal and the alarm (a set the run's outliers showed it in
    training says so in its title); under the corruptions, where measured, refusals and wrong
    answers. Each block says on how many images, the first line with how many posterior samples;
    skipped sets say why."""
    results = evaluation.posteriors
    lines = [f"{evaluation.run_dir}: {evaluation.num_samples} posterior samples an input (seed {evaluation.seed})"]
    lines += [f"  {part}: {r.posterior}; rule: {r.rule.in_words()}" for part, r in results.items()]
    blocks = [_test_block(evaluation), *(_ood_block(results, name, name in evaluation.ood_seen_in_training)
                                         for name in dict.fromkeys(name for r in results.values() for name in r.ood))]
    if any(r.shift for r in results.values()):
        blocks.append(_shift_block(results))
    lines += _grid(list(results), blocks)
    lines += [f"skipped {name}: {why}" for name, why in evaluation.skipped.items()]
    return "\n".join(lines)


def _test_block(evaluation: Evaluation) -> tuple[str, dict[str, list[str]]]:
    results = evaluation.posteriors.values()
    return f"test set, {evaluation.test_size:,} images", {
        "accuracy (forced)": [_percent(r.test.accuracy) for r in results],
        "NLL (nats)": [f"{r.test.nll:.4f}" for r in results],
        "ECE": [f"{r.test.ece:.4f}" for r in results],
        "refused": [_percent(r.test.refused) for r in results],
        "right among the answered": [_percent(r.test.accuracy_accepted) for r in results],
        "certified sets: coverage, mean size": [
            "n/a" if r.test.set_coverage is None else f"{_percent(r.test.set_coverage)}, {r.test.set_size:.2f}"
            for r in results],
        **_alarm_row([r.test.alarm for r in results])}


def _ood_block(results: dict[str, PosteriorResult], name: str,
               seen: bool = False) -> tuple[str, dict[str, list[str]]]:
    ood = [r.ood.get(name) for r in results.values()]  # None: a posterior not scored on it
    images = next(o.images for o in ood if o is not None)
    rows = {"refused (one by one)": [_percent(o and o.refused) for o in ood],
            "refused (in a stream, the alarm acting)": [_percent(o and o.refused_in_stream) for o in ood],
            "AUROC (by the rule's signal)": [_figure(o and r.auroc(name)) for o, r in zip(ood, results.values())],
            **_fpr95_row(ood),
            **_alarm_row([o and o.alarm for o in ood])}
    if any(o is not None and o.handled is not None for o in ood):
        rows["refused or answered with both digits"] = [_percent(o and o.handled) for o in ood]
    return f"OOD set {name}{' (seen in training: outliers)' if seen else ''}, {_count(images)} images", rows


# The signals the summary gives the FPR at 95% TPR by, and their figures in an OODResult (the
# feature density's where measured)
FPR95_BY = {"MI": "by_mutual_information", "entropy": "by_entropy", "max prob": "by_max_prob",
            "density": "by_feature_density"}


def _fpr95_row(ood: list) -> dict[str, list[str]]:
    """The share of test inputs flagged where 95% of the set's are (FPR at 95% TPR), by each signal
    of ``FPR95_BY`` measured on any posterior, a cell per posterior (n/a: not measured)."""
    by = {name: key for name, key in FPR95_BY.items() if any(o is not None and getattr(o, key) for o in ood)}
    cells = [" / ".join(_percent(o and getattr(o, key) and getattr(o, key).fpr95) for key in by.values()) for o in ood]
    return {f"FPR at 95% TPR ({' / '.join(by)})": cells}


def _shift_block(results: dict[str, PosteriorResult]) -> tuple[str, dict[str, list[str]]]:
    shifted = {part: list(r.shift.items()) for part, r in results.items()}
    first = next(sets for sets in shifted.values() if sets)
    return f"MNIST-C's corruptions, {len(first)} of {_count(first[0][1].images)} images, each one stream", {
        "refused (mean)": [_percent(_mean([s.refused for _, s in sets])) for sets in shifted.values()],
        "answered wrong (mean)": [_percent(_mean([s.wrong for _, s in sets])) for sets in shifted.values()],
        "answered wrong (worst)": [_worst(sets) for sets in shifted.values()],
        f"alarm within {ALARM_WITHIN} inputs": [f"{_within(sets)} of {len(sets)}" for sets in shifted.values()]}


def _grid(parts: list[str], blocks: list[tuple[str, dict[str, list[str]]]]) -> list[str]:
    """Blocks of rows, a column per posterior (its name atop each block), every cell right-aligned
    under its name."""
    width = 2 + max(len(text) for title, rows in blocks for text in [title, *(f"  {label}" for label in rows)])
    widths = [max(len(part), *(len(row[i]) for _, rows in blocks for row in rows.values())) for i, part in enumerate(parts)]
    lines = []
    for title, rows in blocks:
        lines.append(f"{title:<{width}}" + "  ".join(f"{part:>{w}}" for part, w in zip(parts, widths)))
        lines += [f"{'  ' + label:<{width}}" + "  ".join(f"{cell:>{w}}" for cell, w in zip(row, widths))
                  for label, row in rows.items()]
    return lines


def _alarm_row(alarms: list[AlarmResult | None]) -> dict[str, list[str]]:
    """Where each posterior's shift alarm sounded on a stream of the set (no row where none has a reference)."""
    stream = next((a.stream for a in alarms if a is not None), None)
    if stream is None:
        return {}
    said = ["n/a" if a is None else "silent" if a.alarm_at is None else f"at input {a.alarm_at}" for a in alarms]
    return {f"shift alarm on a stream of {stream:,}": said}


def _percent(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.2f}%"


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _count(images: int | None) -> str:
    return "?" if images is None else f"{images:,}"  # an eval.json written before the figures held their size


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _worst(sets: list[tuple[str, ShiftResult]]) -> str:
    if not sets:
        return "n/a"
    name, worst = max(sets, key=lambda named: named[1].wrong)
    return f"{_percent(worst.wrong)} ({name})"


def _within(sets: list[tuple[str, ShiftResult]]) -> int:
    return sum(s.alarm is not None and s.alarm.alarm_at is not None and s.alarm.alarm_at <= ALARM_WITHIN
               for _, s in sets)


def _flat(d: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} as {"a/b": 1}; a list of figures by coverage target as {"a/0.9/b": ...}."""
    flat = {}
    for key, value in d.items():
        if isinstance(value, list):
            value = {f"{v['target']:g}": {k: x for k, x in v.items() if k != "target"} for v in value}
        flat.update(_flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def table(evaluation: Evaluation) -> str:
    """Every figure as a text table, a row per figure (named by its path in eval.json's posteriors,
    e.g. ood/notmnist/by_entropy/auroc), a column per posterior."""
    rows = {part: _flat({k: v for k, v in r.to_dict().items() if k != "note"})  # the notes go below it
            for part, r in evaluation.posteriors.items()}
    keys = list(dict.fromkeys(k for row in rows.values() for k in row))
    cell = lambda c: f"{c:.4f}" if isinstance(c, float) else "n/a" if c is None else str(c)  # noqa: E731
    widths = {p: max(len(p), *(len(cell(row.get(k))) for k in keys)) for p, row in rows.items()}  # no cell overflows
    width = max(len(k) for k in keys)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{p:>{widths[p]}}" for p in rows)]
    lines += [f"{key:<{width}}  " + "  ".join(f"{cell(row.get(key)):>{widths[p]}}" for p, row in rows.items()) for key in keys]
    return "\n".join(lines)
