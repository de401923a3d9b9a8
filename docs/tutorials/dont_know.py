"""Saying "I don't know" on MNIST with the shipped lenet (no training): its certified rule answers
digits and refuses letters and noise; an accepted digit comes with a 99% conformal set."""
import torch

import bnn_zoo
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.data.ood_sets import load_notmnist, white_noise

trained = bnn_zoo.load("lenet")  # shipped inside the package: an ensemble of three mean-field guides
bayes, rule, sets = bnn_zoo.posteriors(trained)["bayes"], trained.rules["bayes"], trained.sets["bayes"]
print(bayes.label, "| rule:", rule)

digits, labels = load_torchvision("mnist", train=False, download=False)
inputs = {"MNIST test digits": normalize(digits[:500]), "notMNIST letters": normalize(load_notmnist()[:500]),
          "uniform noise": normalize(white_noise(200))}
torch.manual_seed(0)
refused = {}
for name, x in inputs.items():
    probs = bayes.predict(x, 100)
    decision = rule(probs)
    refused[name] = decision.refused.float().mean().item()
    line = f"{name:>18}: refused {refused[name]:.1%}"
    if name.startswith("MNIST"):
        answered = ~decision.refused
        right = (decision.prediction[answered] == labels[:500][answered]).float().mean().item()
        in_set = sets.predict(probs)[answered]
        line += f", right among the answered {right:.2%}, mean 99% set size {in_set.sum(1).float().mean():.3f}"
    print(line)
print(decision)  # the last set's decision, summarized
# what this page says of them, checked each time it is built
assert refused["MNIST test digits"] < 0.05 and right > 0.99, "the digits are no longer answered, and right"
assert refused["notMNIST letters"] > 0.8 and refused["uniform noise"] > 0.9, "letters and noise are no longer refused"
