"""What scripts/gpu_check.py reads from the output of the processes it starts: the last JSON line
(cuda_draws.py's and step_profile.py's figures), pytest's result line (``PYTEST_RESULT``), and its
FAILURES section, each failure's short traceback and reason, without the warnings and logs after it.

Usage: ``figures = last_json(out); tail = failures(out)``
"""
import json
import re


def last_json(text: str):
    """The last line of ``text`` that is a JSON object (a measuring script's figures), read; a
    ValueError naming the output's end where it has none."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in its output: {text[-300:]}")


PYTEST_RESULT = re.compile(r"\d+ (passed|failed|error)")


def failures(out: str, most: int = 2500) -> str:
    """pytest's FAILURES section (each failure's short traceback and reason), not the warnings and
    logs printed after it; the output's end where it has none (a crash before the summary)."""
    start, end = out.find("= FAILURES ="), out.find("short test summary info")
    if 0 <= start < end:
        return out[out.rfind("\n", 0, start) + 1:end][:most]
    return out[-most:]
