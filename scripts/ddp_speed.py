"""Examples per second of training on several ranks (DistributedDataParallel under torchrun, gloo
on CPU cores, NCCL on GPUs) against one rank: the same config trained by torchrun on 1 rank and on
N, each rank one thread (OMP_NUM_THREADS=1), each run a torchrun of its own, the contenders
alternating over --rounds. The figure is the run's training examples over its median seconds per
epoch from metrics.json (the training steps alone, no validation or test; the step captured as
train.capture says: auto traces it for 3 mnist_mlp epochs).

Usage: python scripts/ddp_speed.py [--ranks 2] [--config mnist_mlp] [--epochs 3] [--rounds 3]
           [--override train.capture=trace] [--data-root DIR] [--json FILE]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bnn_zoo.bench.provenance import provenance
from bnn_zoo.cli import options as cli
from bnn_zoo.core.errors import ConfigError
from bnn_zoo.runs.storage.files import write_atomic

ROOT = Path(__file__).resolve().parents[1]


def examples_per_second(ranks: int, config: str, epochs: int, overrides: list[str], data_root: str | None) -> float:
    """One torchrun of ``config`` on ``ranks`` ranks: its training examples per second."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--standalone",
                   "-m", "bnn_zoo.train", config, f"run_dir={folder}/run", f"train.epochs={epochs}",
                   f"train.eval_every={epochs}", "train.progress=false", "train.twin=false", "train.test_samples=1",
                   "train.val_samples=1", "abstention.certify=false", *overrides,
                   *([f"data.root={data_root}"] if data_root else [])]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            raise ConfigError(f"torchrun on {ranks} rank(s) failed: {done.stdout.strip()[-1500:]}")
        metrics = json.loads(Path(folder, "run", "metrics.json").read_text())
    return metrics["bayes"]["examples_per_second"]


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("--ranks", type=int, default=2, help="ranks against one (default 2)")
    parser.add_argument("--config", default="mnist_mlp")
    parser.add_argument("--epochs", type=int, default=3, help="epochs a run (the median epoch is the figure)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--data-root", default=None, help="the data folder (default $BNN_ZOO_DATA, then ./data)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    def command() -> int:
        if args.ranks < 2 or args.rounds < 1 or args.epochs < 1:
            raise ConfigError("--ranks must be at least 2 (they are compared with one), --rounds and --epochs at least 1")
        runs = {1: [], args.ranks: []}
        for _ in range(args.rounds):
            for ranks in runs:
                runs[ranks].append(examples_per_second(ranks, args.config, args.epochs, args.override, args.data_root))
        one, many = (statistics.median(runs[r]) for r in (1, args.ranks))
        for ranks, rates in runs.items():
            print(f"{args.config} on {ranks} rank(s) of one thread: {statistics.median(rates):,.0f} examples/s "
                  f"(rounds: {', '.join(f'{r:,.0f}' for r in rates)})")
        print(f"{args.ranks} ranks over 1: {many / one:.2f}x")
        if args.json:
            write_atomic(Path(args.json), json.dumps({**provenance(), "config": args.config, "overrides": args.override,
                                                      "runs": runs, "ratio": many / one}, indent=2))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
