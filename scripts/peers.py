"""Training speed of the zoo beside its peers: the same Bayesian network (N(0, 1) prior, an
independent Normal posterior per weight started at sd 0.01, one weight draw per minibatch, Adam at
lr 1e-3, cross-entropy on random inputs of MNIST's shape; for the tiny network, 1-16-1, a Gaussian
likelihood of scale 1) trained by (every plain-PyTorch contender with the zoo's fused Adam)

  zoo            bnn_zoo's step with Pyro's Python at every step (train.capture=eager)
  zoo_traced     the step captured once and replayed op by op (train.capture=trace)
  zoo_compiled   the captured step compiled by torch.compile (train.capture=compile)
  bbb            Bayes by Backprop written by hand in plain PyTorch (bnn_zoo.bench.peers)
  bbb_compiled   the same, its loss compiled by torch.compile (with torch's random numbers, as the zoo's)
  tyxe           TyXe 0.0.2's VariationalBNN with its AutoNormal guide and Pyro's SVI
  bt_reparam     bayesian-torch's dnn_to_bnn, Reparameterization layers
  bt_flipout     bayesian-torch's dnn_to_bnn, Flipout layers
  blitz          blitz-bayesian-pytorch's layers and sample_elbo (its KL by Monte Carlo)
  twin           the plain network (no uncertainty), fused Adam
  twin_compiled  the same, its loss compiled by torch.compile (on CUDA in CUDA graphs): the floor

on mnist_mlp (784-400-400-10) and lenet at batch 128 with the machine's threads, and a tiny
network (toy_mlp 1-16-1, batch 2, one thread) where the step is all overhead. Every measurement runs in
a process of its own, on the device given (TyXe's prior too); the contenders take turns over
--rounds rounds, and each figure is the median of its rounds. The zoo's steps are the ones
``python -m bnn_zoo.train`` takes (Adam's update in the captured step). The peers install with
``pip install -e .[bench]``; one that is missing is skipped with the reason; one that fails (or
outlasts --timeout) is reported with its reason while the others are still measured, and the
exit code is 1. TyXe 0.0.2 calls ``pyro.util.deep_getattr``, which Pyro 1.9 no longer has:
``bnn_zoo.bench.peers`` supplies it (``functools.reduce(getattr, ...)``, what it was). A progress
bar on stderr counts the measurements.

Usage: python scripts/peers.py [--archs mnist_mlp lenet tiny] [--contenders zoo bbb ...]
           [--steps 50] [--rounds 3] [--device auto] [--timeout S] [--json peers.json]
"""
import argparse
import json
import statistics
import sys
import time

from tqdm.auto import tqdm

from bnn_zoo.bench.peers import CONTENDERS, training_step
from bnn_zoo.bench.processes import ChildFailed, in_own_process
from bnn_zoo.bench.provenance import provenance

SHAPES = {"mnist_mlp": ("mnist_mlp", None, 128), "lenet": ("lenet", None, 128), "tiny": ("toy_mlp", [16], 2)}


def measure(spec: dict) -> dict:
    """One contender on one shape, in this process: steps per second over ``steps`` steps (after
    ``warmup`` steps, which include any capture and compilation), and the warm-up's seconds."""
    import torch

    from bnn_zoo.core.networks.architectures import architecture
    from bnn_zoo.runs.plans.checks import pick_device

    arch, hidden, batch_size = SHAPES[spec["shape"]]
    if spec["shape"] == "tiny":
        torch.set_num_threads(1)
    device = pick_device(spec["device"])
    torch.manual_seed(0)
    regression = architecture(arch).likelihood == "gaussian"
    batches = [(torch.randn(batch_size, *architecture(arch).input_shape, device=device),
                torch.randn(batch_size, device=device) if regression else
                torch.randint(0, 10, (batch_size,), device=device)) for _ in range(8)]
    step = training_step(spec["contender"], arch, hidden, batch_size, device)

    def run(n: int) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for i in range(n):
            step(*batches[i % len(batches)])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    warmup = run(spec["warmup"])
    return {"steps_per_s": spec["steps"] / run(spec["steps"]), "warmup_s": warmup}


