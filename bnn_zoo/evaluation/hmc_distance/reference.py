"""An HMC reference anyone can score against: HMC's predictive on a few sets of inputs (a
classifier's probabilities [N, C] as half-precision floats, as the NeurIPS 2021 competition
published them; a regression's draws [S, N]), the recipe that made it (the config, the command, the
commit, the machine, each chain's seed and seconds, and per set the predictive R-hat, effective
sample size and the chain-to-chain floor) as JSON, and a SHA-256 digest of all of it. One ``.npz``
file, read by numpy without pickle; an altered or damaged one refused in one line.

Usage::

    reference = Reference.read("mnist_mlp_hmc")        # a shipped name, or a path to a .npz
    reference.predictive["test"], reference.floor("test"), reference.inputs("test")
    reference.write("my_reference.npz")
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ...core.errors import CheckpointError
from ...runs.storage.loading import SHIPPED
from .digested import read_digested, write_digested
from .inputs import drawn_again

FORMAT = 1
SUFFIX = ".npz"
REBUILD = "build it again (scripts/hmc_reference.py) or install bnn-zoo again"


def shipped_references() -> list[str]:
    """The names of the references that ship inside the package."""
    return sorted(path.stem for path in SHIPPED.glob(f"*{SUFFIX}"))


@dataclass(frozen=True)
class Reference:
    """HMC's predictive by set: classification [N, C] probabilities, regression [D, N] draws of y;
    the inputs stored with it (a toy curve's) and the labels or targets where known, by set; the recipe."""

    name: str
    recipe: dict
    predictive: dict[str, torch.Tensor]
    x: dict[str, torch.Tensor]
    y: dict[str, torch.Tensor]

    @property
    def regression(self) -> bool:
        return self.recipe["task"] == "regression"

    @property
    def sets(self) -> list[str]:
        return list(self.recipe["sets"])

    def floor(self, name: str) -> dict[str, float]:
        """How far HMC's chains are from one another on set ``name`` (``metrics.chain_floor``)."""
        return self.recipe["sets"][self._known(name)]["floor"]

    def _known(self, name: str) -> str:
        if name not in self.recipe["sets"]:
            raise ValueError(f"the reference {self.name} holds no set {name!r}; its sets: {', '.join(self.sets)}")
        return name

    def inputs(self, name: str, data_root: Optional[str] = None) -> torch.Tensor:
        """Set ``name``'s inputs as the network reads them: stored with the reference, or drawn
        again from the data sets (``data_root``, else $BNN_ZOO_DATA) and checked against its digest."""
        if self._known(name) in self.x:
            return self.x[name]
        return drawn_again(name, self.recipe["sets"][name]["spec"], data_root)[0]

    def write(self, path: str | Path) -> None:
        """The reference as one .npz file (no pickle), with the digest of its contents."""
        arrays = {"recipe": np.frombuffer(json.dumps({"format": FORMAT, **self.recipe}).encode(), np.uint8)}
        for name, values in self.predictive.items():
            arrays[f"{name}.predictive"] = values.cpu().numpy().astype(np.float16)  # 3 digits: the metrics' own noise
        arrays.update({f"{name}.x": v.cpu().numpy() for name, v in self.x.items()})
        arrays.update({f"{name}.y": v.cpu().numpy() for name, v in self.y.items()})
        write_digested(Path(path), arrays)

    @classmethod
    def read(cls, reference: str | Path) -> "Reference":
        """A reference by a shipped name (``shipped_references``) or the path of its file; a
        CheckpointError, in one line, for a file that is no reference or whose digest differs."""
        path = Path(reference)
        if path.suffix != SUFFIX:
            path = SHIPPED / f"{reference}{SUFFIX}"
            if not path.is_file():
                shipped = ", ".join(shipped_references()) or "none"
                raise CheckpointError(f"no HMC reference {str(reference)!r}: give a shipped one ({shipped}), or the "
                                      "path of a .npz that python scripts/hmc_reference.py CONFIG --out FILE.npz wrote")
        if not path.is_file():
            raise CheckpointError(f"no HMC reference at {path}: build one there with python scripts/hmc_reference.py "
                                  f"CONFIG --out {path}")
        arrays = read_digested(path, "HMC reference", REBUILD)
        if "recipe" not in arrays:
            raise CheckpointError(f"{path} is no HMC reference (it holds no recipe): give the .npz that python "
                                  "scripts/hmc_reference.py CONFIG --out FILE.npz wrote")
        recipe = json.loads(arrays.pop("recipe").tobytes())
        if recipe.pop("format", None) != FORMAT:
            raise CheckpointError(f"{path} is an HMC reference of another format than this bnn-zoo reads ({FORMAT})")
        parts = {"predictive": {}, "x": {}, "y": {}}
        for key, value in arrays.items():
            name, _, part = key.rpartition(".")
            tensor = torch.from_numpy(value)
            parts[part][name] = tensor.float() if tensor.is_floating_point() else tensor.long()
        return cls(path.stem, recipe, parts["predictive"], parts["x"], parts["y"])
