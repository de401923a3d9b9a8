"""HMC posteriors: Pyro's NUTS over a Bayesian network's weights, the reference that variational
posteriors are compared with. The samples are a posterior ``bnn_zoo.predict`` takes like a guide.

Usage::

    samples, diagnostics = nuts_posterior(model, x, y, num_samples=300, warmup_steps=300)
    probs = bnn_zoo.predict(model, samples, x_test, num_samples=None)   # every sample
"""
from __future__ import annotations

import time

import torch
from pyro.infer import MCMC, NUTS

from ..networks.bnn import BayesianNet


def nuts_posterior(model: BayesianNet, x: torch.Tensor, y: torch.Tensor, num_samples: int = 300,
                   warmup_steps: int = 300, max_tree_depth: int = 8, target_accept: float = 0.8,
                   progress: bool = False) -> tuple[dict[str, torch.Tensor], dict]:
    """NUTS on the full data (x, y), one chain started at the plain network's initialization.

    Returns the weight samples {site: [num_samples, *shape]} and diagnostics: seconds, acceptance
    rate, divergences, and over all weights the smallest effective sample size and largest R-hat.
    """
    kernel = NUTS(model, max_tree_depth=max_tree_depth, target_accept_prob=target_accept,
                  init_strategy=model.init_loc)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=not progress)
    start = time.perf_counter()
    mcmc.run(x, y)
    seconds = time.perf_counter() - start
    samples = {name: value.detach() for name, value in mcmc.get_samples().items()}
    diagnostics = mcmc.diagnostics()
    sites = [v for k, v in diagnostics.items() if k.startswith("net.")]
    return samples, {
        "seconds": seconds, "num_samples": num_samples, "warmup_steps": warmup_steps,
        "acceptance_rate": float(diagnostics["acceptance rate"]["chain 0"]),
        "divergences": len(diagnostics["divergences"]["chain 0"]),
        "min_n_eff": min(float(s["n_eff"].nan_to_num(float("inf")).min()) for s in sites),
        "max_r_hat": max(float(s["r_hat"].nan_to_num(1.0).max()) for s in sites),
    }
