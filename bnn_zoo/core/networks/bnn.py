"""Any PyTorch network made Bayesian: its weights become Pyro sample sites (``PyroSample``) with a
prior, a likelihood explains the data, and the network itself stays plain PyTorch, run on the
sampled weights by ``torch.func.functional_call``. The model vectorizes over leading sample
dimensions of its weights, so ``Predictive(parallel=True)`` and vectorized particles work.

Usage::

    model, guide = bayesian(MyNet(), likelihood="categorical", num_data=60000)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
"""
from __future__ import annotations

import copy
from operator import attrgetter
from typing import Optional, Union

import torch
from pyro.infer.autoguide.initialization import init_to_feasible
from pyro.nn import PyroModule, PyroSample
from pyro.nn.module import to_pyro_module_
from torch import nn
from torch.func import functional_call, vmap

from .guides import make_guide
from .likelihoods import Likelihood, check_num_data, make_likelihood
from .priors import GaussianPrior

# Layers whose parameters stay point estimates (no prior), as is usual for normalization layers:
# trained by the optimizer like the guide's parameters. Their buffers (BatchNorm's running mean and
# variance) are updated in train mode from each minibatch, under the sampled weights, and used
# in eval mode.
NORMALIZATION = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)


class WeightPrior:
    """The prior of one weight tensor: ``prior(shape)``, as a picklable ``PyroSample`` callable."""

    def __init__(self, prior: nn.Module, shape: torch.Size):
        self.prior, self.shape = prior, shape

    def __call__(self, _module: nn.Module):
        return self.prior(self.shape)


