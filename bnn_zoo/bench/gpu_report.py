"""scripts/gpu_check.py's report as markdown: the targets of issue 42 (and issue 36's prediction
targets), each with its measured value and met or missed, then each section's figures; a section
not run is named with why.

Usage: ``text = markdown(report)``
"""
import math
import statistics

SECTIONS = ("draws", "mnist_mlp", "tests", "profile", "peers", "lenet", "torchrun", "recipe")
ARCHS = ("mnist_mlp", "lenet")
EPOCH = {"mnist_mlp": 0.2, "lenet": 0.3}  # seconds an epoch of 60,000 images, batch 128
PREDICT = {"mnist_mlp": 0.3, "lenet": 1.0}  # seconds for 100 samples of 10,000 test images (issue 36)
WARM_FIRST_EPOCH = 3.0  # seconds: a second run's first epoch on a warm cache, and a resumed run's
OVER_TWIN, WITHIN_COMPILED_TWIN = 1.5, 1.5
WALL = 300.0


def _num(value, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _epochs(entry: dict, index) -> float | None:
    seconds = entry.get("epoch_seconds") if entry and entry.get("ok") else None
    if not seconds:
        return None
    return statistics.median(seconds[index]) if isinstance(index, slice) and seconds[index] else \
        (seconds[index] if isinstance(index, int) and len(seconds) > index else None)


def targets(report: dict) -> list[tuple[str, float | None, str, bool | None]]:
    """(target, measured, bound, met); measured None: not measured."""
    rows = []
    for arch in ARCHS:
        runs = report.get(arch, {})
        steady = _epochs(runs.get("compile"), slice(1, None))
        rows.append((f"{arch} epoch, compiled (s)", steady, f"<= {EPOCH[arch]}", None if steady is None else
                     steady <= EPOCH[arch]))
        for name, what in (("second", "first epoch of a second run, warm cache (s)"),
                           ("resumed", "first epoch after resume (s)")):
            entry = runs.get(name)
            first = _epochs(entry, 0 if name == "second" else -1)
            rows.append((f"{arch} {what}", first, f"<= {WARM_FIRST_EPOCH}",
                         None if first is None else first <= WARM_FIRST_EPOCH))
        gap = runs.get("loss_gap")
        rows.append((f"{arch} compiled epoch-1 loss against Pyro's eager (relative)", gap, "<= 1e-3",
                     None if gap is None else gap <= 1e-3))
        predicted = runs.get("predict_seconds")
        rows.append((f"{arch} 100-sample prediction of 10,000 images (s)", predicted, f"<= {PREDICT[arch]}",
                     None if predicted is None or math.isnan(predicted) else predicted <= PREDICT[arch]))
        rates = report.get("peers", {}).get("steps_per_s", {}).get(arch, {})
        zoo, twin, compiled_twin = (rates.get(k) for k in ("zoo_compiled", "twin", "twin_compiled"))
        over = zoo / twin if zoo and twin else None
        rows.append((f"{arch} compiled step over the plain twin's eager step (x)", over, f">= {OVER_TWIN}",
                     None if over is None else over >= OVER_TWIN))
        within = compiled_twin / zoo if zoo and compiled_twin else None
        rows.append((f"{arch} compiled twin's step over the compiled step (x)", within, f"<= {WITHIN_COMPILED_TWIN}",
                     None if within is None else within <= WITHIN_COMPILED_TWIN))
    tests = report.get("tests")
    rows.append(("python -m pytest -m cuda: failed", len(tests["failed"]) if tests and "failed" in tests else None,
                 "0", None if not tests or "failed" not in tests else tests["ok"] and not tests["failed"]))
    recipe = report.get("recipe")
    rows.append(("LeNet recipe end to end (wall s)", recipe.get("wall_s") if recipe and recipe.get("ok") else None,
                 "measured", bool(recipe and recipe.get("ok")) if recipe else None))
    wall = report.get("wall_s")
    rows.append(("gpu_check wall (s)", wall, f"<= {WALL:.0f}", None if wall is None else wall <= WALL))
    return rows


def markdown(report: dict) -> str:
    """The report's heading and provenance, the table of ``targets``, each section's state, then each
    section's figures (a failed one's error)."""
    lines = [f"# gpu_check: {report.get('device')}, torch {report.get('torch')}, commit {report.get('commit')}", "",
             f"`{report.get('command')}`: {_num(report.get('wall_s'), 0)} s of a {_num(report.get('budget_s'), 0)} s "
             f"budget; {report.get('machine')}", "", "| target | measured | bound | met |", "| --- | --- | --- | --- |"]
    for what, value, bound, met in targets(report):
        shown = "not measured" if value is None else (str(value) if isinstance(value, int) else _num(value))
        lines.append(f"| {what} | {shown} | {bound} | {'-' if met is None else 'yes' if met else 'NO'} |")
    lines += ["", "| section | state |", "| --- | --- |"]
    lines += [f"| {name} | {state} |" for name, state in report.get("sections", {}).items()]
    for name in SECTIONS:
        if name in report:
            lines += ["", f"## {name}", "", *_section(name, report[name])]
    return "\n".join(lines) + "\n"


def _section(name: str, found: dict) -> list[str]:
    if name == "draws":
        if "variants" not in found:
            return [f"FAILED: {found.get('error', '')[-800:]}"]
        lines = [f"{found['arch']}, torch {found['torch']} (torch chains random ops itself: "
                 f"{found['torch_chains_random_ops']}); each call's loss and gradients against Pyro's step from the "
                 "same generator state", "", "| variant | call 1 | call 2 | call 3 |", "| --- | --- | --- | --- |"]
        for variant, calls in found["variants"].items():
            cells = [calls["failed"]] if isinstance(calls, dict) else [
                f"{'same' if k['same'] else 'OTHER'} (loss {k['loss_gap']:.1e}, grads {k['grad_gap']:.1e}"
                f"{'' if k['same_state'] else ', other state'})" for k in calls]
            lines.append(f"| {variant} | {' | '.join(cells)} |")
        return lines
    if name in ARCHS:
        lines = ["| run | ok | epoch seconds | losses | test accuracy | wall s |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for run in ("compile", "resumed", "second", "eager"):
            e = found.get(run)
            if e:
                seconds = ", ".join(f"{s:.2f}" for s in e.get("epoch_seconds", []))
                losses = ", ".join(f"{v:.2f}" for v in e.get("losses", []))
                lines.append(f"| {run} | {'yes' if e.get('ok') else 'NO'} | {seconds} | {losses} | "
                             f"{_num(e.get('test_accuracy'), 4)} | {_num(e.get('wall_s'), 0)} |")
        errors = [f"{run}: {found[run]['error'][-600:]}" for run in ("compile", "resumed", "second", "eager")
                  if found.get(run) and found[run].get("error")]
        return lines + ([""] + ["```", *errors, "```"] if errors else [])
    if name == "tests":
        return [f"{'passed' if found.get('ok') else 'FAILED'}: {found.get('summary', '')}", "", "```",
                *found.get("outcomes", []), *([found["tail"]] if found.get("tail") else []), "```"]
    if name == "profile" and found.get("ok"):
        lines = [f"{found['arch']} ({found['capture']}), batch {found['batch_size']}: {found['step_ms']:.3f} ms a step "
                 f"({found['steps_per_s']:.0f} steps/s), the device busy {_num(found['device_busy_ms_per_step'])} ms "
                 f"of it, host gaps {_num(found['host_gap_ms_per_step'])} ms, host CPU {found['cpu_ms_per_step']:.3f} "
                 f"ms; {found['kernels_per_step']:.0f} kernels a step; the first step {found['first_step_s']:.1f} s",
                 "", "| kernel | calls | us |", "| --- | --- | --- |"]
        lines += [f"| `{k['name']}` | {k['calls']} | {k['us']:.0f} |" for k in found["top_kernels"]]
        return lines
    if name == "peers" and "table" in found:
        return ["```", found["table"], "```"]
    if name == "recipe" and found.get("ok"):
        return [f"{found['wall_s']:.0f} s; test accuracy {found.get('test_accuracy')}, the ensemble's "
                f"{found.get('ensemble')}; certified: {found.get('certified')}"]
    if name == "torchrun" and "losses" in found:
        return [f"{'same loss as the plain run' if found['ok'] else 'OTHER LOSS'}: {found['losses']} "
                f"(gap {found['gap']:.1e})"]
    return [f"FAILED: {str(found.get('error', found))[-1200:]}"]
