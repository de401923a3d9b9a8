"""The core, in three rooms and a ground floor: ``networks`` (any PyTorch network made Bayesian, its
priors, likelihoods and guides, local reparameterization, the registered architectures, networks by
name, the deterministic twin, pruning), ``fast`` (the captured training step: compiled, in CUDA
graphs, Adam in the graph, draws in Pyro's order) and ``inference`` (the ELBO, the posterior
predictive, NUTS); ``errors`` holds the one-line errors every layer raises. ``networks`` and ``fast``
import neither other room; ``inference`` imports both. It never sees a run's config. ``VERSION``:
bnn-zoo's version as pip installed it (``bnn_zoo.__version__``; a kept HMC chain's recipe).
"""
from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("bnn-zoo")
except PackageNotFoundError:  # the source tree, not installed
    VERSION = "unknown"
