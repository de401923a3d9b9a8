"""The examples of the README and of the guide to using a pair in your own Pyro code run as written."""
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_the_pyro_guide_s_example_runs_as_written(capsys):
    example = next(b for b in python_blocks(ROOT / "docs" / "guides" / "pyro.md") if b.startswith("import pyro, torch, bnn_zoo"))
    exec(compile(example, "pyro.md", "exec"), {})
    shapes, error = capsys.readouterr().out.strip().splitlines()
    assert shapes == "torch.Size([100, 40]) torch.Size([100, 40])"
    assert float(error.removeprefix("tensor(").rstrip(")")) < 0.5  # the NUTS predictive fits y = x^3 / 4


def test_the_readme_s_pyro_quick_start_runs_as_written():
    example = next(b for b in python_blocks(ROOT / "README.md") if b.startswith("import pyro, bnn_zoo"))
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    found = {"x": x, "y": y}
    exec(compile(example, "README.md", "exec"), found)
    assert found["logits"].shape == (100, 8, 10) and found["loss"] > 0
    assert not torch.allclose(found["logits"][0], found["logits"][1])  # each draw its own weights


def test_the_readme_s_shipped_quick_start_runs_as_written():
    from bnn_zoo.data.sets import normalize

    example = next(b for b in python_blocks(ROOT / "README.md") if b.startswith("import bnn_zoo"))
    found = {"x": normalize(torch.zeros(3, 28, 28, dtype=torch.uint8))}  # blank images
    exec(compile(example, "README.md", "exec"), found)
    assert found["probs"].shape == (100, 3, 10) and found["decision"].refused.all()  # a blank image is refused
    assert found["in_set"].shape == (3, 10)


def test_the_readme_and_getting_started_install_alike():
    """The first install each page gives is the same command (getting started installed the tests'
    extra, the README the page's)."""
    install = re.compile(r'pip install -e "\.\[[a-z,]+\]"')
    first = {page: install.findall((ROOT / page).read_text())[0] for page in ("README.md", "docs/getting-started.md")}
    assert first["README.md"] == first["docs/getting-started.md"] == 'pip install -e ".[serve]"', first