class BayesianNet(PyroModule):
    """A plain network whose weights are latent variables: the model of a (model, guide) pair.

    ``model.net`` holds the weights as ``PyroSample`` sites named ``net.<parameter name>`` (the
    parameters of ``point_estimates`` layers stay ``nn.Parameter``s, and buffers stay buffers);
    ``model.prior`` maps a weight's shape to its prior; ``model.likelihood`` owns the data plate
    and the ``obs`` site. ``model(x, y)`` returns the likelihood's ``returned`` output (logits, or
    a regression's mean).

    Usage: ``model = BayesianNet(MLP(1, [50], 1), Gaussian(num_data=6), GaussianPrior(1.0))``
    """

    # The shape of one input the network takes (x.shape[1:]): its recipe's (``bnn_zoo.build``), or
    # that of the inputs the model last ran on (its guide's first trace, training); None until then.
    input_shape: Optional[tuple[int, ...]] = None

    def __init__(self, net: nn.Module, likelihood: Likelihood, prior: Optional[nn.Module] = None,
                 point_estimates: tuple[type[nn.Module], ...] = NORMALIZATION):
        super().__init__()
        self.prior = prior if prior is not None else GaussianPrior()
        self.likelihood = likelihood
        # A meta-device copy runs the computation; every tensor comes from model.net. It is kept out
        # of the module tree, so it is neither saved nor moved.
        self.__dict__["_skeleton"] = copy.deepcopy(net).to("meta")
        net = copy.deepcopy(net)
        self.weight_shapes = {name: p.shape for name, p in net.named_parameters()}
        # The plain network's own initialization is where the posterior means start.
        self.init_values = {f"net.{n}": p.detach().clone() for n, p in net.named_parameters()}
        to_pyro_module_(net)
        self.sampled = {}  # {parameter name: shape} of the weights that are sample sites (net.<name>)
        for prefix, module in net.named_modules():
            if isinstance(module, point_estimates):
                continue
            for name, param in list(module.named_parameters(recurse=False)):
                delattr(module, name)
                setattr(module, name, PyroSample(WeightPrior(self.prior, param.shape)))
                self.sampled[f"{prefix}.{name}" if prefix else name] = param.shape
        self.net = net

    @property
    def device(self) -> torch.device:
        """Where the model's tensors (prior, likelihood, buffers) live."""
        return next(t.device for t in (*self.buffers(), *self.parameters()))

    @property
    def skeleton(self) -> nn.Module:
        """The meta-device copy of the network that ``forward_with`` runs: a hook on one of its
        layers sees that layer's tensors in every pass (``bnn_zoo.abstain.density.features``)."""
        return self._skeleton

    @property
    def hyperparameters(self) -> dict[str, float]:
        """The prior's and the noise model's current hyperparameters, e.g. {"prior/scale": 1.0}."""
        with torch.no_grad():
            return {**{f"prior/{k}": v for k, v in getattr(self.prior, "hyperparameters", {}).items()},
                    **{f"noise/{k}": v for k, v in self.likelihood.hyperparameters.items()}}

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None, outliers: Optional[torch.Tensor] = None,
                outlier_weight: float = 1.0) -> torch.Tensor:
        """The likelihood of ``y`` at ``x`` under the drawn weights; with ``outliers`` [M, ...] (inputs
        that are none of the classes, ``bnn_zoo.data.shifted.outliers``), "no class" observed at them
        too (``Likelihood.no_class``, of weight ``outlier_weight``), the network run once on both."""
        weights = {name: attrgetter(name)(self.net) for name in self.weight_shapes}
        batch = self.batch_shape(weights)
        if batch and batch[-1] == 1:  # drawn under plates: the last batch dim is the data plate's
            weights = {n: w.expand(*batch, *self.weight_shapes[n]).reshape(*batch[:-1], *self.weight_shapes[n])
                       for n, w in weights.items()}
        if outliers is None:
            out = self.forward_with(weights, x)
        else:  # one pass over both, as outlier exposure takes it
            both = self.forward_with(weights, torch.cat([x, outliers]))
            at = len(self.batch_shape(weights))  # the inputs' dim of the outputs
            out, out_outliers = both.split([len(x), len(outliers)], dim=at)
            self.likelihood.no_class(out_outliers, outlier_weight)
        if x.shape[1:] != self.input_shape:
            self.input_shape = tuple(x.shape[1:])
        return self.likelihood(out, y)

    def batch_shape(self, weights: dict[str, torch.Tensor]) -> torch.Size:
        """The common leading shape of a set of weights (empty for a single draw)."""
        shapes = []
        for name, value in weights.items():
            shape = self.weight_shapes[name]
            if value.shape[value.dim() - len(shape):] != shape:
                raise ValueError(f"weight {name} has shape {tuple(value.shape)}; expected "
                                 f"[..., {', '.join(map(str, shape))}]")
            shapes.append(value.shape[:value.dim() - len(shape)])
        return torch.broadcast_shapes(*shapes)

    def forward_with(self, weights: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The plain network's output on ``x`` [N, ...] at ``weights`` ({parameter name: tensor}),
        each [*B, *shape] for a common batch shape B: [*B, N, *output]. Missing names (point
        estimates) and the buffers come from ``model.net``."""
        state = {name: attrgetter(name)(self.net) for name in self.weight_shapes if name not in weights}
        state.update(self.net.named_buffers())
        skeleton = self._skeleton.train(self.training)
        batch = self.batch_shape(weights)
        if not batch:
            return functional_call(skeleton, {**state, **weights}, (x,))
        flat = {n: w.expand(*batch, *self.weight_shapes[n]).reshape(-1, *self.weight_shapes[n])
                for n, w in weights.items()}
        out = vmap(lambda w: functional_call(skeleton, {**state, **w}, (x,)))(flat)
        return out.reshape(*batch, *out.shape[1:])

    def init_loc(self, site: dict) -> torch.Tensor:
        """An autoguide's ``init_loc_fn``: each weight starts at the plain network's initial value."""
        value = self.init_values.get(site["name"])
        if value is None:
            return init_to_feasible(site)
        return value.to(self.device)


def bayesian(net: nn.Module, prior: Optional[nn.Module] = None,
             likelihood: Union[Likelihood, str] = "categorical", num_data: Optional[int] = None,
             guide: str = "meanfield", init_scale: float = 0.01, rank: int = 10,
             point_estimates: tuple[type[nn.Module], ...] = NORMALIZATION):
    """Turn a plain network into a (model, guide) pair (the network itself is copied, not changed).

    ``prior`` defaults to ``GaussianPrior(1.0)``; ``likelihood`` is a ``Likelihood`` or the name of
    one (``categorical``, ``gaussian``); ``num_data`` is the training set's size, for the
    minibatch scaling; ``guide`` is ``meanfield`` (``DirectAutoNormal``), ``lowrank`` or ``delta``
    (MAP), see ``bnn_zoo.core.networks.guides``. Like any PyroModule, the pair runs with Pyro's global parameter
    store, and with ``module_local_params=True`` when built under that setting.

    Usage: ``model, guide = bayesian(resnet, likelihood=Categorical(), num_data=50000)``
    """
    if isinstance(likelihood, str):
        likelihood = make_likelihood(likelihood, num_data)
    elif num_data is not None:
        check_num_data(num_data)
        if likelihood.num_data not in (None, num_data):
            raise ValueError(f"num_data={num_data} contradicts the likelihood's num_data="
                             f"{likelihood.num_data}; give one of them")
        likelihood.num_data = num_data
    model = BayesianNet(net, likelihood, prior, point_estimates)
    return model, make_guide(model, guide, init_scale, rank)
