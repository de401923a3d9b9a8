"""Several NUTS chains over a Bayesian network's weights, one after another in this process or side
by side in worker processes (CPU), each from its own initialization and seed, and whether they
agree where it matters: the R-hat and effective sample size of the predictive (a network's weights
have symmetric copies, so the chains may disagree on every weight and still describe the same
function).

Usage::

    chains = nuts_chains(model, x, y, chains=4, num_samples=200, warmup_steps=200)   # jobs=2: two at a time
    probs = torch.stack([predict(model, s, x_test, None) for s in chains.samples])   # [4, S, N, C]
    mixing = predictive_convergence(probs)
    mixing.max_r_hat, mixing.min_ess, mixing.share_at_most(1.05)   # the share: of the entries that move
"""
from __future__ import annotations

import copy
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from ..networks.bnn import BayesianNet
from .predictive import seeded

ESS_BYTES = 2 ** 28  # the most a chunk of entries' effective sample size holds at once (_min_ess)


@dataclass(frozen=True)
class Chain:
    """What one chain did: its seed, seconds, acceptance rate and divergent transitions."""

    seed: int
    seconds: float
    acceptance_rate: float
    divergences: int


Drawn = tuple[dict[str, torch.Tensor], Chain]  # one chain's samples {site: [S, *shape]} and what it did


@dataclass(frozen=True)
class Chains:
    """Each chain's weight samples {site: [S, *shape]} (a posterior ``predict`` takes), and what it did."""

    samples: list[dict[str, torch.Tensor]]
    runs: list[Chain]
    num_samples: int
    warmup_steps: int
    max_tree_depth: int
    wall_seconds: float  # from the first chain drawn to the last one's end (side by side: less than seconds; kept ones: none)

    @property
    def seconds(self) -> float:
        """The chains' seconds added up."""
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
                progress: bool = False, jobs: int = 1, drawn: Optional[dict[int, Drawn]] = None,
                on_chain: Optional[Callable[[int, dict[str, torch.Tensor], Chain], None]] = None) -> Chains:
    """``chains`` NUTS chains on the full data (x, y): chain c draws from seed ``seed + c`` and starts
    at the plain network's initialization under that seed (chain 0 at the model's own, where
    ``nuts_posterior`` starts). ``jobs`` > 1 runs that many at a time in worker processes (CPU only),
    each with this process's torch threads: the same samples as one after another. ``drawn`` holds
    chains already drawn by that recipe ({c: (samples, Chain)}, kept by the caller), which are not
    drawn again; ``on_chain(c, samples, run)`` hears of each chain drawn here as it ends, so a caller
    can keep it before the next one starts. The caller's random streams are left as they were."""
    if chains < 1 or num_samples < 1 or warmup_steps < 0 or jobs < 1:
        raise ValueError(f"need at least one chain of at least one sample on at least one job, got {chains} chains of "
                         f"{num_samples} after {warmup_steps} warm-up steps on {jobs} jobs")
    if jobs > 1 and model.device.type != "cpu":
        raise ValueError(f"chains run side by side in CPU processes; on {model.device} run them one after another (jobs=1)")
    done = dict(drawn or {})
    if any(not 0 <= c < chains for c in done):
        raise ValueError(f"chains drawn already must be among the {chains} asked for, got chains {sorted(done)}")
    heard = on_chain or (lambda c, samples, run: None)
    work = {c: (model, x, y, _start(model, seed, c), seed + c, num_samples, warmup_steps, max_tree_depth,
                target_accept, progress) for c in range(chains) if c not in done}
    began = time.perf_counter()
    if jobs == 1:
        for c, args in work.items():
            done[c] = _chain(*args)
            heard(c, *done[c])
    elif work:  # spawned, not forked: a fork of a process with torch's threads running can hang
        with ProcessPoolExecutor(min(jobs, len(work)), multiprocessing.get_context("spawn"), torch.set_num_threads,
                                 (torch.get_num_threads(),)) as pool:
            futures = {pool.submit(_chain, *args): c for c, args in work.items()}
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                heard(futures[future], *done[futures[future]])
    ordered = [done[c] for c in range(chains)]
    return Chains([samples for samples, _ in ordered], [run for _, run in ordered], num_samples, warmup_steps,
                  max_tree_depth, time.perf_counter() - began)


