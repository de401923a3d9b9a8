"""Where a training step's time goes: the step ``python -m bnn_zoo.train`` takes (the captured
step with Adam's update in it, ``train.capture`` as given; on CUDA one CUDA graph), on random
batches of the architecture's shape, timed over --steps steps after --warmup (which compile), then
profiled over --profiled steps by torch.profiler: the top kernels by device time, the device's busy
time a step against the wall's (the rest is the host: Python, launches, waits) and the host's CPU
time a step. The compile cache is the one training uses (a step compiled by a run before loads).
Prints one JSON line.

Usage: python scripts/step_profile.py [--arch mnist_mlp] [--capture compile] [--device cuda] [--steps 200]
"""
import argparse
import json
import math
import sys
import time

from bnn_zoo.cli import options as cli

KERNELS = 10


def profile(arch: str, capture: str, device_name: str, batch_size: int, steps: int, warmup: int, profiled: int) -> dict:
    import pyro
    import torch
    from torch._dynamo.utils import counters
    from torch.profiler import ProfilerActivity

    from bnn_zoo.core.networks.architectures import architecture
    from bnn_zoo.runs.plans.checks import pick_device
    from bnn_zoo.runs.training.compile_cache import compile_cache
    from bnn_zoo.runs.plans.config import load_config, resolved
    from bnn_zoo.runs.training.loop import adam, training_step
    from bnn_zoo.runs.training.phases import BayesPhase
    from bnn_zoo.runs.plans.plan import Plan

    device = pick_device(device_name)
    cuda = device.type == "cuda"
    pyro.set_rng_seed(0)
    plan = Plan.of(resolved(load_config(arch, [f"train.capture={capture}", f"train.batch_size={batch_size}"])))
    num_data = 55000  # MNIST's training split beside its 5,000 validation images: the graph a run compiles
    # module-local parameters, as python -m bnn_zoo.train runs
    with compile_cache(plan.train.compile_cache), pyro.settings.context(module_local_params=True):
        phase = BayesPhase(plan.networks, plan.train, num_data, device, log=lambda line: print(line, file=sys.stderr))
        optimizer = adam(phase.parameters(), plan.train.lr)
        step = phase.updating(optimizer) or training_step(phase.loss, optimizer)
        spec = architecture(arch)
        batches = [(torch.randn(batch_size, *spec.input_shape, device=device),
                    torch.randint(0, spec.classes, (batch_size,), device=device)) for _ in range(8)]
        total = torch.zeros((), device=device)

        def run(n: int) -> tuple[float, float]:
            if cuda:
                torch.cuda.synchronize(device)
            wall, cpu = time.perf_counter(), time.process_time()
            with phase.stepping():
                for i in range(n):
                    total.add_(step(*batches[i % len(batches)]))
            if cuda:
                torch.cuda.synchronize(device)
            return time.perf_counter() - wall, time.process_time() - cpu

        first = run(1)[0]
        run(warmup)
        wall, cpu = run(steps)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=activities) as prof:
            run(profiled)
    kernels = device_kernels(prof) if cuda else []
    busy_ms = sum(k["us"] for k in kernels) / profiled / 1000 if kernels else math.nan
    return {"arch": arch, "capture": phase.capture, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "batch_size": batch_size, "first_step_s": first, "step_ms": 1000 * wall / steps,
            "cpu_ms_per_step": 1000 * cpu / steps, "steps_per_s": steps / wall,
            "device_busy_ms_per_step": busy_ms, "host_gap_ms_per_step": 1000 * wall / steps - busy_ms,
            "kernels_per_step": sum(k["calls"] for k in kernels) / profiled if kernels else 0,
            "top_kernels": sorted(kernels, key=lambda k: -k["us"])[:KERNELS], "table": table(prof, cuda),
            "inductor": dict(counters["inductor"]),  # cudagraph_skips: where a CUDA graph was not used, and why
            "finite": bool(torch.isfinite(total))}


def device_kernels(prof) -> list[dict]:
    """Each kernel the device ran: its name, calls and total microseconds (the profiler's events that
    ran on the device, by name)."""
    found: dict = {}
    for event in prof.events():
        if str(getattr(event, "device_type", "")).endswith("CUDA"):
            entry = found.setdefault(event.name, {"name": event.name[:100], "calls": 0, "us": 0.0})
            entry["calls"] += 1
            entry["us"] += event.time_range.elapsed_us()
    return list(found.values())


def table(prof, cuda: bool) -> str:
    """torch.profiler's own table of the top ops (by device time on CUDA; its column's name changed
    from cuda to device in torch 2.5)."""
    for key in (("self_device_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",)):
        try:
            return prof.key_averages().table(sort_by=key, row_limit=KERNELS)
        except (AttributeError, KeyError, ValueError):
            continue
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="mnist_mlp", choices=["mnist_mlp", "lenet"])
    parser.add_argument("--capture", default="compile", choices=["compile", "trace", "eager"])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the timed ones (they compile)")
    parser.add_argument("--profiled", type=int, default=20, help="steps under torch.profiler")
    args = parser.parse_args(argv)

    def command() -> int:  # a device this machine lacks (its default, cuda, on a CPU) ends in one line
        print(json.dumps(profile(args.arch, args.capture, args.device, args.batch_size, args.steps, args.warmup,
                                 args.profiled)))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
