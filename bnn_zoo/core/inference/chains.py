"""Several NUTS chains over a Bayesian network's weights, one after another in this process, each
from its own initialization and seed, and whether they agree where it matters: the R-hat and
effective sample size of the predictive (a network's weights have symmetric copies, so the chains
may disagree on every weight and still describe the same function).

Usage::

    chains = nuts_chains(model, x, y, chains=4, num_samples=200, warmup_steps=200)
    probs = torch.stack([predict(model, s, x_test, None) for s in chains.samples])   # [4, S, N, C]
    max_r_hat, min_ess = predictive_convergence(probs)
    share = (predictive_r_hats(probs) <= 1.05).double().mean()   # of the entries that move
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from ..networks.bnn import BayesianNet
from .predictive import seeded


@dataclass(frozen=True)
class Chain:
    """What one chain did: its seed, seconds, acceptance rate and divergent transitions."""

    seed: int
    seconds: float
    acceptance_rate: float
    divergences: int


@dataclass(frozen=True)
class Chains:
    """Each chain's weight samples {site: [S, *shape]} (a posterior ``predict`` takes), and what it did."""

    samples: list[dict[str, torch.Tensor]]
    runs: list[Chain]
    num_samples: int
    warmup_steps: int
    max_tree_depth: int

    @property
    def seconds(self) -> float:
        return sum(run.seconds for run in self.runs)

    def pooled(self) -> dict[str, torch.Tensor]:
        """Every chain's samples as one posterior, {site: [chains x S, *shape]}."""
        return {name: torch.cat([s[name] for s in self.samples]) for name in self.samples[0]}


def fresh_start(model: BayesianNet, seed: int) -> dict[str, torch.Tensor]:
    """Initial weights {site: value} as the plain network draws them under ``seed``: its layers'
    own ``reset_parameters``; a weight of a layer without one keeps the network's initial value."""
    start = {site: value.to(model.device) for site, value in model.init_values.items()}
    with seeded(seed, model.device):
        net = copy.deepcopy(model.skeleton).to_empty(device=model.device)
        for prefix, module in net.named_modules():
            if callable(getattr(module, "reset_parameters", None)):
                module.reset_parameters()
                start.update({f"net.{prefix}.{name}" if prefix else f"net.{name}": value.detach()
                              for name, value in module.named_parameters(recurse=False)})
    return start

def nuts_chains(model: BayesianNet, x: torch.Tensor, y: torch.Tensor, chains: int = 4, num_samples: int = 200,
                warmup_steps: int = 200, max_tree_depth: int = 8, target_accept: float = 0.8, seed: int = 0,
                progress: bool = False) -> Chains:
    """``chains`` NUTS chains on the full data (x, y), one after another: chain c draws from seed
    ``seed + c`` and starts at the plain network's initialization under that seed (chain 0 at the
    model's own, where ``nuts_posterior`` starts). The caller's random streams are left as they were."""
    if chains < 1 or num_samples < 1 or warmup_steps < 0:
        raise ValueError(f"need at least one chain of at least one sample, got {chains} chains of {num_samples} "
                         f"after {warmup_steps} warm-up steps")
    samples, runs = [], []
    for c in range(chains):
        start = ({k: v.to(model.device) for k, v in model.init_values.items()} if c == 0 else
                 fresh_start(model, seed + c))
        kernel = NUTS(model, max_tree_depth=max_tree_depth, target_accept_prob=target_accept,
                      init_strategy=init_to_value(values=start))
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=not progress)
        began = time.perf_counter()
        with seeded(seed + c, model.device):
            mcmc.run(x, y)
        diagnostics = mcmc.diagnostics()
        samples.append({name: value.detach() for name, value in mcmc.get_samples().items()})
        runs.append(Chain(seed + c, time.perf_counter() - began, float(diagnostics["acceptance rate"]["chain 0"]),
                          len(diagnostics["divergences"]["chain 0"])))
    return Chains(samples, runs, num_samples, warmup_steps, max_tree_depth)


def predictive_convergence(values: torch.Tensor) -> tuple[float, float]:
    """(largest split R-hat, smallest effective sample size) over the entries of a predictive
    quantity ``values`` [chains, S, ...] (each input's class probabilities, a regression's mean):
    R-hat near 1 where the chains agree. An entry at one value in every sample of every chain (a
    probability at 0) is left out; chains each stuck at a value of its own give R-hat inf."""
    r_hat, moving = _split_r_hat(values)
    if not moving.shape[-1]:
        return 1.0, float("inf")
    # only those: Pyro's effective sample size spreads one entry's NaN over all (its _cummin's max)
    ess = effective_sample_size(moving, chain_dim=0, sample_dim=1)
    return float(r_hat.max()), float(ess.nan_to_num(0.0).min())


def predictive_r_hats(values: torch.Tensor) -> torch.Tensor:
    """The split R-hat of each entry of ``values`` [chains, S, ...] that moves (as
    ``predictive_convergence`` reads them), to say how many entries mix, not only the worst."""
    return _split_r_hat(values)[0]


def _split_r_hat(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if values.dim() < 2 or values.shape[1] < 4:
        raise ValueError(f"R-hat splits each chain in two halves: give [chains, S >= 4, ...], got {list(values.shape)}")
    values = values.double().flatten(2) if values.dim() > 2 else values.double().unsqueeze(-1)
    moving = values[..., values.flatten(0, 1).std(0) > 0]  # [chains, S, entries not all one value]
    if not moving.shape[-1]:
        return torch.ones(0, dtype=torch.float64), moving
    r_hat = split_gelman_rubin(moving, chain_dim=0, sample_dim=1)
    return r_hat.nan_to_num(float("inf"), posinf=float("inf")), moving
