"""MkDocs hooks: the home page is the README; each tutorial runs when the site is built (its source
and what it printed go into its page, with the commit); the results page is drawn from the
scoreboard's JSON.

A tutorial's page holds the line ``<!-- run: NAME.py -->``; the script runs in a fresh folder of
its own, and a failing tutorial fails the build.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
RUN = re.compile(r"^<!-- run: (\S+\.py) -->$", re.M)
RESULTS = re.compile(r"^<!-- results: (\S+\.json) -->$", re.M)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=DOCS, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _run(name: str) -> str:
    script = DOCS / "tutorials" / name
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": folder})
        seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"tutorial {name} failed:\n{done.stderr[-3000:]}")
    return (f"```python\n{script.read_text().strip()}\n```\n\nWhat it printed when this site was built "
            f"(commit {_commit()}, {seconds:.0f} s, {os.cpu_count()} CPU cores):\n\n```text\n{done.stdout.strip()}\n```\n")


def _results(name: str) -> str:
    """The scoreboard's in-distribution and OOD figures per posterior, from its JSON."""
    data = json.loads((DOCS / "results" / name).read_text())
    lines = [f"`{data['command']}` at commit {data['commit']} ({data['machine']}):", "",
             "| run | posterior | accuracy | NLL | refused | right among accepted | near-OOD refused (mean) |",
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
    return RESULTS.sub(lambda m: _results(m.group(1)), markdown)
