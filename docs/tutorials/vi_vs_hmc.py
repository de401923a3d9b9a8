"""VI against HMC on the toy curve: train toy_mlp's mean-field posterior and draw NUTS samples from
the same model, then compare their predictive spread inside and far outside the data."""
import torch

import bnn_zoo
from bnn_zoo.runs.plans.config import load_config
from bnn_zoo.runs.storage.trained import posteriors
from bnn_zoo.evaluation.figures.plots import variance_parts
from bnn_zoo.cli.train import train

# Small settings so the page builds in a few minutes: 1,000 epochs of SVI, 60 NUTS samples after 60 of warm-up
# (NUTS is nearly all of its time, about 4 ms a gradient and up to 2^8 gradients a sample on two CPU cores).
train(load_config("toy_mlp", ["infer=nuts", "train.epochs=1000", "mcmc.num_samples=60", "mcmc.warmup_steps=60",
                              "run_dir=runs/toy_vi_hmc", "overwrite=true", "train.progress=false"]))
rungs = posteriors(bnn_zoo.load("runs/toy_vi_hmc"))
x = torch.tensor([[0.0], [1.5], [5.0], [50.0]])  # inside the data, at its edge, beyond it, far beyond it
for name in ("bayes", "hmc"):
    parts = variance_parts(rungs[name].predict(x, 60))
    print(f"{rungs[name].label:>24}: " + ", ".join(
        f"x={float(xi):g}: {float(m):.2f} +- {float(e):.2f}" for xi, m, e in zip(x[:, 0], parts["mean"], parts["epistemic"])))
