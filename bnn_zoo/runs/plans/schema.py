"""The schema of a run's config: every key, its type, its default and what it means, one frozen
dataclass per section (OmegaConf's structured configs). ``bnn_zoo.runs.plans.config`` reads a config into
it; ``bnn_zoo.runs.plans.plan`` turns one into typed sections the rest of a run reads.

Usage: ``OmegaConf.structured(Config)``; ``TrainConfig().epochs``
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ...data.shifted.augment import AugmentConfig
from ...data.shifted.outliers import OutliersConfig
from ...data.config import DataConfig


@dataclass(frozen=True)
class ModelConfig:
    # Hidden widths of the MLPs; null takes the architecture's default (toy_mlp: [50, 50],
    # mnist_mlp: [400, 400], table_mlp: [50]). LeNet-5's shape is fixed.
    hidden: Optional[list[int]] = None
    # Prior on every weight and bias: gaussian, N(0, prior_scale^2); fan_in, N(0, prior_scale^2 / fan_in)
    # on a weight of a layer with fan_in inputs and N(0, prior_scale^2) on a bias (functions that spread
    # about prior_scale at any width); or scale_mixture, Bayes by Backprop's mixture_pi N(0,
    # mixture_scale1^2) + (1 - mixture_pi) N(0, mixture_scale2^2).
    prior: str = "gaussian"
    prior_scale: float = 1.0
    mixture_pi: float = 0.25
    mixture_scale1: float = 0.75
    mixture_scale2: float = 0.1
    # Empirical Bayes: learn the prior's hyperparameters (shared by all layers) with the ELBO.
    learn_prior: bool = False
    # Initial posterior sd of AutoNormal: small (0.01, not Pyro's 0.1), so the first steps see nearly the
    # deterministic network (mnist_mlp validation after epochs 1 / 2: 34% / 49% with 0.1, 95.8% / 96.3% with 0.01).
    init_scale: float = 0.01
    # The posterior approximation: meanfield (an independent Normal per weight), lowrank (a Normal
    # with guide_rank correlation factors) or delta (point weights: the MAP estimate).
    guide: str = "meanfield"
    guide_rank: int = 10
    # weights: draw one weight set per minibatch. local: each example its own weights, drawn as
    # pre-activations (local reparameterization) in linear layers and by Flipout in convolutions.
    reparam: str = "weights"
    # Regression only. noise: fixed (noise_scale), homoscedastic (one learned scale, starting at noise_scale)
    # or heteroscedastic (the network predicts it at each input); in standard units of data.target_stats.
    # noise_scale null, for your own data: the residual sd a least-squares line through the training
    # split leaves (small where the inputs nearly fix the target, near 1 where they hardly explain it).
    noise: str = "fixed"
    noise_scale: Optional[float] = 1.0
    # arch: package.module:factory: its keyword arguments. Its outputs' likelihood, and table_mlp's:
    # categorical or gaussian (null: categorical)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    likelihood: Optional[str] = None


@dataclass(frozen=True)
class TrainConfig:
    # The run's length: epochs, or optimizer steps (minibatches of batch_size) from which the epochs
    # follow, ceil(steps / minibatches per epoch) by the training split's size, so a table of 300 rows
    # and one of a million learn for about as long. Give one of the two (epochs=null plans in steps).
    epochs: Optional[int] = 10
    steps: Optional[int] = None
    batch_size: int = 128
    lr: float = 1e-3
    # constant, cosine (to lr * lr_min_factor over the run) or step (x lr_gamma every lr_step epochs)
    lr_schedule: str = "constant"
    lr_min_factor: float = 0.01
    lr_step: int = 10
    lr_gamma: float = 0.5
    num_particles: int = 1
    # The negative ELBO (bnn_zoo.core.inference.elbo.TraceKL_ELBO), logged as data fit + KL. meanfield: the KL in
    # closed form where the prior has one (gaussian, fan_in), by Monte Carlo where not (scale_mixture), as
    # Pyro's TraceMeanField_ELBO; trace: Monte Carlo throughout, as Pyro's Trace_ELBO.
    elbo: str = "meanfield"
    # Tempering: minimize data fit + kl_weight x KL (1: the ELBO, the Bayesian posterior).
    kl_weight: float = 1.0
    # Posterior samples used for the validation figures after each epoch and the final test.
    val_samples: int = 20
    test_samples: int = 100
    # Evaluate on the validation set (and checkpoint) every N epochs; null: about 50 times a run
    # (every planned epochs // 50, at least every epoch).
    eval_every: Optional[int] = 1
    # Early stopping: stop once the validation NLL has not fallen below its best for this many
    # evaluations in a row. The checkpoint is then written only at a new best, so it holds the best
    # evaluation's weights, and the test figures are theirs. null: train the whole plan.
    patience: Optional[int] = None
    # Also train the deterministic twin (same network, point weights, maximum likelihood).
    twin: bool = True
    twin_epochs: Optional[int] = None  # null: as many as the Bayesian network's (epochs, or those steps make)
    twin_lr: Optional[float] = None  # null: same as lr
    # MC dropout: train the twin with dropout at this rate after its hidden layers (LeNet-5: the fully
    # connected ones) and sample it with dropout on (bnn_zoo.posterior.DropoutPosterior); 0: a plain twin.
    twin_dropout: float = 0.0
    # An ensemble: train this many copies of the network and of its twin, whose weights start from
    # seeds seed, seed + 1, ... on the same data; the posterior is their mixture, the twins' a deep
    # ensemble. Member 0 is the run itself, member N lives in RUN_DIR/members/N.
    members: int = 1
    progress: bool = True
    # CPU threads torch's operations use while a phase trains and validates (null: chosen from the
    # step's work by bnn_zoo.runs.training.threads: one thread under 10 million FLOPs a step's forward pass,
    # torch's own choice, one per core, above). Any network loses much to a second thread when other
    # work shares the cores: train.threads=1 there. At most the CPU cores the process may use.
    threads: Optional[int] = None
    # The Bayesian network's training step captured once and replayed (bnn_zoo.core.fast.captured_step): compile
    # (torch.compile fuses it with Adam's update; on CUDA one CUDA graph), trace (replayed op by op,
    # no compiler), eager (Pyro's Python every step), auto (by the planned steps, the device and
    # whether the compiled step is in the compile cache: on a CPU compile from 3,000 steps, 600 with
    # the cache warm, trace from 300, eager below; bnn_zoo.core.fast.captured_step.choose). The same
    # draws either way.
    capture: str = "auto"
    # Keep compiled steps across processes in the compile cache (bnn_zoo.runs.training.compile_cache.folder:
    # $BNN_ZOO_CACHE, by default ~/.cache/bnn_zoo/compile), so a resumed run, or another of the same
    # network and batch shape, loads its step instead of compiling it; false: compile afresh, keep nothing.
    compile_cache: bool = True
    # Posteriors fitted after training around each member's twin (bnn_zoo.posterior: laplace_last_layer,
    # laplace_kfac, swag, sgmcmc, or a kind registered by name), their states in RUN_DIR/fitted.pt,
    # each bound to the twin it was fitted around (bnn_zoo.runs.storage.fits). A resume adds these to the
    # ones the run holds, and fits again those its twin's new epochs made stale.
    posteriors: List[str] = field(default_factory=list)
    # With resume=RUN only: fitted posteriors the run holds to delete, with their certificates (the
    # run is certified again without them); nothing else deletes one.
    drop_posteriors: List[str] = field(default_factory=list)
    # Stop early once the validation accuracy reaches this (checked every eval_every epochs).
    stop_at_accuracy: Optional[float] = None


@dataclass(frozen=True)
class MCMCConfig:
    # NUTS over the whole training set, started at the plain network's initialization.
    num_samples: int = 300
    warmup_steps: int = 300
    max_tree_depth: int = 8
    target_accept: float = 0.8


@dataclass(frozen=True)
class AbstentionConfig:
    # After training a classifier, certify the abstention rule on the validation split
    # (bnn_zoo.abstain.certify, written to calibration.json and used by predict, evaluate and the
    # scripts): with probability at least 1 - delta, at most `risk` errors among accepted inputs;
    # the epistemic gate is the strictest that refuses at most max_refusal of validation.
    certify: bool = True
    risk: float = 0.01
    delta: float = 0.05
    max_refusal: float = 0.02
    # The Bayesian network's gate: mutual_information or entropy (bits). The twin's is entropy
    # (a single softmax has no mutual information).
    signal: str = "mutual_information"
    quantile: float = 0.5
    samples: int = 100  # posterior samples per validation input
    # Conformal prediction sets (bnn_zoo.abstain.conformal), calibrated on the same validation split: over
    # the inputs, refused or not, a set holds the true class with probability at least 1 - alpha
    # (predict and the page show an accepted input's). set_score: thr (the smallest sets), aps or raps.
    alpha: float = 0.01
    set_score: str = "thr"
    # The after-alarm rule (bnn_zoo.abstain.after_alarm), certified beside each rule on the same
    # validation split at the same risk and delta: the rule's gate, its class read at this quantile of
    # the samples, the strictest threshold that refuses at most after_alarm_refusal of validation. From
    # the input that sounds the shift alarm on, a stream's answers are held to it. Chosen on the shipped
    # lenet's scoreboard under shift (docs/guides/shift.md, "After the alarm").
    after_alarm_refusal: float = 0.075
    after_alarm_quantile: float = 0.02


@dataclass(frozen=True)
class Config:
    arch: str = "toy_mlp"
    # svi: variational inference (the guide of model.guide). nuts: also draw an HMC posterior (NUTS,
    # settings under mcmc) and compare its predictive with the mean-field one's.
    infer: str = "svi"
    run_dir: Optional[str] = None  # null: runs/<arch> (runs/<factory> for package.module:factory)
    seed: int = 0
    device: str = "auto"  # auto (CUDA when available), cpu, cuda, cuda:1, ...
    resume: Optional[str] = None  # a run directory to continue
    overwrite: bool = False  # replace the run already in run_dir (else a new run there stops)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    # Declared augmentation of the training images (bnn_zoo.data.shifted.augment): each transform and its range
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    # Declared outliers made in each training minibatch from noise and its own images, observed as "no
    # class" (bnn_zoo.data.shifted.outliers): each kind's share of a minibatch and the term's weight
    outliers: OutliersConfig = field(default_factory=OutliersConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mcmc: MCMCConfig = field(default_factory=MCMCConfig)
    abstention: AbstentionConfig = field(default_factory=AbstentionConfig)
