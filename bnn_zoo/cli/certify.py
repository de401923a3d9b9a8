"""Certify a trained classifier run's abstention rules on its validation split and store them in
RUN_DIR/calibration.json, where ``load``, predict, evaluate and the scripts find them: for the
Bayesian network a two-signal rule (quantile threshold and mutual-information gate), for the
deterministic twin the same with an entropy gate (a deep ensemble's or MC dropout's gate is the
Bayesian network's signal: they are sampled too), and for each its conformal prediction sets. A
lone twin also gets a temperature (``bnn_zoo.abstain.temperature``, fitted on the same split): the
temperature-scaled twin is one more posterior, certified like the others. Each entry also keeps its
rule's refusal rate on validation, which the shift alarm (``bnn_zoo.abstain.shift``) watches, and the
after-alarm rule (``bnn_zoo.abstain.after_alarm``) that answers the inputs after it. Training does this
at its end; the work is ``bnn_zoo.evaluation.certification``'s.

Each setting not given comes from the run's config (its ``abstention`` section), so a plain
``python -m bnn_zoo.certify RUN_DIR`` redoes what training did.

Usage: python -m bnn_zoo.certify RUN_DIR [--risk 0.01] [--delta 0.05] [--max-refusal 0.02]
           [--signal mutual_information] [--samples 100] [--alpha 0.01] [--set-score thr]
           [--after-alarm-refusal 0.075] [--after-alarm-quantile 0.02]
"""
from __future__ import annotations

import sys

from ..abstain.conformal import SCORES as SET_SCORES
from ..abstain.density import DENSITY_INPUTS
from ..abstain.rule import DENSITY, SIGNALS
from ..evaluation.certification import certify_run, summary
from . import options as cli


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m bnn_zoo.certify", __doc__)
    parser.add_argument("run_dir", help="a trained classifier run's directory (python -m bnn_zoo.train ...)")
    cli.add_sampling_options(parser, samples="the run's abstention.samples")
    parser.add_argument("--risk", type=float, default=None,
                        help="largest error rate among accepted inputs (default: the run's abstention.risk)")
    parser.add_argument("--delta", type=float, default=None,
                        help="the bound may fail with at most this probability (default: the run's abstention.delta)")
    parser.add_argument("--max-refusal", type=float, default=None,
                        help="refuse at most this fraction of validation (default: the run's abstention.max_refusal)")
    parser.add_argument("--signal", choices=SIGNALS, default=None,
                        help="the Bayesian network's gate (default: the run's abstention.signal)")
    parser.add_argument("--quantile", type=float, default=None,
                        help="quantile of each class's sampled probability (default: the run's abstention.quantile)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="conformal sets miss the true class with probability at most alpha "
                             "(default: the run's abstention.alpha)")
    parser.add_argument("--set-score", choices=SET_SCORES, default=None,
                        help="the sets' score (default: the run's abstention.set_score)")
    parser.add_argument("--after-alarm-refusal", type=float, default=None,
                        help="the after-alarm rule refuses at most this fraction of validation (default: the run's "
                             "abstention.after_alarm_refusal)")
    parser.add_argument("--after-alarm-quantile", type=float, default=None,
                        help="the quantile of each class's sampled probability the after-alarm rule reads (default: "
                             "the run's abstention.after_alarm_quantile)")
    parser.add_argument("--twin-signal", choices=("entropy", DENSITY), default="entropy",
                        help="the twin's gate: its entropy, or its feature density (fitted on the run's first "
                             f"{DENSITY_INPUTS:,} training images; density.pt)")
    parser.add_argument("--data-root", default=None,
                        help="data folder (default: $BNN_ZOO_DATA, then the run's data.root, then ./data)")
    args = parser.parse_args(argv)

    def command() -> int:
        certified = certify_run(args.run_dir, args.device, risk=args.risk, delta=args.delta,
                              max_refusal=args.max_refusal, signal=args.signal, quantile=args.quantile,
                              samples=args.samples, alpha=args.alpha, set_score=args.set_score, seed=args.seed,
                              data_root=args.data_root, twin_signal=args.twin_signal,
                              after_alarm_refusal=args.after_alarm_refusal,
                              after_alarm_quantile=args.after_alarm_quantile)
        print(summary(certified, args.run_dir))
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
