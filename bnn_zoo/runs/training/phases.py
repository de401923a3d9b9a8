"""What training a run is made of: phases behind one small protocol (``Phase``), each run by the
same loop (``bnn_zoo.runs.training.loop.train_phase``), which validates, checkpoints, stops a diverging run and
resumes them all the same way. ``BayesPhase``: SVI of the Bayesian network with its guide;
``TwinPhase``: maximum likelihood of its deterministic twin.

Usage::

    phase = BayesPhase(plan.networks, plan.train, num_data=len(splits.train), device=device, path=run.checkpoint)
    twin = TwinPhase(plan.networks, plan.train, num_data=len(splits.train), device=device, path=run.twin_checkpoint)
    loss = phase.loss(x, y)                          # a minibatch's negative ELBO, to minimize
    loss = phase.loss(x, y, outliers)                # with "no class" at its outliers (an outliers section)
    figures = train_phase(phase, plan.train, config, splits, run_id, log, stored)
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Protocol

import pyro
import torch

from ...core.fast.captured_step import CapturedStep, NotCaptured, choose, reason
from ...core.inference.elbo import TraceKL_ELBO
from ...core.inference.inputs import evaluating
from ...core.inference.predictive import predict
from ...core.networks.reparam import LocalReparameterization
from ...data.sets import TensorSet
from ...data.shifted.outliers import OutliersConfig
from . import compile_cache
from ..plans.factory import build_networks, build_twin
from ..plans.plan import Networks
from ..plans.schema import TrainConfig


def planned_epochs(t: TrainConfig, num_data: int, twin: bool = False) -> int:
    """The epochs a phase plans on ``num_data`` training examples: train.epochs (the twin's:
    train.twin_epochs where given), or those that make train.steps minibatches of train.batch_size."""
    if twin and t.twin_epochs:
        return t.twin_epochs
    if t.steps is None:
        return t.epochs
    return math.ceil(t.steps / math.ceil(num_data / t.batch_size))


def _device_name(device) -> str:
    """A device as its compiled code depends on it: a GPU by its name."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


class Phase(Protocol):
    """One thing a run trains with a torch optimizer, epoch by epoch, into a checkpoint of its own."""

    label: str  # its name in the logs, metrics.json and the ladder: "bayes", "twin"
    path: Path  # its checkpoint
    epochs: int  # the planned length
    lr: float  # Adam's learning rate at the plan's start
    per_example: float  # a minibatch loss times this is nats per training example
    sampled: bool  # whether its figures come from posterior draws

    def parameters(self) -> list[torch.Tensor]:
        """What the optimizer moves."""

    def modules(self) -> list[torch.nn.Module]:
        """The modules holding those parameters (what DDP wraps, ``bnn_zoo.runs.training.ranks``)."""

    def loss(self, x: torch.Tensor, y: torch.Tensor, outliers: torch.Tensor | None = None) -> torch.Tensor:
        """A minibatch's loss, a scalar to minimize; with the minibatch's ``outliers``, "no class" at them too."""

    def updating(self, optimizer: torch.optim.Optimizer) -> Callable[..., torch.Tensor] | None:
        """A whole training step of its own with ``optimizer`` (of a minibatch, with its outliers where
        it has them; the update included; it returns the minibatch's loss, detached), or None: the
        loop's, ``loss`` then backward and step."""

    def end_epoch(self, record: dict, mean: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Add the phase's own figures of the epoch just done to ``record`` (``mean``: a sum's mean
        over the ranks, ``bnn_zoo.runs.training.ranks.Ranks.mean``)."""

    def metrics(self, data: TensorSet, samples: int) -> dict:
        """Its figures on ``data`` (validation, test), from ``samples`` posterior draws where it draws."""

    def state(self) -> dict:
        """What its checkpoint holds besides the loop's own (epoch, optimizer, history, RNG)."""

    def restore(self, stored: dict) -> None:
        """Take back what ``state`` stored."""

    def stepping(self):
        """The context its training steps run in."""


