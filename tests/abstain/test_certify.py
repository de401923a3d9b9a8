import math

import pytest
import torch

from bnn_zoo.abstain.certify import CUTS, Calibration, NotCertified, binomial_cdf, certify, inputs_needed, smallest_risk
from bnn_zoo.abstain.rule import Rule, risk_coverage, uncertainty


def population(n: int, seed: int, samples: int = 4, classes: int = 5):
    """Sampled probabilities [S, n, C] whose labels are drawn from their mean, with inputs of every
    difficulty (a familiar input: concentrated, agreeing samples; an unfamiliar one: spread out)."""
    g = torch.Generator().manual_seed(seed)
    sharpness = torch.rand(n, 1, generator=g) * 6
    centre = (torch.randn(n, classes, generator=g) * sharpness).softmax(-1)
    spread = torch.rand(n, 1, generator=g) * 2
    logits = centre.log() + spread * torch.randn(samples, n, classes, generator=g)
    probs = logits.softmax(-1)
    labels = torch.multinomial(probs.mean(0), 1, generator=g)[:, 0]
    return probs, labels


def selective_risk(rule: Rule, probs, labels) -> float:
    decision = rule(probs)
    kept = ~decision.refused
    return (decision.prediction[kept] != labels[kept]).float().mean().item()


class HeldOut:
    """A large fresh sample, its scores computed once: the selective risk of any rule, fast."""

    def __init__(self, n: int, seed: int):
        probs, labels = population(n, seed)
        top, predicted = torch.quantile(probs, 0.5, dim=0).max(1)
        self.top, self.wrong = top, predicted != labels
        self.scores = uncertainty(probs)
        self.probs, self.labels = probs, labels

    def risk(self, rule: Rule, upto: int | None = None) -> float:
        kept = self.top >= rule.threshold
        if rule.signal is not None:
            kept &= self.scores[rule.signal] <= rule.cut
        return self.wrong[:upto][kept[:upto]].float().mean().item()


def test_binomial_cdf_matches_the_sum_of_its_pmf():
    n, p = 30, 0.1
    pmf = [math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(n + 1)]
    k = torch.tensor([0, 3, 10, 30])
    expected = torch.tensor([sum(pmf[: j + 1]) for j in k.tolist()], dtype=torch.float64)
    assert torch.allclose(binomial_cdf(k, torch.full_like(k, n), p), expected, rtol=1e-9)


@pytest.mark.slow
def test_the_bound_holds_at_the_stated_rate_over_many_draws():
    """Certify on 1,000 inputs, check on 100,000 fresh ones, 200 times: the true error rate among
    accepted inputs may exceed the risk in at most delta of the draws (plus sampling slack); the
    naive choice (empirical risk <= target) exceeds it far more often, so the test can fail."""
    risk, delta, draws = 0.2, 0.1, 200
    held_out = HeldOut(100_000, seed=10_000)
    rule = certify(*population(1000, 0), risk, delta, max_refusal=0.3).rule
    check = held_out.probs[:, :3000], held_out.labels[:3000]
    assert held_out.risk(rule, 3000) == pytest.approx(selective_risk(rule, *check), abs=1e-6)
    violated = naive_violated = 0
    for seed in range(draws):
        probs, labels = population(1000, seed)
        rule = certify(probs, labels, risk, delta, max_refusal=0.3).rule
        violated += held_out.risk(rule) > risk
        # the naive choice: the lowest threshold whose validation error rate is within the risk
        thresholds, _, running_risk = risk_coverage(probs, labels)
        naive = float(thresholds[(running_risk <= risk).nonzero()[-1, 0]])
        naive_violated += held_out.risk(Rule(threshold=naive)) > risk
    slack = 2 * math.sqrt(delta * (1 - delta) / draws)
    assert violated / draws <= delta + slack
    assert naive_violated / draws > delta + slack


def test_the_strictest_gate_within_the_refusal_budget_is_chosen():
    probs, labels = population(4000, seed=1)
    calibration = certify(probs, labels, risk=0.3, delta=0.1, max_refusal=0.5)
    rule = calibration.rule
    assert rule.signal == "mutual_information" and math.isfinite(rule.cut)
    decision = rule(probs)
    assert decision.refused.float().mean().item() == pytest.approx(calibration.validation["refused"])
    assert calibration.validation["refused"] <= 0.5
    # one step stricter on the grid refuses more than the budget, or is not certified
    assert calibration.validation["max_refusal_met"]
    kept = ~decision.refused
    errors = int((decision.prediction[kept] != labels[kept]).sum())
    assert calibration.validation["errors"] == errors
    assert calibration.validation["p_value"] <= calibration.validation["level"] == 0.1 / len(CUTS)


