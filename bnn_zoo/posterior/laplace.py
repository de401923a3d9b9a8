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

import torch
import torch.nn.functional as F
from torch import nn

from ..abstain.density import features, last_linear
from ..core.likelihoods import Categorical
from ..core.predictive import evaluating
from .base import register
from .sampled_weights import WeightSampler

PRIOR_PRECISIONS = torch.logspace(-2, 6, 17).tolist()  # the grid the prior precision is chosen on


def choose_prior_precision(posterior: "WeightSampler", x: torch.Tensor, y: torch.Tensor, samples: int = 10) -> float:
    """The prior precision on PRIOR_PRECISIONS whose posterior predicts the held-out ``x``, ``y``
    best (the least NLL of the predictive mean, each on the same draws), set on ``posterior``."""
    losses = []
    for precision in PRIOR_PRECISIONS:
        posterior.prior_precision = precision
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            mean = posterior.predict(x, samples).mean(0)
        losses.append(-mean.gather(1, y[:, None].to(mean.device)).clamp_min(1e-12).log().mean().item())
    posterior.prior_precision = PRIOR_PRECISIONS[min(range(len(losses)), key=losses.__getitem__)]
    posterior.label = f"{posterior.label_text} (prior precision {posterior.prior_precision:.3g})"
    return posterior.prior_precision


def _check_categorical(twin) -> None:
    if not isinstance(twin.likelihood, Categorical):
        raise ValueError("the Laplace posteriors here are for classifiers (a categorical likelihood)")


@register
class LastLayerLaplace(WeightSampler):
    """A Gaussian over the last ``nn.Linear``'s weights and bias, the rest at the twin's."""

    name, title, fitted, held_out = "laplace_last_layer", "last-layer Laplace", True, True

    label_text = "last-layer Laplace"

    def __init__(self, twin, mean: torch.Tensor, eigenvalues: torch.Tensor, eigenvectors: torch.Tensor,
                 prior_precision: float):
        super().__init__(twin)
        self.layer = last_linear(twin.net)
        self.mean, self.eigenvalues, self.eigenvectors = mean, eigenvalues, eigenvectors
        self.prior_precision = prior_precision
        self.label = f"{self.label_text} (prior precision {prior_precision:.3g})"

    @classmethod
    @torch.no_grad()
    def fit(cls, twin, x: torch.Tensor, y: torch.Tensor, x_held: torch.Tensor, y_held: torch.Tensor,
            batch_size: int = 1000) -> "LastLayerLaplace":
        """The curvature of the categorical likelihood in the last layer: sum over inputs of
        (diag(p) - p p^T) kron (phi phi^T), phi the input's features with a 1 for the bias."""
        _check_categorical(twin)
        layer = last_linear(twin.net)
        with evaluating(twin):
            phi = features(twin.net, twin.net, x, batch_size)
        phi = torch.cat([phi, torch.ones(len(phi), 1, dtype=phi.dtype, device=phi.device)], 1).double()
        weights = torch.cat([layer.weight, layer.bias[:, None]], 1).double()  # [C, D + 1]
        classes, width = weights.shape
        curvature = torch.zeros(classes * width, classes * width, dtype=torch.float64, device=x.device)
        for part in phi.split(batch_size):
            p = (part @ weights.T).softmax(-1)  # [B, C]
            for c in range(classes):  # diag(p) kron phi phi^T: block c
                block = slice(c * width, (c + 1) * width)
                curvature[block, block] += (part * p[:, c:c + 1]).T @ part
            jacobian = (p[:, :, None] * part[:, None, :]).reshape(len(part), -1)  # p kron phi
            curvature -= jacobian.T @ jacobian
        eigenvalues, eigenvectors = torch.linalg.eigh(curvature)
        eigenvalues = eigenvalues.clamp_min(0)
        found = cls(twin, weights.flatten().float(), eigenvalues.float(), eigenvectors.float(), 1.0)
        choose_prior_precision(found, x_held, y_held)
        return found

    def draw(self, n: int) -> dict[str, torch.Tensor]:
        z = torch.randn(n, len(self.mean), device=self.mean.device)
        scaled = z / (self.eigenvalues + self.prior_precision).sqrt()
        flat = self.mean + scaled @ self.eigenvectors.T
        weights = flat.reshape(n, self.layer.out_features, self.layer.in_features + 1)
        name = self.parameter_name(self.layer)
        return {f"{name}.weight": weights[..., :-1], f"{name}.bias": weights[..., -1]}

    def state(self) -> dict:
        return {"mean": self.mean, "eigenvalues": self.eigenvalues, "eigenvectors": self.eigenvectors,
                "prior_precision": self.prior_precision}

    @classmethod
    def from_state(cls, twin, state: dict) -> "LastLayerLaplace":
        return cls(twin, state["mean"], state["eigenvalues"], state["eigenvectors"], float(state["prior_precision"]))

    @property
    def parameters_stored(self) -> int:
        return sum(p.numel() for p in self.twin.parameters()) + self.eigenvectors.numel() + self.eigenvalues.numel()


def _kfac_layers(net: nn.Module) -> list[nn.Module]:
    layers = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d)) and m.bias is not None]
    if not layers:
        raise ValueError("K-FAC Laplace reads nn.Linear and nn.Conv2d layers with biases; this network has none")
    return layers


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
        found = cls(twin, factors, count, 1.0)
        choose_prior_precision(found, x_held, y_held)
        return found

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
        return cls(twin, state["factors"], int(state["count"]), float(state["prior_precision"]))

    @property
    def parameters_stored(self) -> int:
        return sum(t.numel() for f in self.factors.values() for t in f.values()) + \
            sum(p.numel() for p in self.twin.parameters())
