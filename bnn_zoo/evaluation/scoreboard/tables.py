"""The scoreboard's markdown tables (scripts/scoreboard.py): per run and posterior the
in-distribution figures, per OOD set each posterior's, then the ladder (AUROC per set and cost),
the feature density's AUROC per set, and under shift a row per posterior, a table per run of each
corruption's figures, and the wrong answers before and after the alarm.

Usage: ``text = markdown(runs)``  # runs: {name: ScoredRun}
"""
from typing import Callable

from ..results import InDistribution, OODResult, PosteriorResult
from ..split_fits import TARGETS
from .scored import ALARM_WITHIN, ScoredRun, all_sets, ladder_rows, shift_summary

# (header, shown in percent, the figure): the in-distribution columns, then those per OOD set
IN_DISTRIBUTION: list[tuple[str, bool, Callable[[InDistribution], float]]] = [
    ("accuracy", True, lambda t: t.accuracy), ("NLL", False, lambda t: t.nll), ("ECE", False, lambda t: t.ece),
    ("refused", True, lambda t: t.refused), ("acc. accepted", True, lambda t: t.accuracy_accepted),
    ("AURC", False, lambda t: t.aurc), ("AUGRC", False, lambda t: t.augrc), ("risk @95%", False, lambda t: t.risk_at_95),
    ("risk @99%", False, lambda t: t.risk_at_99), ("set coverage", True, lambda t: t.set_coverage),
    ("set size", False, lambda t: t.set_size),
    *((f"{header} @{target:.0%}", percent, lambda t, target=target, name=name: getattr(t.set_figures(target), name, None))
      for target in TARGETS for header, percent, name in (("sets: coverage", True, "coverage"), ("size", False, "size")))]
PER_SET: list[tuple[str, bool, Callable[[OODResult], float | None]]] = [
    ("refused", True, lambda o: o.refused), ("refused in a stream", True, lambda o: o.refused_in_stream),
    ("refused, quantile rule", True, lambda o: o.refused_by_quantile_rule),
    ("AUROC H", False, lambda o: o.by_entropy.auroc), ("AUPR H", False, lambda o: o.by_entropy.aupr),
    ("FPR95 H", False, lambda o: o.by_entropy.fpr95),
    ("AUROC MI", False, lambda o: o.by_mutual_information and o.by_mutual_information.auroc),
    ("AUPR MI", False, lambda o: o.by_mutual_information and o.by_mutual_information.aupr),
    ("FPR95 MI", False, lambda o: o.by_mutual_information and o.by_mutual_information.fpr95),
    ("FPR95 max prob", False, lambda o: o.by_max_prob and o.by_max_prob.fpr95),
    ("AUROC density", False, lambda o: o.by_feature_density and o.by_feature_density.auroc),
    ("FPR95 density", False, lambda o: o.by_feature_density and o.by_feature_density.fpr95),
    ("handled (overlaid)", True, lambda o: o.handled)]


def _cell(value, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.2f}%" if percent else f"{value:.4f}"


def markdown(runs: dict[str, ScoredRun]) -> str:
    """Every table of the scoreboard, one after another."""
    lines = ["| run | model | rule | " + " | ".join(header for header, _, _ in IN_DISTRIBUTION) +
             " | near-OOD refused (mean of those not seen in training; overlaid: or both in the set) | "
             "near-OOD refused, each set one stream (mean of those not seen in training) |",
             "|" + " --- |" * (len(IN_DISTRIBUTION) + 5)]
    for name, run in runs.items():
        for r in run.evaluation.posteriors.values():
            short = {"mutual_information": "MI", "entropy": "H", "feature_density": "-log density"}
            rule = f"q>={r.rule.threshold}" + (f", {short[r.rule.signal]}<={r.rule.cut:.3g}" if r.rule.signal else "")
            cells = [_cell(figure(r.test), percent) for _, percent, figure in IN_DISTRIBUTION]
            lines.append(f"| {name} | {r.posterior} | {rule} | " + " | ".join(cells) +
                         f" | {_cell(run.near_refused(r), True)} | {_cell(run.near_refused_in_stream(r), True)} |")
    for name, run in runs.items():
        fonts = f" (letters drawn in {len(run.letter_fonts)} fonts)" if run.letter_fonts else ""
        lines += ["", f"**{name}**: out-of-distribution sets against its test set{fonts}", "",
                  "| set | model | " + " | ".join(header for header, _, _ in PER_SET) + " |",
                  "|" + " --- |" * (len(PER_SET) + 2)]
        for ood in run.sets:
            for r in run.evaluation.posteriors.values():
                kind = ", ".join(["near"] * (ood in run.near) + ["seen in training"] * (ood in run.evaluation.ood_seen_in_training))
                lines.append(f"| {ood}{f' ({kind})' if kind else ''} | {r.posterior} | " + " | ".join(
                    _cell(figure(r.ood[ood]), percent) for _, percent, figure in PER_SET) + " |")
    return "\n".join(lines + ["", ladder_table(runs), "", density_table(runs), "", shift_table(runs)])


