"""The captured step (bnn_zoo.core.fast.captured_step) is Pyro's step: the same draws, loss, gradients and update."""
import copy
import gc
import json
import math
import subprocess
import sys
import weakref

import pyro
import pytest
import torch
from conftest import SMALL, ZOO, example_batch, tiny_config
from helpers import first_by_default
from torch import nn

from bnn_zoo import bayesian, build
from bnn_zoo.cli.train import train
from bnn_zoo.core.fast.captured_step import BREAK_EVEN, CapturedStep, NotCaptured, choose, reason
from bnn_zoo.core.networks.architectures import ARCHITECTURES
from bnn_zoo.core.inference.elbo import TraceKL_ELBO
from bnn_zoo.core.networks.reparam import LocalReparameterization
from bnn_zoo.runs.training.loop import adam
from bnn_zoo.runs.training.phases import BayesPhase
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.training.resume import config_for_run

ANY_NET = "conv+batchnorm"  # bayesian() of a network outside the zoo, with a point-estimate layer


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)  # as usual before a BatchNorm
        self.norm = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 7 * 7, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.norm(self.conv(x))), 4)
        return self.head(x.flatten(1))


def pair(arch: str, guide: str = "meanfield"):
    """A fresh (model, guide, x, y), the same at every call."""
    pyro.set_rng_seed(0)
    with pyro.settings.context(module_local_params=True):
        if arch == ANY_NET:
            model, guide = bayesian(ConvNet(), num_data=1000, guide=guide, init_scale=0.1)
            x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
        else:
            model, guide = build(arch, num_data=1000, hidden=SMALL[arch], guide=guide, init_scale=0.1)
            x, y = example_batch(arch)
        guide(x[:1])
    return model, guide, x, y


def one_step(model, guide, x, y, reparam: str, capture: str, outliers: torch.Tensor | None = None):
    """(loss, data fit, gradients, parameters after Adam's step, buffers) of one training step (with
    "no class" observed at ``outliers`` where given, of weight 0.5)."""
    elbo = TraceKL_ELBO()
    context = LocalReparameterization if reparam == "local" else torch.enable_grad
    inputs = (x, y) if outliers is None else (x, y, outliers)

    def loss_and_data_fit(x, y, *outliers):
        seen = {"outliers": outliers[0], "outlier_weight": 0.5} if outliers else {}
        with context():
            loss, parts = elbo.loss_and_parts(model, guide, x, y, **seen)
        return loss, parts.data_fit

    modules = [model, guide]
    params = dict(nn.ModuleList(modules).named_parameters())
    optimizer = adam(params.values(), 0.01)
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        step = loss_and_data_fit if capture == "eager" else CapturedStep(loss_and_data_fit, modules, capture == "compile")
        pyro.set_rng_seed(1)
        loss, data_fit = step(*inputs)
        loss.backward()
    rng = torch.get_rng_state()
    grads = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
    optimizer.step()
    after = {n: p.detach().clone() for n, p in params.items()}
    return loss.detach(), data_fit, grads, after, {n: b.clone() for n, b in model.named_buffers()}, rng


def assert_same(eager, captured, exact: bool):
    """Equal bit for bit (replayed op by op), or to float32's rounding at the tensor's scale (fused)."""
    def close(a, b):
        return torch.equal(a, b) if exact else bool((a - b).abs().max() <= 1e-5 * a.abs().max() + 1e-6)

    for what, a, b in zip(("loss", "data fit"), eager[:2], captured[:2]):
        assert close(a, b), f"{what}: eager {a.item()}, captured {b.item()}"
    assert torch.equal(eager[5], captured[5]), "the step drew another number of random numbers"
    for what, a, b in zip(("gradient", "updated parameter", "buffer"), eager[2:5], captured[2:5]):
        assert a.keys() == b.keys(), what
        for name in a:
            assert close(a[name], b[name]), f"{what} {name} differs by {(a[name] - b[name]).abs().max().item():.3g}"


@pytest.mark.parametrize("reparam", ["weights", "local"])
@pytest.mark.parametrize("arch", [*ZOO, ANY_NET])
def test_a_replayed_step_is_pyros_step_on_the_same_draws(arch, reparam):
    eager = one_step(*pair(arch), reparam, "eager")
    captured = one_step(*pair(arch), reparam, "trace")
    assert len(eager[2]) >= 4  # every weight's loc and scale got a gradient
    assert_same(eager, captured, exact=True)


