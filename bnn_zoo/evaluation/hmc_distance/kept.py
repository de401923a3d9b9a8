"""An HMC reference's chains kept as each one ends, so a build that stops (a crash, a machine taken
back, out of memory after the chains) goes on where it stopped: run the same command again and the
chains kept are read instead of drawn. A chain is one ``.npz`` file (no pickle) named by the recipe
that drew it: the config, the training data's digest, the samples, warm-up steps, tree depth and
acceptance target, the first seed, and the versions of bnn-zoo, torch and Pyro, so a chain of
another recipe is never read as this one's; the number of chains is not in it, so a reference of
four chains can grow to six. Each file holds its own digest; a damaged one is refused in one line.

Usage::

    kept = KeptChains(Path("runs/hmc_chains"), recipe_key(plan, train, 500, 300, 7))
    drawn = kept.read(chains=4)                 # {c: (samples, Chain)} of the chains kept
    nuts_chains(..., drawn=drawn, on_chain=kept.write)
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyro
import torch

from ...core.errors import CheckpointError
from ...core.inference.chains import Chain, Drawn
from ...core import VERSION
from ...data.sets import TensorSet
from ...runs.plans.plan import Plan
from ...runs.storage.checkpoint import digest
from .digested import read_digested, write_digested

RUN = "chain.json"  # the array holding the chain's Chain and recipe key as JSON bytes
AGAIN = "delete it to draw that chain again"


def recipe_key(plan: Plan, train: TensorSet, num_samples: int, warmup_steps: int, max_tree_depth: int) -> str:
    """The digest of what a chain's samples depend on but its index: the run's config, the training
    data, the chain's settings, the first seed, and the versions of the code that draws it."""
    return digest({"config": plan.stored(), "x": train.x, "y": train.y, "num_samples": num_samples,
                   "warmup_steps": warmup_steps, "max_tree_depth": max_tree_depth,
                   "target_accept": plan.mcmc.target_accept, "seed": plan.seed,
                   "versions": [VERSION, torch.__version__, pyro.__version__]})[:16]


class KeptChains:
    """The chains of one recipe in ``folder``: ``chain-KEY-C.npz`` for chain C."""

    def __init__(self, folder: Path, key: str):
        self.folder, self.key = Path(folder), key

    def path(self, c: int) -> Path:
        return self.folder / f"chain-{self.key}-{c}.npz"

    def read(self, chains: int) -> dict[int, Drawn]:
        """The kept chains among the first ``chains``: {c: (samples, Chain)}."""
        return {c: self._read(c) for c in range(chains) if self.path(c).is_file()}

    def write(self, c: int, samples: dict[str, torch.Tensor], run: Chain) -> None:
        """Keep chain ``c``: its samples and what it did, whole or not at all."""
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays = {site: value.detach().cpu().numpy() for site, value in samples.items()}
        arrays[RUN] = np.frombuffer(json.dumps({"key": self.key, "chain": c, **asdict(run)}).encode(), np.uint8)
        write_digested(self.path(c), arrays, compressed=False)  # a chain's draws do not compress

    def _read(self, c: int) -> Drawn:
        path = self.path(c)
        arrays = read_digested(path, "kept chain", AGAIN)
        run = json.loads(arrays.pop(RUN).tobytes()) if RUN in arrays else {}
        if (run.pop("key", None), run.pop("chain", None)) != (self.key, c):
            raise CheckpointError(f"{path} is another recipe's chain or another chain than its name says: {AGAIN}")
        return {site: torch.from_numpy(value) for site, value in arrays.items()}, Chain(**run)
