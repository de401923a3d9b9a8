"""Build an HMC reference (``bnn_zoo.evaluation.hmc_distance``): several NUTS chains, one after another
from different initializations, over the training split of CONFIG's network and data; each chain's
predictive on the reference's sets (a toy curve: test points inside the observed range and points
beyond it; a classifier: the test set, notMNIST and one MNIST-C corruption); the predictive's R-hat
and effective sample size over the chains and the chain-to-chain floor printed; all of it written to
one .npz file (no pickle) with its recipe and digest, for bnn_zoo.against_hmc and
scripts/distance_to_hmc.py to score against. With --keep, each chain is kept as it ends, and the same
command run again reads the chains kept instead of drawing them (an hour of chains survives a crash).

Usage: python scripts/hmc_reference.py mnist_mlp_hmc [--chains 4] [--jobs 1] [--samples 200] [--warmup 200]
           [--out bnn_zoo/shipped/mnist_mlp_hmc.npz] [--keep runs/hmc_chains] [--test-size 10000]
           [--override data.train_limit=5000]
"""
import sys
from pathlib import Path

from bnn_zoo.bench.provenance import provenance
from bnn_zoo.cli import options as cli
from bnn_zoo.data.sets import load_splits
from bnn_zoo.evaluation.hmc_distance.build import build_reference
from bnn_zoo.evaluation.hmc_distance.ladder import PROBLEMS, Problem
from bnn_zoo.runs.plans.checks import pick_device
from bnn_zoo.runs.plans.config import load_config, resolved
from bnn_zoo.runs.plans.plan import Plan


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("config", help=f"the network and data: {', '.join(PROBLEMS)}, or another config")
    parser.add_argument("--chains", type=lambda t: cli.count(t, least=2), default=4,
                        help="NUTS chains, each from its own initialization and seed (default 4)")
    parser.add_argument("--jobs", type=cli.count, default=1, help="chains run at a time, each in a process of "
                        "its own with the network's torch threads (default 1; CPU only)")
    parser.add_argument("--samples", type=cli.count, default=None,
                        help="samples a chain keeps (default mcmc.num_samples)")
    parser.add_argument("--warmup", type=lambda t: cli.count(t, least=0), default=None,
                        help="warm-up steps of a chain (default mcmc.warmup_steps)")
    parser.add_argument("--tree-depth", type=cli.count, default=None, help="NUTS's largest tree depth "
                        "(default mcmc.max_tree_depth)")
    parser.add_argument("--out", default=None,
                        help="the file to write (default ./NAME.npz, NAME the problem's reference)")
    parser.add_argument("--test-size", type=cli.count, default=None, help="test images (default 10000)")
    parser.add_argument("--ood-size", type=cli.count, default=None, help="notMNIST images (default 2000)")
    parser.add_argument("--shift-size", type=cli.count, default=None, help="corrupted test images (default 2000)")
    parser.add_argument("--data-root", default=None, help="data folder (default: $BNN_ZOO_DATA, then ./data)")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE", help="overrides of CONFIG")
    parser.add_argument("--keep", default=None, metavar="DIR", help="keep each chain in DIR as it ends and read the "
                        "chains of this recipe kept there, not drawing them again: a build that stopped goes on where it stopped")
    parser.add_argument("--progress", action="store_true", help="show each chain's progress bar")
    args = parser.parse_args(argv)

    def command() -> int:
        problem = PROBLEMS.get(args.config, Problem(args.config, f"{Path(args.config).stem}_hmc"))
        out = cli.output_file("--out", args.out or f"{problem.reference}.npz")  # before the chains, not after
        root = [f"data.root={args.data_root}"] if args.data_root else []
        plan = Plan.of(resolved(load_config(problem.config, [*root, *args.override])))
        device = pick_device(plan.device)
        splits = load_splits(plan.data, plan.categorical, plan.seed, device)
        sets = problem.sets(plan, args.data_root, args.test_size, args.ood_size, args.shift_size)
        reference = build_reference(plan, splits.train, sets, args.chains, args.samples or plan.mcmc.num_samples,
                                    plan.mcmc.warmup_steps if args.warmup is None else args.warmup, out.stem,
                                    provenance(), args.tree_depth, args.progress, args.jobs,
                                    Path(args.keep) if args.keep else None)
        reference.write(out)
        recipe = reference.recipe
        print(f"{out}: {out.stat().st_size / 1e6:.2f} MB, {recipe['seconds']:.0f} s of NUTS, {recipe['wall_seconds']:.0f} s "
              f"from start to end ({provenance()['machine']})")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
