"""bnn-zoo: Bayesian neural networks in Pyro that can say "I don't know".

Usage::

    import bnn_zoo
    model, guide = bnn_zoo.build("lenet")
    trained = bnn_zoo.load("runs/lenet")
    probs = bnn_zoo.predict(trained.model, trained.guide, x, num_samples=100)
"""
import pyro

# Parameters live in their modules, not in Pyro's global store: two models never share
# weights by name, and a loaded guide keeps exactly the values it was given.
pyro.settings.set(module_local_params=True)

from .checkpoint import Trained, load  # noqa: E402
from .predict import predict  # noqa: E402
from .zoo import (  # noqa: E402
    ARCHITECTURES,
    BayesianNet,
    DirectAutoNormal,
    GaussianNoise,
    GaussianPrior,
    ScaleMixturePrior,
    build,
    make_guide,
    make_net,
    make_prior,
    make_twin,
)

__all__ = ["ARCHITECTURES", "BayesianNet", "DirectAutoNormal", "GaussianNoise", "GaussianPrior",
           "ScaleMixturePrior", "Trained", "build", "load", "make_guide", "make_net", "make_prior",
           "make_twin", "predict"]
