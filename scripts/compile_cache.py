"""What the compile cache saves on this machine: an architecture trained with train.capture=compile
for two epochs in three processes, one after another, each through ``python -m bnn_zoo.train``:
on a cold compile cache (a new folder), again on the cache the first filled (another seed: the
same graph), and with train.compile_cache=false. For each, its compile overhead (its first epoch's
seconds over its second's: capturing, compiling or loading the step) and its wall seconds; and the
second's overhead over the first's (issue 42's target: at most 0.1). Time it on a quiet machine.

Usage: python scripts/compile_cache.py [--arch mnist_mlp] [--train-limit 4096] [--device cpu]
           [--data-root DIR] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bnn_zoo.bench.provenance import provenance

RUNS = (("cold", "seed=0"), ("warm", "seed=1"), ("off", "seed=2", "train.compile_cache=false"))


def timed_run(arch: str, run_dir: Path, cache: Path, args, extra: tuple) -> dict:
    """One training process: its epochs' seconds, compile overhead and wall seconds."""
    command = [sys.executable, "-m", "bnn_zoo.train", arch, f"run_dir={run_dir}", "overwrite=true", "train.epochs=2",
               "train.capture=compile", f"data.train_limit={args.train_limit}", f"device={args.device}",
               "train.twin=false", "abstention.certify=false", "train.progress=false", "train.test_samples=10",
               *([f"data.root={args.data_root}"] if args.data_root else []), *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "BNN_ZOO_CACHE": str(cache)})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed: {done.stderr.strip()[-1500:]}")
    seconds = [h["seconds"] for h in json.loads((run_dir / "metrics.json").read_text())["bayes"]["history"]]
    return {"epoch_seconds": seconds, "overhead_s": seconds[0] - seconds[1], "wall_s": wall}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="mnist_mlp", choices=["mnist_mlp", "lenet"])
    parser.add_argument("--train-limit", type=int, default=4096, help="training images (default 4096)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--data-root", default=None, help="folder holding MNIST/raw (default $BNN_ZOO_DATA, ./data)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compile_cache_") as work:
        cache = Path(work) / "cache"  # cold for the first process
        try:
            found = {name: timed_run(args.arch, Path(work) / name, cache, args, extra)
                     for name, *extra in RUNS}
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    ratio = found["warm"]["overhead_s"] / found["cold"]["overhead_s"]
    print(f"{args.arch} on {args.train_limit} images, device {args.device}: compile overhead (first epoch over the "
          "second), wall seconds")
    for name, entry in found.items():
        print(f"  {name:<5} {entry['overhead_s']:7.1f} s   wall {entry['wall_s']:6.1f} s   epochs "
              f"{', '.join(f'{s:.2f}' for s in entry['epoch_seconds'])}")
    print(f"  warm over cold: {ratio:.2f}x (target <= 0.10)")
    if args.json:
        Path(args.json).write_text(json.dumps({**provenance(), "arch": args.arch, "train_limit": args.train_limit,
                                               "device": args.device, "runs": found, "warm_over_cold": ratio},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