@pytest.mark.parametrize("capture", first_by_default(["trace", "compile"]))
@pytest.mark.parametrize("reparam", ["weights", "local"])
def test_a_step_with_outliers_is_pyros_step_on_the_same_draws(reparam, capture):
    """The minibatch's outliers, a third input, observed as "no class" (BayesianNet.forward): captured,
    the step draws, differentiates and fits the data as Pyro's, that term in its data fit."""
    outliers = torch.randn(4, *ARCHITECTURES["lenet"].input_shape, generator=torch.Generator().manual_seed(2))
    eager = one_step(*pair("lenet"), reparam, "eager", outliers)
    assert_same(eager, one_step(*pair("lenet"), reparam, capture, outliers), exact=capture == "trace")
    assert eager[1] > one_step(*pair("lenet"), reparam, "eager")[1] + 1000 * math.log(10) * 0.5 * 0.99


@pytest.mark.parametrize("arch", first_by_default([*ZOO, ANY_NET]))  # compiling takes seconds an architecture
def test_a_compiled_step_is_pyros_step_on_the_same_draws(arch):
    eager = one_step(*pair(arch), "local", "eager")
    assert_same(eager, one_step(*pair(arch), "local", "compile"), exact=False)


def whole_steps(model, guide, x, y, capture: str, lrs=(0.01, 0.003, 0.003)):
    """Training steps at the learning rates ``lrs`` (changed between steps, as a schedule does):
    (loss and data fit of each, Adam's moments and step counts, parameters after, random state
    after). Eager: Pyro's step, backward, torch's fused Adam; captured: the whole step with Adam's
    update in it."""
    elbo = TraceKL_ELBO()

    def loss_and_data_fit(x, y):
        loss, parts = elbo.loss_and_parts(model, guide, x, y)
        return loss, parts.data_fit

    modules = [model, guide]
    params = dict(nn.ModuleList(modules).named_parameters())
    optimizer, figures = adam(params.values(), lrs[0]), []
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        step = None if capture == "eager" else CapturedStep(loss_and_data_fit, modules, capture == "compile",
                                                            note=pytest.fail, optimizer=optimizer)
        pyro.set_rng_seed(1)
        for lr in lrs:
            optimizer.param_groups[0]["lr"] = lr
            if step is None:
                optimizer.zero_grad()
                loss, data_fit = loss_and_data_fit(x, y)
                loss.backward()
                optimizer.step()
            else:
                loss, data_fit = step(x, y)
                assert not loss.requires_grad
            figures.append(torch.stack([loss.detach(), data_fit]))
    moments = {f"{n}/{k}": optimizer.state[p][k].clone() for n, p in params.items()
               for k in ("exp_avg", "exp_avg_sq", "step")}
    states = [torch.get_rng_state(), *([torch.cuda.get_rng_state()] if x.is_cuda else [])]
    return torch.stack(figures), moments, {n: p.detach().clone() for n, p in params.items()}, states


def assert_same_steps(eager, captured, exact: bool):
    assert all(map(torch.equal, eager[3], captured[3])), "the steps drew another number of random numbers"
    for what, a, b in (("losses", {"": eager[0]}, {"": captured[0]}), ("moment", eager[1], captured[1]),
                       ("parameter", eager[2], captured[2])):
        assert a.keys() == b.keys()
        for name in a:
            close = torch.equal(a[name], b[name]) if exact else \
                bool((a[name] - b[name]).abs().max() <= 1e-5 * a[name].abs().max() + 1e-6)
            assert close, f"{what} {name} differs by {(a[name] - b[name]).abs().max().item():.3g}"


@pytest.mark.parametrize("capture", ["trace", "compile"])
def test_the_whole_step_with_adam_in_it_is_pyros_step_and_torchs_adam(capture):
    """Captured with the optimizer, a step draws, differentiates and takes Adam's step as Pyro's
    step and torch's fused Adam do: the same losses, Adam's moments (its first moment is the
    gradient's running mean: the same gradients), step counts and parameters, at learning rates
    that change between steps; replayed op by op bit for bit, compiled to float32 rounding."""
    captured = whole_steps(*pair("mnist_mlp"), capture)
    assert_same_steps(whole_steps(*pair("mnist_mlp"), "eager"), captured, exact=capture == "trace")
    start = dict(nn.ModuleList(pair("mnist_mlp")[:2]).named_parameters())
    assert all(not torch.equal(captured[2][n], start[n]) for n in start)  # every parameter was moved


