"""How far one predictive is from another, as the NeurIPS 2021 competition "Approximate Inference in
Bayesian Deep Learning" scored entries against HMC (its starter kit's ``metrics.py``): for
classification, top-1 agreement (the share of inputs where the two predictive distributions'
most probable classes are the same) and total variation (half the L1 distance between them,
averaged over inputs); for regression, the 1-Wasserstein distance between the two sets of
predictive draws at each input, averaged over inputs, as ``scipy.stats.wasserstein_distance``
computes it. And the noise floor: the same distances between HMC's own chains, averaged over pairs,
and from each chain to the pool of the others.

Usage::

    agreement(approx, hmc), total_variation(approx, hmc)     # [N, C] predictive distributions
    wasserstein_1(draws, hmc_draws)                           # [S, N] and [S', N] draws at each input
"""
from __future__ import annotations

from itertools import combinations

import torch

HELD_OUT = "held_out_"  # a floor's figures from each chain to the pool of the others


def _distributions(p: torch.Tensor, q: torch.Tensor) -> None:
    if p.dim() != 2 or p.shape != q.shape:
        raise ValueError(f"compare two predictive distributions [N, C] over the same inputs and classes, got "
                         f"{list(p.shape)} and {list(q.shape)}")


def agreement(p: torch.Tensor, q: torch.Tensor) -> float:
    """The share of inputs whose most probable class is the same under p and q [N, C]."""
    _distributions(p, q)
    return float((p.argmax(-1) == q.argmax(-1)).double().mean())


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """Half the L1 distance between p and q [N, C] at each input, averaged over the inputs: 0 for the
    same distribution, 1 for distributions with no class in common."""
    _distributions(p, q)
    return float((p.double() - q.double()).abs().sum(-1).mean() / 2)


def wasserstein_1(a: torch.Tensor, b: torch.Tensor) -> float:
    """The 1-Wasserstein distance between the empirical distributions of draws ``a`` [S, N] and
    ``b`` [S', N] at each of the N inputs (the area between their CDFs, as
    ``scipy.stats.wasserstein_distance`` computes it, S and S' may differ), averaged over inputs."""
    return float(wasserstein_1_each(a, b).mean())


def wasserstein_1_each(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[N]: ``wasserstein_1`` at each input."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or not (len(a) and len(b)):
        raise ValueError(f"compare draws [S, N] and [S', N] at the same N inputs, got {list(a.shape)} and "
                         f"{list(b.shape)}")
    u, v = a.double().T.sort(-1).values, b.double().T.sort(-1).values  # [N, S], [N, S']
    values = torch.cat([u, v], -1).sort(-1).values
    deltas = values.diff(dim=-1)
    at = values[:, :-1].contiguous()
    u, v = u.contiguous(), v.contiguous()
    u_cdf = torch.searchsorted(u, at, right=True).double() / u.shape[-1]
    v_cdf = torch.searchsorted(v, at, right=True).double() / v.shape[-1]
    return ((u_cdf - v_cdf).abs() * deltas).sum(-1)


def predictive_draws(outputs: torch.Tensor, count: int = 1000, seed: int = 0) -> torch.Tensor:
    """[count, N]: draws of y at each input from the mixture of a regression's predictive samples,
    (mean, noise sd) outputs [S, N, 2] (``bnn_zoo.predict``'s): the samples taken evenly (each about
    count / S times), a standard normal each from ``seed``. 1,000, as the competition asked for."""
    if outputs.dim() != 3 or outputs.shape[-1] != 2:
        raise ValueError(f"a regression's predictive is [S, N, 2] (mean, noise sd), got {list(outputs.shape)}")
    rows = torch.arange(count) * len(outputs) // count
    noise = torch.randn(count, outputs.shape[1], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    loc, scale = outputs.double().cpu()[rows].unbind(-1)
    return loc + scale * noise


def chain_floor(per_chain: list[torch.Tensor], regression: bool) -> dict[str, float]:
    """How far HMC's chains are from one another: each pair's distance averaged over the pairs
    (``agreement``, ``total_variation``, or ``w1``), and each chain's distance to the pool of the
    others, averaged over the chains (the same names after ``held_out_``): a rung scored against the
    pool of every chain is as close as HMC can tell where it is as close as a chain is to the rest.
    ``per_chain`` holds each chain's predictive distribution [N, C] or its draws [S, N]."""
    if len(per_chain) < 2:
        raise ValueError(f"the floor compares chains with one another: give at least two, got {len(per_chain)}")
    pairs = list(combinations(per_chain, 2))
    rest = [(chain, _pooled([other for j, other in enumerate(per_chain) if j != i], regression))
            for i, chain in enumerate(per_chain)]
    metrics = {"w1": wasserstein_1} if regression else {"agreement": agreement, "total_variation": total_variation}
    floor = {name: sum(metric(a, b) for a, b in pairs) / len(pairs) for name, metric in metrics.items()}
    floor.update({f"{HELD_OUT}{name}": sum(metric(a, b) for a, b in rest) / len(rest)
                  for name, metric in metrics.items()})
    return floor


def floor_prefix(floor: dict[str, float]) -> str:
    """Which of a ``chain_floor`` a distance is measured against: each chain to the others' pool
    (``HELD_OUT``), where it is recorded; chain to chain ("") in a reference kept from before."""
    return HELD_OUT if any(key.startswith(HELD_OUT) for key in floor) else ""


def _pooled(chains: list[torch.Tensor], regression: bool) -> torch.Tensor:
    """Chains as one: their draws together, or the mean of their predictive distributions."""
    return torch.cat(chains) if regression else torch.stack(chains).mean(0)
