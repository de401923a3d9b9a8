"""MkDocs hooks: the home page is the README; each tutorial runs when the site is built (its source
and what it printed go into its page, with the commit); the results page is drawn from the
measuring scripts' JSON.

A tutorial's page holds the line ``<!-- run: NAME.py -->``; under ``mkdocs build`` the script runs
in a fresh folder of its own (its runs and the networks it trusts stay there), and a failing
tutorial fails the build in one line (mkdocs' PluginError: no traceback), as does one that runs past
TUTORIAL_TIMEOUT; ``mkdocs serve`` shows the source alone, so that it rebuilds in seconds.
"""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mkdocs.exceptions import PluginError

DOCS = Path(__file__).resolve().parent
RUN = re.compile(r"^<!-- run: (\S+\.py) -->$", re.M)
TUTORIAL_TIMEOUT = 1800  # seconds: a hanging tutorial fails the build instead of hanging it
COMMAND: dict = {}  # mkdocs' command: build (runs the tutorials) or serve (shows their source)
RESULTS = re.compile(r"^<!-- (scoreboard|peers|ddp|tables|hmc_distance): (\S+\.json) -->$", re.M)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=DOCS, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _run(name: str) -> str:
    script = DOCS / "tutorials" / name
    source = f"```python\n{script.read_text().strip()}\n```\n\n"
    if COMMAND.get("name") == "serve":  # rebuilt on every edit: the tutorials run in mkdocs build
        return source + "_Its output appears in the built site: `mkdocs build` runs each tutorial._\n"
    with tempfile.TemporaryDirectory() as folder:  # its files, and the networks it trusts, stay in it
        env = {**os.environ, "BNN_ZOO_HOME": folder,
               "PYTHONPATH": os.pathsep.join(p for p in (folder, str(DOCS.parent), os.environ.get("PYTHONPATH")) if p)}
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, str(script)], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env, start_new_session=True)  # its own group: a timeout stops all of it
        try:
            stdout, stderr = child.communicate(timeout=TUTORIAL_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise PluginError(f"tutorial {name} ran past its cap of {TUTORIAL_TIMEOUT} s and was stopped: build the "
                              "site on a quieter machine, or raise TUTORIAL_TIMEOUT in docs/hooks.py") from None
        seconds = time.perf_counter() - started
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    if done.returncode:
        raise PluginError(f"tutorial {name} failed (exit code {done.returncode}):\n{done.stderr[-3000:]}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return source + (f"What it printed when this site was built (commit {_commit()}, {seconds:.0f} s, {cores} CPU "
                     f"cores):\n\n```text\n{done.stdout.strip()}\n```\n")


def on_startup(command: str, **_) -> None:
    COMMAND["name"] = command


def _peers(data: dict) -> str:
    """Training steps per second of each contender on each network: the median of the rounds."""
    archs = list(data["results"])
    contenders = list(dict.fromkeys(c for arch in archs for c in data["results"][arch]))
    cell = lambda r: "n/a" if r is None else f"{r['steps_per_s']:.1f}" if "steps_per_s" in r else "skipped"  # noqa: E731
    rows = [f"| {c} | " + " | ".join(cell(data["results"][a].get(c)) for a in archs) + " |" for c in contenders]
    return "\n".join([f"| contender | {' | '.join(archs)} |", "| --- |" + " --- |" * len(archs), *rows]) + "\n"


def _ddp(data: dict) -> str:
    """Training examples per second on one rank and on several, the median of the runs."""
    rows = [f"| {ranks} | {statistics.median(runs):,.0f} | {', '.join(f'{r:,.0f}' for r in runs)} |"
            for ranks, runs in data["runs"].items()]
    return "\n".join([f"{data['config']}: {data['ratio']:.2f}x on {max(data['runs'], key=int)} ranks.", "",
                      "| ranks | examples per second (median) | each run |", "| --- | --- | --- |", *rows]) + "\n"


def _tables(data: dict) -> str:
    """Each table's test figures: the Bayesian network, its twin, their ensembles, the baselines (as
    scripts/tables.py prints them)."""
    parts = [("bayes", "Bayesian"), ("twin", "twin"), ("ensemble", "ensemble"),
             ("deep_ensemble", "deep ensemble of twins"), ("linear", "linear / logistic"), ("mean", "mean / majority")]
    shown = [(key, name) for key, name in parts if all(key in r for r in data["rows"])]

    def cell(row: dict, f: dict) -> str:
        return f"{f['rmse']:.2f} / {f['nll']:.3f}" if row["regression"] else f"{f['accuracy']:.2%} / {f['nll']:.3f}"
    rows = [f"| {r['table']} | {r['seed']} | " + " | ".join(cell(r, r[key]) for key, _ in shown) +
            f" | {r['seconds']:.0f} |" for r in data["rows"]]
    return "\n".join(["RMSE (regression) or accuracy, and NLL in nats, on the test split:", "",
                      f"| table | split | {' | '.join(name for _, name in shown)} | seconds |",
                      "| --- |" + " --- |" * (len(shown) + 2), *rows]) + "\n"


def _results(kind: str, name: str) -> str:
    """A measurement's figures drawn from the JSON its command wrote, with the command and commit."""
    data = json.loads((DOCS / "results" / name).read_text())
    head = f"`{data['command']}` at commit {data['commit']} ({data['machine']}):\n\n"
    return head + {"scoreboard": _scoreboard, "peers": _peers, "ddp": _ddp, "tables": _tables,
                   "hmc_distance": _hmc_distance}[kind](data)


def _hmc_distance(data: dict) -> str:
    """Each problem's table of the ladder's distance to its HMC reference (scripts/distance_to_hmc.py),
    with the reference's chains, their R-hat and their seconds."""
    parts = []
    for name, problem in data["problems"].items():
        recipe = problem["recipe"]
        r_hat = ", ".join(f"{s} {d['max_r_hat']:.2f}" for s, d in recipe["sets"].items())
        parts.append(f"**{name}** against `{problem['reference']}` ({len(recipe['chains'])} NUTS chains of "
                     f"{recipe['num_samples']} samples after {recipe['warmup_steps']}, {recipe['seconds']:.0f} s on "
                     f"{recipe['built']['machine']}; the predictive's largest R-hat: {r_hat}):\n\n{problem['table']}\n")
    return "\n".join(parts)


def _scoreboard(data: dict) -> str:
    """The scoreboard's in-distribution and OOD figures per posterior."""
    lines = ["| run | posterior | accuracy | NLL | refused | right among accepted | near-OOD refused (mean) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    far_rows = []
    for run, scored in data["runs"].items():
        for part, r in scored["posteriors"].items():
            test, near = r["test"], scored["near_means"][part]
            lines.append(f"| {run} | {r['posterior']} | {test['accuracy']:.2%} | {test['nll']:.4f} | {test['refused']:.2%} | "
                         f"{test['accuracy_accepted']:.2%} | {'n/a' if near['refused'] is None else format(near['refused'], '.1%')} |")
            far_rows += [f"| {run} | {r['posterior']} | {s} | {o['refused']:.1%} | {_best_auroc(o):.4f} |"
                         for s, o in r["ood"].items()]
    return "\n".join(lines + ["", "Refused, and the best AUROC of the posterior's signals, per OOD set:", "",
                              "| run | posterior | set | refused | AUROC |", "| --- | --- | --- | --- | --- |", *far_rows]) + "\n"


def _best_auroc(ood: dict) -> float:
    return max(ood[k]["auroc"] for k in ("by_entropy", "by_mutual_information", "by_feature_density") if ood.get(k))


def _readme() -> str:
    """The README, the site's home page, its links made the site's own."""
    text = (DOCS.parent / "README.md").read_text()
    text = text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
    return text.replace("([LICENSE](LICENSE))", "(the LICENSE file beside the code)")


def on_page_markdown(markdown: str, **_) -> str:
    if markdown.strip() == "<!-- readme -->":
        return _readme()
    markdown = RUN.sub(lambda m: _run(m.group(1)), markdown)
    return RESULTS.sub(lambda m: _results(m.group(1), m.group(2)), markdown)
