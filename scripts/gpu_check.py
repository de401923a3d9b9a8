"""Prove and time the CUDA path on one GPU in at most 5 minutes (--budget), most important first:

  draws     the compiled step's draws against Pyro's, four ways (scripts/cuda_draws.py)
  mnist_mlp python -m bnn_zoo.train compiled on a cold compile cache (3 epochs), resumed for a 4th,
            a second run of the same shape on the now-warm cache, an eager run (its losses against
            the compiled run's), and 100 posterior samples of the 10,000 test images predicted
  tests     python -m pytest -m cuda: each test passed or failed
  profile   one compiled mnist_mlp step: its top kernels, device busy time and host gaps
  peers     the compiled step beside the plain twin's, eager and compiled (scripts/peers.py)
  lenet     as mnist_mlp
  torchrun  mnist_mlp on one GPU under torchrun (NCCL, DDP) against the plain run
  recipe    the shipped LeNet recipe end to end: 3 guides, their twins, certification

Each section's figures are written as it finishes (OUT/gpu_check.json, OUT/gpu_check.md, with the
targets met or missed): a call cut off returns what was done. A section that would not fit in the
budget left is skipped and reported as skipped; every process it starts has a timeout that keeps
the whole within the budget. OUT: --out, else $OUT, else gpu_check/ in the checkout (git-ignored);
the runs go to a temporary folder, removed at the end. On a machine without CUDA it says so in one
line and exits 2.

Usage: python scripts/gpu_check.py [--data-root DIR] [--out DIR] [--sections draws tests ...] [--budget 285]
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bnn_zoo.bench.gpu_output import PYTEST_RESULT, failures, last_json
from bnn_zoo.bench.gpu_report import SECTIONS, markdown
from bnn_zoo.bench.provenance import provenance

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TRAIN = ["device=cuda", "train.progress=false", "train.twin=false", "abstention.certify=false", "train.eval_every=1"]
RESERVE = 5.0  # seconds kept for writing the report after the last process
SAME_AS_PYRO = 1e-3  # a compiled run's epoch losses against Pyro's on the same draws (float32 rounding)
# The least each section needs (a guess from issue 42's H200 run; a section is skipped below it) and the most it gets
NEEDS = {"draws": (25, 60), "mnist_mlp": (60, 120), "tests": (40, 120), "profile": (20, 45), "peers": (100, 220),
         "lenet": (60, 120), "torchrun": (25, 60), "recipe": (150, 600)}


class Budget:
    """The seconds left of the budget, and a process's timeout within them."""

    def __init__(self, seconds: float, clock=time.monotonic):
        self.clock, self.seconds = clock, seconds
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed() - RESERVE

    def timeout(self, most: float) -> float:
        return max(1.0, min(most, self.left()))


def run(command: list[str], timeout: float, **env) -> tuple[int, str, float]:
    """(exit code, its stdout then stderr, seconds) of a command in the checkout (its bnn_zoo
    imported, installed or not); -1 where it ran past ``timeout``. Whole: a JSON line is read from it
    before any of it is cut to keep in the report."""
    start = time.perf_counter()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **env})
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        tail = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        code, out = -1, f"{tail}\ntimed out after {timeout:.0f} s"
    return code, out, time.perf_counter() - start


