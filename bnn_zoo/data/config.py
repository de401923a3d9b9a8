"""The data section of a run's config: where its examples come from and, once a run has looked at
its own data, what it found there (the run's DataProfile), so its checkpoint answers without the
data. ``bnn_zoo.runs.plans.schema`` holds it among the other sections; the data layer's functions take it.

Usage: ``DataConfig(name="mnist", train_limit=1000).val_size``
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


# The data keys as long as a run's inputs are wide: a table of 10,000 columns made them OmegaConf lists
# of 10,000 nodes, merged and checked one by one at every config built (a minute to train, 56 s each
# predict), so they stay out of the config's merges and travel beside it, typed.
HELD_BESIDE = ("features", "mean", "std")


@dataclass(frozen=True)
class DataConfig:
    # mnist, fashion_mnist (classifiers), polynomial, sinusoid (toy_mlp), or your own (bnn_zoo.data.own):
    # folder (a subfolder of images per class), tensors (.pt or .npz of x and y) or csv; null: told by
    # data.path where given (a folder, .csv, .pt or .npz), else the architecture's default.
    name: Optional[str] = None
    # Folder holding <Name>/raw/ as torchvision lays it out; null: $BNN_ZOO_DATA, else ./data.
    root: Optional[str] = None
    download: bool = True
    # Your own data: its folder or file; its test set's (null: PATH/test beside PATH/train, else a fifth held out)
    path: Optional[str] = None
    test_path: Optional[str] = None
    # folder: images resized to image_size x image_size (null: as they are, one size), 1 (gray) or 3 (RGB) channels
    image_size: Optional[int] = None
    channels: int = 1
    target: Optional[str] = None  # csv: the target column (null: one named target/label/class/y, else the last)
    ood: Dict[str, str] = field(default_factory=dict)  # {name: folder of images} evaluate and the scoreboard score
    # Measured on your own data's training split when a run starts (its DataProfile); its checkpoint answers without it.
    # The keys of HELD_BESIDE are held beside the config, not in it: on a plan's and a loaded run's typed data
    # section (``Plan.data``, ``Trained.data``), and in the config its checkpoint and metrics.json store.
    input_shape: Optional[List[int]] = None
    classes: Optional[List[str]] = None
    features: Optional[List[str]] = None  # csv: the feature columns the network reads, in order
    mean: Optional[List[float]] = None  # per channel of images, per feature of rows
    std: Optional[List[float]] = None
    target_stats: Optional[List[float]] = None  # a regression's target mean and sd: its network learns them standardized
    digest: Optional[str] = None  # of every example: data changed since the run trained is refused
    # MNIST's digits: answer each input from the posterior over two readings of it, as given and remade as
    # MNIST's digits were made (bnn_zoo.data.images.remade: background to black, the ink fitted into
    # 20x20 and centred by its mass), their predictive samples pooled (bnn_zoo.posterior.reading): where
    # the readings disagree the answer is uncertain. Twice the predictions.
    remade: bool = False
    # Examples held out of the training set for validation and threshold calibration (null: 5000 of
    # MNIST's, a fifth of your own data's).
    val_size: Optional[int] = None
    # Use only the first N training / test images (quick runs and tests); null: all.
    train_limit: Optional[int] = None
    test_limit: Optional[int] = None
