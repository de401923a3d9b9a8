"""Prediction speed of the zoo (``bnn_zoo.predict``, plain and compiled) against a loop over
posterior samples (Pyro's ``Predictive``), and the variance of the gradient with and without local
reparameterization. (The training step beside the peers is scripts/peers.py; the time to a
validation accuracy is scripts/time_to_accuracy.py.)

Each measurement runs in its own process (so peak memory is its own) on synthetic inputs of the
real shapes (speed does not depend on pixel values); the gradient variance on an MNIST minibatch.

Usage: python scripts/benchmark.py [--archs mnist_mlp lenet] [--device auto] [--predict-repeats 1]
           [--json results.json]
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

from bnn_zoo.bench.processes import in_own_process

PREDICTION = ("predict", "compiled", "loop")  # bnn_zoo.predict plain and compiled; Pyro's Predictive


# ---- one measurement, in a child process ----

def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _peak_mb(device, start_rss: float) -> float:
    """Peak memory of the measurement: CUDA's peak allocation, or the CPU's peak RSS above the start."""
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - start_rss


def _timed(fn, repeats: int, device) -> list[float]:
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def prediction_run(method: str, arch: str, device, num_samples: int, num_images: int, chunk_size: int):
    """A closure ``run(n)`` predicting ``num_samples`` posterior samples for the first n of ``num_images`` inputs."""
    import torch
    from pyro.infer import Predictive

    from bnn_zoo import build, predict
    from bnn_zoo.core.networks.architectures import architecture

    model, guide = build(arch, num_data=55000)
    model.to(device)
    x = torch.randn(num_images, *architecture(arch).input_shape, device=device)
    guide(x[:1])
    if method in ("predict", "compiled"):
        compiled = method == "compiled"
        return lambda n: predict(model, guide, x[:n], num_samples, chunk_size=chunk_size, compiled=compiled)
    if method == "loop":  # Pyro's Predictive: one guide and one model run per posterior sample
        predictive = Predictive(model, guide=guide, num_samples=num_samples, return_sites=["_RETURN"])
        return lambda n: torch.no_grad()(predictive)(x[:n])["_RETURN"].softmax(-1)
    raise ValueError(f"unknown prediction method {method!r}")


def measure(spec: dict) -> dict:
    """Run one measurement (in this process) and return its figures."""
    import torch

    from bnn_zoo.runs.plans.checks import pick_device

    torch.manual_seed(0)
    device = pick_device(spec["device"])
    prediction_run("predict", "toy_mlp", device, 2, 2, 1)(2)  # one-off lazy initialization (~160 MB of RSS)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start_rss = _rss_mb()
    run = prediction_run(spec["method"], spec["arch"], device, spec["samples"], spec["images"], spec["chunk_size"])
    run(min(500, spec["images"]))  # warm-up on a slice of predict's batch size (compiles the compiled one)
    times = _timed(lambda: run(spec["images"]), spec["predict_repeats"], device)
    seconds = statistics.median(times)
    return {"seconds": seconds, "images_per_s": spec["images"] / seconds, "peak_mb": _peak_mb(device, start_rss),
            "repeats_s": times}


def gradient_variance(spec: dict) -> dict:
    """Variance over repeated draws of the ELBO's gradient on one fixed minibatch, with respect to
    the posterior means and sds, for weight sampling and for local reparameterization, from the
    same posterior (every sd set to ``posterior_sd``, a trained posterior's typical size)."""
    import torch

    from bnn_zoo.core.errors import DataError
    from bnn_zoo.data.sets import load_torchvision, normalize
    from bnn_zoo.runs.plans.checks import pick_device
    from bnn_zoo.runs.plans.config import load_config, resolved
    from bnn_zoo.runs.training.phases import BayesPhase
    from bnn_zoo.runs.plans.plan import Plan

    device = pick_device(spec["device"])
    try:
        images, labels = load_torchvision("mnist", spec["data_root"], train=True, download=False)
        x, y, data = normalize(images[:spec["batch_size"]]), labels[:spec["batch_size"]], "MNIST"
    except DataError:
        x, y, data = torch.randn(spec["batch_size"], 1, 28, 28), torch.randint(0, 10, (spec["batch_size"],)), "random"
    x, y = x.to(device), y.to(device)
    out = {"data": data, "draws": spec["draws"]}
    for reparam in ("weights", "local"):
        torch.manual_seed(0)
        cfg = resolved(load_config(spec["arch"], [f"model.reparam={reparam}",
                                                  f"model.init_scale={spec['posterior_sd']}"]))
        plan = Plan.of(cfg)
        phase = BayesPhase(plan.networks, plan.train, 55000, device)
        guide, loss_fn = phase.guide, phase.loss
        grads = {"loc": [], "scale": []}
        for _ in range(spec["draws"]):
            guide.zero_grad()
            loss_fn(x, y).backward()
            for part, module in (("loc", guide.locs), ("scale", guide.scales)):
                grads[part].append(torch.cat([p.grad.flatten() for p in module.parameters()]))
        out[reparam] = {part: torch.stack(g).var(0).mean().item() for part, g in grads.items()}
    return out


# ---- the report ----

def run_benchmark(args) -> dict:
    base = {"device": args.device}
    results = {"device": args.device, "posterior_sd": args.posterior_sd, "batch_size": args.batch_size,
               "gradient_variance": {}, "predict": {}}
    for arch in args.archs:
        results["gradient_variance"][arch] = in_own_process(__file__, {
            **base, "kind": "gradvar", "arch": arch, "batch_size": args.batch_size, "draws": args.draws,
            "posterior_sd": args.posterior_sd, "data_root": args.data_root})
    for arch in args.archs:
        results["predict"][arch] = {m: in_own_process(__file__, {
            **base, "kind": "predict", "method": m, "arch": arch, "samples": args.samples, "images": args.images,
            "predict_repeats": args.predict_repeats, "chunk_size": args.chunk_size}) for m in PREDICTION}
    return results


def report(results: dict) -> str:
    lines = []
    if results["gradient_variance"]:
        first = next(iter(results["gradient_variance"].values()))
        lines += [f"gradient variance: {first['draws']} gradients on one {first['data']} minibatch of "
                      f"{results['batch_size']}, mean over parameters (posterior sds all {results['posterior_sd']})",
                  f"{'arch':<10}{'of':<7}{'weights':>12}{'local':>12}{'weights/local':>15}"]
        for arch, r in results["gradient_variance"].items():
            for part in ("loc", "scale"):
                w, loc = r["weights"][part], r["local"][part]
                lines.append(f"{arch:<10}{part:<7}{w:>12.4g}{loc:>12.4g}{w / loc:>14.2f}x")
    if results["predict"]:
        lines += ["", "prediction: posterior samples over the test images (median of --predict-repeats runs)",
                  f"{'arch':<10}{'method':<9}{'seconds':>9}{'images/s':>10}{'peak MB':>9}{'speed-up':>10}"]
        for arch, methods in results["predict"].items():
            for method, r in methods.items():
                gain = f"{methods['loop']['seconds'] / r['seconds']:>9.2f}x" if method != "loop" else ""
                lines.append(f"{arch:<10}{method:<9}{r['seconds']:>9.3f}{r['images_per_s']:>10.0f}"
                             f"{r['peak_mb']:>9.0f}{gain}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=["mnist_mlp", "lenet"])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--batch-size", type=int, default=128, help="the minibatch of the gradient variance")
    parser.add_argument("--samples", type=int, default=100, help="posterior samples in prediction")
    parser.add_argument("--images", type=int, default=10000, help="inputs in prediction (MNIST test: 10000)")
    parser.add_argument("--chunk-size", type=int, default=10, help="posterior samples per batched pass")
    parser.add_argument("--predict-repeats", type=int, default=1, help="prediction runs (the median is reported)")
    parser.add_argument("--draws", type=int, default=50, help="gradients drawn for the gradient variance")
    parser.add_argument("--posterior-sd", type=float, default=0.1, help="posterior sds for the gradient variance")
    parser.add_argument("--data-root", default=None, help="MNIST for the gradient variance ($BNN_ZOO_DATA)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        import pyro

        run = gradient_variance if spec["kind"] == "gradvar" else measure
        with pyro.settings.context(module_local_params=True):  # as python -m bnn_zoo.train runs
            print(json.dumps(run(spec)))
        return 0
    try:
        results = run_benchmark(args)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