class Check:
    """The sections' shared state: where runs and the compile cache go, the budget, the report."""

    def __init__(self, args, work: Path, budget: Budget, out: Path):
        self.args, self.work, self.budget, self.out = args, work, budget, out
        # the compile cache, cold at first, for every process (torch's own variable for those outside a run)
        self.env = {"BNN_ZOO_CACHE": str(work / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(work / "cache"),
                    "BNN_ZOO_DATA": args.data_root}
        self.report: dict = {}

    def train(self, name: str, args: list[str], most: float) -> dict:
        """One ``python -m bnn_zoo.train`` and its Bayesian network's figures."""
        code, tail, seconds = run([PYTHON, "-m", "bnn_zoo.train", *args], self.budget.timeout(most), **self.env)
        run_dir = next((Path(a.split("=", 1)[1]) for a in args if a.startswith(("run_dir=", "resume="))), None)
        if code != 0:
            return {"ok": False, "wall_s": seconds, "error": tail[-1500:]}
        metrics = json.loads((run_dir / "metrics.json").read_text())
        bayes = metrics["bayes"]
        return {"ok": True, "wall_s": seconds, "epoch_seconds": [h["seconds"] for h in bayes["history"]],
                "losses": [h["loss"] for h in bayes["history"]], "test_accuracy": bayes.get("test/accuracy"),
                "metrics": metrics, "log": [line for line in tail.splitlines() if "training step" in line][-1:]}


def check_draws(c: Check) -> dict:
    code, tail, seconds = run([PYTHON, "scripts/cuda_draws.py", "--arch", "lenet", "--timeout",
                               f"{c.budget.timeout(NEEDS['draws'][1]) - 5:.0f}"], c.budget.timeout(NEEDS["draws"][1]))
    return {"ok": code == 0, "seconds": seconds, **(last_json(tail) if code == 0 else {"error": tail[-1500:]})}


def check_training(c: Check, arch: str) -> dict:
    """Compiled on a cold cache (3 epochs), resumed (a 4th), a second run on the warm cache, the
    prediction timed, an eager run (its loss against the compiled run's); each recorded as it ends."""
    most = NEEDS[arch][1]
    found = c.report.setdefault(arch, {})
    first_dir, common = c.work / f"{arch}-compile", [*TRAIN, f"data.root={c.args.data_root}"]
    steps = [("compile", [arch, f"run_dir={first_dir}", "overwrite=true", "train.epochs=3", "train.capture=compile"]),
             ("resumed", [f"resume={first_dir}", "train.epochs=4"]),
             ("second", [arch, f"run_dir={c.work / f'{arch}-second'}", "overwrite=true", "train.epochs=1", "seed=1",
                         "train.capture=compile"]),
             ("eager", [arch, f"run_dir={c.work / f'{arch}-eager'}", "overwrite=true", "train.epochs=1",
                        "train.capture=eager"])]
    for name, args in steps:
        if name == "eager" and found["compile"]["ok"] and c.budget.left() > 15:
            found["predict_seconds"] = predict_seconds(c, first_dir)
            write(c)
        if c.budget.left() < 15 or (name == "resumed" and not found["compile"]["ok"]):
            found[name] = {"ok": False, "error": "skipped: " + ("the budget ran out" if c.budget.left() < 15 else
                                                                "no compiled run to resume")}
            continue
        found[name] = c.train(name, args + common, most)
        found[name].pop("metrics", None)
        write(c)
    compiled, eager = found["compile"], found["eager"]
    if compiled["ok"] and eager["ok"]:
        found["loss_gap"] = abs(compiled["losses"][0] - eager["losses"][0]) / abs(eager["losses"][0])
        found["same_as_pyro"] = found["loss_gap"] <= SAME_AS_PYRO
    return found


def predict_seconds(c: Check, run_dir: Path) -> float:
    """The median of three timed predictions (after one that compiles) of 100 samples on the 10,000
    test images, in a process of its own."""
    code = (
        "import time, statistics, torch, pyro, bnn_zoo; from bnn_zoo.data.sets import load_torchvision, normalize; "
        f"t = bnn_zoo.load({str(run_dir)!r}, 'cuda'); "
        f"x = normalize(load_torchvision('mnist', {c.args.data_root!r}, train=False, download=False)[0]).cuda(); "
        "p = bnn_zoo.posteriors(t)['bayes']; times = []\n"
        "with pyro.settings.context(module_local_params=True):\n"
        "    for i in range(4):\n"
        "        torch.cuda.synchronize(); s = time.perf_counter(); p.predict(x, 100); torch.cuda.synchronize()\n"
        "        times.append(time.perf_counter() - s)\n"
        "print(statistics.median(times[1:]))")
    status, tail, _ = run([PYTHON, "-c", code], c.budget.timeout(60), **c.env)
    return float(tail.strip().splitlines()[-1]) if status == 0 else float("nan")


def check_tests(c: Check) -> dict:
    parallel = ["-n", "4"] if importlib.util.find_spec("xdist") else []
    code, out, seconds = run([PYTHON, "-m", "pytest", "-m", "cuda", "-q", "-rA", "-p", "no:cacheprovider",
                              "-p", "no:logging", "-p", "no:warnings", "--tb=short", *parallel],
                             c.budget.timeout(NEEDS["tests"][1]), BNN_ZOO_DATA=c.args.data_root)
    lines = out.strip().splitlines()
    outcomes = [line for line in lines if line.startswith(("PASSED", "FAILED", "ERROR", "SKIPPED"))]
    return {"ok": code == 0, "seconds": seconds, "summary": next((line for line in reversed(lines)
                                                                   if PYTEST_RESULT.search(line)), ""),
            "outcomes": outcomes, "failed": [line for line in outcomes if line.startswith(("FAILED", "ERROR"))],
            **({} if code == 0 else {"tail": failures(out)})}


def check_profile(c: Check) -> dict:
    code, tail, seconds = run([PYTHON, "scripts/step_profile.py", "--arch", "mnist_mlp", "--device", "cuda"],
                              c.budget.timeout(NEEDS["profile"][1]), **c.env)
    return {"ok": code == 0, "seconds": seconds, **(last_json(tail) if code == 0 else {"error": tail[-1500:]})}


def check_peers(c: Check) -> dict:
    out = c.work / "peers.json"
    timeout = c.budget.timeout(NEEDS["peers"][1])
    code, tail, seconds = run([PYTHON, "scripts/peers.py", "--device", "cuda", "--rounds", "1", "--steps", "200",
                               "--archs", "mnist_mlp", "lenet", "--contenders", "zoo_compiled", "twin", "twin_compiled",
                               "--timeout", f"{max(50.0, timeout / 6):.0f}", "--json", str(out)], timeout, **c.env)
    if not out.is_file():
        return {"ok": False, "seconds": seconds, "error": tail[-1500:]}
    results = json.loads(out.read_text())["results"]
    rates = {arch: {k: e.get("steps_per_s") for k, e in entries.items()} for arch, entries in results.items()}
    return {"ok": code == 0, "seconds": seconds, "steps_per_s": rates, "table": tail.strip()[-2500:],
            "failed": {f"{a}/{k}": e["failed"] for a, entries in results.items() for k, e in entries.items()
                       if "failed" in e}}


def check_torchrun(c: Check) -> dict:
    """mnist_mlp for one epoch (16,384 images) on one GPU under torchrun (NCCL, DDP) and without: the same loss."""
    losses = {}
    for name, launcher in (("torchrun", [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "1", "-m",
                                         "bnn_zoo.train"]), ("plain", [PYTHON, "-m", "bnn_zoo.train"])):
        run_dir = c.work / f"ddp-{name}"
        code, tail, _ = run([*launcher, "mnist_mlp", f"run_dir={run_dir}", "overwrite=true", "train.epochs=1",
                             "data.train_limit=16384", "train.capture=eager", f"data.root={c.args.data_root}", *TRAIN],
                            c.budget.timeout(NEEDS["torchrun"][1] / 2), **c.env)
        if code != 0:
            return {"ok": False, "error": f"{name}: {tail[-1500:]}"}
        losses[name] = json.loads((run_dir / "metrics.json").read_text())["bayes"]["history"][0]["loss"]
    gap = abs(losses["torchrun"] - losses["plain"]) / abs(losses["plain"])
    return {"ok": gap <= 1e-5, "losses": losses, "gap": gap}


def check_recipe(c: Check) -> dict:
    """The shipped LeNet recipe as the docs train it: python -m bnn_zoo.train lenet train.members=3."""
    run_dir = c.work / "lenet-recipe"
    found = c.train("recipe", ["lenet", "train.members=3", f"run_dir={run_dir}", "overwrite=true", "device=cuda",
                               "train.progress=false", f"data.root={c.args.data_root}"], NEEDS["recipe"][1])
    metrics = found.pop("metrics", {})
    if found["ok"]:
        found["ensemble"] = {part: e.get("test/accuracy") for part, e in metrics.get("ensemble", {}).items()}
        found["certified"] = "calibration" in metrics
    return found


CHECKS = {"draws": check_draws, "mnist_mlp": lambda c: check_training(c, "mnist_mlp"), "tests": check_tests,
          "profile": check_profile, "peers": check_peers, "lenet": lambda c: check_training(c, "lenet"),
          "torchrun": check_torchrun, "recipe": check_recipe}
assert tuple(CHECKS) == SECTIONS


def write(c: Check) -> None:
    """The report so far, both files, replaced whole (a call cut off keeps the last)."""
    c.report["wall_s"] = c.budget.elapsed()
    for name, text in (("gpu_check.json", json.dumps(c.report, indent=2, default=str)),
                       ("gpu_check.md", markdown(c.report))):
        partial = c.out / f".{name}.partial"
        partial.write_text(text)
        partial.replace(c.out / name)


def out_folder(given: str | None) -> Path:
    return Path(given or os.environ.get("OUT") or ROOT / "gpu_check").resolve()


def main(argv=None, clock=time.monotonic) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--data-root", default=os.environ.get("BNN_ZOO_DATA", "data"),
                        help="folder holding MNIST/raw (default $BNN_ZOO_DATA, else ./data)")
    parser.add_argument("--out", default=None, help="folder for gpu_check.json and .md (default $OUT, else gpu_check/)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS,
                        help="which, in the order above (default all that fit)")
    parser.add_argument("--budget", type=float, default=285.0, help="seconds for the whole (default 285)")
    args = parser.parse_args(argv)
    budget = Budget(args.budget, clock)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here (torch.cuda.is_available() is False): scripts/gpu_check.py proves and times the "
              "CUDA path on a GPU", file=sys.stderr)
        return 2
    args.data_root = str(Path(args.data_root).resolve())
    out = out_folder(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    c = Check(args, work, budget, out)
    c.report.update(**provenance(), torch=torch.__version__, device=torch.cuda.get_device_name(0),
                    budget_s=args.budget, sections={})
    try:
        for name in [s for s in SECTIONS if s in args.sections]:
            least = NEEDS[name][0]
            if budget.left() < least:
                c.report["sections"][name] = (f"skipped: {budget.left():.0f} s left of the budget, it needs about "
                                              f"{least}")
            else:
                start = budget.elapsed()
                try:
                    c.report[name] = {**c.report.get(name, {}), **CHECKS[name](c)}
                except Exception as err:  # noqa: BLE001 - one section's failure is its figure; the next still runs
                    c.report[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
                c.report["sections"][name] = f"done in {budget.elapsed() - start:.0f} s"
            write(c)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(c.report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