@pytest.mark.parametrize("guide", ["lowrank", "delta"])
def test_other_guides_replay_as_pyro_runs_them(guide):
    eager = one_step(*pair("mnist_mlp", guide), "weights", "eager")
    assert_same(eager, one_step(*pair("mnist_mlp", guide), "weights", "trace"), exact=True)


def test_capturing_draws_no_random_number_and_replays_draw_fresh_ones():
    model, guide, x, y = pair("mnist_mlp")
    elbo = TraceKL_ELBO()
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        step = CapturedStep(lambda x, y: (elbo.differentiable_loss(model, guide, x, y),), [model, guide])
        state = torch.get_rng_state()
        step._capture((x, y))
        assert torch.equal(torch.get_rng_state(), state)
        first, second = step(x, y)[0], step(x, y)[0]
    assert len(step.graphs) == 1  # captured once, replayed
    assert first != second  # each replay draws new weights


def test_a_step_that_branches_on_a_tensor_value_is_not_captured():
    class Branching(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 2)

        def forward(self, x):
            out = self.layer(x)
            return out if out.sum() > 0 else -out  # a branch a trace would freeze

    with pyro.settings.context(module_local_params=True):
        model, guide = bayesian(Branching(), num_data=10)
        x, y = torch.randn(4, 3), torch.randint(0, 2, (4,))
        guide(x)
        step = CapturedStep(lambda x, y: (TraceKL_ELBO().differentiable_loss(model, guide, x, y),), [model, guide])
        for _ in range(2):  # said again at each call of that signature
            with pytest.raises(NotCaptured, match="branches on a tensor's value") as caught:
                step(x, y)
    assert "\n" not in str(caught.value)


def test_a_guide_without_parameters_yet_is_refused_before_tracing():
    with pyro.settings.context(module_local_params=True):
        model, guide = bayesian(nn.Linear(3, 2), num_data=10)
        with pytest.raises(ValueError, match=r"has no parameters yet: call it once \(guide\(x\)\)"):
            CapturedStep(lambda x, y: (TraceKL_ELBO().differentiable_loss(model, guide, x, y),), [model, guide])


def test_train_and_eval_mode_are_captured_apart():
    """BatchNorm normalizes by the batch in train mode and by its running statistics in eval mode:
    a graph traced in one mode is not replayed in the other."""
    model, guide, x, y = pair(ANY_NET)
    elbo = TraceKL_ELBO()
    fn = lambda x, y: (elbo.differentiable_loss(model, guide, x, y),)  # noqa: E731
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        step = CapturedStep(fn, [model, guide])
        step(x, y)
        model.eval()
        pyro.set_rng_seed(2)
        captured = step(x, y)[0]
        pyro.set_rng_seed(2)
        eager = fn(x, y)[0]
    assert len(step.graphs) == 2 and torch.equal(captured, eager.detach())


def test_a_phase_that_cannot_capture_says_so_and_trains_as_pyro_does():
    """With Pyro's global parameter store the trace would not see the parameters: the phase says
    so in one line and runs Pyro's step, drawing what an eager phase draws."""
    cfg = tiny_config("mnist_mlp", **{"model.hidden": "[8]", "train.capture": "trace"})
    x, y = example_batch("mnist_mlp")
    notes = []
    losses = {}
    for capture in ("trace", "eager"):
        with pyro.settings.context(module_local_params=capture == "eager"):
            pyro.set_rng_seed(0)
            plan = Plan.of(make(cfg, capture))
            phase = BayesPhase(plan.networks, plan.train, 1000, "cpu", log=notes.append)
            pyro.set_rng_seed(3)
            losses[capture] = phase.loss(x, y).item()
    assert len(notes) == 1 and "global parameter store" in notes[0] and "runs uncaptured" in notes[0], notes
    assert losses["trace"] == losses["eager"]


