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
    trained.alarm("bayes").observe(probs, inputs=x).describe()  # do these inputs still look certified-like?
    trained.stream("bayes").decide(probs, inputs=x).decision.refused   # after the alarm, the after-alarm rule too
    print(bnn_zoo.against_hmc(model, guide, reference="toy_mlp_hmc"))   # a toy_mlp pair: how far from HMC
"""

from .abstain.conformal import ConformalSets, calibrate_sets
from .abstain.shift import ShiftAlarm
from .abstain.temperature import fit_temperature
from .core.networks.architectures import ARCHITECTURES, build, make_net, make_twin
from .core.networks.bnn import BayesianNet, bayesian
from .core.inference.elbo import TraceKL_ELBO
from .core.networks.guides import DirectAutoNormal, make_guide
from .core.networks.likelihoods import Categorical, Gaussian
from .core.inference.predictive import predict  # bnn_zoo/predict.py is the command line alone
from .core.networks.priors import FanInPrior, GaussianPrior, ScaleMixturePrior, make_prior
from .core.networks.reparam import LocalReparameterization
from .core.networks.twin import Twin
from .core import VERSION as __version__
from .evaluation.hmc_distance.score import against_hmc
from .runs.storage.loading import load
from .runs.storage.trained import Trained, posteriors


def __getattr__(name: str):
    """Names of earlier versions, kept with a warning (once for each place that uses one, the
    ``from bnn_zoo import SplitELBO`` form too): SplitELBO is TraceKL_ELBO."""
    if name == "SplitELBO":
        from .core.errors import say_once

        say_once("bnn_zoo.SplitELBO is now bnn_zoo.TraceKL_ELBO", DeprecationWarning)
        return TraceKL_ELBO
    raise AttributeError(f"module 'bnn_zoo' has no attribute {name!r}")



__all__ = ["ARCHITECTURES", "BayesianNet", "Categorical", "ConformalSets", "DirectAutoNormal", "FanInPrior",
           "Gaussian", "GaussianPrior", "LocalReparameterization", "ScaleMixturePrior", "ShiftAlarm", "TraceKL_ELBO",
           "Trained", "Twin", "against_hmc", "bayesian", "build", "calibrate_sets", "fit_temperature", "load",
           "make_guide", "make_net", "make_prior", "make_twin", "posteriors", "predict"]
