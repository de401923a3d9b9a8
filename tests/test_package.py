"""The package as a Pyro user's process sees it: importing it changes nothing global, and its
modules import one way (no cycles)."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
import bnn_zoo, bnn_zoo.cli.train, bnn_zoo.predict, bnn_zoo.evaluation.figures.plots, bnn_zoo.core.inference.nuts
pyplot = "matplotlib.pyplot" in sys.modules
import bnn_zoo.evaluation.evaluate, bnn_zoo.evaluation.figures.rejection  # torchmetrics, which they use, imports pyplot itself
after = state()
print(json.dumps({"same": before == after, "pyplot": pyplot,
                  "diff": {k: (before[k], after[k]) for k in before if before[k] != after[k]}}))
"""


@pytest.mark.slow
def test_importing_the_package_changes_nothing_global():
    import json

    done = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["same"], found["diff"]
    assert not found["pyplot"]  # plots use matplotlib's Figure API: no pyplot, no backend chosen


# The layers, lowest first: a module imports from its own subpackage and those below it, never above.
LAYERS = ("core", "data", "abstain", "posterior", "runs", "evaluation", "bench", "page", "cli")
ENTRIES = ("__init__", "train", "predict", "evaluate", "certify", "calibrate", "serve", "trust")
# The rooms of a layer split by idea, and the rooms each may import (``core.errors`` is the ground floor)
ROOMS = {"core.networks": (), "core.fast": (), "core.inference": ("core.networks", "core.fast"),
         "data.shifted": (), "evaluation.figures": (), "evaluation.scoreboard": ("evaluation.figures",),
         "evaluation.hmc_distance": (),
         "runs.plans": (), "runs.storage": ("runs.plans",), "runs.training": ("runs.plans", "runs.storage")}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _imports(path: Path) -> set[str]:
    """The bnn_zoo modules a module imports (relative or absolute, dotted under bnn_zoo), at any
    depth of its code."""
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" and path.parent != PACKAGE else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
                if node.module:
                    found.add(".".join(target))
                else:
                    found.update(".".join([*target, a.name]) for a in node.names)
            elif node.module and node.module.startswith("bnn_zoo."):
                found.add(node.module[len("bnn_zoo."):])
        elif isinstance(node, ast.Import):
            found.update(a.name[len("bnn_zoo."):] for a in node.names if a.name.startswith("bnn_zoo."))
    return found


def _layer(module: str) -> int:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else len(LAYERS)  # the entry modules sit on top


def test_modules_import_one_way_down_the_layers():
    modules = {_module(p): _imports(p) for p in PACKAGE.rglob("*.py") if "shipped" not in p.parts}
    known = set(modules)
    for module, deps in modules.items():
        for dep in deps:
            if dep not in known:  # a name imported from a package's __init__
                dep = dep.rpartition(".")[0]
            assert dep in known, f"{module} imports {dep}, which is no module of the package"
            assert _layer(dep) <= _layer(module), f"{module} ({LAYERS[_layer(module)] if _layer(module) < len(LAYERS) else 'entry'}) imports {dep}, a layer above it"
    graph = {m: {d if d in known else d.rpartition(".")[0] for d in deps} - {m} for m, deps in modules.items()}
    order, done = [], set()
    while len(done) < len(graph):
        ready = sorted(m for m, deps in graph.items() if m not in done and deps <= done)
        assert ready, f"import cycle among {sorted(set(graph) - done)}"
        order += ready
        done |= set(ready)
    top = [p.stem for p in PACKAGE.glob("*.py")]
    assert sorted(top) == sorted(ENTRIES), top  # the top holds the entry points alone
    assert len([d for d in PACKAGE.iterdir() if (d / "__init__.py").is_file() and d.name != "shipped"]) == len(LAYERS)


def _room(module: str) -> str | None:
    return next((room for room in ROOMS if module.startswith(room + ".")), None)


def test_the_rooms_of_a_layer_import_one_way_and_hold_at_most_ten_modules():
    """Inside a layer a room imports from itself, the layer's own modules and the rooms it is allowed
    (plans below storage below training; networks and the fast step below inference), never the other
    way; a layer's own modules never import its rooms; no room, and no layer's own modules, past 10."""
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        room = _room(module)
        for dep in _imports(path):
            other = _room(dep) or _room(dep + ".x")  # a name imported from a room's package
            if other and room != other and other.split(".")[0] == module.split(".")[0]:  # within one layer
                assert room is None or other in ROOMS[room], f"{module} ({room}) imports {dep} ({other})"
            if room is None and other and other.split(".")[0] == module.split(".")[0]:
                assert False, f"{module} imports {dep}: a layer's own modules never import its rooms"
    for layer in {room.split(".")[0] for room in ROOMS} | set(LAYERS):  # every room, a layer's own modules too
        for folder in [PACKAGE / layer, *(PACKAGE / room.replace(".", "/") for room in ROOMS if room.startswith(layer))]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            assert len(modules) <= 10, (folder.name, len(modules))
    for layer in ("core", "runs"):  # split whole: their rooms and a ground floor of errors
        assert {p.stem for p in (PACKAGE / layer).glob("*.py")} <= {"__init__", "errors"}, layer


def test_no_module_passes_300_lines():
    """A module is read in one sitting: the package's and the scripts'."""
    for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "scripts").glob("*.py")]:
        assert len(path.read_text().splitlines()) <= 300, path


def test_the_module_map_in_the_docs_is_the_package_s():
    """docs/guides/modules.md names each room under a heading and each module in a row of its table:
    every module of the package, none that is not."""
    text = (PACKAGE.parent / "docs" / "guides" / "modules.md").read_text()
    mapped, room = set(), None
    for line in text.splitlines():
        if line.startswith("## `"):
            room = line[4:line.index("`", 4)]
        elif room and line.startswith("| `"):
            cell = line.split("|")[1]
            mapped |= {f"{room}.{name}" for name in cell.replace("`", "").replace(" ", "").split(",")}
    modules = {_module(p) for p in PACKAGE.rglob("*.py") if "shipped" not in p.parts
               and p.parent != PACKAGE and p.name != "__init__.py"}
    assert mapped == modules, (sorted(modules - mapped), sorted(mapped - modules))
    headings = [line[4:line.index("`", 4)] for line in text.splitlines() if line.startswith("## `")]
    assert list(dict.fromkeys(h.split(".")[0] for h in headings)) == list(LAYERS)
    assert [h for h in headings if "." in h] == [room for layer in LAYERS for room in ROOMS if room.startswith(layer + ".")]


def test_the_wheel_ships_every_subpackage():
    """pyproject.toml lists the packages the wheel holds: each folder of the package with an
    ``__init__`` (a room missing there installs a package that cannot import)."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"bnn_zoo." + _module(p).removesuffix(".__init__") if p.parent != PACKAGE else "bnn_zoo"
             for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
