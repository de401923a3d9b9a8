"""What the command lines share: their common options, each defined once, and one way to end on a
user's mistake: a line on stderr and exit code 2, never a traceback.

Usage::

    parser = command_parser("python -m bnn_zoo.evaluate", __doc__)
    add_sampling_options(parser)
    args = parser.parse_args(argv)
    return run(lambda: work(args))
"""
from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Callable

from ..core.errors import ConfigError, UserError, say
from ..runs.plans.checks import MAX_SAMPLES
from ..runs.storage.files import check_writable


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose mistakes end as the commands' others do: one line, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def command_parser(prog: str | None, doc: str) -> argparse.ArgumentParser:
    """A parser whose description is the first paragraph of ``doc`` and whose epilog is the rest
    (reStructuredText's double backquotes left out: a terminal shows them as they are)."""
    first, _, rest = inspect.cleandoc(doc or "").replace("``", "").partition("\n\n")
    return OneLineParser(prog=prog, description=first, epilog=rest or None,
                         formatter_class=argparse.RawDescriptionHelpFormatter)


def config_keys() -> str:
    """Every key a run's config has, by section, from the config's own fields (for --help)."""
    from omegaconf import OmegaConf

    from ..data.config import DataConfig
    from ..runs.plans.schema import Config

    defaults = OmegaConf.to_container(OmegaConf.structured(Config))
    top = [k for k, v in defaults.items() if not isinstance(v, dict)]
    lines = [", ".join(top)] + [f"{name}.: {', '.join(v)}" for name, v in defaults.items() if isinstance(v, dict)]
    wrapped = [textwrap.fill(line, 100, initial_indent="  ", subsequent_indent="      ") for line in lines]
    schema, data = (_source(section) for section in (Config, DataConfig))  # where they are, wherever they move
    return f"the config's keys (each documented in {schema}, the data section's in {data}):\n" + "\n".join(wrapped)


def _source(cls: type) -> str:
    """The file that defines ``cls``, from the package's parent folder (bnn_zoo/runs/plans/schema.py)."""
    package = Path(inspect.getfile(sys.modules[cls.__module__.partition(".")[0]])).parent
    return Path(inspect.getfile(cls)).relative_to(package.parent).as_posix()


def count(text: str, least: int = 1, most: int | None = None, unit: str = "") -> int:
    """An argparse type: a whole number from ``least`` to ``most`` (None: no bound), ``unit`` what
    it counts (argparse names the option when it is out of range)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"at most {most}{' ' + unit if unit else ''}, got {value}")
    return value


def one_of(text: str, names) -> str:
    """An argparse type: one of ``names`` (for a positional of nargs "*", whose ``choices`` argparse
    checks against the empty list when none is given)."""
    if text not in names:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(names)})")
    return text


def seed(text: str) -> int:
    return count(text, least=0)


def posterior_samples(text: str) -> int:
    """An argparse type: posterior samples per input, 1 to MAX_SAMPLES (the predictive holds
    samples x inputs x classes numbers)."""
    return count(text, most=MAX_SAMPLES, unit="posterior samples")


def add_sampling_options(parser: argparse.ArgumentParser, samples: int | str = 100) -> None:
    """How to draw from a run: posterior samples (a number, or where the default comes from),
    seed and device."""
    parser.add_argument("--samples", type=posterior_samples,
                        default=samples if isinstance(samples, int) else None,
                        help=f"posterior samples per input, at most {MAX_SAMPLES} (default {samples})")
    parser.add_argument("--seed", type=seed, default=0, help="seed for the posterior draws (default 0)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N")


def add_rule_options(parser: argparse.ArgumentParser, calibrated: bool = True) -> None:
    """Which abstention rule (with ``calibrated``), and the quantile rule's knobs (see
    bnn_zoo.abstain.rule)."""
    if calibrated:
        parser.add_argument("--rule", choices=["calibrated", "quantile"], default="calibrated",
                            help="calibrated: the run's certified rule (calibration.json; the quantile "
                                 "rule where it has none); quantile: the quantile rule with --quantile, "
                                 "--threshold")
    parser.add_argument("--quantile", type=float, default=0.5,
                        help="quantile rule: quantile of each class's sampled probability (default 0.5, the median)")
    parser.add_argument("--threshold", type=float, default=0.2,
                        help="quantile rule: accept the classes whose quantile probability reaches this (default 0.2)")


def parse_noting(parser: argparse.ArgumentParser, argv: list[str] | None,
                 *dests: str) -> tuple[argparse.Namespace, list[str]]:
    """``parser``'s arguments, and those of the options ``dests`` (their dest names) the command line
    gave, as spelled (--threshold; --no-act-on-alarm), whatever their values: an option that does not
    apply is refused where given, never left unsaid."""
    unset = object()  # argparse leaves a name the namespace holds as it is, where no option sets it
    args = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(dests, unset)))
    spelled = []
    for dest in dests:
        if getattr(args, dest) is unset:
            setattr(args, dest, parser.get_default(dest))
        else:
            spelled.append(f"--{'no-' if getattr(args, dest) is False else ''}{dest.replace('_', '-')}")
    return args, spelled


ACT_ON_ALARM = ("from the input that sounds the shift alarm on, hold a stream's answers to the stricter "
                "after-alarm rule (default; --no-act-on-alarm: the certified rule alone)")


def add_alarm_option(parser: argparse.ArgumentParser, help: str = ACT_ON_ALARM) -> None:
    """Whether a stream's answers act on its shift alarm (bnn_zoo.abstain.after_alarm)."""
    parser.add_argument("--act-on-alarm", action=argparse.BooleanOptionalAction, default=True, help=help)


def add_data_options(parser: argparse.ArgumentParser, ood_size: bool = True, sizes: str | None = None) -> None:
    """Where the data sets are and how much of them to use; ``sizes``: what says the sizes left
    out (evaluate's --full), which are then None, for the command to choose (default: every test
    image, 10,000 of each OOD set)."""
    parser.add_argument("--data-root", default=None,
                        help="data folder (default: $BNN_ZOO_DATA, then the run's data.root, then ./data)")
    parser.add_argument("--test-size", type=count, default=None, help=f"test images to use (default {sizes or 'all'})")
    if ood_size:
        parser.add_argument("--ood-size", type=count, default=None if sizes else 10000,
                            help=f"images per out-of-distribution set (default {sizes or 10000})")


def output_file(option: str, path: str | Path) -> Path:
    """The file ``option`` names for a command to write at the end, checked before the work: its
    folder there and writable, the path no folder and no symbolic link."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ConfigError(f"{option} {path}: folder {path.parent} does not exist; create it or write elsewhere")
    if path.is_symlink() or path.is_dir():
        raise ConfigError(f"{option} {path} is a {'symbolic link' if path.is_symlink() else 'folder'}; "
                          "give the path of a file to write")
    check_writable(path.parent)
    return path


def note(line: str | None) -> None:
    """A line for the person at the terminal, on stderr beside the answers (nothing for None)."""
    if line:
        print(line, file=sys.stderr)


def run(command: Callable[[], int]) -> int:
    """Run a command; a user's mistake ends in one line on stderr and exit code 2."""
    try:
        return command()
    except (UserError, FileNotFoundError, ValueError) as err:  # API checks raise ValueError
        say(err)  # unless said already: by this rank before the others left, or by another rank
        return 2
    except OSError as err:  # a file or folder the system refused (permissions, say): named, not a traceback
        print(f"error: {err.filename or 'a file'}: {err.strerror or err}", file=sys.stderr)
        return 2
