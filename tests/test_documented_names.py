"""What the docs promise by name works: each ``python -m bnn_zoo.X`` they give answers --help, each
option they give a command (``python -m bnn_zoo.X ... --opt``, ``scripts/X.py ... --opt``) is in its
--help, each file or folder of the repository they name (bnn_zoo/..., scripts/..., configs/...,
docs/...) is there, each dotted bnn_zoo name in the README, the docs and the package's own
docstrings and comments resolves, every name the package exported before its rooms were built still
does, and the names users typed before the renames still work with a one-line notice."""
import contextlib
import functools
import importlib
import io
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest
from helpers import load_script

import bnn_zoo

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(bnn_zoo.__file__).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]  # CHANGELOG.md keeps the old names
SOURCES = sorted((ROOT / "bnn_zoo").rglob("*.py"))
COMMAND = re.compile(r"python -m (bnn_zoo(?:\.\w+)+)")
DOTTED = re.compile(r"(?<![\w./])bnn_zoo(?:\.[A-Za-z_]\w*)+")
# bnn_zoo.__all__ before the restructure (main at 2f169ae): each still imports from the package
EXPORTED = ["ARCHITECTURES", "BayesianNet", "Categorical", "ConformalSets", "DirectAutoNormal", "FanInPrior",
            "Gaussian", "GaussianPrior", "LocalReparameterization", "ScaleMixturePrior", "SplitELBO", "Trained",
            "Twin", "bayesian", "build", "calibrate_sets", "fit_temperature", "load", "make_guide", "make_net",
            "make_prior", "make_twin", "posteriors", "predict"]


def _found(pattern: re.Pattern, files: list[Path]) -> dict[str, str]:
    """Each match of ``pattern`` in ``files``, with the first file that gives it."""
    found = {}
    for file in files:
        for match in pattern.findall(file.read_text()):
            found.setdefault(match.rstrip("."), str(file.relative_to(ROOT)))
    return found


def resolve(dotted: str):
    """The object a dotted name names, attribute by attribute from the package (``bnn_zoo.predict``
    is the function, not the command's module), importing a submodule where one is not yet loaded;
    a module that is not this package's file (an editable install's other copy) does not count."""
    parts = dotted.split(".")
    found = bnn_zoo
    for depth, name in enumerate(parts[1:], 2):
        if not hasattr(found, name):
            module = importlib.import_module(".".join(parts[:depth]))
            if not Path(module.__file__).is_relative_to(PACKAGE):
                raise ModuleNotFoundError(f"{module.__name__} is no module of {PACKAGE}")
        found = getattr(found, name)
    return found


COMMANDS = {**_found(COMMAND, SOURCES), **_found(COMMAND, DOCS)}
# A file or folder of the repository, as the docs name it (a glob where it holds *)
REPO_PATH = re.compile(r"(?<![\w./-])((?:bnn_zoo|scripts|configs|docs)/[\w.*/-]*[\w*])")
# A command the docs give, in code: python -m bnn_zoo.X, or a script; its options follow it
INVOCATION = re.compile(r"python -m (bnn_zoo(?:\.\w+)+)|(scripts/\w+\.py)")
OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def code_of(text: str) -> list[str]:
    """The code in a Markdown page: each line of its fenced blocks, and each inline code span (one
    broken over two lines joined by a space)."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return ([line for block in fenced for line in block.splitlines()]
            + [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)])


def documented_options() -> dict[tuple[str, str], str]:
    """{(command, option): the page that gives it} for each --option the docs write after a command
    (``python -m bnn_zoo.X`` or ``scripts/X.py``), up to the next command in the same code."""
    found = {}
    for page in DOCS:
        for code in code_of(page.read_text()):
            calls = list(INVOCATION.finditer(code))
            for call, after in zip(calls, [*calls[1:], None]):
                tail = code[call.end():after.start() if after else len(code)]
                for option in OPTION.findall(tail):
                    found.setdefault((call.group(1) or call.group(2), option), str(page.relative_to(ROOT)))
    return found


@functools.cache
def help_of(command: str) -> str:
    """What ``command --help`` prints: a ``bnn_zoo.X`` module's, or a ``scripts/X.py`` script's."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        if command.startswith("scripts/"):
            load_script(Path(command).stem).main(["--help"])
        else:
            argv, sys.argv = sys.argv, [command, "--help"]
            try:
                runpy.run_module(command, run_name="__main__")
            finally:
                sys.argv = argv
    return out.getvalue()


