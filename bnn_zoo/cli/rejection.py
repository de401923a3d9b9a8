"""The command line of the rejection scripts (``scripts/reject_notmnist.py``, ``reject_noise.py``):
refusals on MNIST and an OOD set, with their plots (``bnn_zoo.evaluation.figures.rejection``).

Usage: ``sys.exit(script_main("notmnist", sys.argv[1:], __doc__))``
"""
from __future__ import annotations

from . import options as cli


def script_main(ood: str, argv: list[str] | None, doc: str) -> int:
    """The command line shared by the rejection scripts."""
    parser = cli.command_parser(None, doc)
    parser.add_argument("run_dir", help="a trained run (python -m bnn_zoo.train ...)")
    parser.add_argument("--out", default=None, help=f"output folder (default RUN_DIR/reject_{ood}; for a shipped posterior ./reject_{ood}_NAME)")
    cli.add_sampling_options(parser)
    cli.add_rule_options(parser)
    cli.add_data_options(parser)
    parser.add_argument("--grid", type=cli.count, default=6, help="inputs in the histogram grid")
    args = parser.parse_args(argv)

    def command() -> int:
        from ..evaluation.figures.rejection import rejection_report, report_folder, table  # here: a torchvision
        # of another torch is said in a line (bnn_zoo.data.vision)

        report = rejection_report(args.run_dir, ood, args.out, args.samples, args.rule, args.quantile, args.threshold,
                                  args.test_size, args.ood_size, args.grid, args.data_root, args.device,
                                  args.seed)
        print(table(report))
        cli.note(f"wrote reject_{ood}.json and the plots to {report_folder(args.run_dir, ood, args.out)}")
        return 0

    return cli.run(command)
