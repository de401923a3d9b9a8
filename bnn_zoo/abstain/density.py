"""A third uncertainty signal, from feature space: how unlike the training data an input's features
are (DDU, Mukhoti et al. 2023). A Gaussian per class is fitted to the penultimate features (the
input of the network's last ``nn.Linear``) of training inputs; an input's score is minus the log
density of that mixture, so higher means less familiar. It reads one point network: the twin, or
a Bayesian network at its posterior mean (``bnn_zoo.posterior``'s ``Posterior.point_network``).

Usage::

    density = FeatureDensity.fit(features(twin.net, twin.net, x_train), y_train)
    score = density.score(features(twin.net, twin.net, x))     # [N]; detection(score_in, score_ood)
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

DENSITY_INPUTS = 10000  # the training inputs a run's densities are fitted on (the first of its training split)
JITTERS = (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)  # times the mean variance, added until each covariance factors


def last_linear(net: nn.Module) -> nn.Linear:
    """The network's last ``nn.Linear`` (in module order): its input is the penultimate feature."""
    layers = [m for m in net.modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise ValueError(f"the feature density reads the input of a network's last nn.Linear; this "
                         f"{type(net).__name__} has none")
    return layers[-1]


@torch.no_grad()
def features(net: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
             batch_size: int = 1000) -> torch.Tensor:
    """[N, D]: the input of ``net``'s last ``nn.Linear`` (flattened) as ``forward(xb)`` runs over
    ``x`` in batches (``forward`` may run ``net`` itself or through ``torch.func.functional_call``)."""
    captured: list[torch.Tensor] = []
    handle = last_linear(net).register_forward_pre_hook(lambda _m, args: captured.append(args[0].flatten(1)))
    batches = x.split(batch_size)
    try:
        for xb in batches:
            forward(xb)
    finally:
        handle.remove()
    if len(captured) != len(batches):
        raise ValueError(f"the network's last nn.Linear ran {len(captured)} times for {len(batches)} batches: its "
                         "input is no single penultimate feature")
    return torch.cat(captured)


class FeatureDensity:
    """A Gaussian per class on features, mixed by the classes' shares of the fitting data."""

    def __init__(self, means: torch.Tensor, scale_tril: torch.Tensor, log_weights: torch.Tensor):
        self.gaussians = torch.distributions.MultivariateNormal(means, scale_tril=scale_tril)
        self.log_weights = log_weights

    @classmethod
    def fit(cls, feats: torch.Tensor, labels: torch.Tensor) -> "FeatureDensity":
        """Each class's mean and covariance (float64) of ``feats`` [N, D], with the smallest jitter
        on the diagonal that lets every covariance factor. Every class needs more inputs than one."""
        if feats.dim() != 2 or labels.shape != feats.shape[:1]:
            raise ValueError(f"need features [N, D] and one label per row; got {tuple(feats.shape)} and "
                             f"{tuple(labels.shape)}")
        feats, labels = feats.double(), labels.to(feats.device)
        classes, counts = labels.unique(return_counts=True)
        if len(classes) < 2 or counts.min() < 2:
            raise ValueError("the feature density needs at least two classes with two or more inputs each; "
                             f"got counts {dict(zip(classes.tolist(), counts.tolist()))}")
        if int(classes.max()) + 1 != len(classes):
            raise ValueError(f"every class 0..{int(classes.max())} needs inputs to fit its Gaussian; "
                             f"these labels hold only {classes.tolist()}: fit on more inputs")
        means = torch.stack([feats[labels == c].mean(0) for c in classes])
        covs = torch.stack([torch.cov((feats[labels == c] - means[i]).T, correction=1).reshape(
            feats.shape[1], feats.shape[1]) for i, c in enumerate(classes)])
        eye = torch.eye(feats.shape[1], dtype=feats.dtype, device=feats.device)
        scale = covs.diagonal(dim1=-2, dim2=-1).mean().clamp_min(1e-12)
        for jitter in JITTERS:
            tril, info = torch.linalg.cholesky_ex(covs + jitter * scale * eye)
            if not info.any():
                return cls(means, tril, (counts.double() / len(labels)).log())
        raise ValueError("the features' covariances do not factor even with a jitter of "
                         f"{JITTERS[-1]} times their mean variance: the features hold NaN or inf")

    def state(self) -> dict:
        """Its tensors, for a checkpoint (``from_state`` rebuilds it)."""
        return {"loc": self.gaussians.loc, "scale_tril": self.gaussians.scale_tril, "log_weights": self.log_weights}

    @classmethod
    def from_state(cls, state: dict) -> "FeatureDensity":
        return cls(state["loc"], state["scale_tril"], state["log_weights"])

    def score(self, feats: torch.Tensor) -> torch.Tensor:
        """[N]: minus the log density (nats) of each row of ``feats`` under the mixture."""
        log_probs = self.gaussians.log_prob(feats.double()[:, None, :]) + self.log_weights
        return -log_probs.logsumexp(1)

    @property
    def dimension(self) -> int:
        return self.gaussians.loc.shape[-1]

    def __repr__(self) -> str:
        return f"FeatureDensity({self.gaussians.loc.shape[0]} classes, {self.dimension} features)"