def _start(model: BayesianNet, seed: int, c: int) -> dict[str, torch.Tensor]:
    """Where chain c starts: the model's own initialization for the first, a fresh one under seed + c after."""
    return {k: v.to(model.device) for k, v in model.init_values.items()} if c == 0 else fresh_start(model, seed + c)


def _chain(model: BayesianNet, x: torch.Tensor, y: torch.Tensor, start: dict[str, torch.Tensor], seed: int,
           num_samples: int, warmup_steps: int, max_tree_depth: int, target_accept: float,
           progress: bool) -> tuple[dict[str, torch.Tensor], Chain]:
    """One chain from ``start`` under ``seed``: its samples {site: [S, *shape]} and what it did."""
    kernel = NUTS(model, max_tree_depth=max_tree_depth, target_accept_prob=target_accept,
                  init_strategy=init_to_value(values=start))
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=not progress)
    began = time.perf_counter()
    with seeded(seed, model.device):
        mcmc.run(x, y)
    diagnostics = mcmc.diagnostics()
    samples = {name: value.detach() for name, value in mcmc.get_samples().items()}
    return samples, Chain(seed, time.perf_counter() - began, float(diagnostics["acceptance rate"]["chain 0"]),
                          len(diagnostics["divergences"]["chain 0"]))


@dataclass(frozen=True)
class Convergence:
    """Whether chains agree on a predictive quantity: the split R-hat of each of its entries that
    moves (near 1 where the chains agree; inf where each chain sits at a value of its own) and the
    smallest effective sample size among them."""

    r_hats: torch.Tensor
    min_ess: float

    @property
    def max_r_hat(self) -> float:
        return float(self.r_hats.max()) if len(self.r_hats) else 1.0

    @property
    def median_r_hat(self) -> float:
        return float(self.r_hats.median()) if len(self.r_hats) else 1.0

    def share_at_most(self, bound: float) -> float:
        """The share of the moving entries whose R-hat is at most ``bound``: how many mix, not only the worst."""
        return float((self.r_hats <= bound).double().mean()) if len(self.r_hats) else 1.0


def predictive_convergence(values: torch.Tensor) -> Convergence:
    """The split R-hat and effective sample size over the entries of a predictive quantity ``values``
    [chains, S, ...] (each input's class probabilities, a regression's mean). An entry at one value
    in every sample of every chain (a probability at 0) is left out."""
    r_hats, moving = _split_r_hat(values)
    if not moving.shape[-1]:
        return Convergence(r_hats, float("inf"))
    return Convergence(r_hats, _min_ess(moving))


def _min_ess(moving: torch.Tensor) -> float:
    """The smallest effective sample size over the entries of ``moving`` [chains, S, entries] (only
    those that move: Pyro's spreads one entry's NaN over all, its _cummin's max), by Pyro's
    ``effective_sample_size`` on as many entries at a time as ``ESS_BYTES`` holds: it makes an
    [S, S, entries] tensor (10,000 inputs x 10 classes of 500 samples: 46 GB at once)."""
    chunk = max(1, ESS_BYTES // (moving.shape[1] ** 2 * moving.element_size()))
    return min(float(effective_sample_size(part, chain_dim=0, sample_dim=1).nan_to_num(0.0).min())
               for part in moving.split(chunk, dim=-1))


def _split_r_hat(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if values.dim() < 2 or values.shape[1] < 4:
        raise ValueError(f"R-hat splits each chain in two halves: give [chains, S >= 4, ...], got {list(values.shape)}")
    values = values.double().flatten(2) if values.dim() > 2 else values.double().unsqueeze(-1)
    moving = values[..., values.flatten(0, 1).std(0) > 0]  # [chains, S, entries not all one value]
    if not moving.shape[-1]:
        return torch.ones(0, dtype=torch.float64), moving
    r_hat = split_gelman_rubin(moving, chain_dim=0, sample_dim=1)
    return r_hat.nan_to_num(float("inf"), posinf=float("inf")), moving