def shift_table(runs: dict[str, ScoredRun]) -> str:
    """Under shift: a row per posterior over the corruptions (``shift_summary``), then per run a row
    per corruption with each posterior's refused / wrong / the input its alarm sounded at."""
    rows = {label: (run, r) for label, (run, _, r) in ladder_rows(runs).items() if r.shift}
    if not rows:
        return ""
    lines = ["| posterior | corruptions not seen in training | refused (mean; the certified rule alone) | answered "
             "wrong (mean; the certified rule alone) | worst wrong | at most 1% wrong on | "
             f"alarm within {ALARM_WITHIN} on | alarm on clean test | seen in training: refused / wrong (mean) |",
             "|" + " --- |" * 9]
    for label, (run, r) in rows.items():
        s = shift_summary(r, run.evaluation.seen_in_training)
        clean = "n/a" if r.test.alarm is None else "none" if s["clean_alarm_at"] is None else f"at {s['clean_alarm_at']}"
        within = "n/a" if s["alarm_within"] is None else f"{s['alarm_within']} of {s['corruptions']}"
        seen = s["seen_in_training"]
        apart = (f"{len(seen['corruptions'])}: {_cell(seen['refused'], True)} / {_cell(seen['wrong'], True)}"
                 if seen["corruptions"] else "none")
        lines.append(f"| {label} | {s['corruptions']} | {_cell(s['refused'], True)} "
                     f"({_cell(s['refused_alone'], True)}) | {_cell(s['wrong'], True)} "
                     f"({_cell(s['wrong_alone'], True)}) | "
                     f"{_cell(s['worst_wrong'], True)} ({s['worst']}) | {s['at_most_1pct_wrong']} of {s['corruptions']} | "
                     f"{within} | {clean} | {apart} |")
    for name, run in runs.items():
        results = {part: r for part, r in run.evaluation.posteriors.items() if r.shift}
        if not results:
            continue
        first = next(iter(results.values()))
        stream = f" of {first.test.alarm.stream}" if first.test.alarm else ""
        lines += ["", f"**{name}** under shift: refused / answered wrong / the input{stream} its alarm sounded at",
                  "", "| corruption | " + " | ".join(r.posterior for r in results.values()) + " |",
                  "|" + " --- |" * (len(results) + 1)]
        for corruption in first.shift:
            cells = []
            for r in results.values():
                c = r.shift[corruption]
                at = "n/a" if c.alarm is None else "none" if c.alarm.alarm_at is None else str(c.alarm.alarm_at)
                cells.append(f"{_cell(c.refused, True)} / {_cell(c.wrong, True)} / {at}")
            seen = " (seen in training)" if corruption in run.evaluation.seen_in_training else ""
            lines.append(f"| {corruption}{seen} | " + " | ".join(cells) + " |")
        lines += before_after_table(name, results)
    return "\n".join(lines)


def before_after_table(name: str, results: dict[str, PosteriorResult]) -> list[str]:
    """Per corruption, each set answered as one stream: the inputs answered wrong before the alarm
    and from it on (counts, and per input), then refused with the after-alarm rule acting (and by the
    certified rule alone); none where the run holds no alarm reference."""
    results = {part: r for part, r in results.items() if all(c.by_alarm for c in r.shift.values())}
    if not results:
        return []
    lines = ["", f"**{name}** before and after the alarm: wrong before it / wrong from it on (per input) / refused "
                 "(by the certified rule alone)", "",
             "| corruption | " + " | ".join(r.posterior for r in results.values()) + " |",
             "|" + " --- |" * (len(results) + 1)]
    for corruption in next(iter(results.values())).shift:
        cells = []
        for r in results.values():
            b, refused = r.shift[corruption].by_alarm, r.shift[corruption].refused
            cells.append(f"{b.wrong_before} of {b.before} ({_cell(b.wrong_before_rate, True)}) / {b.wrong_after} of "
                         f"{b.after} ({_cell(b.wrong_after_rate, True)}) / {_cell(refused, True)} "
                         f"({_cell(b.refused_alone, True)})")
        lines.append(f"| {corruption} | " + " | ".join(cells) + " |")
    return lines


def ladder_table(runs: dict[str, ScoredRun]) -> str:
    """The ladder: per posterior, accuracy, NLL, AUROC per OOD set (by the signal its rule gates
    on), the mean over the near sets, and the cost columns."""
    sets = all_sets(runs)
    lines = ["| posterior | accuracy | NLL | " + " | ".join(f"AUROC {n}" for n in sets) +
             " | near AUROC (mean) | training min | predict s | predict MB | numbers stored |",
             "|" + " --- |" * (len(sets) + 8)]
    for label, (run, part, r) in ladder_rows(runs).items():
        aurocs = [_cell(r.auroc(n), False) if n in r.ood else "" for n in sets]
        seconds, mb = run.train_seconds.get(part), r.cost.predict_peak_mb
        lines.append(f"| {label} | {_cell(r.test.accuracy, True)} | {r.test.nll:.4f} | " + " | ".join(aurocs) +
                     f" | {_cell(run.near_auroc(r), False)}"
                     f" | {'n/a' if seconds is None else f'{seconds / 60:.1f}'} | {r.cost.predict_seconds:.1f}"
                     f" | {'n/a' if mb is None else f'{mb:.0f}'} | {r.cost.parameters:,} |")
    return "\n".join(lines)


def density_table(runs: dict[str, ScoredRun]) -> str:
    """The third signal on the ladder: per posterior with a point network (a guide at its mean, a
    twin), the AUROC of its feature density (bnn_zoo.abstain.density) per OOD set and over the near sets."""
    sets = all_sets(runs)
    lines = ["| posterior | " + " | ".join(f"density AUROC {n}" for n in sets) + " | near (mean) |",
             "|" + " --- |" * (len(sets) + 2)]
    for label, (run, _, r) in ladder_rows(runs).items():
        cells = [_cell(r.ood[n].by_feature_density.auroc, False) if n in r.ood and r.ood[n].by_feature_density
                 else "n/a" for n in sets]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_cell(run.near_density_auroc(r), False)} |")
    return "\n".join(lines)

