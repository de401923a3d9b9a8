import math

import pytest
import torch
from conftest import SMALL, ZOO, example_batch
from torch import nn

from bnn_zoo import make_twin
from bnn_zoo.abstain.density import FeatureDensity, features, last_linear


def _reference_score(probe, feats, labels):
    """minus log sum_c pi_c N(f; mu_c, Sigma_c), written out with the Gaussian's formula."""
    feats, scores = feats.double(), []
    for f in probe.double():
        terms = []
        for c in labels.unique():
            member = feats[labels == c]
            mu = member.mean(0)
            cov = (member - mu).T @ (member - mu) / (len(member) - 1)
            d = f - mu
            log_n = -0.5 * (d @ torch.linalg.solve(cov, d) + torch.logdet(cov) + len(mu) * math.log(2 * math.pi))
            terms.append(log_n + math.log((labels == c).double().mean()))
        scores.append(-torch.logsumexp(torch.stack(terms), 0))
    return torch.stack(scores)


def test_the_score_is_minus_the_log_density_of_the_class_mixture():
    g = torch.Generator().manual_seed(0)
    labels = torch.tensor([0] * 30 + [1] * 20 + [2] * 10)
    centres = torch.tensor([[0.0, 0.0, 0.0], [4.0, 0.0, 1.0], [0.0, 5.0, -2.0]])
    feats = centres[labels] + torch.randn(60, 3, generator=g) * torch.tensor([1.0, 0.5, 2.0])
    density = FeatureDensity.fit(feats, labels)
    probe = torch.randn(7, 3, generator=g) * 4
    assert torch.allclose(density.score(probe), _reference_score(probe, feats, labels), atol=1e-9)
    # far from every class scores higher (less familiar) than a class's centre
    assert (density.score(torch.full((1, 3), 40.0)) > density.score(centres).max()).all()


def test_a_degenerate_feature_gets_the_smallest_jitter_that_factors():
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    feats = torch.tensor([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [5.0, 1.0], [6.0, 1.0], [7.0, 1.0]])  # a dead unit
    density = FeatureDensity.fit(feats, labels)
    assert density.score(feats).isfinite().all()
    # the dead unit lit up: far less familiar than any training input
    assert density.score(torch.tensor([[1.0, 2.0]])) > density.score(feats).max() + 100


@pytest.mark.parametrize("feats, labels, message", [
    (torch.zeros(4), torch.zeros(4), "need features"),
    (torch.randn(4, 2), torch.zeros(4, dtype=torch.long), "at least two classes"),
    (torch.randn(4, 2), torch.tensor([0, 0, 0, 1]), "at least two classes"),
    (torch.randn(4, 2), torch.tensor([0, 0, 2, 2]), "every class 0..2"),
    (torch.full((4, 2), float("nan")), torch.tensor([0, 0, 1, 1]), "NaN or inf"),
])
def test_bad_input_is_refused_in_one_line(feats, labels, message):
    with pytest.raises(ValueError, match=message):
        FeatureDensity.fit(feats, labels)


@pytest.mark.parametrize("arch", ZOO)
def test_the_features_are_the_input_of_the_last_linear_layer(arch):
    torch.manual_seed(0)
    net = make_twin(arch, SMALL[arch]).net.eval()
    x, _ = example_batch(arch, 5)
    layer = last_linear(net)
    with torch.no_grad():
        feats = features(net, net, x, batch_size=2)  # in batches of 2, 2, 1
        out = net(x)
    assert torch.allclose(layer(feats).reshape(out.shape), out, atol=1e-6)
    assert not layer._forward_pre_hooks  # the hook is gone


def test_a_network_without_a_linear_layer_is_named():
    with pytest.raises(ValueError, match="Conv2d has none"):
        last_linear(nn.Conv2d(1, 2, 3))
