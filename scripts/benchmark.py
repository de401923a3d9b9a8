"""Training and prediction speed of the zoo, side by side with a hand-written Bayes by Backprop in
plain PyTorch and with the deterministic twin; prediction against a loop over posterior samples;
the variance of the gradient with and without local reparameterization. (The time to a
validation accuracy is scripts/time_to_accuracy.py.)

Each measurement runs in its own process (so peak memory is its own) on synthetic inputs of the
real shapes (speed does not depend on pixel values); the gradient variance on an MNIST minibatch.

Usage: python scripts/benchmark.py [--archs toy_mlp mnist_mlp lenet] [--device auto] [--steps 50]
           [--repeats 3] [--json results.json]
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext

# zoo: the training step as python -m bnn_zoo.train runs it by default (TraceMeanField_ELBO, one
# weight draw per minibatch); zoo_local: with model.reparam=local; zoo_trace: with train.elbo=trace.
ZOO_VARIANTS = {"zoo": [], "zoo_local": ["model.reparam=local"], "zoo_trace": ["train.elbo=trace"]}
TRAINING = (*ZOO_VARIANTS, "bbb", "twin")
PREDICTION = ("predict", "loop")


# ---- the baseline: Bayes by Backprop written by hand in plain PyTorch ----

def bayes_by_backprop(net, prior_scale: float = 1.0, init_scale: float = 0.01):
    """Blundell et al.'s Bayes by Backprop for any plain network: a Normal posterior per weight,
    w = mu + softplus(rho) * eps (one draw per minibatch), a N(0, prior_scale^2) prior with its
    closed-form KL. Returns (parameters, loss(x, y, num_batches)): the minibatch's summed NLL plus
    KL / number of batches."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call

    names = [n for n, _ in net.named_parameters()]
    mus = [p.detach().clone().requires_grad_() for p in net.parameters()]
    rhos = [torch.full_like(p, math.log(math.expm1(init_scale))).requires_grad_() for p in net.parameters()]

    def loss(x, y, num_batches: int):
        sigmas = [F.softplus(r) for r in rhos]
        weights = {n: m + s * torch.randn_like(s) for n, m, s in zip(names, mus, sigmas)}
        nll = F.cross_entropy(functional_call(net, weights, (x,)), y, reduction="sum")
        kl = sum((math.log(prior_scale) - s.log() + (s ** 2 + m ** 2) / (2 * prior_scale ** 2) - 0.5).sum()
                 for m, s in zip(mus, sigmas))
        return nll + kl / num_batches

    return mus + rhos, loss


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


def training_step(method: str, arch: str, device, batch_size: int):
    """A closure running one optimizer step of ``method`` on a batch, as training does it."""
    import torch

    from bnn_zoo.factory import twin_from_config
    from bnn_zoo.config import load_config, resolved
    from bnn_zoo.loop import adam
    from bnn_zoo.phases import BayesPhase
    from bnn_zoo.zoo import architecture, make_net

    cfg = resolved(load_config(arch, [f"train.batch_size={batch_size}", *ZOO_VARIANTS.get(method, [])]))
    spec = architecture(arch)
    num_data = 55000  # the size of a training set; speed does not depend on it
    if spec.likelihood == "categorical":
        target = lambda n: torch.randint(0, 10, (n,), device=device)  # noqa: E731
    else:
        target = lambda n: torch.randn(n, device=device)  # noqa: E731
    batches = [(torch.randn(batch_size, *spec.input_shape, device=device), target(batch_size))
               for _ in range(8)]
    stepping = nullcontext
    if method in ZOO_VARIANTS:
        phase = BayesPhase(cfg, num_data, device)
        optimizer, loss_fn, stepping = adam(phase.parameters(), cfg.train.lr), phase.loss, phase.stepping
    elif method == "twin":
        twin = twin_from_config(cfg, device)
        optimizer, loss_fn = adam(twin.parameters(), cfg.train.lr), twin.loss
    elif method == "bbb":
        if spec.likelihood != "categorical":
            return None  # the baseline is a classifier
        params, bbb_loss = bayes_by_backprop(make_net(arch, cfg.model.hidden).to(device))
        optimizer = torch.optim.Adam(params, lr=cfg.train.lr)
        loss_fn = lambda x, y: bbb_loss(x, y, math.ceil(num_data / batch_size))  # noqa: E731
    else:
        raise ValueError(f"unknown training method {method!r}")
    state = {"i": 0}

    def step():
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        optimizer.zero_grad(set_to_none=True)
        with stepping():  # as python -m bnn_zoo.train runs its steps
            loss_fn(x, y).backward()
        optimizer.step()

    return step


def prediction_run(method: str, arch: str, device, num_samples: int, num_images: int, chunk_size: int):
    """A closure ``run(n)`` predicting ``num_samples`` posterior samples for the first n of ``num_images`` inputs."""
    import torch
    from pyro.infer import Predictive

    from bnn_zoo import build, predict
    from bnn_zoo.zoo import architecture

    model, guide = build(arch, num_data=55000)
    model.to(device)
    x = torch.randn(num_images, *architecture(arch).input_shape, device=device)
    guide(x[:1])
    if method == "predict":
        return lambda n: predict(model, guide, x[:n], num_samples, chunk_size=chunk_size)
    if method == "loop":  # Pyro's Predictive: one guide and one model run per posterior sample
        predictive = Predictive(model, guide=guide, num_samples=num_samples, return_sites=["_RETURN"])
        return lambda n: torch.no_grad()(predictive)(x[:n])["_RETURN"].softmax(-1)
    raise ValueError(f"unknown prediction method {method!r}")


