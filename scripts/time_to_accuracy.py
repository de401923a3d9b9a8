"""Train a shipped config until its posterior predictive reaches a validation accuracy (mnist_mlp
98%, lenet 99%, checked every epoch): the epochs, training seconds (validation excluded) and wall
seconds it took, with the training step captured and compiled and with Pyro's Python at every
step (``train.capture``; the same draws either way), each run in a process of its own.

Usage: python scripts/time_to_accuracy.py [--archs mnist_mlp lenet] [--capture compile eager]
           [--device auto] [--target 0.98] [--json out.json] [--override train.batch_size=256 ...]
"""
import argparse
import json
import sys
import tempfile
import time

from bnn_zoo.bench.processes import in_own_process
from bnn_zoo.cli import options as cli
from bnn_zoo.cli.train import train
from bnn_zoo.core.fast.captured_step import MODES
from bnn_zoo.runs.plans.config import load_config

TARGETS = {"mnist_mlp": 0.98, "lenet": 0.99}


def time_to_accuracy(arch: str, target: float, capture: str = "compile", device: str = "auto",
                     data_root: str | None = None, overrides: tuple[str, ...] = ()) -> dict:
    """One run to ``target`` validation accuracy, in this process."""
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        cfg = load_config(arch, [f"device={device}", f"run_dir={run_dir}", "train.twin=false", "train.eval_every=1",
                                 "train.progress=false", f"train.stop_at_accuracy={target}", "train.test_samples=10",
                                 f"train.capture={capture}",
                                 *([f"data.root={data_root}"] if data_root else []), *overrides])
        history = train(cfg)["bayes"]["history"]
        wall = time.perf_counter() - start
    done = history[-1]
    return {"target": target, "reached": done.get("val/accuracy", 0) >= target, "epochs": done["epoch"],
            "val_accuracy": done.get("val/accuracy"), "training_s": sum(h["seconds"] for h in history),
            "wall_s": wall}


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("--archs", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--capture", nargs="+", default=["compile", "eager"], choices=MODES,
                        help="train.capture of the runs, one run each")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N")
    parser.add_argument("--data-root", default=None, help="the MNIST folder (default $BNN_ZOO_DATA, then ./data)")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--target", type=float, default=None,
                        help="the validation accuracy to reach (default: mnist_mlp 0.98, lenet 0.99)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(time_to_accuracy(**json.loads(args.child))))
        return 0

    def command() -> int:
        results = {arch: {capture: in_own_process(__file__, {
            "arch": arch, "target": args.target or TARGETS[arch], "capture": capture, "device": args.device,
            "data_root": args.data_root, "overrides": args.override}) for capture in args.capture}
            for arch in args.archs}
        for arch, runs in results.items():
            for capture, r in runs.items():
                print(f"time to {100 * r['target']:.0f}% validation accuracy, {arch}, train.capture={capture}: "
                      f"{'reached' if r['reached'] else 'NOT reached'} after {r['epochs']} epochs "
                      f"({100 * r['val_accuracy']:.2f}%), {r['training_s']:.1f} s training, "
                      f"{r['wall_s']:.1f} s wall")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
