"""Each measurement in a Python process of its own: a script's one way to run itself with
``--child SPEC`` and read back the JSON its last line prints (so a figure's memory, threads and
compiled state are its own, and one contender cannot warm up another).

Usage (in a script that answers ``--child SPEC`` with one line of JSON)::

    result = in_own_process(__file__, {"arch": "lenet", ...}, timeout=600)
"""
import json
import os
import subprocess
import sys


class ChildFailed(RuntimeError):
    """The measurement's process failed (``timed_out``: killed at its timeout); ``last`` is the last
    line it wrote to stderr."""

    def __init__(self, spec: dict, stderr: str, returncode: int):
        self.last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {returncode}"
        self.timed_out = returncode == -1
        super().__init__(f"the measurement {spec} failed: {stderr.strip()[-2000:]}")


def in_own_process(script: str, spec: dict, timeout: float | None = None) -> dict:
    """``python SCRIPT --child SPEC`` in a fresh process (killed after ``timeout`` seconds): its
    last line of stdout, as JSON."""
    try:
        done = subprocess.run([sys.executable, os.path.abspath(script), "--child", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else err.stderr or ""
        raise ChildFailed(spec, f"timed out after {timeout} s: {stderr}", -1) from None
    if done.returncode != 0:
        raise ChildFailed(spec, done.stderr, done.returncode)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise ChildFailed(spec, f"no JSON on its last line of output: {done.stdout.strip()[-500:]!r} "
                                f"{done.stderr.strip()[-1500:]}", 0) from None
