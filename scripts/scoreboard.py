"""The out-of-distribution scoreboard: for each trained classifier run and every posterior it holds
(its Bayesian network or ensemble, its twin, MC dropout or deep ensemble, HMC: bnn_zoo.ladder), one
table (markdown and JSON) and plots. In distribution: accuracy, NLL, ECE, refused, accuracy on
accepted, AURC, risk at 95% and 99% coverage. Per OOD set (the far ones, and the near ones that
bnn_zoo.ood builds from MNIST test digits and the machine's fonts): refused under the run's
certified rule and under the seed's quantile rule, AUROC / AUPR / FPR95 by entropy and by mutual
information. Then the ladder: one row per posterior with its AUROC per set and its cost (training
minutes, seconds and peak MB to predict the test set, numbers stored), and ladder.png.

Usage: python scripts/scoreboard.py mnist_mlp lenet lenet_fashion [--out scoreboard] [--samples 100]
           [--ood-size 10000] [--near-size 2000]        # shipped posteriors, or run directories
"""
import json
import sys
from pathlib import Path

from bnn_zoo import cli, plots
from bnn_zoo.checkpoint import MEMBERS, PARTS
from bnn_zoo.errors import ConfigError
from bnn_zoo.files import check_writable, make_folder, read_json, write_atomic
from bnn_zoo.trained import load
from bnn_zoo.evaluate import DEFAULT_OOD, evaluate_run
from bnn_zoo.ood import NEAR, font_files

IN_DISTRIBUTION = [("accuracy", "accuracy"), ("nll", "NLL"), ("ece", "ECE"), ("refused", "refused"),
                   ("accuracy_accepted", "acc. accepted"), ("aurc", "AURC"), ("risk_at_95", "risk @95%"),
                   ("risk_at_99", "risk @99%")]
PER_SET = [("refused", "refused"), ("refused_quantile_rule", "refused, seed's rule"), ("auroc", "AUROC H"),
           ("aupr", "AUPR H"), ("fpr95", "FPR95 H"), ("auroc_mi", "AUROC MI"), ("aupr_mi", "AUPR MI"),
           ("fpr95_mi", "FPR95 MI")]
# Near sets for a FashionMNIST run: the ones that are not digits themselves.
NEAR_FOR = {"mnist": NEAR, "fashion_mnist": ("letters", "constant", "scribbles", "blank")}


def ood_sets(run_dir: str) -> tuple[list[str], list[str]]:
    data = load(run_dir).config.data.name
    if data not in DEFAULT_OOD:
        raise ValueError(f"{run_dir} is not a classifier run (data {data!r})")
    return list(DEFAULT_OOD[data]), list(NEAR_FOR[data])


def score(run_dir: str, samples: int, ood_size: int, near_size: int, **kwargs) -> dict:
    far, near = ood_sets(run_dir)
    sizes = {**dict.fromkeys(far, ood_size), **dict.fromkeys(near, near_size)}
    result = evaluate_run(run_dir, samples, ood=tuple(far + near), ood_size=sizes, **kwargs)
    result["far"], result["near"] = far, [n for n in near if n not in result["skipped"]]
    if "letters" in result["near"]:  # the letters set is drawn in the machine's fonts
        result["letter_fonts"] = [Path(f).name for f in font_files()]
    for part, seconds in training_seconds(run_dir).items():
        if part in result:
            result[part]["cost/train_seconds"] = seconds
    for part in PARTS:
        if part in result and result["near"]:
            r = result[part]
            r["near/mean_refused"] = sum(r[f"ood/refused_{n}"] for n in result["near"]) / len(result["near"])
            r["near/mean_auroc"] = sum(best_auroc(r, n) for n in result["near"]) / len(result["near"])
    return result


def best_auroc(row: dict, name: str) -> float:
    """AUROC by mutual information where the posterior is sampled, else by entropy."""
    return row.get(f"ood/auroc_mi_{name}", row[f"ood/auroc_{name}"])


def training_seconds(run_dir: str) -> dict[str, float]:
    """Seconds each posterior took to train, from metrics.json: epochs x the median seconds per
    epoch (robust to epochs that shared the CPU), summed over an ensemble's members; nothing for a
    shipped posterior, which has no metrics.json."""
    runs = [Path(run_dir), *sorted(Path(run_dir, MEMBERS).glob("*"))]
    paths = [r / "metrics.json" for r in runs if (r / "metrics.json").is_file()]
    fix = "train the run again, or delete the file to leave its training time out"
    metrics = [read_json(path, "metrics file bnn-zoo wrote", fix) for path in paths]
    found = {}
    try:
        for part in ("bayes", "twin"):
            if metrics and part in metrics[0]:
                found[part] = sum(m[part]["seconds_per_epoch"] * len(m[part]["history"]) for m in metrics if part in m)
        if metrics and "hmc" in metrics[0]:
            found["hmc"] = found.get("bayes", 0.0) + metrics[0]["hmc"]["seconds"]  # NUTS starts after SVI
    except (KeyError, TypeError, AttributeError) as err:
        raise ConfigError(f"{' or '.join(map(str, paths))} lacks the training times the scoreboard reads "
                          f"({err.__class__.__name__}: {err}); {fix}") from None
    return found


def _cell(value, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.2f}%" if percent else f"{value:.4f}"


