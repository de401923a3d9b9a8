import pytest
import torch

from bnn_zoo.core.networks.nets import MLP, LeNet5


def test_lenet5_has_the_classic_shape():
    net = LeNet5()
    # conv 6@5x5 (156) + conv 16@5x5 (2,416) + 400-120 (48,120) + 120-84 (10,164) + 84-10 (850)
    assert sum(p.numel() for p in net.parameters()) == 61706
    assert net(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    assert net.features(torch.zeros(1, 1, 28, 28)).shape == (1, 400)


@pytest.mark.parametrize("hidden, count", [([400, 400], 478410), ([16], 784 * 16 + 16 + 16 * 10 + 10)])
def test_mlp_widths_and_flattening(hidden, count):
    net = MLP(784, hidden, 10)
    assert sum(p.numel() for p in net.parameters()) == count
    x = torch.randn(4, 1, 28, 28)
    assert torch.equal(net(x), net(x.flatten(1)))
