"""Your own network and your own data made Bayesian: a factory in a module of your own
(arch=mynets:small_mlp) trained on a CSV table, certified, and asked about new rows, one of them far
outside anything it saw."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

Path("mynets.py").write_text('''
from torch import nn


def small_mlp(inputs: int = 2, width: int = 32, classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, classes))
''')
g = torch.Generator().manual_seed(0)
y = torch.randint(0, 3, (900,), generator=g)
x = torch.tensor([[0.0, 0.0], [4.0, 0.0], [2.0, 3.5]])[y] + 0.8 * torch.randn(900, 2, generator=g)
names = ["circle", "square", "triangle"]
Path("shapes.csv").write_text("width,height,shape\n" + "".join(f"{a:.3f},{b:.3f},{names[k]}\n" for (a, b), k in zip(x.tolist(), y)))
Path("new.csv").write_text("height,width\n0.1,0.2\n3.4,2.1\n40,-30\n")


def run(*args: str) -> str:
    # A stored run's network is imported from installed packages or PYTHONPATH, never from the folder
    # you stand in (a run handed to you could carry a mynets.py): PYTHONPATH=. names this folder.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [".", os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout


run("bnn_zoo.cli.train", "arch=mynets:small_mlp", "model.kwargs.width=32", "data.name=csv", "data.path=shapes.csv",
    "train.epochs=60", "train.lr=0.01", "abstention.risk=0.05", "run_dir=runs/shapes", "overwrite=true", "train.progress=false")
print(run("bnn_zoo.predict", "runs/shapes", "new.csv"))
answers = json.loads(run("bnn_zoo.predict", "runs/shapes", "new.csv", "--json"))["answers"]
print("far row:", answers[2]["label"], answers[2]["refused_by"], answers[2]["uncertainty_bits"])
assert [a["label"] for a in answers[:2]] == ["circle", "triangle"], "the rows near the data are no longer answered right"
