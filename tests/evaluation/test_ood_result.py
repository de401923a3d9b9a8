"""An OOD set's detection figures (bnn_zoo.evaluation.evaluate.ood_result) by each signal a rule can
gate on, the largest mean probability (the maximum softmax probability baseline) among them: AUROC,
AUPR and the share of the test inputs flagged where 95% of the set's are (FPR at 95% TPR)."""
import pytest
import torch

from bnn_zoo.abstain.rule import Rule
from bnn_zoo.evaluation.evaluate import ood_result
from bnn_zoo.evaluation.results import Evaluation, OODResult


def _two_classes(top: torch.Tensor) -> torch.Tensor:
    """One deterministic prediction [1, N, 2] whose larger probability is ``top``."""
    return torch.stack([top, 1 - top], -1)[None]


def test_the_max_probability_s_fpr_at_95_tpr_is_the_share_of_test_inputs_as_unsure_as_the_95th_outlier():
    test = 0.99 - 0.19 * torch.arange(100) / 99  # the test inputs' largest probabilities, 0.99 down to 0.80
    ood = 0.85 - 0.35 * torch.arange(100) / 99  # the set's, 0.85 down to 0.50
    found = ood_result(_two_classes(test), _two_classes(ood), Rule())
    # flagging 95 of the set's 100 flags every input whose top is at most the 6th highest of the set's,
    # 0.85 - 0.35 x 5 / 99 = 0.8323: the test inputs 83 to 99, 17 of 100
    assert found.by_max_prob.fpr95 == pytest.approx(0.17)
    # pair by pair, the set's input less sure than the test input (a tie counts half)
    pairs = ((test[:, None] > ood[None, :]).float() + 0.5 * (test[:, None] == ood[None, :]).float()).mean()
    assert found.by_max_prob.auroc == pytest.approx(pairs.item(), abs=1e-6)
    assert found.by_entropy.fpr95 == pytest.approx(0.17)  # of two classes, the entropy ranks as the top does
    assert found.by_mutual_information is None  # one deterministic prediction


def test_an_older_eval_json_without_the_max_probability_reads_and_writes_back():
    test, ood = _two_classes(torch.full((10,), 0.9)), _two_classes(torch.linspace(0.5, 0.95, 10))
    found = ood_result(test, ood, Rule())
    assert OODResult.from_dict(found.to_dict()) == found
    older = {k: v for k, v in found.to_dict().items() if k != "by_max_prob"}
    assert OODResult.from_dict(older).by_max_prob is None
    evaluation = Evaluation("run", 4, 0, "calibrated", 10, {}, {}, ("rotate",), ("noise", "overlaid"))
    assert Evaluation.from_dict(evaluation.to_dict()) == evaluation
    assert evaluation.to_dict()["ood_seen_in_training"] == ["noise", "overlaid"]
    written = evaluation.to_dict()
    del written["ood_seen_in_training"]  # an eval.json written before outliers
    assert Evaluation.from_dict(written).ood_seen_in_training == ()
