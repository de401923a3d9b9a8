"""Prove and time the CUDA path in one command, on one GPU, in about 8 minutes: the tests marked
cuda; mnist_mlp and lenet trained for two epochs and resumed for a third through
``python -m bnn_zoo.train`` with ``train.capture`` eager, trace and compile (checkpoints,
validation, resume across the capture: the eager run resumed compiled), their losses held against
each other; an epoch and prediction (100 samples of the 10,000 test images) timed; the training
step beside the peers (``scripts/peers.py --device cuda``); a one-GPU torchrun (NCCL, DDP) against
the plain run. Writes gpu_check.json and gpu_check.md into OUT; on a machine without CUDA it says
so in one line and exits 2.

The targets it checks (issue 36): an epoch of 60,000 images in at most 0.3 s (mnist_mlp) and 0.5 s
(lenet); 100 samples of 10,000 images predicted in at most 0.3 s and 1 s; the compiled step at
least 3x Pyro's own step on the same GPU.

Usage: python scripts/gpu_check.py OUT [--data-root DIR] [--skip tests peers torchrun]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _child import provenance

ROOT = Path(__file__).resolve().parent.parent
ARCHS = ("mnist_mlp", "lenet")
CAPTURES = ("eager", "trace", "compile")
TARGETS = {"epoch_seconds": {"mnist_mlp": 0.3, "lenet": 0.5}, "predict_seconds": {"mnist_mlp": 0.3, "lenet": 1.0},
           "compiled_over_eager": 3.0}
# How far a captured run's epoch losses may lie from Pyro's on the same draws: a replay op by op is
# Pyro's step (float reductions on the GPU may order differently), a compiled one to float32 rounding.
TOLERANCE = {"eager": 0.0, "trace": 1e-5, "compile": 1e-3}


def run(command: list[str], timeout: float, **env) -> tuple[int, str, float]:
    """(exit code, its output's last 3,000 characters, seconds) of a command in the checkout."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        code, out = -1, f"timed out after {timeout} s: {err.stdout or ''}"
    return code, (out if isinstance(out, str) else out.decode(errors="replace"))[-3000:], time.perf_counter() - start


def train(arch: str, capture: str, out: Path, data_root: str, epochs: int, resume: bool = False,
          then: str | None = None) -> dict:
    """One run of ``python -m bnn_zoo.train`` (or its resume, compiled where ``then`` says), and its
    metrics.json's figures of the Bayesian network."""
    run_dir = out / "runs" / f"{arch}-{capture}"
    args = ([f"resume={run_dir}"] if resume else [arch, f"run_dir={run_dir}", "overwrite=true"]) + [
        f"train.epochs={epochs}", f"train.capture={then or capture}", "device=cuda", f"data.root={data_root}",
        "train.progress=false", "train.twin=false", "abstention.certify=false", "train.eval_every=1"]
    code, tail, seconds = run([sys.executable, "-m", "bnn_zoo.train", *args], timeout=240)
    if code != 0:
        return {"ok": False, "error": tail, "seconds": seconds}
    bayes = json.loads((run_dir / "metrics.json").read_text())["bayes"]
    return {"ok": True, "seconds": seconds, "losses": [h["loss"] for h in bayes["history"]],
            "epoch_seconds": [h["seconds"] for h in bayes["history"]], "test_accuracy": bayes["test/accuracy"]}


def predict_seconds(run_dir: Path, data_root: str) -> float:
    """The median of three timed predictions (after one that compiles) of 100 samples on the 10,000
    test images, in a process of its own."""
    code = (
        "import time, statistics, torch, pyro, bnn_zoo; from bnn_zoo.data.sets import load_torchvision, normalize; "
        f"t = bnn_zoo.load({str(run_dir)!r}, 'cuda'); "
        f"x = normalize(load_torchvision('mnist', {data_root!r}, train=False, download=False)[0]).cuda(); "
        "p = bnn_zoo.posteriors(t)['bayes']; times = []\n"
        "with pyro.settings.context(module_local_params=True):\n"
        "    for i in range(4):\n"
        "        torch.cuda.synchronize(); s = time.perf_counter(); p.predict(x, 100); torch.cuda.synchronize()\n"
        "        times.append(time.perf_counter() - s)\n"
        "print(statistics.median(times[1:]))")
    status, tail, _ = run([sys.executable, "-c", code], timeout=240)
    return float(tail.strip().splitlines()[-1]) if status == 0 else float("nan")


def check_training(out: Path, data_root: str) -> dict:
    """Every arch x capture trained, resumed, and its losses against Pyro's (eager) on the same draws."""
    results = {}
    for arch in ARCHS:
        for capture in CAPTURES:
            first = train(arch, capture, out, data_root, epochs=2)
            later = train(arch, capture, out, data_root, epochs=3, resume=True,
                          then="compile" if capture == "eager" else None) if first["ok"] else first
            results[f"{arch}/{capture}"] = {"first": first, "resumed": later}
        eager = results[f"{arch}/eager"]["first"]
        for capture in CAPTURES:
            entry = results[f"{arch}/{capture}"]
            if entry["first"]["ok"] and eager["ok"]:
                gaps = [abs(a - b) / abs(b) for a, b in zip(entry["first"]["losses"], eager["losses"])]
                entry["loss_gap"] = max(gaps)
                entry["same_as_pyro"] = entry["loss_gap"] <= TOLERANCE[capture]
            entry["resumed_ok"] = entry["resumed"]["ok"] and len(entry["resumed"].get("losses", [])) == 3
        compiled = results[f"{arch}/compile"]["resumed"]
        if compiled["ok"]:
            results[f"{arch}/epoch_seconds"] = statistics.median(compiled["epoch_seconds"][1:])  # not the compiling one
            results[f"{arch}/predict_seconds"] = predict_seconds(out / "runs" / f"{arch}-compile", data_root)
    return results


def check_peers(out: Path) -> dict:
    code, tail, seconds = run([sys.executable, "scripts/peers.py", "--device", "cuda", "--rounds", "1", "--archs",
                               *ARCHS, "--json", str(out / "peers.json")], timeout=300)
    if code != 0:
        return {"ok": False, "error": tail}
    found = json.loads((out / "peers.json").read_text())
    return {"ok": True, "seconds": seconds, "table": tail, "results": found}


def check_torchrun(out: Path, data_root: str) -> dict:
    """mnist_mlp for one epoch on one GPU under torchrun (NCCL, DDP) and without: the same losses."""
    figures = {}
    for name, launcher in (("torchrun", [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
                                         "-m", "bnn_zoo.train"]), ("plain", [sys.executable, "-m", "bnn_zoo.train"])):
        run_dir = out / "runs" / f"ddp-{name}"
        code, tail, seconds = run([*launcher, "mnist_mlp", f"run_dir={run_dir}", "overwrite=true", "train.epochs=1",
                                   "device=cuda", f"data.root={data_root}", "train.progress=false", "train.twin=false",
                                   "abstention.certify=false", "train.capture=eager"], timeout=240)
        if code != 0:
            return {"ok": False, "error": f"{name}: {tail}"}
        figures[name] = json.loads((run_dir / "metrics.json").read_text())["bayes"]["history"][0]["loss"]
    gap = abs(figures["torchrun"] - figures["plain"]) / abs(figures["plain"])
    return {"ok": gap <= 1e-5, "losses": figures, "gap": gap}


def markdown(report: dict) -> str:
    lines = [f"# gpu_check: {report['machine']}, commit {report['commit']}", "", f"`{report['command']}`", ""]
    tests = report.get("tests")
    if tests:
        lines += [f"**CUDA tests** (`python -m pytest -m cuda`): {'passed' if tests['ok'] else 'FAILED'} "
                  f"({tests['summary']})", ""]
    training = report.get("training", {})
    if training:
        lines += ["| arch | capture | trained | loss gap to Pyro's | resumed (eager: compiled) | test accuracy | wall s |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for arch in ARCHS:
            for capture in CAPTURES:
                e = training[f"{arch}/{capture}"]
                lines.append(f"| {arch} | {capture} | {'yes' if e['first']['ok'] else 'FAILED'} | "
                             f"{e.get('loss_gap', float('nan')):.2e} | {'yes' if e['resumed_ok'] else 'FAILED'} | "
                             f"{e['resumed'].get('test_accuracy', float('nan')):.4f} | {e['first']['seconds']:.0f} |")
        lines += ["", "| target | figure | bound | met |", "| --- | --- | --- | --- |"]
        for what in ("epoch_seconds", "predict_seconds"):
            for arch in ARCHS:
                figure = training.get(f"{arch}/{what}", float("nan"))
                bound = TARGETS[what][arch]
                lines.append(f"| {arch} {what.replace('_', ' ')} | {figure:.3f} | <= {bound} | {'yes' if figure <= bound else 'NO'} |")
    peers = report.get("peers")
    if peers and peers["ok"]:
        lines += ["", "```", peers["table"].strip(), "```"]
        for arch, ratio in peers.get("compiled_over_eager", {}).items():
            lines.append(f"- {arch}: compiled step {ratio:.2f}x Pyro's (target >= {TARGETS['compiled_over_eager']})")
    elif peers:
        lines += ["", f"**peers** FAILED: {peers['error'][-500:]}"]
    ddp = report.get("torchrun")
    if ddp:
        lines += ["", f"**torchrun, one GPU (NCCL)**: {'same loss as the plain run' if ddp['ok'] else 'FAILED'} "
                      f"({ddp.get('losses', ddp.get('error'))})"]
    return "\n".join(lines) + "\n"


def ratios(peers: dict) -> dict:
    """The compiled step's steps per second over Pyro's eager step's, per arch (peers.json's rows)."""
    found = {}
    for arch in ARCHS:
        rows = peers.get("results", {}).get("results", {}).get(arch, {})
        eager, compiled = rows.get("zoo", {}).get("steps_per_s"), rows.get("zoo_compiled", {}).get("steps_per_s")
        if eager and compiled:
            found[arch] = compiled / eager
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="folder for gpu_check.json, gpu_check.md and the runs")
    parser.add_argument("--data-root", default=os.environ.get("BNN_ZOO_DATA", "data"),
                        help="folder holding MNIST/raw (default $BNN_ZOO_DATA, else ./data)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["tests", "training", "peers", "torchrun"])
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here (torch.cuda.is_available() is False): scripts/gpu_check.py proves and times the "
              "CUDA path on a GPU", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    report = {**provenance(), "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    if "tests" not in args.skip:
        code, tail, seconds = run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider"],
                                  timeout=300)
        report["tests"] = {"ok": code == 0, "summary": tail.strip().splitlines()[-1] if tail.strip() else "",
                           "seconds": seconds, "tail": tail}
    if "training" not in args.skip:
        report["training"] = check_training(out, args.data_root)
    if "peers" not in args.skip:
        report["peers"] = check_peers(out)
        report["peers"]["compiled_over_eager"] = ratios(report["peers"])
    if "torchrun" not in args.skip:
        report["torchrun"] = check_torchrun(out, args.data_root)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    (out / "gpu_check.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
