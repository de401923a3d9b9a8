"""The README's example of a pair in a Pyro user's own code runs as written."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_pyro_example_runs_as_written(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if b.startswith("import pyro, torch, bnn_zoo"))
    exec(compile(example, "README.md", "exec"), {})
    shapes, error = capsys.readouterr().out.strip().splitlines()
    assert shapes == "torch.Size([100, 40]) torch.Size([100, 40])"
    assert float(error.removeprefix("tensor(").rstrip(")")) < 0.5  # the NUTS predictive fits y = x^3 / 4
