"""Temperature scaling (bnn_zoo.abstain.temperature) recovers the temperature that miscalibrated a predictor."""
import pytest
import torch

from bnn_zoo.abstain.temperature import fit_temperature


@pytest.mark.parametrize("overconfidence", [0.5, 1.0, 2.0, 4.0])
def test_the_fitted_temperature_undoes_an_overconfident_predictor(overconfidence):
    """Labels drawn from softmax(z); the predictor says softmax(overconfidence z): the NLL's minimum
    lies at T = overconfidence, within sampling error on 20,000 inputs."""
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(20000, 10, generator=generator) * 2
    labels = torch.multinomial(z.softmax(-1), 1, generator=generator).squeeze(-1)
    t = fit_temperature(overconfidence * z, labels)
    assert abs(t / overconfidence - 1) < 0.03, t


def test_the_fitted_temperature_is_the_nll_s_minimum():
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(1)
    z = torch.randn(3000, 10, generator=generator)
    labels = torch.multinomial((1.7 * z).softmax(-1), 1, generator=generator).squeeze(-1)
    t = fit_temperature(z, labels)
    nll = {f: F.cross_entropy(z.double() / (t * f), labels).item() for f in (0.99, 1.0, 1.01)}
    assert nll[1.0] <= nll[0.99] and nll[1.0] <= nll[1.01], nll


SEPARABLE = torch.randn(50, 3, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("logits, labels, message", [
    (torch.randn(5, 3), torch.zeros(4, dtype=torch.long), r"need logits \[N, C\] and one label per row"),
    (torch.full((2, 3), float("nan")), torch.zeros(2, dtype=torch.long), "the logits hold NaN or inf"),
    (SEPARABLE, SEPARABLE.argmax(-1), "classifies all 50 inputs right: .* no temperature is best"),
    (SEPARABLE * 100, (SEPARABLE.argmax(-1) + 1) % 3, r"the best temperature lies outside 0.05..20.0"),
])
def test_bad_input_is_refused_in_one_line(logits, labels, message):
    with pytest.raises(ValueError, match=message):
        fit_temperature(logits, labels)


def test_a_trained_twin_scaled_on_validation_has_a_lower_test_nll(tiny_run, shared_data):
    """The tiny run's twin, a temperature fitted on its validation split: the test NLL falls and
    the accuracy stays."""
    import torch.nn.functional as F

    from bnn_zoo import load
    from bnn_zoo.evaluation.certification import validation_set
    from bnn_zoo.core.inference.inputs import evaluating
    from bnn_zoo.data.sets import load_torchvision, normalize

    trained = load(tiny_run)
    x_val, y_val = validation_set(trained, str(shared_data))
    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    with torch.no_grad(), evaluating(trained.twin):
        t = fit_temperature(trained.twin(x_val), y_val)
        logits = trained.twin(normalize(images[:3000]))
    before, after = F.cross_entropy(logits, labels[:3000]), F.cross_entropy(logits / t, labels[:3000])
    assert after < before - 0.005, (t, before.item(), after.item())
