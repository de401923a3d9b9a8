"""Per-layer histograms of a trained run's weight posteriors: means, standard deviations and
signal-to-noise ratios |mu| / sigma; prints their quartiles per layer.

Usage: python scripts/weight_posteriors.py runs/lenet [--out runs/lenet/weight_posteriors.png]
"""
import sys
from pathlib import Path

import torch

from bnn_zoo import load
from bnn_zoo.cli import options as cli
from bnn_zoo.core.networks.pruning import posterior_loc_scale
from bnn_zoo.evaluation.figures import plots


def summary(loc_scale: dict) -> str:
    lines = [f"{'parameter':<22}{'count':>9}" + "".join(f"{h:>27}" for h in
                                                      ("|mu| quartiles", "sigma quartiles", "SNR quartiles"))]
    q = torch.tensor([0.25, 0.5, 0.75])
    for name, (loc, scale) in loc_scale.items():
        parts = [loc.abs(), scale, loc.abs() / scale]
        lines.append(f"{name:<22}{loc.numel():>9}" + "".join(
            f"{' / '.join(f'{v:.3g}' for v in torch.quantile(p.flatten().float()[:1_000_000], q).tolist()):>27}"
            for p in parts))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("run_dir", help="a trained run (python -m bnn_zoo.train ...)")
    parser.add_argument("--out", default=None, help="the figure (default RUN_DIR/weight_posteriors.png)")
    args = parser.parse_args(argv)

    def command() -> int:
        trained = load(args.run_dir)
        loc_scale = posterior_loc_scale(trained.guide)
        out = Path(args.out or Path(args.run_dir) / "weight_posteriors.png")
        plots.weight_posteriors(loc_scale, out, f"{trained.config.arch}: weight posteriors")
        print(summary(loc_scale))
        print(f"wrote {out}")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
