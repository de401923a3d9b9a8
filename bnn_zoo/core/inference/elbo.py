"""The training objective: the negative ELBO split into data fit and KL, both returned with the loss,
computing only the log-densities the loss uses. A ``pyro.infer.ELBO``: the base class runs the
particles (``num_particles``, ``vectorize_particles``, ``max_plate_nesting``), so it runs with
``SVI`` and, called on a (model, guide) pair, as a ``torch.nn.Module`` for torch optimizers.

Usage::

    elbo = TraceKL_ELBO()                                   # closed-form KL where one exists
    loss, parts = elbo.loss_and_parts(model, guide, x, y)   # parts.data_fit, parts.kl: nats, detached
    loss = elbo.differentiable_loss(model, guide, x, y)
    SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), TraceKL_ELBO(closed_form_kl=False))
    TraceKL_ELBO(num_particles=8, vectorize_particles=True)  # the particles in one batched pass
    TraceKL_ELBO(kl_weight=0.5)                             # tempered: data fit + 0.5 KL
"""
from __future__ import annotations

from dataclasses import dataclass

import pyro.poutine as poutine
import torch
from pyro.distributions.kl import kl_divergence
from pyro.distributions.util import scale_and_mask
from pyro.infer import ELBO
from pyro.poutine.util import prune_subsample_sites
from pyro.util import check_model_guide_match, check_site_shape


def has_closed_form_kl(q, p) -> bool:
    """Whether torch knows KL(q || p) in closed form for these two distributions."""
    try:
        kl_divergence(q, p)
    except NotImplementedError:  # torch's signal that no closed form is registered
        return False
    return True


@dataclass(frozen=True)
class ELBOParts:
    """The two parts of a negative ELBO, in nats, averaged over the particles and detached:
    ``data_fit`` (minus the scaled log-likelihood) and ``kl`` (KL(q || p), not tempered)."""

    data_fit: torch.Tensor
    kl: torch.Tensor


class TraceKL_ELBO(ELBO):
    """Negative ELBO = data fit (minus the scaled log-likelihood) + KL(q || p), per particle.

    With ``closed_form_kl`` (the default) each latent site's KL is taken in closed form where torch
    has one (a Normal guide against a Normal prior) and by Monte Carlo, log q(w) - log p(w) at the
    drawn w, where not: the estimator of Pyro's ``TraceMeanField_ELBO``. Without, Monte Carlo
    throughout: ``Trace_ELBO``'s. Every guide site must be reparameterized (all of bnn_zoo's are).
    ``kl_weight`` tempers the objective to data fit + kl_weight x KL (1: the ELBO; below 1 the data
    count for more, above 1 the prior); ``loss_and_parts`` returns the KL unweighted. Other keyword
    arguments are ``pyro.infer.ELBO``'s (``vectorize_particles``, ``max_plate_nesting``, ...).
    """

    def __init__(self, num_particles: int = 1, closed_form_kl: bool = True, kl_weight: float = 1.0, **kwargs):
        super().__init__(num_particles=num_particles, **kwargs)
        if not 0 < kl_weight < float("inf"):
            raise ValueError(f"kl_weight must be a positive finite number, got {kl_weight}")
        self.closed_form_kl = closed_form_kl
        self.kl_weight = kl_weight

    def _get_trace(self, model, guide, args, kwargs):
        """One particle's (model trace, guide trace), the model replayed on the guide's draws, with
        the observed sites' log-densities (the KL terms take what they need). ``pyro.infer.ELBO``'s
        one abstract method: its ``_get_traces`` calls it per particle, or once in a plate over
        the particles with ``vectorize_particles``. Validation checks the shapes as Trace_ELBO does."""
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        if poutine.is_validation_enabled():
            check_model_guide_match(model_trace, guide_trace, self.max_plate_nesting)
        model_trace, guide_trace = prune_subsample_sites(model_trace), prune_subsample_sites(guide_trace)
        if poutine.is_validation_enabled():
            for trace in (model_trace, guide_trace):
                trace.compute_log_prob()
                for site in trace.nodes.values():
                    if site["type"] == "sample":
                        check_site_shape(site, self.max_plate_nesting)
        model_trace.compute_log_prob(lambda _name, site: site["is_observed"])
        return model_trace, guide_trace

    def kl_estimators(self, model, guide, *args, **kwargs) -> dict[str, list[str]]:
        """Which latent sites' KL terms this ELBO takes in closed form and which by Monte Carlo."""
        model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        estimators: dict[str, list[str]] = {"closed_form": [], "monte_carlo": []}
        for name, site in model_trace.iter_stochastic_nodes():
            closed = self.closed_form_kl and has_closed_form_kl(guide_trace.nodes[name]["fn"], site["fn"])
            estimators["closed_form" if closed else "monte_carlo"].append(name)
        return estimators

    def _kl_term(self, q: dict, p: dict) -> torch.Tensor:
        if not q["fn"].has_rsample:
            raise ValueError(f"TraceKL_ELBO needs reparameterized guide sites; {q['name']} is not: "
                             "use Pyro's TraceGraph_ELBO")
        if self.closed_form_kl:
            try:
                return scale_and_mask(kl_divergence(q["fn"], p["fn"]), q["scale"], q["mask"]).sum()
            except NotImplementedError:  # no closed form: Monte Carlo below
                pass
        value = q["value"]
        return (scale_and_mask(q["fn"].log_prob(value), q["scale"], q["mask"]).sum()
                - scale_and_mask(p["fn"].log_prob(value), p["scale"], p["mask"]).sum())

    def particle(self, model_trace, guide_trace) -> tuple[torch.Tensor, torch.Tensor]:
        """(data fit, KL) of one particle's traces (of all the particles, summed, when vectorized)."""
        data_fit = kl = torch.zeros(())
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample":
                continue
            if site["is_observed"]:
                data_fit = data_fit - site["log_prob_sum"]
            else:
                kl = kl + self._kl_term(guide_trace.nodes[name], site)
        for name, q in guide_trace.nodes.items():  # auxiliary guide sites (a low-rank guide's joint draw)
            if q["type"] == "sample" and name not in model_trace.nodes:
                kl = kl + scale_and_mask(q["fn"].log_prob(q["value"]), q["scale"], q["mask"]).sum()
        return data_fit, kl

    def loss_and_parts(self, model, guide, *args, **kwargs) -> tuple[torch.Tensor, ELBOParts]:
        """(the differentiable loss, its ELBOParts), both averaged over the particles."""
        data_fit = kl = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            d, k = self.particle(model_trace, guide_trace)
            data_fit, kl = data_fit + d / self.num_particles, kl + k / self.num_particles
        return data_fit + self.kl_weight * kl, ELBOParts(data_fit.detach(), kl.detach())

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        return self.loss_and_parts(model, guide, *args, **kwargs)[0]

    def loss(self, model, guide, *args, **kwargs) -> float:
        with torch.no_grad():
            return self.differentiable_loss(model, guide, *args, **kwargs).item()

    def loss_and_grads(self, model, guide, *args, **kwargs) -> float:
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        loss.backward(retain_graph=self.retain_graph)
        return loss.item()
