"""The package as a Pyro user's process sees it: importing it changes nothing global, and its
modules import one way (no cycles)."""
import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bnn_zoo"

SNAPSHOT = """
import json, sys, matplotlib, pyro, torch, torch.nn.functional as F
def state():
    return {"pyro": {k: repr(v) for k, v in pyro.settings.get().items()},
            # the raw settings: reading rcParams["backend"] would resolve the backend, importing pyplot
            "rc": repr(sorted((k, repr(v)) for k, v in dict.items(matplotlib.rcParams))),
            "linear": id(F.linear), "conv2d": id(F.conv2d), "grad": torch.is_grad_enabled(),
            "validation": pyro.infer.util.is_validation_enabled(), "dtype": str(torch.get_default_dtype()),
            "param_store": len(pyro.get_param_store())}
before = state()
import bnn_zoo, bnn_zoo.cli.train, bnn_zoo.predict, bnn_zoo.evaluation.plots, bnn_zoo.core.nuts
pyplot = "matplotlib.pyplot" in sys.modules
import bnn_zoo.evaluation.evaluate, bnn_zoo.evaluation.rejection  # torchmetrics, which they use, imports pyplot itself
after = state()
print(json.dumps({"same": before == after, "pyplot": pyplot,
                  "diff": {k: (before[k], after[k]) for k in before if before[k] != after[k]}}))
"""


def test_importing_the_package_changes_nothing_global():
    import json

    done = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["same"], found["diff"]
    assert not found["pyplot"]  # plots use matplotlib's Figure API: no pyplot, no backend chosen


def _imports(path: Path) -> set[str]:
    """The bnn_zoo modules a module imports (relative or absolute), at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                found.update(n.split(".")[0] for n in names)
            elif node.module and node.module.startswith("bnn_zoo."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("bnn_zoo."))
    return found


def test_modules_import_one_way():
    modules = {p.stem: _imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert all(deps <= set(modules) for deps in modules.values()), modules
    order, done = [], set()
    while len(done) < len(modules):
        ready = sorted(m for m, deps in modules.items() if m not in done and deps <= done)
        assert ready, f"import cycle among {sorted(set(modules) - done)}"
        order += ready
        done |= set(ready)
    assert order.index("nets") < order.index("bnn") < order.index("zoo") < order.index("train")