def measure(spec: dict) -> dict:
    """Run one measurement (in this process) and return its figures."""
    import torch

    from bnn_zoo.config import pick_device

    torch.manual_seed(0)
    device = pick_device(spec["device"])
    training_step("zoo", "toy_mlp", device, 2)()  # one-off lazy initialization (~160 MB of RSS)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start_rss = _rss_mb()
    if spec["kind"] == "train":
        step = training_step(spec["method"], spec["arch"], device, spec["batch_size"])
        if step is None:
            return {}
        for _ in range(spec["warmup"]):
            step()
        times = _timed(lambda: [step() for _ in range(spec["steps"])], spec["repeats"], device)
        seconds = statistics.median(times)
        return {"steps_per_s": spec["steps"] / seconds, "images_per_s": spec["steps"] * spec["batch_size"] / seconds,
                "peak_mb": _peak_mb(device, start_rss), "repeats_s": times}
    run = prediction_run(spec["method"], spec["arch"], device, spec["samples"], spec["images"], spec["chunk_size"])
    run(min(200, spec["images"]))  # warm-up on a slice
    times = _timed(lambda: run(spec["images"]), spec["predict_repeats"], device)
    seconds = statistics.median(times)
    return {"seconds": seconds, "images_per_s": spec["images"] / seconds, "peak_mb": _peak_mb(device, start_rss),
            "repeats_s": times}


def gradient_variance(spec: dict) -> dict:
    """Variance over repeated draws of the ELBO's gradient on one fixed minibatch, with respect to
    the posterior means and sds, for weight sampling and for local reparameterization, from the
    same posterior (every sd set to ``posterior_sd``, a trained posterior's typical size)."""
    import torch

    from bnn_zoo.config import load_config, pick_device, resolved
    from bnn_zoo.data import load_torchvision, normalize
    from bnn_zoo.errors import DataError
    from bnn_zoo.phases import BayesPhase

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
        phase = BayesPhase(cfg, 55000, device)
        guide, loss_fn = phase.guide, phase.loss
        grads = {"loc": [], "scale": []}
        for _ in range(spec["draws"]):
            guide.zero_grad()
            loss_fn(x, y).backward()
            for part, module in (("loc", guide.locs), ("scale", guide.scales)):
                grads[part].append(torch.cat([p.grad.flatten() for p in module.parameters()]))
        out[reparam] = {part: torch.stack(g).var(0).mean().item() for part, g in grads.items()}
    return out


def _child(spec: dict) -> dict:
    """Run ``spec`` in a fresh Python process; its last stdout line is the JSON result."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"measurement {spec} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the report ----

def run_benchmark(args) -> dict:
    base = {"device": args.device, "repeats": args.repeats}
    results = {"device": args.device, "posterior_sd": args.posterior_sd, "steps": args.steps,
               "repeats": args.repeats, "batch_size": args.batch_size,
               "train": {}, "gradient_variance": {}, "predict": {}}
    for arch in args.archs:
        results["train"][arch] = {m: _child({**base, "kind": "train", "method": m, "arch": arch,
                                            "steps": args.steps, "warmup": args.warmup,
                                            "batch_size": args.batch_size}) for m in TRAINING}
    for arch in [a for a in args.archs if a != "toy_mlp"]:
        results["gradient_variance"][arch] = _child({**base, "kind": "gradvar", "arch": arch,
                                                    "batch_size": args.batch_size, "draws": args.draws,
                                                    "posterior_sd": args.posterior_sd,
                                                    "data_root": args.data_root})
    for arch in [a for a in args.archs if a != "toy_mlp"]:
        results["predict"][arch] = {m: _child({**base, "kind": "predict", "method": m, "arch": arch,
                                              "samples": args.samples, "images": args.images,
                                              "predict_repeats": args.predict_repeats,
                                              "chunk_size": args.chunk_size}) for m in PREDICTION}
    return results


def report(results: dict) -> str:
    lines = [f"training: batch {results['batch_size']}, median of {results['repeats']} repeats of "
             f"{results['steps']} steps, device {results['device']}",
             f"{'arch':<10}{'method':<10}{'steps/s':>10}{'images/s':>11}{'peak MB':>9}"
             f"{'zoo/bbb':>9}{'zoo/twin':>10}"]
    for arch, methods in results["train"].items():
        for method, r in methods.items():
            if not r:
                continue
            zoo = r["steps_per_s"]
            ratios = (f"{zoo / methods['bbb']['steps_per_s']:>8.2f}x" if methods["bbb"] else f"{'-':>9}",
                      f"{methods['twin']['steps_per_s'] / zoo:>9.2f}x") if method in ZOO_VARIANTS else ("", "")
            lines.append(f"{arch:<10}{method:<10}{r['steps_per_s']:>10.1f}{r['images_per_s']:>11.0f}"
                         f"{r['peak_mb']:>9.0f}{ratios[0]}{ratios[1]}")
    lines.append("  zoo/bbb: the zoo's steps per second over the hand-written BbB's (higher is better); "
                 "zoo/twin: how many times longer a zoo step takes than a twin step")
    if results["gradient_variance"]:
        first = next(iter(results["gradient_variance"].values()))
        lines += ["", f"gradient variance: {first['draws']} gradients on one {first['data']} minibatch of "
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
                gain = f"{methods['loop']['seconds'] / r['seconds']:>9.2f}x" if method == "predict" else ""
                lines.append(f"{arch:<10}{method:<9}{r['seconds']:>9.3f}{r['images_per_s']:>10.0f}"
                             f"{r['peak_mb']:>9.0f}{gain}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=["toy_mlp", "mnist_mlp", "lenet"])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--steps", type=int, default=50, help="training steps per repeat")
    parser.add_argument("--warmup", type=int, default=5, help="untimed training steps first")
    parser.add_argument("--repeats", type=int, default=3, help="the median of repeats is reported")
    parser.add_argument("--batch-size", type=int, default=128)
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