@pytest.mark.slow  # two compiles
@pytest.mark.parametrize("path", ["updating", "loss"])
def test_a_phase_notes_its_compiled_step_in_the_cache_on_either_path(path, tmp_path, monkeypatch):
    """Once the compiled step has run, the compile cache notes that it holds it: through the step
    with Adam in it (one process) and through the loss alone (what DDP steps), once, and not before."""
    from bnn_zoo.runs.training import compile_cache

    monkeypatch.setenv(compile_cache.CACHE_ENV, str(tmp_path))
    cfg = tiny_config("mnist_mlp", **{"model.hidden": "[8]", "train.capture": "compile"})
    x, y = example_batch("mnist_mlp")
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False), \
            compile_cache.compile_cache(True):  # as the loop runs its steps: without argument validation
        plan = Plan.of(make(cfg, "compile"))
        phase = BayesPhase(plan.networks, plan.train, 1000, "cpu", log=pytest.fail)  # captured, or it says why
        assert not compile_cache.warm(phase.signature)
        step = phase.updating(adam(phase.parameters(), 1e-3)) if path == "updating" else phase.loss
        step(x, y)
        assert compile_cache.warm(phase.signature)


def make(cfg, capture):
    from bnn_zoo.runs.plans.config import make_config, resolved

    return resolved(make_config(cfg, [f"train.capture={capture}"]))


def test_when_compiling_fails_the_traced_step_runs_with_a_note(monkeypatch):
    def no_compiler(*_args, **_kwargs):
        raise RuntimeError("no C++ compiler found\nsecond line")

    eager = one_step(*pair("toy_mlp"), "weights", "eager")
    monkeypatch.setattr(torch, "compile", lambda fn, **_: no_compiler)
    with pytest.warns(UserWarning, match=r"torch.compile failed \(RuntimeError: no C\+\+ compiler found\); "
                                         r"the captured step runs uncompiled$"):
        assert_same(eager, one_step(*pair("toy_mlp"), "weights", "compile"), exact=True)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("warm", [False, True])
def test_auto_captures_where_the_run_is_long_enough_to_pay_for_it(device, warm):
    trace_from, compile_from = BREAK_EVEN[device, warm]
    assert choose("auto", trace_from - 1, device, warm) == "eager"
    assert choose("auto", trace_from, device, warm) == "trace"
    assert choose("auto", compile_from - 1, device, warm) == "trace"
    assert choose("auto", compile_from, device, warm) == "compile"
    assert choose("eager", 10 ** 6, device, warm) == "eager" and choose("trace", 1, device, warm) == "trace"
    assert choose("auto", compile_from, "mps", warm) == choose("auto", compile_from, "cpu", warm)  # as the CPU


def test_a_warm_compile_cache_compiles_shorter_runs_and_the_log_says_why():
    """A run of 1,000 steps compiles where the cache holds its step (on a CPU from 600 steps, on
    CUDA from 1,000) and traces where it does not (compiling pays from 3,000)."""
    assert [choose("auto", 1000, device, warm) for device in ("cpu", "cuda") for warm in (False, True)] == \
        ["trace", "compile", "trace", "compile"]
    assert reason("auto", 1000, "cuda", True) == (
        "train.capture=auto: 1,000 steps on cuda, the compiled step in the compile cache; tracing pays from 300 "
        "steps, compiling from 1,000")
    assert reason("trace", 1000, "cuda", True) == "train.capture=trace"


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_a_captured_run_trains_and_resumes_as_pyros_step_does(tmp_path):
    """The same history epoch for epoch, captured or not; and a captured run stopped and resumed
    ends where one that never stopped does."""
    histories = {}
    for capture in ("eager", "trace"):
        run = tmp_path / capture
        train(tiny_config("toy_mlp", run_dir=str(run), **{"train.epochs": 12, "train.eval_every": 6,
                                                          "train.capture": capture}))
        histories[capture] = json.loads((run / "metrics.json").read_text())["bayes"]["history"]
    assert [h["loss"] for h in histories["trace"]] == [h["loss"] for h in histories["eager"]]
    stopped = tmp_path / "stopped"
    train(tiny_config("toy_mlp", run_dir=str(stopped), **{"train.epochs": 6, "train.eval_every": 6,
                                                          "train.capture": "trace"}))
    resumed = train(config_for_run(None, [f"resume={stopped}", "train.epochs=12"]))["bayes"]["history"]
    assert [h["loss"] for h in resumed] == [h["loss"] for h in histories["trace"]]


