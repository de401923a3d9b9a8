"""The shift alarm's rates (``bnn_zoo.evaluation.alarm_rates``): the bound on its false alarms, and
what adds each posterior a run lacks."""
from types import SimpleNamespace

import pytest

from bnn_zoo.evaluation.alarm_rates import how_to_add, upper_bound


def test_the_clopper_pearson_bound_of_the_alarm_rates():
    assert upper_bound(0, 200) == pytest.approx(1 - 0.05 ** (1 / 200), rel=1e-6)  # (1 - p)^n = 0.05
    assert upper_bound(200, 200) == 1.0 and upper_bound(2, 200) == pytest.approx(0.0311, abs=1e-4)


@pytest.mark.parametrize("part, twin, members, advice", [
    ("swag", True, [], "python -m bnn_zoo.train resume=runs/a 'train.posteriors=[swag]' fits it and certifies it"),
    ("hmc", True, [], "python -m bnn_zoo.train resume=runs/a infer=nuts draws its samples"),
    ("twin", False, [], "python -m bnn_zoo.train resume=runs/a train.twin=true trains the twin and certifies it"),
    ("twin_scaled", False, [], "python -m bnn_zoo.train resume=runs/a train.twin=true trains the twin and certifies it"),
    ("twin_scaled", True, [], "python -m bnn_zoo.certify runs/a fits its temperature"),
    ("twin_scaled", True, ["a member"], "an ensemble's twins are not temperature-scaled; measure its twin"),
])
def test_each_posterior_a_run_lacks_gets_what_adds_it(part, twin, members, advice):
    trained = SimpleNamespace(run_dir="runs/a", twin=object() if twin else None, members=members)
    assert how_to_add(trained, "runs/a", part) == advice
    shipped = SimpleNamespace(run_dir=None, twin=object(), members=[])
    assert how_to_add(shipped, "lenet", part).startswith("a shipped posterior holds what it was shipped with")