def test_a_threshold_is_certified_only_after_every_stricter_one():
    """Fixed-sequence testing: confident inputs that are 20% wrong sink thresholds 0.9 to 0.55, so
    the looser ones are not certified, although with 3,000 hesitant right answers added they hold
    5% errors and would pass on their own."""
    confident = torch.tensor([0.95, 0.05, 0, 0, 0]).expand(1000, 5)
    hesitant = torch.tensor([0.5, 0.3, 0.2, 0, 0]).expand(3000, 5)
    probs = torch.cat([confident, hesitant]).expand(4, 4000, 5)
    labels = torch.zeros(4000, dtype=torch.long)
    labels[:200] = 1  # 200 of the confident answers are wrong
    assert selective_risk(Rule(threshold=0.5), probs, labels) == pytest.approx(0.05)
    with pytest.raises(NotCertified):
        certify(probs, labels, risk=0.1, delta=0.1, signal=None)
    right = labels == 0  # the same inputs without the confident mistakes: every threshold holds
    assert certify(probs[:, right], labels[right], risk=0.1, delta=0.1, signal=None).rule.threshold == 0.2


def test_without_a_signal_only_the_threshold_is_calibrated():
    probs, labels = population(2000, seed=2)
    rule = certify(probs, labels, risk=0.3, delta=0.1, signal=None).rule
    assert rule.signal is None and rule.cut == math.inf and rule.threshold >= 0.2


def test_an_unreachable_risk_is_refused_with_advice():
    probs, labels = population(50, seed=3)
    with pytest.raises(ValueError, match="higher risk or delta"):
        certify(probs, labels, risk=0.001, delta=0.01)


def right_and_sure(n: int, seed: int = 0):
    """n inputs a network gets right with every sample at 0.98: zero errors at every threshold."""
    labels = torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(seed))
    probs = torch.full((4, n, 2), 0.02)
    probs[:, torch.arange(n), labels] = 0.98
    return probs, labels


@pytest.mark.parametrize("signal, tests", [("mutual_information", len(CUTS)), (None, 1)])
def test_the_smallest_risk_certified_is_the_zero_error_bound_rounded_up(signal, tests):
    """With zero errors among all n accepted inputs the best p-value is (1 - risk)^n, tested at
    delta / (number of cuts): the smallest risk certified is 1 - (delta / cuts)^(1/n), given
    rounded up to two significant digits; certify certifies it and refuses a risk just below."""
    probs, labels = right_and_sure(91)
    found = smallest_risk(probs, labels, delta=0.05, signal=signal)
    exact = 1 - (0.05 / tests) ** (1 / 91)
    assert found == pytest.approx(math.ceil(exact * 1000) / 1000) and found >= exact  # 0.076 and 0.033
    certify(probs, labels, found, delta=0.05, signal=signal)
    with pytest.raises(NotCertified):
        certify(probs, labels, exact * 0.999, delta=0.05, signal=signal)


def test_the_smallest_risk_is_the_least_two_digit_risk_certify_certifies():
    probs, labels = population(300, seed=5)
    found = smallest_risk(probs, labels, delta=0.1)
    assert found == 0.14
    certify(probs, labels, 0.14, delta=0.1)
    with pytest.raises(NotCertified):
        certify(probs, labels, 0.13, delta=0.1)
    wrong = probs.mean(0).argmax(-1) != labels  # where the network errs at every threshold: no risk below 1
    assert smallest_risk(probs[:, wrong], labels[wrong]) is None


@pytest.mark.parametrize("risk, gated, plain", [(0.05, 139, 59), (0.01, 709, 299), (0.005, 1422, 598)])
def test_the_inputs_a_risk_needs_are_the_fewest_with_a_passing_zero_error_p_value(risk, gated, plain):
    """docs/guides/abstention.md's table: the validation inputs a rule must accept, none wrong, for
    risk at delta 0.05, with the gate's 62 cuts and without a gate (one)."""
    assert (inputs_needed(risk, 0.05), inputs_needed(risk, 0.05, tests=1)) == (gated, plain)
    for n, tests in ((gated, len(CUTS)), (plain, 1)):
        assert (1 - risk) ** n <= 0.05 / tests < (1 - risk) ** (n - 1)
    probs, labels = right_and_sure(plain)
    certify(probs, labels, risk, delta=0.05, signal=None)
    with pytest.raises(NotCertified):
        certify(probs[:, 1:], labels[1:], risk, delta=0.05, signal=None)