@pytest.mark.parametrize("arch", first_by_default(ZOO))
def test_compiled_prediction_is_the_plain_one_on_the_same_draws(arch):
    from bnn_zoo.core.inference.predictive import predict

    model, guide, x, _ = pair(arch)
    with pyro.settings.context(module_local_params=True):
        plain = [predict(model, guide, x, 6, chunk_size=4, batch_size=5, compiled=False) for _ in range(2)]
        pyro.set_rng_seed(1)
        reference = predict(model, guide, x, 6, chunk_size=4, batch_size=5, compiled=False)
        pyro.set_rng_seed(1)
        compiled = predict(model, guide, x, 6, chunk_size=4, batch_size=5, compiled=True)
    assert not torch.equal(plain[0], plain[1])  # fresh draws at each call
    assert (compiled - reference).abs().max() <= 1e-5 * reference.abs().max()


@pytest.mark.slow
def test_compiling_leaves_the_callers_settings_as_they_were():
    """TorchDynamo's first compile in a process turns torch.distributions' validation off for
    everyone; the zoo's compiled paths give it back. In a fresh process, where that first compile
    is the zoo's."""
    code = ("import torch; from torch.distributions import Distribution; from bnn_zoo import build; "
            "from bnn_zoo.core.inference.predictive import predict; model, guide = build('mnist_mlp', hidden=[8]); "
            "x = torch.randn(3, 1, 28, 28); guide(x); predict(model, guide, x, 2, compiled=True); "
            "print(Distribution._validate_args)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_a_compiled_prediction_goes_with_its_model_which_still_copies_and_pickles():
    import pickle

    from bnn_zoo.core.fast.compiling import _COMPILED_PREDICTIVES
    from bnn_zoo.core.inference.predictive import predict

    model, guide, x, _ = pair("mnist_mlp")
    predict(model, guide, x, 2, compiled=True)
    compiled = _COMPILED_PREDICTIVES[model].compiled
    assert compiled.run is not None and compiled.run is not compiled.fn  # compiled, not fallen back
    pickle.dumps(model), copy.deepcopy(model)
    gone, buffer_gone = weakref.ref(model), weakref.ref(model.prior.scale)
    del model, guide, compiled
    gc.collect()
    assert gone() is None and buffer_gone() is None


class FailsWhileRunning:
    """A compiled (or replayed) function that runs its graph ``works`` times, then draws a few
    random numbers and raises, as a CUDA graph or kernel may fail after compiling went well."""

    def __init__(self, fn, works: int):
        self.fn, self.works, self.calls = fn, works, 0

    def __call__(self, *args):
        self.calls += 1
        if self.calls > self.works:
            torch.rand(7)  # part of the step's draws, taken before it failed
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
        return self.fn(*args)


def steps(capture: str, n: int = 4, note=None):
    """The losses and final parameters of n steps of the captured toy step."""
    model, guide, x, y = pair("toy_mlp")
    elbo, modules = TraceKL_ELBO(), [model, guide]
    fn = lambda x, y: (elbo.differentiable_loss(model, guide, x, y),)  # noqa: E731
    params = dict(nn.ModuleList(modules).named_parameters())
    optimizer, losses = adam(params.values(), 0.01), []
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        step = CapturedStep(fn, modules, capture == "compile", note=note or pytest.fail)
        pyro.set_rng_seed(1)
        for _ in range(n):
            optimizer.zero_grad()
            try:
                loss, = step(x, y)
            except NotCaptured as err:
                (note or pytest.fail)(str(err))
                loss, = fn(x, y)  # what BayesPhase does: Pyro's step
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in params.items()}


def test_a_compiled_step_that_fails_while_running_falls_back_to_the_trace_on_the_same_draws(monkeypatch):
    traced = steps("trace")
    monkeypatch.setattr(torch, "compile", lambda fn, **_: FailsWhileRunning(fn, works=2))
    notes = []
    compiled = steps("compile", note=notes.append)
    assert notes == ["the compiled function failed while running (RuntimeError: CUDA error: an illegal memory access "
                     "was encountered); the captured step runs uncompiled"]
    assert compiled[0] == traced[0]  # the failed step's draws are drawn again, by the trace
    assert all(torch.equal(compiled[1][n], traced[1][n]) for n in traced[1])


def test_a_replay_that_fails_while_running_falls_back_to_pyros_step_on_the_same_draws(monkeypatch):
    capture = CapturedStep._capture
    monkeypatch.setattr(CapturedStep, "_capture", lambda self, inputs: FailsWhileRunning(capture(self, inputs), works=1))
    notes = []
    failing = steps("trace", note=notes.append)
    assert notes[0] == ("the captured step failed while running (RuntimeError: CUDA error: an illegal memory access was "
                        "encountered)") and len(set(notes)) == 1
    monkeypatch.setattr(CapturedStep, "_capture", lambda self, inputs: (_ for _ in ()).throw(NotCaptured("eager")))
    pyros = steps("trace", note=lambda _: None)  # every step Pyro's own
    assert failing[0] == pyros[0] and all(torch.equal(failing[1][n], pyros[1][n]) for n in pyros[1])


