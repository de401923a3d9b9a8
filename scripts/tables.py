"""Real tables through the documented commands: scikit-learn's diabetes (regression), breast cancer,
digits (as a 64-column table), wine and iris (classification), each split 80/20 by
``train_test_split(test_size=0.2, random_state=SEED)`` and written as CSV, then trained in a
process of its own by the line the docs give for a table,

    python -m bnn_zoo.train table_regression data.path=train.csv data.test_path=test.csv

(table_classification for the classes), and once more with ``resume=RUN train.members=5``, which
adds four members: the ensemble of five Bayesian networks and the deep ensemble of their five twins.
Beside them, fitted on the same 80%: scikit-learn's LinearRegression (RMSE, and the Gaussian NLL of
the training fit's residual sd) or LogisticRegression on StandardScaler features (accuracy, NLL),
and the training mean or majority class. A run trains on four fifths of the 80% and stops on the
validation NLL of the last fifth; the baselines fit all of it. Seconds: the documented command's
wall clock, start to end, in its own process.

Usage: python scripts/tables.py [--tables diabetes breast_cancer ...] [--seeds 0 1 2] [--members 5]
           [--out runs/tables] [--json tables.json] [--override train.steps=500 ...]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bnn_zoo.bench.provenance import provenance

TABLES = {"diabetes": "load_diabetes", "breast_cancer": "load_breast_cancer", "digits": "load_digits",
          "wine": "load_wine", "iris": "load_iris"}
REGRESSION = ("diabetes",)
CONFIG = {True: "table_regression", False: "table_classification"}  # by whether the table regresses


def write_split(name: str, seed: int, folder: Path) -> dict:
    """The table's 80/20 split as folder/train.csv and folder/test.csv (the target last, named
    target); returns the arrays, for the baselines."""
    import numpy as np
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    table = getattr(datasets, TABLES[name])()
    names = [str(n).replace(" ", "_") for n in getattr(table, "feature_names", range(table.data.shape[1]))]
    names = [n if not n.isdigit() else f"x{n}" for n in names]
    x_train, x_test, y_train, y_test = train_test_split(table.data, table.target, test_size=0.2, random_state=seed)
    folder.mkdir(parents=True, exist_ok=True)
    for part, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        rows = [",".join([*map(repr, map(float, row)), repr(float(t)) if name in REGRESSION else str(int(t))])
                for row, t in zip(x, y)]
        (folder / f"{part}.csv").write_text("\n".join([",".join([*names, "target"]), *rows]) + "\n")
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": np.asarray(y_test)}


def baselines(split: dict, regression: bool) -> dict:
    """Linear or logistic regression, and the training mean or majority class, on the test split."""
    import numpy as np
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y, x_test, y_test = split["x_train"], split["y_train"], split["x_test"], split["y_test"]
    if regression:
        def gaussian(mean, sd):
            return {"rmse": float(np.sqrt(((y_test - mean) ** 2).mean())),
                    "nll": float((0.5 * np.log(2 * np.pi * sd ** 2) + (y_test - mean) ** 2 / (2 * sd ** 2)).mean())}
        linear = LinearRegression().fit(x, y)
        return {"linear": gaussian(linear.predict(x_test), (y - linear.predict(x)).std()),
                "mean": gaussian(y.mean(), y.std())}

    def categorical(probs):
        picked = probs[np.arange(len(y_test)), np.searchsorted(classes, y_test)]
        return {"accuracy": float((classes[probs.argmax(1)] == y_test).mean()),
                "nll": float(-np.log(np.clip(picked, 1e-12, None)).mean())}
    classes, counts = np.unique(y, return_counts=True)
    logistic = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(x, y)
    return {"linear": categorical(logistic.predict_proba(x_test)),
            "mean": categorical(np.tile(counts / counts.sum(), (len(y_test), 1)))}


def train(args: list[str]) -> float:
    """``python -m bnn_zoo.train ARGS`` in a process of its own; its wall-clock seconds."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.train", *args, "train.progress=false"],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"python -m bnn_zoo.train {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return time.perf_counter() - started


def measure(name: str, seed: int, folder: Path, members: int, overrides: list[str]) -> dict:
    """One table on one split: the documented command, then its ensemble, and the baselines."""
    regression = name in REGRESSION
    split = write_split(name, seed, folder)
    run = folder / "run"
    command = [CONFIG[regression], f"data.path={folder / 'train.csv'}", f"data.test_path={folder / 'test.csv'}"]
    seconds = train([*command, f"run_dir={run}", "overwrite=true", *overrides])
    single = json.loads((run / "metrics.json").read_text())
    if members > 1:
        train([f"resume={run}", f"train.members={members}"])
    metrics = json.loads((run / "metrics.json").read_text())
    keys = ("rmse", "nll") if regression else ("accuracy", "nll")
    figures = lambda part: {k: part[f"test/{k}"] for k in keys}  # noqa: E731
    row = {"table": name, "seed": seed, "regression": regression, "rows": len(split["y_train"]) + len(split["y_test"]),
           "features": split["x_train"].shape[1], "command": " ".join(["python -m bnn_zoo.train", *command]),
           "seconds": seconds, "bayes": figures(single["bayes"]), "twin": figures(single["twin"]),
           "best_epoch": {part: single[part].get("best_epoch") for part in ("bayes", "twin")},
           "epochs": {part: len(single[part]["history"]) for part in ("bayes", "twin")},
           **baselines(split, regression)}
    if members > 1:
        row.update(ensemble=figures(metrics["ensemble"]["bayes"]), deep_ensemble=figures(metrics["ensemble"]["twin"]),
                   members=members)
    if regression:  # the learned noise sd of the weights the run kept
        history = single["bayes"]["history"]
        row["noise_sd"] = history[(row["best_epoch"]["bayes"] or len(history)) - 1]["noise/scale"]
    return row


def markdown(rows: list[dict]) -> str:
    """The rows as one markdown table (the docs' results page draws the same from the JSON)."""
    parts = [("bayes", "Bayesian"), ("twin", "twin"), ("ensemble", "ensemble"),
             ("deep_ensemble", "deep ensemble of twins"), ("linear", "linear / logistic"), ("mean", "mean / majority")]
    shown = [(key, name) for key, name in parts if all(key in r for r in rows)]

    def cell(row: dict, f: dict) -> str:
        return f"{f['rmse']:.2f} / {f['nll']:.3f}" if row["regression"] else f"{f['accuracy']:.2%} / {f['nll']:.3f}"
    lines = [f"| {r['table']} | {r['seed']} | " + " | ".join(cell(r, r[key]) for key, _ in shown) +
             f" | {r['seconds']:.0f} |" for r in rows]
    return "\n".join(["RMSE (regression) or accuracy, and NLL in nats, on the test split:", "",
                      f"| table | split | {' | '.join(name for _, name in shown)} | seconds |",
                      "| --- |" + " --- |" * (len(shown) + 2), *lines]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="random_state of each 80/20 split")
    parser.add_argument("--members", type=int, default=5, help="the ensembles' size (1: no ensembles)")
    parser.add_argument("--out", default="runs/tables", help="the folder for the splits and runs (default runs/tables)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides of every run (quick checks; the figures above take none)")
    args = parser.parse_args(argv)
    rows = []
    for seed in args.seeds:
        for name in args.tables:
            rows.append(measure(name, seed, Path(args.out) / f"{name}_{seed}", args.members, args.override))
            print(f"{name}, split {seed}: {rows[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({**provenance(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