@pytest.mark.parametrize("kwargs, message", [
    ({"risk": 0}, "risk"), ({"risk": 1.5}, "risk"), ({"risk": 0.1, "delta": 0}, "delta"),
    ({"risk": 0.1, "max_refusal": -0.1}, "max_refusal"), ({"risk": 0.1, "signal": "variance"}, "signal"),
])
def test_bad_settings_are_named(kwargs, message):
    probs, labels = population(100, seed=4)
    with pytest.raises(ValueError, match=message):
        certify(probs, labels, **kwargs)


def test_a_calibration_round_trips_through_json_values():
    probs, labels = population(2000, seed=5)
    calibration = certify(probs, labels, risk=0.3, delta=0.1)
    again = Calibration.from_dict(calibration.to_dict())
    assert again == calibration
    assert torch.equal(again.rule(probs).refused, calibration.rule(probs).refused)


def test_certify_refuses_an_empty_batch_and_what_is_not_a_tensor():
    with pytest.raises(ValueError, match=r"no inputs \(N\)"):
        certify(torch.full((3, 0, 10), 0.1), torch.zeros(0, dtype=torch.long), risk=0.1)
    probs, labels = population(100, seed=6)
    with pytest.raises(TypeError, match="labels as a torch.Tensor"):
        certify(probs, labels.numpy(), risk=0.1)
    with pytest.raises(TypeError, match="torch.Tensor of sampled probabilities"):
        certify(probs.numpy(), labels, risk=0.1)


def density_like(probs, seed: int):
    """Scores that stand in for a feature density's (bnn_zoo.abstain.density): higher for the inputs the
    network is unsure of (their entropy in nats, scaled), with noise of their own, any sign."""
    g = torch.Generator().manual_seed(seed)
    return 40 * uncertainty(probs)["entropy"] - 20 + torch.randn(probs.shape[1], generator=g) * 5


@pytest.mark.slow
def test_a_density_gate_holds_the_bound_at_the_stated_rate_over_many_draws():
    """As the bound above, with the gate on density scores given beside the probabilities and its
    cuts fixed beforehand from training inputs' scores: the error rate among accepted fresh inputs
    exceeds the risk in at most delta of the draws (plus sampling slack)."""
    from bnn_zoo.abstain.certify import density_cuts
    from bnn_zoo.abstain.rule import DENSITY

    risk, delta, draws = 0.2, 0.1, 100
    cuts = density_cuts(density_like(population(5000, seed=20_000)[0], seed=20_000))
    probs, labels = population(100_000, seed=10_000)
    scores = density_like(probs, seed=10_000)
    top, predicted = torch.quantile(probs, 0.5, dim=0).max(1)
    wrong = predicted != labels
    violated, gated = 0, 0
    for seed in range(draws):
        p, y = population(1000, seed)
        rule = certify(p, y, risk, delta, max_refusal=0.3, signal=DENSITY, cuts=cuts, density=density_like(p, seed)).rule
        gated += rule.signal == DENSITY
        kept = (top >= rule.threshold) & (scores <= rule.cut if rule.signal else True)
        violated += wrong[kept].float().mean().item() > risk
        if seed == 0:  # the rule reads the scores it is given: the same refusals as computed here
            assert torch.equal(rule(probs[:, :2000], scores[:2000]).refused, ~kept[:2000])
    slack = 2 * math.sqrt(delta * (1 - delta) / draws)
    assert violated / draws <= delta + slack and gated > draws / 2  # and the density gate was at work


def test_a_density_gate_needs_its_scores_and_its_own_cuts():
    from bnn_zoo.abstain.certify import density_cuts
    from bnn_zoo.abstain.rule import DENSITY

    probs, labels = population(200, seed=3)
    rule = Rule(threshold=0.2, signal=DENSITY, cut=-5.0)  # minus a log density: a cut of any sign
    scores = torch.linspace(-10, 10, 200)
    assert torch.equal(rule(probs, scores).refused_by_gate, scores > -5.0)
    with pytest.raises(ValueError, match="this rule's gate reads the feature density: pass density="):
        rule(probs)
    with pytest.raises(ValueError, match=r"one density score per input \(200\), got shape \(3,\)"):
        rule(probs, scores[:3])
    with pytest.raises(ValueError, match="a density gate's cuts are nats of its own scores"):
        certify(probs, labels, 0.3, signal=DENSITY, density=scores)
    cuts = density_cuts(scores)
    assert cuts[0] == pytest.approx(float(scores.median()), abs=0.1) and cuts[-1] == math.inf
    assert all(a < b for a, b in zip(cuts, cuts[1:])) and len(cuts) == 61


def test_a_run_s_config_cannot_ask_for_a_density_gate_yet():
    from bnn_zoo.core.errors import ConfigError
    from bnn_zoo.runs.training.resume import config_for_run

    with pytest.raises(ConfigError, match="a feature-density gate is certified in Python"):
        config_for_run("mnist_mlp", ["abstention.signal=feature_density"])
