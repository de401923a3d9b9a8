"""Saying "I don't know" on MNIST with the shipped lenet (no training): its certified rule answers
digits and refuses most letters and all noise one by one, and nearly every letter once they come as
a stream (the shift alarm sounds, and the after-alarm rule answers the rest); an accepted digit
comes with a 99% conformal set."""
import torch

import bnn_zoo
from bnn_zoo.data.sets import load_torchvision, normalize
from bnn_zoo.data.shifted.ood_sets import load_notmnist, white_noise

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
stream = trained.stream("bayes")  # the letters one after another, as predict answers several files
letters = stream.decide(bayes.predict(inputs["notMNIST letters"], 100))
in_stream = letters.decision.refused.float().mean().item()
print(f"notMNIST letters as one stream: refused {in_stream:.1%}; {stream.describe()}")
# what this page says of them, checked each time it is built
assert refused["MNIST test digits"] < 0.05 and right > 0.99, "the digits are no longer answered, and right"
assert refused["uniform noise"] > 0.9 and in_stream > 0.85, "noise, and letters in a stream, are no longer refused"
assert refused["notMNIST letters"] > 0.6, "most letters are no longer refused one by one"
