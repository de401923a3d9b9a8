"""How close each rung of the ladder is to HMC, by the NeurIPS 2021 approximate-inference competition's
metrics (``bnn_zoo.evaluation.hmc_distance``): for each problem (toy_mlp, toy_sinusoid, the reduced
MNIST MLP mnist_mlp_hmc), the runs that hold every rung trained on the same network and data as its
HMC reference (mean-field VI, MAP, last-layer and K-FAC Laplace, SWAG, cyclical SG-MCMC; ensembles of
5 guides, the deep ensemble and MultiSWAG; low-rank VI and MC dropout), each posterior scored on the
reference's sets: agreement and total variation (classification: test, notMNIST, one corruption) or
the 1-Wasserstein distance (regression: inside the data and beyond it), each beside the floor HMC's
own chains set, with accuracy or RMSE and NLL on the test set. One table per problem, and JSON.

Usage: python scripts/distance_to_hmc.py [toy_mlp toy_sinusoid mnist_mlp_hmc] [--runs runs/distance]
           [--references DIR] [--reuse] [--samples 100] [--size N] [--json hmc_distance.json] [--override KEY=VALUE ...]
"""
import json
import sys
import time
from pathlib import Path

from bnn_zoo.bench.provenance import provenance
from bnn_zoo.cli import options as cli
from bnn_zoo.cli.train import train
from bnn_zoo.evaluation.hmc_distance.ladder import PROBLEMS, markdown, run_dir, run_overrides, score_runs
from bnn_zoo.evaluation.hmc_distance.reference import Reference
from bnn_zoo.evaluation.scoreboard.scored import training_seconds
from bnn_zoo.runs.plans.checks import pick_device
from bnn_zoo.runs.plans.config import load_config
from bnn_zoo.runs.storage.files import write_atomic


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("problems", nargs="*", type=lambda t: cli.one_of(t, PROBLEMS), metavar="PROBLEM",  # none: all
                        help=f"default: all of {', '.join(PROBLEMS)}")
    parser.add_argument("--runs", default="runs/distance", help="where the rungs' runs go (default runs/distance)")
    parser.add_argument("--references", default=None,
                        help="a folder of NAME.npz references (default: the shipped ones)")
    parser.add_argument("--reuse", action="store_true",
                        help="score the runs already in --runs instead of training them")
    parser.add_argument("--size", type=cli.count, default=None, help="score each set's first N inputs (default all)")
    parser.add_argument("--json", default=None, help="also write the rows to this file (its folder checked first)")
    parser.add_argument("--data-root", default=None, help="data folder (default: $BNN_ZOO_DATA, then ./data)")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE", help="overrides of every run")
    cli.add_sampling_options(parser)
    args = parser.parse_args(argv)

    def command() -> int:
        output = args.json and cli.output_file("--json", args.json)  # before the work, not after it
        found = {name: Reference.read(Path(args.references, f"{PROBLEMS[name].reference}.npz") if args.references
                                      else PROBLEMS[name].reference) for name in args.problems or PROBLEMS}  # all, before any run
        device, report = str(pick_device(args.device)), {**provenance(), "problems": {}}
        for name, reference in found.items():
            problem, runs, began = PROBLEMS[name], [], time.perf_counter()
            for run in problem.runs:
                runs.append(run_dir(problem, run, args.runs))
                if not (args.reuse and Path(runs[-1], "metrics.json").is_file()):
                    train(load_config(problem.config, run_overrides(problem, run, args.runs, tuple(args.override))))
            trained = time.perf_counter() - began
            rows = score_runs(runs, reference, args.samples, args.size, args.data_root, device, args.seed,
                              {run: training_seconds(run) for run in runs})
            table = markdown(rows, reference)
            print(f"\n{name} against {reference.name} ({args.samples} samples; trained in {trained:.0f} s, scored in "
                  f"{time.perf_counter() - began - trained:.0f} s)\n\n{table}")
            report["problems"][name] = {"reference": reference.name, "recipe": reference.recipe, "table": table,
                                        "rows": [vars(row) for row in rows], "seconds": time.perf_counter() - began}
        if output:
            write_atomic(output, json.dumps(report, indent=2))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
