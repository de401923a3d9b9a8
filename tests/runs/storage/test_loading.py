"""A calibration read from a run directory or a shipped file (bnn_zoo.runs.storage.loading): a tampered or
impossible entry is refused by name in one line, by load, predict and the page alike."""
import json
import shutil

import pytest

from bnn_zoo.core.errors import CheckpointError
from bnn_zoo.runs.storage import loading
from bnn_zoo.runs.storage.checkpoint import CALIBRATION, read, save_atomic

# (what is done to a calibration, what the refusal says of it)
TAMPERED = {
    "a refusal rate that is no share": (lambda c: c["bayes"]["validation"].__setitem__("refused", 1.5),
                                        "bayes: its rule's share of validation refused is 1.5, not a number from 0 to 1"),
    "an after-alarm rule without its rate": (lambda c: c["twin"]["after_alarm"]["validation"].pop("refused"),
                                             "twin: its after-alarm rule's share of validation refused is None, not a "
                                             "number from 0 to 1"),
    "a part that is a list": (lambda c: c.__setitem__("twin", [1, 2]), "its twin entry is [1, 2], not a mapping"),
    "an after-alarm rule without its threshold": (lambda c: c["bayes"]["after_alarm"]["rule"].pop("threshold"),
                                                  "bayes: its after-alarm rule lacks 'threshold'"),
    # issue 47: a null rule passed the check and failed later with a TypeError; an empty entry said "(None)"
    "a null after-alarm rule": (lambda c: c["bayes"]["after_alarm"].__setitem__("rule", None),
                                "bayes: its after-alarm rule is None, not a rule"),
    "a null rule": (lambda c: c["twin"].__setitem__("rule", None), "twin: its rule is None, not a rule"),
    "an empty after-alarm entry": (lambda c: c["bayes"].__setitem__("after_alarm", {}),
                                   "bayes: its after-alarm entry holds neither a rule nor why none is certified ({})"),
}


@pytest.fixture(scope="module")
def shipped_copy(tmp_path_factory):
    """The shipped lenet's files, copied: each test tampers with a copy of its own."""
    folder = tmp_path_factory.mktemp("shipped")
    for name in ("lenet.pt", "lenet_twin.pt"):
        shutil.copy(loading.SHIPPED / name, folder / name)
    return folder


@pytest.mark.parametrize("how", TAMPERED)
def test_a_tampered_run_calibration_is_refused_by_name_in_one_line(certified_run, tmp_path, capsys, how):
    from bnn_zoo.cli.predict import main as predict_main

    run = tmp_path / "run"
    shutil.copytree(certified_run, run)
    found = json.loads((run / CALIBRATION).read_text())
    tamper, said = TAMPERED[how]
    tamper(found)
    (run / CALIBRATION).write_text(json.dumps(found))
    expected = (f"{run / CALIBRATION} is not a calibration bnn-zoo wrote ({said}); delete it or write it again: "
                f"python -m bnn_zoo.certify {run}")
    with pytest.raises(CheckpointError) as refused:
        loading.load(run)
    assert str(refused.value) == expected
    assert predict_main([str(run), "nothing.png"]) == 2
    assert capsys.readouterr().err == f"error: {expected}\n"


@pytest.mark.parametrize("how", ["a refusal rate that is no share", "an after-alarm rule without its rate", "a part that is a list"])
def test_a_tampered_shipped_calibration_is_refused_by_name_and_the_page_says_so(shipped_copy, tmp_path, monkeypatch,
                                                                                how):
    from starlette.testclient import TestClient

    from bnn_zoo.page.answers import Answerer
    from bnn_zoo.page.app import create_app

    folder = tmp_path / "shipped"
    shutil.copytree(shipped_copy, folder)
    state = read(folder / "lenet.pt")
    tamper, said = TAMPERED[how]
    tamper(state["calibration"])
    save_atomic(state, folder / "lenet.pt")
    monkeypatch.setattr(loading, "SHIPPED", folder)
    expected = (f"{folder / 'lenet.pt'}'s calibration is not a calibration bnn-zoo wrote ({said}); the file that "
                "shipped is damaged: install bnn-zoo again")
    with pytest.raises(CheckpointError) as refused:
        loading.load("lenet")
    assert str(refused.value) == expected
    client = TestClient(create_app(Answerer("lenet", "cpu")), base_url="http://localhost:8000")
    reply = client.post("/api/answer", params={"example": "digit"})
    assert (reply.status_code, reply.json()) == (400, {"error": expected})  # not a 500


@pytest.mark.parametrize("loosened, looser", [({"threshold": 0.0}, "a lower threshold"),
                                               ({"quantile": 0.9}, "a higher quantile"),
                                               ({"signal": None, "cut": None}, "another gate and another cut"),
                                               ({"cut": 5.0, "quantile": 0.6}, "a higher quantile and another cut")])
def test_an_after_alarm_rule_that_does_not_tighten_the_rule_is_refused(loosened, looser):
    """Issue 47: an after-alarm rule hand-loosened below the certified one answered inputs while
    listing the rule that refused them, its line still "held to the stricter after-alarm rule"."""
    from bnn_zoo.abstain.rule import Rule

    rule = Rule(0.5, 0.85, "mutual_information", 0.46)
    strict = {**Rule(0.02, 0.9, "mutual_information", 0.46).to_dict()}
    refused = {"refused": 0.02}
    entry = {"rule": rule.to_dict(), "validation": refused, "after_alarm": {"rule": strict, "validation": refused}}
    assert loading.checked_calibration({"bayes": entry}, "here", "fix") == {"bayes": entry}  # a tightening
    entry["after_alarm"]["rule"] = {**strict, **loosened}
    with pytest.raises(CheckpointError) as refused:
        loading.checked_calibration({"bayes": entry}, "here", "fix it")
    loose = Rule.from_dict(entry["after_alarm"]["rule"])
    assert str(refused.value) == (f"here is not a calibration bnn-zoo wrote (bayes: its after-alarm rule "
                                  f"({loose.in_words()}) does not tighten its rule ({rule.in_words()}): it has "
                                  f"{looser}); fix it")


def test_an_after_alarm_rule_without_a_rule_is_refused():
    from bnn_zoo.abstain.rule import Rule

    entry = {"after_alarm": {"rule": Rule(0.02, 0.9).to_dict()}}
    with pytest.raises(CheckpointError, match=r"\(bayes: it holds an after-alarm rule but no certified rule for it to "
                                              r"tighten\)"):
        loading.checked_calibration({"bayes": entry}, "here", "fix")


def test_a_calibration_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / CALIBRATION
    path.write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"calibration.json is not a calibration bnn-zoo wrote \(it holds "
                                              r"\[1, 2\], not a mapping of posteriors\); delete it or write it again"):
        loading.read_calibration(path)
    rule = {"quantile": 0.5, "threshold": 0.2, "signal": None, "cut": None}
    assert loading.checked_calibration({"bayes": {"rule": rule, "validation": {"refused": 0.02}}}, "here", "")
    with pytest.raises(CheckpointError, match="its rule's share of validation refused is True, not a number"):
        loading.checked_calibration({"bayes": {"rule": rule, "validation": {"refused": True}}}, "here", "")
