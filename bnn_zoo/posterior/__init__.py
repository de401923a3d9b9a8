"""The kinds of posterior a run holds, each one class registered by name (``base.KINDS``), each
predicting sampled probabilities behind one interface: the Bayesian network's guides
(``variational``), the twin's point weights, temperature-scaled or MC dropout (``point``), NUTS's
samples (``hmc``), ensembles of any of them (``base.Mixture``), and those fitted after training around
the twin (``laplace``, ``swag``, ``sgmcmc``). A new kind is one module registering its class.
"""
from .base import HELD_SHARE, KINDS, Mixture, Posterior, certifying, fitted_kinds, held_part, register

# isort: off
# Registered in this order, the reports' order: the run's own posteriors, then those fitted after it.
from .variational import VariationalPosterior  # noqa: F401
from .point import DropoutPosterior, PointPosterior, ScaledPosterior  # noqa: F401
from .hmc import SampledPosterior  # noqa: F401
from .laplace import KFACLaplace, LastLayerLaplace  # noqa: F401
from .swag import SWAG  # noqa: F401
from .sgmcmc import CyclicalSGMCMC  # noqa: F401
# isort: on

BAYES, TWIN, TWIN_SCALED, HMC = "bayes", "twin", "twin_scaled", "hmc"  # the built-in kinds, in code that names one

__all__ = ["BAYES", "HELD_SHARE", "HMC", "KINDS", "Mixture", "TWIN", "TWIN_SCALED", "Posterior", "certifying", "fitted_kinds",
           "held_part", "register"]