class BayesPhase:
    """SVI of the Bayesian network: Adam on the guide's parameters and the model's own (a learned
    prior or noise), the negative ELBO of ``TraceKL_ELBO`` (inside ``LocalReparameterization`` when
    model.reparam=local), its data-fit and KL parts logged per epoch; the step captured as
    ``train.capture`` says (``bnn_zoo.core.fast.captured_step``; auto weighs the planned steps, the device
    and whether the compile cache holds the step, ``bnn_zoo.runs.training.compile_cache``), Adam's update
    in it. ``outliers``: the run's outliers section, whose weight the "no class" term at a minibatch's
    outliers takes (``BayesianNet.forward``). Build and run it with module-local parameters; the steps
    run without Pyro's argument validation (they cost a third of a mnist_mlp step; the traced run of
    ``kl_estimators`` before training keeps them on)."""

    label = "bayes"
    sampled = True

    def __init__(self, networks: Networks, t: TrainConfig, num_data: int, device, path: Path | None = None,
                 log: Callable[[str], None] = print, outliers: OutliersConfig = OutliersConfig()):
        self.model, self.guide = build_networks(networks, num_data, device)
        self.outlier_weight = outliers.weight
        self.elbo = TraceKL_ELBO(t.num_particles, closed_form_kl=t.elbo == "meanfield", kl_weight=t.kl_weight)
        self.reparam = LocalReparameterization if networks.model.reparam == "local" else nullcontext
        self.path, self.lr, self.num_data, self.log = path, t.lr, num_data, log
        self.epochs = planned_epochs(t, num_data)
        self.per_example = 1.0 / num_data
        self._data_fit = torch.zeros((), device=device)  # summed over the epoch's minibatches
        self.cached = t.compile_cache
        # what the compiled step depends on: a run with the same compiles the same graph
        recipe = networks.recipe
        self.signature = repr((torch.__version__, _device_name(device), networks.model, networks.target_stats,
                               f"{recipe.make_net.__module__}.{recipe.make_net.__qualname__}", recipe.input_shape,
                               recipe.likelihood, recipe.classes, num_data, t.batch_size, t.elbo, t.num_particles,
                               t.kl_weight, outliers, sorted((n, tuple(p.shape)) for n, p in self._named_parameters())))
        steps, kind = self.epochs * math.ceil(num_data / t.batch_size), torch.device(device).type
        warm = t.compile_cache and compile_cache.warm(self.signature)
        self.capture = choose(t.capture, steps, kind, warm)
        self.capture_reason = reason(t.capture, steps, kind, warm)
        self._captured = None if self.capture == "eager" else \
            CapturedStep(self._loss_and_data_fit, [self.model, self.guide], self.capture == "compile", log,
                         cached=self.cached, on_compiled=self._mark_cached)
        self._uncaptured: set[str] = set()  # why a step was not captured, said once each

    def _mark_cached(self) -> None:
        """The compile cache's note that it holds this step (where the run keeps its compiled steps)."""
        if self.cached:
            compile_cache.mark(self.signature)

    def parameters(self) -> list[torch.Tensor]:
        return [*self.guide.parameters(), *self.model.parameters()]

    def _named_parameters(self):
        return torch.nn.ModuleList([self.model, self.guide]).named_parameters()

    def modules(self) -> list[torch.nn.Module]:
        return [self.guide, self.model]

    def _loss_and_data_fit(self, x: torch.Tensor, y: torch.Tensor,
                           outliers: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The negative ELBO and its data fit (with the outliers' "no class" term where given)."""
        seen = {} if outliers is None else {"outliers": outliers, "outlier_weight": self.outlier_weight}
        with self.reparam():
            loss, parts = self.elbo.loss_and_parts(self.model, self.guide, x, y, **seen)
        return loss, parts.data_fit

    def loss(self, x: torch.Tensor, y: torch.Tensor, outliers: torch.Tensor | None = None) -> torch.Tensor:
        inputs = (x, y) if outliers is None else (x, y, outliers)  # the captured step's: tensors only
        try:
            loss, data_fit = (self._captured or self._loss_and_data_fit)(*inputs)
        except NotCaptured as err:  # for this batch shape: the others stay captured
            self._say_uncaptured(err)
            loss, data_fit = self._loss_and_data_fit(*inputs)
        self._data_fit = self._data_fit + data_fit
        return loss

    def updating(self, optimizer: torch.optim.Optimizer):
        """The captured step with Adam's update in it (compiled: in its graph); None for eager."""
        if self.capture == "eager":
            return None
        whole = CapturedStep(self._loss_and_data_fit, [self.model, self.guide], self.capture == "compile",
                             self.log, optimizer=optimizer, cached=self.cached, on_compiled=self._mark_cached)

        def step(x: torch.Tensor, y: torch.Tensor, outliers: torch.Tensor | None = None) -> torch.Tensor:
            inputs = (x, y) if outliers is None else (x, y, outliers)
            try:
                loss, data_fit = whole(*inputs)
            except NotCaptured as err:  # Pyro's step and torch's Adam, for this batch shape
                self._say_uncaptured(err)
                optimizer.zero_grad(set_to_none=True)
                loss, data_fit = self._loss_and_data_fit(*inputs)
                loss.backward()
                optimizer.step()
                loss = loss.detach()
            self._data_fit = self._data_fit + data_fit
            return loss

        return step

    def _say_uncaptured(self, err: NotCaptured) -> None:
        if str(err) not in self._uncaptured:
            self._uncaptured.add(str(err))
            self.log(f"train.capture={self.capture}: cannot capture the step ({err}); it runs uncaptured")

    def end_epoch(self, record: dict, mean) -> None:
        data_fit = mean(self._data_fit).item() / record["steps"] / self.num_data
        self._data_fit = torch.zeros_like(self._data_fit)
        record.update(data_fit=data_fit, kl=record["loss"] - data_fit, **self.model.hyperparameters)

    def metrics(self, data: TensorSet, samples: int) -> dict:
        return self.model.likelihood.metrics(predict(self.model, self.guide, data.x, samples), data.y)

    def state(self) -> dict:
        return {"num_data": self.num_data, "model": self.model.state_dict(), "guide": self.guide.state_dict()}

    def restore(self, stored: dict) -> None:
        self.model.load_state_dict(stored["model"]), self.guide.load_state_dict(stored["guide"])

    def stepping(self):
        return pyro.validation_enabled(False)


class TwinPhase:
    """Maximum likelihood of the deterministic twin (with dropout when train.twin_dropout > 0; with
    "no class" at a minibatch's outliers, of the ``outliers`` section's weight, as the Bayesian
    network's), evaluated in eval mode (MC dropout's sampling is ``bnn_zoo.posterior``'s); its steps,
    as the Bayesian network's, without argument validation."""

    label = "twin"
    per_example = 1.0
    sampled = False

    def __init__(self, networks: Networks, t: TrainConfig, num_data: int, device, path: Path | None = None,
                 outliers: OutliersConfig = OutliersConfig()):
        self.twin = build_twin(networks, device)
        self.outlier_weight = outliers.weight
        self.path, self.epochs, self.lr = path, planned_epochs(t, num_data, twin=True), t.twin_lr or t.lr

    def parameters(self) -> list[torch.Tensor]:
        return list(self.twin.parameters())

    def modules(self) -> list[torch.nn.Module]:
        return [self.twin]

    def loss(self, x: torch.Tensor, y: torch.Tensor, outliers: torch.Tensor | None = None) -> torch.Tensor:
        return self.twin.loss(x, y, outliers, self.outlier_weight)

    def updating(self, optimizer: torch.optim.Optimizer) -> None:
        return None  # the loop's step: the plain network's backward is all of it

    def end_epoch(self, record: dict, mean) -> None:
        pass  # the loop's loss is the whole story

    @torch.no_grad()
    def metrics(self, data: TensorSet, samples: int) -> dict:
        with evaluating(self.twin):
            return self.twin.likelihood.metrics(self.twin(data.x).unsqueeze(0), data.y)

    def state(self) -> dict:
        return {"net": self.twin.state_dict()}

    def restore(self, stored: dict) -> None:
        self.twin.load_state_dict(stored["net"])

    def stepping(self):
        return pyro.validation_enabled(False)  # its check of the likelihood's arguments reads them on the host