PATHS = _found(REPO_PATH, DOCS)
OPTIONS = documented_options()
NAMES = {name: where for name, where in {**_found(DOTTED, SOURCES), **_found(DOTTED, DOCS)}.items()
         if name not in COMMANDS and not name.endswith((".py", ".pt", ".json"))}


def test_the_docs_give_every_command():
    documented = {"train", "predict", "evaluate", "certify", "serve", "trust"}
    assert {f"bnn_zoo.{command}" for command in documented} <= set(_found(COMMAND, DOCS))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_documented_command_answers_help(command, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [command, "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(command, run_name="__main__")
    assert stop.value.code == 0, f"{command} (in {COMMANDS[command]}) exited {stop.value.code}"
    assert capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_documented_path_is_in_the_repository(path):
    there = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
    assert there, f"{path}, named in {PATHS[path]}, is not there"


@pytest.mark.parametrize("command, option", sorted(OPTIONS))
def test_each_documented_option_is_one_its_command_takes(command, option):
    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_of(command)), \
        f"{command} {option}, given in {OPTIONS[(command, option)]}, is not among its options"


@pytest.mark.filterwarnings("ignore:bnn_zoo.SplitELBO is now:DeprecationWarning")
@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_documented_name_resolves(name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as err:
        pytest.fail(f"{name}, named in {NAMES[name]}, does not resolve: {err}")


@pytest.fixture
def nothing_said(monkeypatch):
    """A process that has given no notice of a renamed name yet (each is given once a process)."""
    from bnn_zoo.core import errors

    monkeypatch.setattr(errors, "_SAID", set())


def test_every_name_exported_before_still_imports(nothing_said):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = {name: getattr(bnn_zoo, name) for name in EXPORTED}
    assert found["SplitELBO"] is bnn_zoo.TraceKL_ELBO
    assert [str(w.message) for w in caught] == ["bnn_zoo.SplitELBO is now bnn_zoo.TraceKL_ELBO"]
    assert set(EXPORTED) - {"SplitELBO"} <= set(bnn_zoo.__all__)


def test_the_old_command_and_config_key_work_with_a_notice(monkeypatch, capsys, nothing_said):
    from bnn_zoo.runs.plans.config import make_config

    monkeypatch.setattr(sys, "argv", ["bnn_zoo.calibrate", "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("bnn_zoo.calibrate", run_name="__main__")
    assert stop.value.code == 0
    printed = capsys.readouterr()
    assert printed.err == "note: python -m bnn_zoo.calibrate is now python -m bnn_zoo.certify\n"
    assert "python -m bnn_zoo.certify RUN_DIR" in printed.out
    cfg = make_config({"arch": "lenet"}, ["abstention.calibrate=false"])
    assert cfg.abstention.certify is False
    assert capsys.readouterr().err == "note: abstention.calibrate is now abstention.certify\n"


def test_an_old_name_is_noticed_once_a_process_not_at_every_use(nothing_said, capsys):
    """Issue 40: a deprecated name warned at every use (each config read, each attribute access)."""
    from bnn_zoo.runs.plans.config import make_config

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert bnn_zoo.SplitELBO is bnn_zoo.TraceKL_ELBO and bnn_zoo.SplitELBO is bnn_zoo.TraceKL_ELBO
    assert [str(w.message) for w in caught] == ["bnn_zoo.SplitELBO is now bnn_zoo.TraceKL_ELBO"]
    for _ in range(3):
        assert make_config({"arch": "lenet"}, ["abstention.calibrate=false"]).abstention.certify is False
    assert capsys.readouterr().err == "note: abstention.calibrate is now abstention.certify\n"


def test_the_from_import_form_of_an_old_name_warns_too(nothing_said):
    """Issue 47: ``from bnn_zoo import SplitELBO`` never warned under pytest: the notice, once a
    process, had gone to an earlier use whose warning a filter dropped (the import system's probe of
    the module's __getattr__ is one more use). Once for each place that uses it, at that place."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")
        assert bnn_zoo.SplitELBO is bnn_zoo.TraceKL_ELBO  # elsewhere, its warning filtered away
        warnings.simplefilter("always")
        from bnn_zoo import SplitELBO
        line = sys._getframe().f_lineno - 1
    assert SplitELBO is bnn_zoo.TraceKL_ELBO
    assert [(str(w.message), w.filename, w.lineno) for w in caught] == [
        ("bnn_zoo.SplitELBO is now bnn_zoo.TraceKL_ELBO", __file__, line)]  # one warning: the probe and the import
