"""Give shipped posteriors their conformal prediction sets, their temperature-scaled twin and
their shift alarm's reference, keeping everything else of their files (weights, the rules they
shipped with): each posterior's sets, certified on the shipped config's validation split at its
abstention.alpha with its abstention.set_score, the certifying inputs' scores the alarm compares
with (``bnn_zoo.abstain.shift``), and the scaled twin's temperature, rule and sets, all from the
draws certification makes (``certify_trained``: seed 0, abstention.samples). Prints each set's
threshold and what it does on validation. ``--alarm-only`` adds the alarm's references and keeps
the rest as it shipped. Every file it writes holds no folder of the machine that built it
(``bnn_zoo.runs.portable``); ``--portable`` rewrites the files shipped before so, and nothing else
(no data needed: weights, calibration and the weights' digests stay as they were).

Usage: python scripts/ship_sets.py lenet mnist_mlp lenet_fashion [--data-root DIR] [--alarm-only]
       python scripts/ship_sets.py --portable      # every shipped posterior (or those named)
"""
import sys

import pyro

from bnn_zoo.cli import options as cli
from bnn_zoo.cli.certify import certify_trained, validation_set
from bnn_zoo.core.predictive import seeded
from bnn_zoo.posterior import TWIN_SCALED
from bnn_zoo.runs.checkpoint import read, save_atomic
from bnn_zoo.runs.loading import SHIPPED, load, shipped_names
from bnn_zoo.runs.portable import make_portable, portable
from bnn_zoo.runs.trained import sampled_probs


@pyro.settings.context(module_local_params=True)
def ship_sets(name: str, data_root: str | None = None, seed: int = 0, alarm_only: bool = False) -> dict:
    """Certify ``name``'s sets (and its scaled twin) and write them into its file with the alarm's
    references (``alarm_only``: those alone); returns {part: (sets, validation coverage, size)}."""
    trained = load(name)  # a shipped name is the shipped posterior, whatever folder is here
    a = trained.config.abstention
    x, labels = validation_set(trained, data_root)
    certified = certify_trained(trained, x, labels, a.risk, a.delta, a.max_refusal, a.signal, a.quantile,
                                a.samples, a.alpha, a.set_score, seed)
    path = SHIPPED / f"{name}.pt"
    state = read(path)
    if not alarm_only:
        state["calibration"].pop(TWIN_SCALED, None)  # a scaled twin shipped before goes with its temperature
    for part, entry in certified.items():
        if alarm_only:
            if part in state["calibration"]:
                state["calibration"][part]["alarm"] = entry["alarm"]
        elif part == TWIN_SCALED:
            state["calibration"][part] = entry
        else:
            state["calibration"].setdefault(part, {}).update(sets=entry["sets"], alarm=entry["alarm"])
    save_atomic({**state, "config": portable(state["config"])}, path)
    trained = load(name)
    with seeded(seed):
        sampled = sampled_probs(trained, x, a.samples)
    return {part: (sets, *sets.coverage_and_size(sampled[part], labels)) for part, sets in trained.sets.items()}


def portable_files(name: str) -> dict[str, bool]:
    """``name``'s shipped files (NAME.pt, NAME_twin.pt) rewritten without a folder of the machine
    that built them; {file name: whether it changed}."""
    paths = [SHIPPED / f"{name}.pt", SHIPPED / f"{name}_twin.pt"]
    return {path.name: make_portable(path) for path in paths if path.is_file()}


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"shipped posteriors: {', '.join(shipped_names())} (default: every one)")
    parser.add_argument("--data-root", default=None, help="the data folder (default $BNN_ZOO_DATA, then ./data)")
    parser.add_argument("--alarm-only", action="store_true", help="add the shift alarm's references alone")
    parser.add_argument("--portable", action="store_true",
                        help="rewrite the files without the folders of the machine that built them, nothing else")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in shipped_names()]
    if unknown:
        parser.error(f"{unknown[0]} is no shipped posterior; choose from {', '.join(shipped_names())}")
    names = args.names or shipped_names()

    def command() -> int:
        if args.portable:
            for name in names:
                for file, changed in portable_files(name).items():
                    said = "rewritten without the folders" if changed else "holds no folder"
                    print(f"{file}: {said} of the machine that built it")
            return 0
        for name in names:
            for part, (sets, coverage, size) in ship_sets(name, args.data_root, alarm_only=args.alarm_only).items():
                print(f"{name} {part}: {sets.score} score <= {sets.threshold:.4g} at {1 - sets.alpha:.0%} "
                      f"({sets.n} validation inputs: coverage {coverage:.2%}, mean size {size:.3f})")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