def markdown(results: dict[str, dict]) -> str:
    lines = ["| run | model | rule | " + " | ".join(label for _, label in IN_DISTRIBUTION) + " | near-OOD refused (mean) |",
             "|" + " --- |" * (len(IN_DISTRIBUTION) + 4)]
    for run, r in results.items():
        for part in [p for p in PARTS if p in r]:
            row, model = r[part], r[part]["posterior"]
            rule = f"q>={row['rule/threshold']}" + (f", {'MI' if row['rule/signal'] == 'mutual_information' else 'H'}"
                                                    f"<={row['rule/cut']:.3g}" if row["rule/signal"] else "")
            cells = [_cell(row[f"test/{k}"], k in ("accuracy", "refused", "accuracy_accepted")) for k, _ in IN_DISTRIBUTION]
            lines.append(f"| {run} | {model} | {rule} | " + " | ".join(cells) +
                         f" | {_cell(row.get('near/mean_refused'), True)} |")
    for run, r in results.items():
        fonts = f" (letters drawn in {len(r['letter_fonts'])} fonts)" if "letter_fonts" in r else ""
        lines += ["", f"**{run}**: out-of-distribution sets against its test set{fonts}", "",
                  "| set | model | " + " | ".join(label for _, label in PER_SET) + " |",
                  "|" + " --- |" * (len(PER_SET) + 2)]
        for name in r["far"] + r["near"]:
            if name in r["skipped"]:
                continue
            for part in [p for p in PARTS if p in r]:
                lines.append(f"| {name}{' (near)' if name in r['near'] else ''} | {r[part]['posterior']} | " + " | ".join(
                    _cell(r[part].get(f"ood/{k}_{name}"), k.startswith("refused")) for k, _ in PER_SET) + " |")
    return "\n".join(lines + ["", ladder_table(results)])


def ladder_rows(results: dict[str, dict]) -> dict[str, tuple[dict, dict]]:
    """{"run: posterior": (the run's result, the posterior's row)} over every run and posterior."""
    return {f"{Path(run).name}: {r[part]['posterior']}": (r, r[part])
            for run, r in results.items() for part in PARTS if part in r}


def ladder_table(results: dict[str, dict]) -> str:
    """The ladder: per posterior, accuracy, NLL, AUROC per OOD set (mutual information where it is
    sampled, else entropy), the mean over the near sets, and the cost columns."""
    sets = list(dict.fromkeys(n for r in results.values() for n in r["far"] + r["near"] if n not in r["skipped"]))
    lines = ["| posterior | accuracy | NLL | " + " | ".join(f"AUROC {n}" for n in sets) +
             " | near AUROC (mean) | training min | predict s | predict MB | numbers stored |",
             "|" + " --- |" * (len(sets) + 8)]
    for label, (r, row) in ladder_rows(results).items():
        aurocs = [_cell(best_auroc(row, n), False) if f"ood/auroc_{n}" in row else "" for n in sets]
        minutes = row.get("cost/train_seconds")
        mb = row["cost/predict_peak_mb"]
        lines.append(f"| {label} | {_cell(row['test/accuracy'], True)} | {row['test/nll']:.4f} | " + " | ".join(aurocs) +
                     f" | {_cell(row.get('near/mean_auroc'), False)} | {'n/a' if minutes is None else f'{minutes / 60:.1f}'}"
                     f" | {row['cost/predict_seconds']:.1f} | {'n/a' if mb is None else f'{mb:.0f}'} | {row['cost/parameters']:,} |")
    return "\n".join(lines)


def plot_ladder(results: dict[str, dict], out: Path) -> None:
    sets = list(dict.fromkeys(n for r in results.values() for n in r["far"] + r["near"] if n not in r["skipped"]))
    rows = {}
    for label, (r, row) in ladder_rows(results).items():
        shown = [n for n in sets if f"ood/refused_{n}" in row]
        rows[label] = {"auroc": {n: best_auroc(row, n) for n in shown},
                       "risk": 1 - row["test/accuracy_accepted"],
                       "refused": sum(row[f"ood/refused_{n}"] for n in shown) / max(1, len(shown))}
    plots.ladder(rows, sets, out / "ladder.png")


def plot(results: dict[str, dict], out: Path) -> None:
    for run, r in results.items():
        sets = [n for n in r["far"] + r["near"] if n not in r["skipped"]]
        rows = {"Bayesian, certified rule": {}, "Bayesian, seed's rule": {}, "twin, certified rule": {}}
        for name in sets:
            b = r["bayes"]
            rows["Bayesian, certified rule"][name] = {"refused": b[f"ood/refused_{name}"],
                                                      "auroc": max(b[f"ood/auroc_{name}"], b[f"ood/auroc_mi_{name}"])}
            rows["Bayesian, seed's rule"][name] = {"refused": b[f"ood/refused_quantile_rule_{name}"]}
            if "twin" in r:
                rows["twin, certified rule"][name] = {"refused": r["twin"][f"ood/refused_{name}"],
                                                      "auroc": r["twin"][f"ood/auroc_{name}"]}
        plots.scoreboard(rows, sets, out / f"scoreboard_{Path(run).name}.png")


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR_OR_NAME")
    parser.add_argument("--out", default="scoreboard", help="output folder (default ./scoreboard)")
    cli.add_sampling_options(parser)
    cli.add_data_options(parser)
    parser.add_argument("--near-size", type=cli.count, default=2000, help="images per near-OOD set (default 2000)")
    args = parser.parse_args(argv)

    def command() -> int:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is a file; give a folder for the scoreboard's files")
        check_writable(make_folder(out))  # before the work, not after
        for run in args.runs:
            training_seconds(run)  # a damaged metrics.json is named now, not after the evaluation
        results = {run: score(run, args.samples, args.ood_size, args.near_size, seed=args.seed,
                              test_size=args.test_size, data_root=args.data_root, device=args.device)
                   for run in args.runs}
        write_atomic(out / "scoreboard.json", json.dumps(results, indent=2))
        table = markdown(results)
        write_atomic(out / "scoreboard.md", table + "\n")
        plot(results, out)
        plot_ladder(results, out)
        print(table)
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
