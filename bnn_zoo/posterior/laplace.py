"""Laplace's approximation around the twin's weights (MacKay 1992; Daxberger et al. 2021, "Laplace
Redux"): a Gaussian posterior whose precision is the likelihood's curvature (its generalized
Gauss-Newton matrix, the Fisher for these likelihoods) plus the prior's, the prior precision chosen
where the posterior predicts held-out validation inputs best (the first fifth of them, which
certification leaves out, as it does the temperature's).

``LastLayerLaplace``: the last ``nn.Linear`` alone, its full curvature. ``KFACLaplace``: every
``nn.Linear`` and ``nn.Conv2d``, each layer's curvature Kronecker-factored (K-FAC: Martens & Grosse
2015; Grosse & Martens 2016 for convolutions), its Fisher sampled with one label per input. Both
fit after training from the twin alone, on the training data, with no gradient step.

Usage::

    laplace = KFACLaplace.fit(trained.twin, x_train, y_train, x_held, y_held)
    probs = laplace.predict(x, num_samples=100)      # [100, N, C]
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..abstain.density import features, last_linear
from ..core.networks.likelihoods import Categorical
from ..core.inference.inputs import evaluating
from .base import register, state_number, state_tensor
from .sampled_weights import WeightSampler

PRIOR_PRECISIONS = [10 ** (k / 2) for k in range(-4, 13)]  # the grid the prior precision is chosen on: 0.01 .. 1e6


def choose_prior_precision(posterior: Callable[[float], WeightSampler], x: torch.Tensor, y: torch.Tensor,
                           samples: int = 10) -> WeightSampler:
    """The posterior (``posterior(precision)``) of the prior precision on PRIOR_PRECISIONS that
    predicts the held-out ``x``, ``y`` best (the least NLL of the predictive mean, each on the same
    draws)."""
    best, least = None, math.inf
    for precision in PRIOR_PRECISIONS:
        found = posterior(precision)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            mean = found.predict(x, samples).mean(0)
        loss = -mean.gather(1, y[:, None].to(mean.device)).clamp_min(1e-12).log().mean().item()
        if best is None or loss < least:
            best, least = found, loss
    return best


def _not_a_classifier(twin) -> str | None:
    if not isinstance(twin.likelihood, Categorical):
        return "fits a classifier's categorical likelihood, and this run regresses (a Gaussian likelihood)"
    return None


def _check_categorical(twin) -> None:
    if _not_a_classifier(twin):
        raise ValueError("the Laplace posteriors here are for classifiers (a categorical likelihood)")


def last_layer_curvature(phi: torch.Tensor, weights: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    """[P, P], P = C x width: the summed categorical NLL's Hessian in the last layer's weights
    ``weights`` [C, width] (its generalized Gauss-Newton matrix: the logits are linear in them),
    flattened class by class, ``phi`` [N, width] its inputs (a 1 for the bias where it has one):
    sum over inputs of (diag(p) - p p^T) kron phi phi^T, p = softmax(phi W^T). Block (c, d) is
    phi^T diag(p_c [c = d] - p_c p_d) phi: each pair of classes once, a matrix product each."""
    classes, width = weights.shape
    hessian = torch.zeros(classes * width, classes * width, dtype=phi.dtype, device=phi.device)
    block = [slice(c * width, (c + 1) * width) for c in range(classes)]
    for part in phi.split(batch_size):
        p = (part @ weights.T).softmax(-1)  # [B, C]
        scaled = [part * p[:, c:c + 1] for c in range(classes)]  # diag(p_c) phi
        for c in range(classes):
            hessian[block[c], block[c]] += scaled[c].T @ (part - scaled[c])
            for d in range(c + 1, classes):
                hessian[block[c], block[d]] -= scaled[c].T @ scaled[d]
    for c in range(classes):
        for d in range(c + 1, classes):
            hessian[block[d], block[c]] = hessian[block[c], block[d]].T
    return hessian


def _with_bias(layer: nn.Linear, values: torch.Tensor) -> torch.Tensor:
    """``values`` [N, in] with a column of ones appended where ``layer`` has a bias."""
    if layer.bias is None:
        return values
    return torch.cat([values, torch.ones(len(values), 1, dtype=values.dtype, device=values.device)], 1)


@register
class LastLayerLaplace(WeightSampler):
    """A Gaussian over the last ``nn.Linear``'s weights (and bias, where it has one), the rest at
    the twin's; its precision, the curvature plus the prior's, kept as its Cholesky factor L (a
    draw: mean + L^-T z)."""

    name, title, fitted, held_out = "laplace_last_layer", "last-layer Laplace", True, True

    label_text = "last-layer Laplace"

    def __init__(self, twin, mean: torch.Tensor, factor: torch.Tensor, prior_precision: float):
        super().__init__(twin)
        self.layer = last_linear(twin.net)
        self.mean, self.factor, self.prior_precision = mean, factor, prior_precision
        self.label = f"{self.label_text} (prior precision {prior_precision:.3g})"

    @classmethod
    def cannot_fit(cls, twin, num_data: int) -> str | None:
        if not any(isinstance(m, nn.Linear) for m in twin.net.modules()):
            return "reads the network's last nn.Linear, and this network has none"
        return _not_a_classifier(twin)

    @classmethod
    @torch.no_grad()
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held: torch.Tensor, y_held: torch.Tensor,
            batch_size: int = 1000) -> "LastLayerLaplace":
        """The curvature in the last layer (``last_layer_curvature``, in float64), and the prior
        precision on PRIOR_PRECISIONS whose posterior predicts the held-out inputs best, each
        posterior's precision factored once (a Cholesky factor, where an eigendecomposition would
        cost a 4,010-weight layer a minute on a CPU)."""
        _check_categorical(twin)
        layer = last_linear(twin.net)
        with evaluating(twin):
            phi = _with_bias(layer, features(twin.net, twin.net, x, batch_size)).double()
        weights = (layer.weight if layer.bias is None else torch.cat([layer.weight, layer.bias[:, None]], 1)).double()
        curvature = last_layer_curvature(phi, weights, batch_size)
        diagonal, mean = curvature.diagonal().clone(), weights.flatten().float()

        def posterior(precision: float) -> "LastLayerLaplace":
            curvature.diagonal().copy_(diagonal + precision)  # the posterior's precision, in place
            return cls(twin, mean, torch.linalg.cholesky(curvature), precision)

        found = choose_prior_precision(posterior, x_held, y_held)
        found.factor = found.factor.float()  # kept as the mean is
        return found

    def draw(self, n: int) -> dict[str, torch.Tensor]:
        z = torch.randn(n, len(self.mean), device=self.mean.device, dtype=self.factor.dtype)
        flat = self.mean + torch.linalg.solve_triangular(self.factor, z, upper=False, left=False).to(self.mean.dtype)
        weights = flat.reshape(n, self.layer.out_features, -1)
        name = self.parameter_name(self.layer)
        drawn = {f"{name}.weight": weights[..., :self.layer.in_features]}
        if self.layer.bias is not None:
            drawn[f"{name}.bias"] = weights[..., -1]
        return drawn

    def state(self) -> dict:
        return {"mean": self.mean, "factor": self.factor, "prior_precision": self.prior_precision}

    @classmethod
    def from_state(cls, twin, state: dict) -> "LastLayerLaplace":
        layer = last_linear(twin.net)
        size = layer.out_features * (layer.in_features + (layer.bias is not None))
        factor = state_tensor(state, "factor", (size, size))
        if not bool((factor.diagonal() > 0).all()) or bool(factor.triu(1).any()):
            raise ValueError("its 'factor' is no Cholesky factor (a lower triangle with a positive diagonal)")
        return cls(twin, state_tensor(state, "mean", (size,)), factor, float(state_number(state, "prior_precision")))

    @property
    def parameters_stored(self) -> int:
        return sum(p.numel() for p in self.twin.parameters()) + self.mean.numel() + self.factor.numel()


def _kfac_layers(net: nn.Module) -> list[nn.Module]:
    layers = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d)) and m.bias is not None]
    if not layers:
        raise ValueError("K-FAC Laplace reads nn.Linear and nn.Conv2d layers with biases; this network has none")
    return layers


def _fan_in(layer: nn.Module) -> int:
    """The inputs of one of the layer's outputs, with its bias's 1: the rows of K-FAC's A factor."""
    return layer.weight[0].numel() + 1


