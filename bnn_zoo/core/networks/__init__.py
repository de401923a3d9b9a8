"""Bayesian networks as Pyro model/guide pairs: ``bnn`` (any ``nn.Module`` made Bayesian), ``priors``,
``likelihoods``, ``guides``, ``reparam`` (local reparameterization), ``nets`` and ``architectures`` (the
registered recipes), ``network_names`` (your network by name), ``twin`` (the deterministic twin) and
``pruning``. It imports ``core.errors`` only.
"""
