"""Give shipped posteriors their conformal prediction sets, their temperature-scaled twin and their
after-alarm rules, keeping everything else of their files (weights, the rules they shipped with):
each posterior's sets, certified on the shipped config's validation split at its abstention.alpha
with its abstention.set_score, and the scaled twin's temperature, rule and sets, all from the draws
certification makes (``certify_trained``: seed 0, abstention.samples). Prints each set's threshold
and what it does on validation. ``--after-alarm-only`` adds the
after-alarm rule (``bnn_zoo.abstain.after_alarm``) beside each rule the file holds, certified nested
in that rule on the same split and draws, at its risk and delta (a density gate's from the cuts and
scores certification gives it), and keeps the rest as it shipped. Every file it writes holds no
folder of the machine that built it (``bnn_zoo.runs.storage.portable``); ``--portable`` rewrites the files
shipped before so, and nothing else (no data needed: weights, calibration and the weights' digests
stay as they were).

``--recertify`` certifies everything again on the shipped weights, as ``python -m bnn_zoo.certify``
certifies a run, its config changed first by ``--override KEY=VALUE``.

Usage: python scripts/ship_sets.py lenet mnist_mlp lenet_fashion [--data-root DIR] [--after-alarm-only]
       python scripts/ship_sets.py lenet --recertify --override data.remade=true
       python scripts/ship_sets.py --portable      # every shipped posterior (or those named)
"""
import sys

import pyro

from bnn_zoo.abstain.rule import DENSITY, Rule
from bnn_zoo.cli import options as cli
from bnn_zoo.evaluation.certification import after_alarm_entry, after_alarm_line, certify_trained, validation_set
from bnn_zoo.core.inference.predictive import seeded
from bnn_zoo.posterior import KINDS, TWIN_SCALED, certifying
from bnn_zoo.runs.storage.checkpoint import read, save_atomic, stored_beside, stored_config
from bnn_zoo.runs.plans.config import make_config
from bnn_zoo.runs.storage.loading import SHIPPED, load, shipped_names
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.storage.portable import make_portable, portable
from bnn_zoo.runs.storage.trained import posteriors, sampled_probs


@pyro.settings.context(module_local_params=True)
def ship_sets(name: str, data_root: str | None = None, seed: int = 0) -> dict:
    """Certify ``name``'s sets (and its scaled twin) and write them into its file; returns {part:
    (sets, validation coverage, size)}."""
    trained = load(name)  # a shipped name is the shipped posterior, whatever folder is here
    a = trained.config.abstention
    x, labels = validation_set(trained, data_root)
    certified = certify_trained(trained, x, labels, a.risk, a.delta, a.max_refusal, a.signal, a.quantile,
                                a.samples, a.alpha, a.set_score, seed)
    path = SHIPPED / f"{name}.pt"
    state = read(path)
    state["calibration"].pop(TWIN_SCALED, None)  # a scaled twin shipped before goes with its temperature
    for part, entry in certified.items():
        if part == TWIN_SCALED:
            state["calibration"][part] = entry
        else:
            state["calibration"].setdefault(part, {}).update(sets=entry["sets"])
            state["calibration"][part].pop("alarm", None)  # the entropy reference no alarm reads since fc66f38
    save_atomic({**state, "config": portable(state["config"])}, path)
    trained = load(name)
    with seeded(seed):
        sampled = sampled_probs(trained, x, a.samples)
    return {part: (sets, *sets.coverage_and_size(sampled[part], labels)) for part, sets in trained.sets.items()}


@pyro.settings.context(module_local_params=True)
def recertify(name: str, data_root: str | None = None, overrides: list[str] | None = None, seed: int = 0) -> dict:
    """Certify ``name`` again on its shipped weights as certification certifies a run
    (``certify_trained``: each rule, its after-alarm rule, sets, the scaled twin's
    temperature), its config first changed by ``overrides`` (KEY=VALUE, as train takes them:
    data.remade=true; the networks must stay those the weights fit), and write it all into its file
    once, whole, its weights kept, after all of it succeeded; returns the entries."""
    path = SHIPPED / f"{name}.pt"
    state = read(path)
    if any(entry.get("rule", {}).get("signal") == DENSITY for entry in state["calibration"].values()
           if isinstance(entry, dict)):
        raise ValueError(f"{name}'s twin gates on its feature density, which --recertify does not fit again: "
                         "certify its run (python -m bnn_zoo.certify RUN_DIR --twin-signal feature_density) and ship it")
    trained = load(name)
    config = make_config(stored_config(state, path), overrides) if overrides else trained.config
    if Plan.of(config).networks != Plan.of(trained.config).networks:
        raise ValueError(f"--override {' '.join(overrides)} changes the networks {name}'s weights fit; override only "
                         "how inputs are read and certified")
    for held in (trained, *trained.members):  # the file as it will be, in memory: nothing written until all succeeded
        held.config = config
    a = trained.config.abstention
    x, labels = validation_set(trained, data_root)
    certified = certify_trained(trained, x, labels, a.risk, a.delta, a.max_refusal, a.signal, a.quantile, a.samples,
                                a.alpha, a.set_score, seed, a.after_alarm_refusal, a.after_alarm_quantile)
    kept = {key: entry for key, entry in state["calibration"].items() if key not in KINDS}  # the weights it certified
    config = portable(Plan.of(config, stored_beside(state, path)).stored()) if overrides else state["config"]
    save_atomic({**state, "config": config, "calibration": {**kept, **certified}}, path)
    return certified