class Poisoning:
    """A captured graph whose outputs (loss, figures, gradients) turn to NaN once the next step
    begins, as a CUDA graph's are overwritten by its next replay."""

    def __init__(self, graph):
        self.graph, self.last = graph, []

    def __call__(self, params, buffers, inputs):
        for t in self.last:
            t.fill_(float("nan"))
        loss, figures, grads = self.graph(params, buffers, inputs)
        self.last = [t for t in (loss, *figures, *grads) if t is not None]
        return loss, figures, grads


def test_nothing_reads_a_step_s_outputs_once_the_next_step_has_begun(tmp_path, monkeypatch):
    """Training with each step's outputs poisoned as the next begins ends where it ends without:
    the loop, the phase and Adam read a step's loss, data fit and gradients before the next step."""
    runs = {}
    for poisoned in (False, True):
        if poisoned:
            capture = CapturedStep._capture
            monkeypatch.setattr(CapturedStep, "_capture", lambda self, inputs: Poisoning(capture(self, inputs)))
        run = tmp_path / str(poisoned)
        train(tiny_config("toy_mlp", run_dir=str(run), **{"train.epochs": 8, "train.eval_every": 4,
                                                          "train.capture": "trace", "train.twin": False}))
        runs[poisoned] = json.loads((run / "metrics.json").read_text())["bayes"]
    assert [h["loss"] for h in runs[True]["history"]] == [h["loss"] for h in runs[False]["history"]]
    assert [h["data_fit"] for h in runs[True]["history"]] == [h["data_fit"] for h in runs[False]["history"]]
    assert runs[True]["test/rmse"] == runs[False]["test/rmse"]


def on_cuda(model, guide, x, y):
    """The same pair on the GPU, its guide's parameters moved with it."""
    return model.to("cuda"), guide.to("cuda"), x.to("cuda"), y.to("cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("capture", ["trace", "compile"])
@pytest.mark.parametrize("arch", ZOO)
def test_on_cuda_the_captured_step_is_pyros_step_on_the_same_draws(arch, capture):
    """The CUDA half of the capture: the graph replayed on the GPU (compiled: in a CUDA graph)
    draws the GPU's numbers in Pyro's order, so it is Pyro's step there too."""
    torch.cuda.manual_seed(1)
    eager = one_step(*on_cuda(*pair(arch)), "weights", "eager")
    torch.cuda.manual_seed(1)
    captured = one_step(*on_cuda(*pair(arch)), "weights", capture)
    assert_same(eager, captured, exact=capture == "trace")


@pytest.mark.cuda
@pytest.mark.parametrize("capture", ["trace", "compile"])
def test_on_cuda_the_whole_step_with_adam_in_it_is_pyros_step_and_torchs_adam(capture):
    """On the GPU (compiled: drawing, ELBO, backward and Adam's update in one CUDA graph), three
    steps at changing learning rates are Pyro's and torch's fused Adam's, on the GPU's draws."""
    eager = whole_steps(*on_cuda(*pair("mnist_mlp")), "eager")
    assert_same_steps(eager, whole_steps(*on_cuda(*pair("mnist_mlp")), capture), exact=capture == "trace")


@pytest.mark.cuda
@pytest.mark.parametrize("arch", ZOO)
def test_on_cuda_compiled_prediction_is_the_plain_one_on_the_same_draws(arch):
    from bnn_zoo.core.inference.predictive import predict

    model, guide, x, _ = on_cuda(*pair(arch))
    with pyro.settings.context(module_local_params=True):
        torch.cuda.manual_seed(1), pyro.set_rng_seed(1)
        reference = predict(model, guide, x, 6, chunk_size=4, batch_size=5, compiled=False)
        torch.cuda.manual_seed(1), pyro.set_rng_seed(1)
        compiled = predict(model, guide, x, 6, chunk_size=4, batch_size=5, compiled=True)
    assert compiled.is_cuda and (compiled - reference).abs().max() <= 1e-5 * reference.abs().max()
