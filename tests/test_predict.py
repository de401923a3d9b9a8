import pytest
import torch
from conftest import ZOO, example_batch

from bnn_zoo import build, make_net, predict


@pytest.mark.parametrize("arch", ZOO)
def test_predict_shapes_and_chunks(arch):
    model, guide = build(arch, num_data=100)
    x, _ = example_batch(arch, 7)
    out = predict(model, guide, x, num_samples=11, chunk_size=4, batch_size=3)
    expected = (11, 7, 10) if arch != "toy_mlp" else (11, 7, 2)  # regression: mean, noise scale
    assert out.shape == expected and not out.requires_grad
    assert not torch.allclose(out[0], out[1])  # every sample draws its own weights
    if arch != "toy_mlp":
        assert torch.allclose(out.sum(-1), torch.ones(11, 7))
    else:
        assert torch.equal(out[..., 1], torch.ones(11, 7))  # the fixed noise scale


@pytest.mark.parametrize("arch", ZOO)
def test_predict_matches_the_network_at_the_posterior_means(arch):
    """With a (nearly) zero posterior spread every sample is the network at the guide's means."""
    model, guide = build(arch, num_data=100, init_scale=1e-9)
    x, y = example_batch(arch, 5)
    guide(x, y)
    net = make_net(arch)
    net.load_state_dict({k[len("net."):]: v for k, v in guide.median().items()})
    expected = net(x).softmax(-1) if arch != "toy_mlp" else model.noise(net(x))
    out = predict(model, guide, x, num_samples=3)
    assert torch.allclose(out, expected.expand_as(out), atol=1e-4)


def test_predict_rejects_bad_sizes():
    model, guide = build("toy_mlp")
    with pytest.raises(ValueError, match="positive"):
        predict(model, guide, torch.zeros(2, 1), num_samples=0)
