"""bnn-zoo: Bayesian neural networks in Pyro that can say "I don't know".

Importing it changes no Pyro, torch or matplotlib setting: the pairs work with Pyro's global
parameter store and with ``pyro.settings.set(module_local_params=True)``.

Usage::

    import bnn_zoo
    model, guide = bnn_zoo.build("lenet", num_data=55000)      # a registered recipe
    model, guide = bnn_zoo.bayesian(my_net, likelihood="categorical", num_data=50000)
    trained = bnn_zoo.load("lenet")                             # a run directory, or a shipped name
    probs = bnn_zoo.posteriors(trained)["bayes"].predict(x, num_samples=100)   # guide or ensemble alike
    probs = bnn_zoo.predict(model, guide, x, num_samples=100)   # one guide (or weight samples)
"""
from importlib.metadata import PackageNotFoundError, version

from .bnn import BayesianNet, bayesian
from .conformal import ConformalSets, calibrate_sets
from .trained import Trained, load
from .elbo import SplitELBO
from .guides import DirectAutoNormal, make_guide
from .ladder import posteriors
from .likelihoods import Categorical, Gaussian
from .sampling import predict  # bnn_zoo/predict.py, the command line, is callable as this function too
from .priors import FanInPrior, GaussianPrior, ScaleMixturePrior, make_prior
from .reparam import LocalReparameterization
from .temperature import fit_temperature
from .twin import Twin
from .zoo import ARCHITECTURES, build, make_net, make_twin

try:
    __version__ = version("bnn-zoo")
except PackageNotFoundError:  # the source tree, not installed
    __version__ = "unknown"

__all__ = ["ARCHITECTURES", "BayesianNet", "Categorical", "ConformalSets", "DirectAutoNormal", "FanInPrior",
           "Gaussian", "GaussianPrior", "LocalReparameterization", "ScaleMixturePrior", "SplitELBO", "Trained",
           "Twin", "bayesian", "build", "calibrate_sets", "fit_temperature", "load", "make_guide", "make_net",
           "make_prior", "make_twin", "posteriors", "predict"]