def _inputs(layer: nn.Module, a: torch.Tensor) -> torch.Tensor:
    """A layer's inputs as rows [positions, fan-in + 1]: a convolution's patches (each position a
    row), a 1 appended for the bias."""
    if isinstance(layer, nn.Conv2d):
        a = F.unfold(a, layer.kernel_size, layer.dilation, layer.padding, layer.stride)  # [B, fan-in, L]
        a = a.transpose(1, 2).reshape(-1, a.shape[1])
    return torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype, device=a.device)], 1)


@register
class KFACLaplace(WeightSampler):
    """A Gaussian over every linear and convolutional layer's weights and bias, each layer's
    precision N (A kron G) + l I: A the second moment of its inputs, G of the gradients at its
    outputs under labels the network draws itself."""

    name, title, fitted, held_out = "laplace_kfac", "K-FAC Laplace", True, True

    label_text = "K-FAC Laplace"

    def __init__(self, twin, factors: dict[str, dict], count: int, prior_precision: float):
        super().__init__(twin)
        self.factors, self.count, self.prior_precision = factors, count, prior_precision
        self.layers = {self.parameter_name(m): m for m in _kfac_layers(twin.net)}
        self.label = f"{self.label_text} (prior precision {prior_precision:.3g})"

    @classmethod
    def cannot_fit(cls, twin, num_data: int) -> str | None:
        if not any(isinstance(m, (nn.Linear, nn.Conv2d)) and m.bias is not None for m in twin.net.modules()):
            return "reads nn.Linear and nn.Conv2d layers with biases, and this network has none"
        return _not_a_classifier(twin)

    @classmethod
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held: torch.Tensor, y_held: torch.Tensor,
            batch_size: int = 500, seed: int = 0) -> "KFACLaplace":
        _check_categorical(twin)
        layers = _kfac_layers(twin.net)
        moments = {id(m): [0.0, 0.0] for m in layers}
        inputs: dict[int, torch.Tensor] = {}
        hooks = [m.register_forward_pre_hook(lambda m, args: inputs.__setitem__(id(m), args[0].detach())) for m in layers]
        outputs: dict[int, torch.Tensor] = {}

        def keep_gradient(m, args, out) -> None:  # the gradient at the layer's output, once backward reaches it
            out.register_hook(lambda g: outputs.__setitem__(id(m), g.detach()))

        hooks += [m.register_forward_hook(keep_gradient) for m in layers]
        generator = torch.Generator(device=x.device).manual_seed(seed)
        try:
            with evaluating(twin), torch.enable_grad():
                for xb in x.split(batch_size):
                    logits = twin.net(xb)
                    drawn = torch.multinomial(logits.detach().softmax(-1), 1, generator=generator)[:, 0]
                    twin.net.zero_grad(set_to_none=True)
                    F.cross_entropy(logits, drawn, reduction="sum").backward()
                    for m in layers:
                        a = _inputs(m, inputs[id(m)]).double()
                        g = outputs[id(m)].double()
                        positions = 1
                        if isinstance(m, nn.Conv2d):
                            positions = g.shape[2] * g.shape[3]
                            g = g.flatten(2).transpose(1, 2).reshape(-1, g.shape[1])
                        moments[id(m)][0] += a.T @ a / positions
                        moments[id(m)][1] += g.T @ g
        finally:
            for hook in hooks:
                hook.remove()
            twin.net.zero_grad(set_to_none=True)
        count, factors = len(x), {}
        for m in layers:
            a_values, a_vectors = torch.linalg.eigh(moments[id(m)][0] / count)
            g_values, g_vectors = torch.linalg.eigh(moments[id(m)][1] / count)
            factors[cls.parameter_name_of(twin, m)] = {
                "mean": torch.cat([m.weight.detach().flatten(1), m.bias.detach()[:, None]], 1),
                "a_values": a_values.clamp_min(0).float(), "a_vectors": a_vectors.float(),
                "g_values": g_values.clamp_min(0).float(), "g_vectors": g_vectors.float()}
        return choose_prior_precision(lambda precision: cls(twin, factors, count, precision), x_held, y_held)

    def draw(self, n: int) -> dict[str, torch.Tensor]:
        weights = {}
        for name, f in self.factors.items():
            layer = self.layers[name]
            spread = (self.count * f["g_values"][:, None] * f["a_values"][None] + self.prior_precision).rsqrt()
            z = torch.randn(n, *spread.shape, device=spread.device) * spread
            w = f["mean"] + f["g_vectors"] @ z @ f["a_vectors"].T  # [n, out, fan-in + 1]
            weights[f"{name}.weight"] = w[..., :-1].reshape(n, *layer.weight.shape)
            weights[f"{name}.bias"] = w[..., -1]
        return weights

    def state(self) -> dict:
        return {"factors": self.factors, "count": self.count, "prior_precision": self.prior_precision}

    @classmethod
    def from_state(cls, twin, state: dict) -> "KFACLaplace":
        layers = {cls.parameter_name_of(twin, m): m for m in _kfac_layers(twin.net)}
        factors = state.get("factors") if isinstance(state, dict) else None
        if not isinstance(factors, dict) or set(factors) != set(layers):
            raise ValueError(f"its 'factors' are not a mapping of this network's layers {', '.join(layers)} to "
                             "their factors")
        for name, layer in layers.items():
            out, fan_in = layer.weight.shape[0], _fan_in(layer)
            try:
                for key, shape in (("mean", (out, fan_in)), ("a_vectors", (fan_in, fan_in)), ("g_vectors", (out, out))):
                    state_tensor(factors[name], key, shape)
                state_tensor(factors[name], "a_values", (fan_in,), least=0)
                state_tensor(factors[name], "g_values", (out,), least=0)
            except ValueError as err:
                raise ValueError(f"layer {name}: {err}") from None
        return cls(twin, factors, int(state_number(state, "count", whole=True)),
                   float(state_number(state, "prior_precision")))

    @property
    def parameters_stored(self) -> int:
        return sum(t.numel() for f in self.factors.values() for t in f.values()) + \
            sum(p.numel() for p in self.twin.parameters())
