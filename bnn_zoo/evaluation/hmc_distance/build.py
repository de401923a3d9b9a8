"""An HMC reference built: several NUTS chains from different initializations over a run's training
split (``bnn_zoo.core.inference.chains``), each chain's predictive on every set of inputs, and what
says whether to trust it: the predictive's R-hat and effective sample size over the chains, and the
chains' distance to one another and from each chain to the pool of the others (the floor no
approximation can be told apart below).

Usage: ``reference = build_reference(plan, splits.train, image_sets(...), chains=4, num_samples=200,
warmup_steps=200, built=provenance(), jobs=2)``
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

import pyro
import torch

from ...core.inference.chains import nuts_chains, predictive_convergence
from ...core.inference.predictive import predict
from ...data.sets import TensorSet
from ...runs.plans.factory import build_networks, build_twin
from ...runs.plans.plan import Plan
from ...runs.training.loop import cpu_threads
from ...runs.training.threads import step_threads
from .inputs import InputSet
from .kept import KeptChains, recipe_key
from .metrics import chain_floor, predictive_draws
from .reference import Reference

# A regression reference holds DRAWS draws of y at each input, an equal share from each chain's
# samples; chain c's noise from seed SEEDS + c, apart from the seeds a scorer draws from (0, 1, ...)
DRAWS, SEEDS = 1000, 10_000
R_HAT = 1.05  # the predictive R-hat at or under which an entry counts as mixed


def build_reference(plan: Plan, train: TensorSet, sets: list[InputSet], chains: int, num_samples: int,
                    warmup_steps: int, name: str, built: dict, max_tree_depth: int | None = None,
                    progress: bool = False, jobs: int = 1, keep: Optional[Path] = None, log=print) -> Reference:
    """HMC's reference predictive for the network ``plan`` describes, trained on ``train``, over
    ``sets``: ``chains`` NUTS chains of ``num_samples`` after ``warmup_steps`` (chain c from seed
    plan.seed + c; ``jobs`` of them at a time, in worker processes), with ``built`` (the command,
    commit and machine) in its recipe. With ``keep``, a folder, each chain is kept there as it ends
    and the chains of this recipe kept there already are read, not drawn again (``kept``)."""
    pyro.set_rng_seed(plan.seed)  # the model's own initialization, where chain 0 starts
    model, _ = build_networks(plan.networks, len(train), train.x.device)
    depth = max_tree_depth or plan.mcmc.max_tree_depth
    with torch.random.fork_rng(devices=[]):  # the plain network, to weigh a gradient's work (NUTS's: the full data)
        plain = build_twin(plan.networks)
    threads, why = step_threads(plan.train.threads, plain, plan.networks.recipe.input_shape, len(train), train.x.device)
    log(f"{name}: {chains} NUTS chains of {num_samples} samples after {warmup_steps} warm-up steps, tree depth <= "
        f"{depth}, on {len(train)} training examples, {jobs} at a time; {why}")
    kept, ready = None, {}
    if keep is not None:
        kept = KeptChains(keep, recipe_key(plan, train, num_samples, warmup_steps, depth))
        ready = {c: ({site: v.to(train.x.device) for site, v in samples.items()}, run)
                 for c, (samples, run) in kept.read(chains).items()}
        log(f"  chains kept in {keep} as each ends ({kept.path(0).name}, ...); read there: {sorted(ready) or 'none'}")
    with cpu_threads(threads):
        drawn = nuts_chains(model, train.x, train.y, chains, num_samples, warmup_steps, depth,
                            plan.mcmc.target_accept, plan.seed, progress, jobs, ready, kept.write if kept else None)
    for run in drawn.runs:
        log(f"  chain from seed {run.seed}: {run.seconds:.0f} s, acceptance {run.acceptance_rate:.2f}, "
            f"{run.divergences} divergent")
    regression = not plan.categorical
    predictive, x, y, described = {}, {}, {}, {}
    for found in sets:
        x_set = found.x.to(train.x.device)
        outputs = torch.stack([predict(model, samples, x_set, None) for samples in drawn.samples]).cpu()
        convergence = predictive_convergence(outputs)
        mixing = {"max_r_hat": convergence.max_r_hat, "min_ess": convergence.min_ess,
                  "median_r_hat": convergence.median_r_hat, f"share_r_hat_at_most_{R_HAT}": convergence.share_at_most(R_HAT)}
        if regression:
            per_chain = [predictive_draws(o, DRAWS // chains, SEEDS + c) for c, o in enumerate(outputs)]
            predictive[found.name] = torch.cat(per_chain)
            x[found.name] = found.x.cpu()
        else:
            per_chain = list(outputs.mean(1))
            predictive[found.name] = outputs.mean((0, 1))
        if found.y is not None:
            y[found.name] = found.y.cpu()
        hmc = model.likelihood.metrics(outputs.flatten(0, 1), found.y.cpu()) if found.y is not None else {}
        described[found.name] = {"spec": found.spec, "inputs": len(found.x), **mixing,
                                 "floor": chain_floor(per_chain, regression), "hmc": hmc}
        log(f"  {found.name}: {len(found.x)} inputs, predictive R-hat <= {convergence.max_r_hat:.3f} (median "
            f"{convergence.median_r_hat:.3f}, {100 * convergence.share_at_most(R_HAT):.1f}% of entries <= {R_HAT}), ESS >= "
            f"{convergence.min_ess:.0f}, "
            f"chain-to-chain {described[found.name]['floor']}")
    recipe = {"task": "regression" if regression else "classification", "config": plan.stored(),
              "chains": [asdict(run) for run in drawn.runs], "num_samples": num_samples,
              "warmup_steps": warmup_steps, "max_tree_depth": depth, "seconds": drawn.seconds, "wall_seconds": drawn.wall_seconds,
              "jobs": jobs, "threads": threads,
              "built": built, "sets": described}
    return Reference(name, recipe, predictive, x, y)
