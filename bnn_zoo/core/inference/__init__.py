"""Inference over the networks: ``elbo`` (the ELBO with closed-form KL where one exists),
``predictive`` (the posterior predictive, batched and compiled) and ``nuts`` (HMC with NUTS). It
imports ``core.networks`` and ``core.fast``.
"""