def _child(spec: dict, timeout: float | None = None) -> dict:
    """``measure(spec)`` in a fresh Python process; a missing peer comes back as {"skipped": why},
    one that fails (or runs past ``timeout`` seconds) as {"failed": its last line}."""
    try:
        return in_own_process(__file__, spec, timeout)
    except ChildFailed as err:
        if "ModuleNotFoundError" in err.last:
            return {"skipped": f"{err.last.split(': ', 1)[-1]} (pip install -e .[bench])"}
        return {"failed": f"timed out after {timeout:g} s" if err.timed_out else err.last}


def run_rounds(args) -> dict:
    """{shape: {contender: {"steps_per_s": median over rounds, "rounds": [...], "warmup_s": ...}}}"""
    results: dict = {shape: {c: {"rounds": []} for c in args.contenders} for shape in args.archs}
    with tqdm(total=args.rounds * len(args.archs) * len(args.contenders), desc="peers", unit="measurement",
              leave=False) as progress:
        for _ in range(args.rounds):
            for shape in args.archs:
                for contender in args.contenders:
                    entry = results[shape][contender]
                    if "skipped" in entry or "failed" in entry:  # not measured again: its turn is done
                        progress.update()
                        continue
                    progress.set_postfix_str(f"{shape} {contender}")
                    steps = args.steps * (20 if shape == "tiny" else 1)
                    r = _child({"contender": contender, "shape": shape, "device": args.device, "steps": steps,
                                "warmup": max(5, steps // 10)}, args.timeout)
                    progress.update()
                    if "skipped" in r or "failed" in r:
                        entry.update(r)
                        continue
                    entry["rounds"].append(r["steps_per_s"])
                    entry["warmup_s"] = r["warmup_s"]
    for entries in results.values():
        for entry in entries.values():
            if entry["rounds"]:
                entry["steps_per_s"] = statistics.median(entry["rounds"])
    return results


def report(results: dict, device: str) -> str:
    lines = [f"training steps per second, median of the rounds, device {device} (higher is better); "
             "x: over the fastest peer (TyXe, bayesian-torch, blitz), over hand-written BbB; "
             "the twin's step takes 1/x of the contender's"]
    for shape, entries in results.items():
        fastest_peer = max((e.get("steps_per_s", 0) for c, e in entries.items()
                            if c in ("tyxe", "bt_reparam", "bt_flipout", "blitz")), default=0)
        bbb = entries.get("bbb", {}).get("steps_per_s")
        twin = entries.get("twin", {}).get("steps_per_s")
        arch, hidden, batch = SHAPES[shape]
        lines.append(f"{shape} ({arch}{f' hidden {hidden}' if hidden else ''}, batch {batch}"
                     f"{', one thread' if shape == 'tiny' else ''}):")
        for contender, e in entries.items():
            if "skipped" in e or "failed" in e:
                lines.append(f"  {contender:<13} {'skipped' if 'skipped' in e else 'FAILED'}: "
                             f"{e.get('skipped') or e['failed']}")
                continue
            rate = e["steps_per_s"]
            ratios = [f"{rate / fastest_peer:5.2f}x peer" if fastest_peer else "",
                      f"{rate / bbb:5.2f}x bbb" if bbb else "",
                      f"twin {twin / rate:5.2f}x" if twin else ""]
            lines.append(f"  {contender:<13}{rate:9.1f}   {'  '.join(ratios)}   (warm-up {e['warmup_s']:.1f} s; "
                         f"rounds {', '.join(f'{r:.1f}' for r in e['rounds'])})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per measurement (x20 for tiny)")
    parser.add_argument("--rounds", type=int, default=3, help="turns each contender takes; the median is reported")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds a measurement may take (default: no limit)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return 0
    results = run_rounds(args)
    print(report(results, args.device))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**provenance(), "device": args.device, "steps": args.steps, "rounds": args.rounds, "results": results}, f,
                      indent=2)
    failed = [f"{shape}/{c}" for shape, entries in results.items() for c, e in entries.items() if "failed" in e]
    if failed:
        print(f"{len(failed)} measurement(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
