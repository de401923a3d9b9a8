"""The examples of the README and of the guide to using a pair in your own Pyro code run as written
(pasted alone, from the clone), and the README's first command answers the digit that ships."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import NO_MNIST, SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
SEVEN = 7  # the label of MNIST's first test digit, which ships as bnn_zoo/shipped/seven.png


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_the_pyro_guide_s_example_runs_as_written(capsys):
    example = next(b for b in python_blocks(ROOT / "docs" / "guides" / "pyro.md") if b.startswith("import pyro, torch, bnn_zoo"))
    exec(compile(example, "pyro.md", "exec"), {})
    shapes, error = capsys.readouterr().out.strip().splitlines()
    assert shapes == "torch.Size([100, 40]) torch.Size([100, 40])"
    assert float(error.removeprefix("tensor(").rstrip(")")) < 0.5  # the NUTS predictive fits y = x^3 / 4


@pytest.mark.slow  # a thousand SVI steps: seconds
def test_the_pyro_guide_s_distance_to_hmc_runs_as_written(capsys):
    """The guide scored against the shipped toy reference in a few lines: W1 on each of its sets,
    beside the floor (a chain's W1 to the others' pool), and how many times the floor beyond the data."""
    from bnn_zoo.evaluation.hmc_distance.reference import Reference

    example = next(b for b in python_blocks(ROOT / "docs" / "guides" / "pyro.md") if "against_hmc" in b)
    exec(compile(example, "pyro.md", "exec"), {})
    *lines, times = capsys.readouterr().out.strip().splitlines()
    reference = Reference.read("toy_mlp_hmc")
    assert [line.split(" (")[0] for line in lines] == [f"toy_mlp_hmc {name}" for name in reference.sets]
    for line, name in zip(lines, reference.sets):
        w1, floor = re.fullmatch(rf"toy_mlp_hmc {name} \(200 inputs\): W1 (\S+) \(\S+x a chain's (\S+) from the "
                                 rf"others\)", line).groups()
        assert 0 < float(w1) < 100 and float(floor) == pytest.approx(reference.floor(name)["held_out_w1"], abs=1e-4)
    assert float(times) == pytest.approx(float(w1) / reference.floor("beyond")["held_out_w1"], rel=1e-3)


def _needs_mnist(block: str) -> None:
    """Skip where a block reads MNIST ($BNN_ZOO_DATA, as a user's shell has it) and this machine has none."""
    if "load_torchvision" in block and not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)


def _pyro_quick_start(found: dict) -> None:
    from bnn_zoo.data.sets import load_torchvision

    assert torch.equal(found["y"], load_torchvision("mnist", str(SHARED_DATA))[1][:128])  # MNIST's first 128
    assert found["logits"].shape == (100, 128, 10) and found["loss"] > 0
    assert not torch.allclose(found["logits"][0], found["logits"][1])  # each draw its own weights


def _shipped_quick_start(found: dict) -> None:
    assert found["probs"].shape == (100, 1, 10)
    assert found["decision"].prediction.tolist() == [SEVEN] and not found["decision"].refused.any()
    assert found["in_set"][0].nonzero().flatten().tolist() == [SEVEN]  # its 99% set: the seven alone


# What each Python block of the first pages (by its first line) must have computed; a block not
# here need only run
CHECKS = {"import pyro, bnn_zoo": _pyro_quick_start, "import bnn_zoo": _shipped_quick_start}
BLOCKS = [(page, block) for page in ("README.md", "docs/getting-started.md") for block in python_blocks(ROOT / page)]


@pytest.mark.parametrize("page, block", BLOCKS, ids=[f"{page}: {block.splitlines()[0]}" for page, block in BLOCKS])
def test_each_python_block_of_the_first_pages_runs_as_pasted(page, block, monkeypatch):
    """Each block alone, in a namespace of its own (x was defined nowhere), with $BNN_ZOO_DATA as a
    user's shell would have it; it computes what its comments say."""
    _needs_mnist(block)
    monkeypatch.setenv("BNN_ZOO_DATA", str(SHARED_DATA))
    found = {}
    exec(compile(block, page, "exec"), found)
    CHECKS.get(block.splitlines()[0], lambda found: None)(found)


def test_the_readme_s_quick_starts_are_the_blocks_checked():
    assert set(CHECKS) <= {block.splitlines()[0] for page, block in BLOCKS if page == "README.md"}


def test_the_shipped_example_is_mnist_s_first_test_digit(shared_data):
    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import load_torchvision
    from bnn_zoo.shipped import EXAMPLE

    images, labels = load_torchvision("mnist", str(shared_data), train=False, download=False)
    assert torch.equal(load_image(EXAMPLE, centre=False), images[0]) and int(labels[0]) == SEVEN
    assert EXAMPLE.stat().st_size < 1000


def test_the_shipped_sneaker_is_fashion_mnist_s_first_test_sneaker_and_ships_in_the_wheel(shared_data):
    """Issue 47: getting started asked ``predict lenet_fashion shoe.png`` and no shoe.png shipped."""
    import fnmatch
    import tomllib

    from bnn_zoo.data.images import load_image
    from bnn_zoo.data.sets import CLASS_NAMES, load_torchvision
    from bnn_zoo.shipped import FASHION_EXAMPLE

    images, labels = load_torchvision("fashion_mnist", str(shared_data), train=False, download=False)
    first = int((labels == CLASS_NAMES["fashion_mnist"].index("Sneaker")).nonzero()[0])
    assert first == 9 and torch.equal(load_image(FASHION_EXAMPLE, centre=False), images[first])
    assert FASHION_EXAMPLE.stat().st_size < 1000
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["bnn_zoo.shipped"]
    assert any(fnmatch.fnmatch(FASHION_EXAMPLE.name, pattern) for pattern in shipped)
    assert f"python -m bnn_zoo.predict lenet_fashion bnn_zoo/shipped/{FASHION_EXAMPLE.name}" in \
        (ROOT / "docs" / "getting-started.md").read_text()


@pytest.mark.slow
def test_the_readme_s_first_command_answers_the_shipped_digit_s_label():
    """The install block's predict line, run as a user runs it in the clone: it answers the true label."""
    install = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    line = next(line for line in install.splitlines() if line.startswith("python -m bnn_zoo.predict"))
    command = shlex.split(line.partition("#")[0])
    done = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    image = command[-1]
    assert (ROOT / image).is_file() and f"{image}: {SEVEN} (" in done.stdout, done.stdout


def test_the_readme_and_getting_started_install_alike():
    """The first install each page gives is the same command (getting started installed the tests'
    extra, the README the page's)."""
    install = re.compile(r'pip install -e "\.\[[a-z,]+\]"')
    first = {page: install.findall((ROOT / page).read_text())[0] for page in ("README.md", "docs/getting-started.md")}
    assert first["README.md"] == first["docs/getting-started.md"] == 'pip install -e ".[serve]"', first
