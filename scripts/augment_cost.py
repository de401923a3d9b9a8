"""CPU seconds the declared augmentation takes per epoch: a recipe's ``augment`` section (lenet's by
default) over its data's training images (MNIST's 60,000) in minibatches of 128, each drawn from its
epoch's generator as training draws, on one thread; time.process_time around the augmentation alone
(not the slicing). Prints one JSON line: each epoch's seconds and the least.

Usage: python scripts/augment_cost.py [--arch lenet] [--images 60000] [--batch-size 128] [--epochs 2]
"""
import argparse
import json
import sys
import time

import torch

from bnn_zoo.data.sets import load_torchvision, normalize, run_data_root
from bnn_zoo.data.shifted.augment import Augment
from bnn_zoo.runs.plans.config import load_config, resolved
from bnn_zoo.runs.plans.plan import Plan
from bnn_zoo.runs.training.loop import cpu_threads


def epoch_seconds(augment: Augment, x: torch.Tensor, batch_size: int, epoch: int) -> float:
    """CPU seconds of one epoch's augmentation of ``x``, minibatch by minibatch."""
    spent, draws = 0.0, augment.generator(epoch)
    for xb in x.split(batch_size):
        start = time.process_time()
        augment(xb, draws)
        spent += time.process_time() - start
    return spent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="lenet", help="a recipe whose augment section is timed")
    parser.add_argument("--images", type=int, default=60_000, help="the first this many training images")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed, the least reported")
    args = parser.parse_args(argv)
    plan = Plan.of(resolved(load_config(args.arch)))
    augment = Augment.of(plan.augment, plan.data, plan.seed)
    if augment is None:
        parser.error(f"{args.arch} declares no augmentation (its augment section turns nothing on): name one that does")
    images, _ = load_torchvision(plan.data.name, run_data_root(None, plan.data.root), download=plan.data.download)
    x = normalize(images[:args.images])
    with cpu_threads(1):
        seconds = [round(epoch_seconds(augment, x, args.batch_size, epoch), 3) for epoch in range(args.epochs)]
    print(json.dumps({"arch": args.arch, "augment": plan.augment.describe(), "images": len(x),
                      "batch_size": args.batch_size, "threads": 1, "epoch_cpu_seconds": seconds,
                      "least": min(seconds)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