def portable_files(name: str) -> dict[str, bool]:
    """``name``'s shipped files (NAME.pt, NAME_twin.pt) rewritten without a folder of the machine
    that built them; {file name: whether it changed}."""
    paths = [SHIPPED / f"{name}.pt", SHIPPED / f"{name}_twin.pt"]
    return {path.name: make_portable(path) for path in paths if path.is_file()}


@pyro.settings.context(module_local_params=True)
def ship_after_alarm(name: str, data_root: str | None = None, seed: int = 0) -> dict[str, dict]:
    """Certify the after-alarm rule beside each rule ``name``'s file holds, as certification does
    (``after_alarm_entry`` on the validation split's draws at seed 0, the inputs that certify the
    part, the entry's risk and delta, the config's after-alarm settings), and write them into its
    file, all else kept; returns the entries by posterior."""
    trained = load(name)
    a = trained.config.abstention
    x, labels = validation_set(trained, data_root)
    with seeded(seed, trained.device):
        sampled = sampled_probs(trained, x, a.samples)
    rungs, found = posteriors(trained), {}
    for part, probs in sampled.items():
        entry = trained.calibration.get(part, {})
        if "rule" not in entry:
            continue
        rule, held = Rule.from_dict(entry["rule"]), certifying(part, len(labels))
        density = None
        if rule.signal == DENSITY:  # the gate's scores of the certifying inputs, as certify_density_gate's
            density = trained.densities[part].score(rungs[part].features(x[held]))
        found[part] = after_alarm_entry(probs[:, held], labels[held], rule, entry["risk"], entry["delta"],
                                        a.after_alarm_refusal, a.after_alarm_quantile, density)
    path = SHIPPED / f"{name}.pt"
    state = read(path)
    for part, entry in found.items():
        state["calibration"][part]["after_alarm"] = entry
    save_atomic({**state, "config": portable(state["config"])}, path)
    return found


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"shipped posteriors: {', '.join(shipped_names())} (default: every one)")
    parser.add_argument("--data-root", default=None, help="the data folder (default $BNN_ZOO_DATA, then ./data)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--after-alarm-only", action="store_true", help="add the after-alarm rules alone")
    only.add_argument("--recertify", action="store_true",
                      help="certify every rule, after-alarm rule and set again on the shipped weights")
    parser.add_argument("--override", nargs="+", default=[], metavar="KEY=VALUE",
                        help="with --recertify: change the shipped config first (data.remade=true)")
    only.add_argument("--portable", action="store_true",
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
        if args.override and not args.recertify:
            raise ValueError("--override changes the config of a posterior certified again: give --recertify too")
        for name in names:
            if args.recertify:
                for part, entry in recertify(name, args.data_root, args.override).items():
                    print(f"{name} {part}: " + (f"rule {Rule.from_dict(entry['rule'])}, refuses "
                                                f"{entry['validation']['refused']:.2%} of validation"
                                                f"{after_alarm_line(entry['after_alarm'])}" if "rule" in entry
                                                else entry.get("error", "")))
                continue
            if args.after_alarm_only:
                for part, entry in ship_after_alarm(name, args.data_root).items():
                    print(f"{name} {part}{after_alarm_line(entry)}")
                continue
            for part, (sets, coverage, size) in ship_sets(name, args.data_root).items():
                print(f"{name} {part}: {sets.score} score <= {sets.threshold:.4g} at {1 - sets.alpha:.0%} "
                      f"({sets.n} validation inputs: coverage {coverage:.2%}, mean size {size:.3f})")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
