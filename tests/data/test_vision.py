"""torchvision imported in one place (bnn_zoo.data.vision): a torchvision built for another torch is
said in one line naming both versions and the command that installs a matching pair."""
import sys
from importlib.metadata import version

import pytest
import torch

from bnn_zoo.data.vision import matching_install

MISMATCH = "operator torchvision::nms does not exist"  # what torchvision raises beside another torch


class _OtherTorchsTorchvision:
    """An import hook: importing torchvision fails as it does where it was built for another torch."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            raise RuntimeError(MISMATCH)
        return None


@pytest.mark.parametrize("torch_version, command", [
    ("2.14.1+cpu", 'pip install torch==2.14.1 "torchvision==0.29.*" --index-url https://download.pytorch.org/whl/cpu'),
    ("2.5.1+cu124", 'pip install torch==2.5.1 "torchvision==0.20.*" --index-url https://download.pytorch.org/whl/cu124'),
    ("2.0.1", 'pip install torch==2.0.1 "torchvision==0.15.*"'),
    ("1.13.1", "pip install --upgrade torch torchvision"),
    ("2.6.0a0+git1234", "pip install --upgrade torch torchvision"),  # a build of its own: no pair to name
    ("2.6.0+git1234", "pip install --upgrade torch torchvision"),
    ("2.7.1+rocm6.3", 'pip install torch==2.7.1 "torchvision==0.22.*" --index-url https://download.pytorch.org/whl/rocm6.3'),
])
def test_the_matching_torchvision_is_named_for_each_torch(torch_version, command):
    assert matching_install(torch_version) == command


def test_evaluate_says_a_torchvision_of_another_torch_in_one_line(monkeypatch, capsys):
    """Issue 51: evaluate ended in a 36-line traceback where torchvision did not match torch. Through
    the package's real import point: the modules that import torchvision imported anew."""
    from bnn_zoo.cli import evaluate

    for name in [n for n in sys.modules if n.split(".")[0] in ("torchvision", "torchmetrics")] + [
            "bnn_zoo.data.vision", "bnn_zoo.abstain.metrics", "bnn_zoo.evaluation.evaluate"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_OtherTorchsTorchvision(), *sys.meta_path])
    assert evaluate.main(["lenet", "--samples", "2"]) == 2
    said = capsys.readouterr().err
    assert said == (f"error: torchvision {version('torchvision')} does not work with torch {torch.__version__}, it was "
                    f"built for another torch ({MISMATCH}): install the torchvision of this torch, "
                    f"{matching_install(torch.__version__)} (or both anew: pip install --upgrade torch torchvision)\n")
    assert "pip install torch==" in said  # this torch's pair named, not only both anew


def test_where_no_pair_is_known_both_are_installed_anew():
    from bnn_zoo.data.vision import mismatch

    assert mismatch("2.6.0a0+git1234", "0.21.0", MISMATCH) == (
        f"torchvision 0.21.0 does not work with torch 2.6.0a0+git1234, it was built for another torch ({MISMATCH}): "
        "install both anew, pip install --upgrade torch torchvision")
