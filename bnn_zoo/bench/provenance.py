"""What a figure needs beside it: the command that measured it, the commit of the code it ran, and
the machine (the docs' results pages print them with the figures).

Usage: ``json.dump({**provenance(), "results": results}, f)``
"""
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the package: a clone, or site-packages


def commit() -> str:
    """The commit of the package's own clone ("+changes" where its tree differs from it); "unknown"
    where the package is no clone's (installed from a wheel, even into a folder inside another
    repository: git is not let look above the package's folder)."""
    try:
        found = subprocess.run(["git", "describe", "--always", "--dirty=+changes"], cwd=ROOT, capture_output=True,
                               text=True, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(ROOT.parent)})
    except OSError:  # no git here: the figure still gets written
        return "unknown"
    return found.stdout.strip() or "unknown"


def provenance() -> dict:
    """{"command": the command line as typed, "commit": ``commit()``, "machine": its CPU cores
    and GPU}."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return {"command": shlex.join(["python", os.path.relpath(sys.argv[0]), *sys.argv[1:]]), "commit": commit(),
            "machine": f"{cores} CPU cores ({platform.machine()}), {gpu}"}
