"""Whether the compiled step draws Pyro's numbers on a GPU, and if not, why: LeNet's captured step
(weight draws, as tests/core/fast/test_captured_step.py's CUDA test) compiled four ways, each in a
process of its own, all at once: its draws chained in Pyro's order or left to the compiler
(``bnn_zoo.core.fast.ordered_draws``), in a CUDA graph or not. At each of its first three calls (the
CUDA graph's warm-up, recording and first replay) the loss and gradients are held against Pyro's
own step from the same generator state, and the generator's state after both. Prints one JSON
line: {variant: [{call, loss_gap, grad_gap, same_state, same}]}.

Usage: python scripts/cuda_draws.py [--arch lenet] [--timeout 120]
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

VARIANTS = {"ordered, CUDA graph": (True, True), "ordered, no CUDA graph": (True, False),
            "compiler's order, CUDA graph": (False, True), "compiler's order, no CUDA graph": (False, False)}
CALLS = 3
TOLERANCE = 1e-4  # float32 rounding of a fused step against Pyro's, relative to the figure's scale


def _gap(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def measure(arch: str, order: bool, cuda_graphs: bool, device: str = "cuda") -> list:
    """The variant's first calls against Pyro's step from the same generator states (in this process)."""
    import pyro
    import torch
    from torch import nn

    import bnn_zoo.core.fast.captured_step as captured_step
    from bnn_zoo import build
    from bnn_zoo.core.inference.elbo import TraceKL_ELBO

    compiled = captured_step.Compiled

    class Forced(compiled):
        """The captured step's Compiled with the variant's draw order and CUDA graph."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "order": order, "cuda_graphs": cuda_graphs})

    captured_step.Compiled = Forced
    try:
        return _calls(arch, device, captured_step, build, TraceKL_ELBO, pyro, torch, nn)
    finally:
        captured_step.Compiled = compiled


def _calls(arch, device, captured_step, build, TraceKL_ELBO, pyro, torch, nn) -> list:
    cuda = torch.device(device).type == "cuda"
    pyro.set_rng_seed(0)
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        model, guide = build(arch, num_data=1000, hidden=[32] if arch != "lenet" else None, init_scale=0.1)
        x = torch.randn(8, 1) if arch == "toy_mlp" else torch.randn(8, 1, 28, 28)
        y = torch.randn(8) if arch == "toy_mlp" else torch.randint(0, 10, (8,))
        guide(x[:1])
        model, guide, x, y = model.to(device), guide.to(device), x.to(device), y.to(device)
        elbo, modules = TraceKL_ELBO(), [model, guide]
        params = list(nn.ModuleList(modules).parameters())

        def fn(x, y):
            return (elbo.differentiable_loss(model, guide, x, y),)

        step = captured_step.CapturedStep(fn, modules, compiled=True, note=lambda n: print(n, file=sys.stderr))
        found = []
        for call in range(1, CALLS + 1):
            torch.manual_seed(100 + call)
            states = torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None
            outs = []
            for run in (step, fn):
                torch.set_rng_state(states[0]), torch.cuda.set_rng_state(states[1]) if cuda else None
                for p in params:
                    p.grad = None
                loss, = run(x, y)
                loss.backward()
                outs.append((loss.detach().clone(), [p.grad.clone() for p in params],
                             torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else torch.zeros(1)))
            (loss_c, grads_c, cpu_c, gpu_c), (loss_e, grads_e, cpu_e, gpu_e) = outs
            gaps = {"loss_gap": _gap(loss_c, loss_e), "grad_gap": max(_gap(a, b) for a, b in zip(grads_c, grads_e)),
                    "same_state": bool(torch.equal(cpu_c, cpu_e) and torch.equal(gpu_c, gpu_e))}
            found.append({"call": call, **gaps, "same": gaps["loss_gap"] <= TOLERANCE and gaps["grad_gap"] <= TOLERANCE
                          and gaps["same_state"]})
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="lenet", choices=["toy_mlp", "mnist_mlp", "lenet"])
    parser.add_argument("--timeout", type=float, default=120, help="seconds each variant may take")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        order, cuda_graphs = VARIANTS[args.child]
        print(json.dumps(measure(args.arch, order, cuda_graphs)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: scripts/cuda_draws.py compares the compiled step's draws on a GPU", file=sys.stderr)
        return 2
    children = {name: subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--arch", args.arch,
                                        "--child", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for name in VARIANTS}
    found = {}
    for name, child in children.items():
        try:
            out, err = child.communicate(timeout=args.timeout)
            found[name] = json.loads(out.strip().splitlines()[-1]) if child.returncode == 0 else \
                {"failed": (err.strip().splitlines() or [f"exit {child.returncode}"])[-1]}
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            found[name] = {"failed": f"timed out after {args.timeout:g} s"}
    import torch._inductor.fx_passes.post_grad as post_grad

    print(json.dumps({"arch": args.arch, "torch": torch.__version__,
                      "torch_chains_random_ops": hasattr(post_grad, "_chain_random_ops_for_ordering"),
                      "variants": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
