"""The core: Bayesian networks as Pyro model/guide pairs, and their inference. Any PyTorch network
made Bayesian (``bnn``), its priors, likelihoods and guides, the registered architectures and
networks by name, the ELBO, local reparameterization, the captured training step, NUTS, the
posterior predictive, the deterministic twin. It never sees a run's config.
"""
