"""Every command the README and the docs print runs as printed (issue 47): each line of their bash
blocks and each inline command (``python -m bnn_zoo...``, ``python scripts/...``, ``torchrun ...``)
is either run here, in order, in a temporary folder laid out as a user's clone (the package,
scripts/ and configs/, and the user's own files the commands name: my_pngs/, prices.csv, ...), with
data from $BNN_ZOO_DATA, placeholders (DIR, RUN, NAME, S) filled in and tiny limits added only for
time; or listed in NOT_RUN with why it cannot run in a test. A docs command in neither fails the
fast test, so a new one cannot slip through; the runs are marked slow (about 25 minutes on two
CPU cores).

The README's Python blocks run in test_readme.py; the names and options these commands use are
checked against each command's --help in test_documented_names.py.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import NO_MNIST, SHARED_DATA
from PIL import Image
from test_documented_names import DOCS, ROOT

# What starts an inline command in prose; a bash block's every line is one
STARTS = re.compile(r"^(python3? |torchrun |srun |pip |mkdocs |PYTHONPATH=|cp |apt-get |\.ci/run|curl )")


def commands_of(text: str) -> list[str]:
    """The commands a page prints: each line of its bash blocks (a line ending in a backslash joined
    to the next; comments left out), each inline code span that starts with a command, spaces
    made single."""
    found = []
    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        if language == "bash":
            for line in re.sub(r"\\\n", " ", block).splitlines():
                line = "" if line.lstrip().startswith("#") else line.split(" #")[0]
                found.append(" ".join(line.split()))
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    found += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return [command for command in found if STARTS.match(command)]


def documented() -> dict[str, str]:
    """{command: the first page that prints it} over the README and docs/."""
    found = {}
    for page in DOCS:
        for command in commands_of(page.read_text()):
            found.setdefault(command, str(page.relative_to(ROOT)))
    return found


# The limits added for time, by what a command trains on
IMAGES = ("data.train_limit=256 data.test_limit=100 data.val_size=200 train.epochs=1 train.twin_epochs=1 "
          "train.val_samples=2 train.test_samples=8 abstention.samples=8 train.progress=false")
OWN = ("data.train_limit=200 data.test_limit=50 train.epochs=1 train.twin_epochs=1 train.val_samples=2 "
       "train.test_samples=8 abstention.samples=8 train.progress=false")
TOY = "train.epochs=20 train.progress=false"
NUTS = f"{TOY} mcmc.num_samples=4 mcmc.warmup_steps=4"
TABLE = "train.steps=30 train.progress=false"
AGAIN = "overwrite=true"  # the run folder an earlier command wrote: this one replaces its run
EVALUATE = "--samples 4 --test-size 100 --ood-size 50"
BOARD = "--samples 8 --test-size 50 --ood-size 20 --near-size 10 --shift-size 20"  # 8: a sample of each member
DATA = str(SHARED_DATA)

# (the command as printed, {placeholder: what it stands for here}, what is added for time), in the
# order they run: a command that reads a run comes after the one that trains it
RUN = [
    ("python -m bnn_zoo.predict lenet bnn_zoo/shipped/seven.png", {}, ""),
    ('python -c "import bnn_zoo.shipped as s; print(s.EXAMPLE)"', {}, ""),
    ("python -m bnn_zoo.predict lenet_fashion bnn_zoo/shipped/sneaker.png", {}, ""),
    ("python -m bnn_zoo.train", {}, ""),  # the README's timed line, whole
    ("python -m bnn_zoo.train toy_sinusoid", {}, f"{TOY} {AGAIN}"),
    ("python -m bnn_zoo.train toy_mlp infer=nuts", {}, f"{NUTS} {AGAIN}"),
    ("python -m bnn_zoo.train toy_sinusoid infer=nuts", {}, f"{NUTS} {AGAIN}"),
    ("python -m bnn_zoo.train toy_sinusoid model.noise=heteroscedastic", {}, f"{TOY} {AGAIN}"),
    ("python -m bnn_zoo.train CONFIG", {"CONFIG": "toy_mlp"}, f"{TOY} {AGAIN}"),
    ("python -m bnn_zoo.train lenet data.root=DIR", {"DIR": DATA}, IMAGES),
    ("python -m bnn_zoo.train lenet train.epochs=1 data.root=DIR run_dir=runs/x", {"DIR": DATA}, IMAGES),
    ("python -m bnn_zoo.train resume=runs/x train.epochs=30", {}, "train.epochs=2 train.progress=false"),
    ("python -m bnn_zoo.train resume=runs/x train.lr=1e-4", {}, "train.epochs=3 train.progress=false"),
    ("python -m bnn_zoo.train lenet run_dir=runs/x overwrite=true", {}, IMAGES),
    ("python -m bnn_zoo.train lenet model.reparam=local", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet train.members=3", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet train.threads=1", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet data.train_limit=6000 train.epochs=3 train.members=1 train.twin=false "
     "abstention.certify=false train.threads=1", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet data.train_limit=2000 train.epochs=1 augment.rotate=15 augment.noise=0.1", {},
     f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet data.train_limit=2000 train.epochs=1 outliers.noise=0.25 outliers.mixed=0.25", {},
     f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train lenet outliers.noise=0.125 outliers.scrambled=0.125 outliers.cut=0.125 "
     "outliers.warped=0.125 outliers.weight=0.1 abstention.signal=entropy run_dir=runs/lenet_oe01", {}, IMAGES),
    ("python -m bnn_zoo.evaluate runs/lenet_oe01", {}, EVALUATE),
    ("python -m bnn_zoo.evaluate runs/lenet_oe01 --test-size 500 --ood --shift shot_noise impulse_noise glass_blur "
     "motion_blur stripe fog spatter dotted_line zigzag canny_edges", {}, f"{EVALUATE} --shift-size 20"),
    ("python -m bnn_zoo.certify runs/lenet_oe01 --risk 0.01", {}, ""),
    ("python -m bnn_zoo.evaluate runs/lenet_oe01 --ood notmnist fashion_mnist noise --shift shot_noise impulse_noise "
     "glass_blur motion_blur stripe fog spatter dotted_line zigzag canny_edges --no-act-on-alarm", {},
     f"{EVALUATE} --shift-size 20"),
    ("python -m bnn_zoo.train lenet KINDS abstention.signal=entropy train.members=1 train.epochs=4 train.twin=false "
     "run_dir=runs/kinds/NAME", {"KINDS": "outliers.scrambled=0.03", "NAME": "scrambled"}, IMAGES),
    ("python -m bnn_zoo.evaluate runs/kinds/NAME --samples 20 --test-size 1000 --ood notmnist fashion_mnist --ood-size 500 "
     "--shift shot_noise impulse_noise glass_blur motion_blur stripe fog spatter dotted_line zigzag canny_edges "
     "--shift-size 200 --no-act-on-alarm", {"NAME": "scrambled"}, f"{EVALUATE} --shift-size 20"),
    ("python -m bnn_zoo.certify runs/lenet", {}, ""),
    ("python -m bnn_zoo.certify RUN", {"RUN": "runs/lenet"}, ""),
    ("python -m bnn_zoo.certify RUN_DIR", {"RUN_DIR": "runs/lenet"}, ""),
    ("python -m bnn_zoo.certify RUN_DIR --alpha 0.01 --set-score thr", {"RUN_DIR": "runs/lenet"}, ""),
    ("python -m bnn_zoo.certify RUN --data-root DIR", {"RUN": "runs/lenet", "DIR": DATA}, ""),
    ("python -m bnn_zoo.certify RUN --twin-signal feature_density", {"RUN": "runs/lenet"}, ""),
    ("python -m bnn_zoo.evaluate lenet", {}, EVALUATE),  # the shipped lenet
    ("python -m bnn_zoo.evaluate runs/lenet", {}, EVALUATE),
    ("python -m bnn_zoo.evaluate RUN_DIR", {"RUN_DIR": "runs/lenet"}, EVALUATE),
    ("python -m bnn_zoo.evaluate runs/CONFIG --rule quantile --full", {"CONFIG": "lenet"}, f"{EVALUATE} --shift-size 20"),
    ("python -m bnn_zoo.evaluate RUN --samples S --test-size 5000 --ood notmnist fashion_mnist noise --ood-size 2000",
     {"RUN": "runs/lenet", "S": "4"}, EVALUATE),
    ("python -m bnn_zoo.evaluate NAME --full --samples 100 --ood notmnist --ood-size 100 --output DIR/NAME.json",
     {"NAME": "lenet", "DIR": "."}, f"{EVALUATE} --shift-size 20"),
    ("python scripts/reject_notmnist.py runs/lenet", {}, EVALUATE),
    ("python scripts/reject_noise.py runs/lenet", {}, EVALUATE),
    ("python -m bnn_zoo.predict runs/lenet my_digit.png", {}, ""),
    ("python -m bnn_zoo.predict runs/lenet *.png --verbose", {}, ""),
    ("python -m bnn_zoo.predict runs/lenet *.png --json", {}, ""),
    ("python -m bnn_zoo.predict lenet *.png", {}, ""),
    ("python scripts/weight_posteriors.py runs/lenet", {}, ""),
    ("cp -r runs/lenet runs/lenet_ensemble && python -m bnn_zoo.train resume=runs/lenet_ensemble train.members=5", {},
     "train.progress=false"),
    ("python -m bnn_zoo.train lenet train.members=5 run_dir=runs/lenet_ensemble", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train resume=runs/lenet_ensemble train.members=8", {}, "train.progress=false"),
    ("python -m bnn_zoo.predict runs/lenet_ensemble digit.png --posterior twin", {}, ""),
    ("python -m bnn_zoo.train lenet train.members=3 run_dir=runs/lenet_ens3", {}, IMAGES),
    ("python -m bnn_zoo.train lenet model.guide=lowrank train.twin_dropout=0.5 run_dir=runs/lenet_lowrank", {}, IMAGES),
    ("python -m bnn_zoo.train lenet run_dir=lenet_ladder "
     '"train.posteriors=[laplace_last_layer,laplace_kfac,swag,sgmcmc]"', {}, f"{IMAGES} data.train_limit=900"),
    ("python -m bnn_zoo.train lenet_fashion run_dir=runs/lenet_fashion", {}, IMAGES),
    ("python -m bnn_zoo.evaluate runs/lenet_fashion --full", {}, f"{EVALUATE} --shift-size 20"),
    ("python -m bnn_zoo.train mnist_mlp", {}, IMAGES),
    ("python scripts/prune.py runs/mnist_mlp", {}, "--samples 2 --test-size 100 --ood-size 50 --levels 0 0.5"),
    ("python -m bnn_zoo.train mnist_mlp model.guide=lowrank model.guide_rank=10", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train mnist_mlp model.prior=scale_mixture", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train mnist_mlp model.prior=fan_in", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train mnist_mlp model.learn_prior=true", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train mnist_mlp model.prior=scale_mixture model.learn_prior=true model.mixture_pi=0.5", {},
     f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train mnist_mlp train.elbo=trace", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.train mnist_mlp train.epochs=2", {}, f"{IMAGES} {AGAIN}"),
    ("python -m bnn_zoo.evaluate RUN", {"RUN": "runs/mnist_mlp"}, EVALUATE),
    ("python -m bnn_zoo.train mnist_mlp data.train_limit=2000 data.test_limit=1000 train.epochs=2 run_dir=runs/quick",
     {}, IMAGES),
    ("python -m bnn_zoo.train mnist_mlp data.root=DIR data.train_limit=2000 train.epochs=1 "
     "'train.posteriors=[laplace_last_layer]' run_dir=RUN", {"DIR": DATA, "RUN": "runs/laplace"}, IMAGES),
    ("python -m bnn_zoo.train mnist_mlp train.members=5 run_dir=runs/mnist_mlp_ensemble", {}, IMAGES),
    ("python -m bnn_zoo.train mnist_mlp model.guide=lowrank model.guide_rank=10 train.twin_dropout=0.5 "
     "run_dir=runs/mnist_mlp_lowrank", {}, IMAGES),
    ("python -m bnn_zoo.train mnist_mlp_hmc model.prior=gaussian run_dir=runs/mnist_mlp_hmc", {},
     f"{IMAGES} mcmc.num_samples=4 mcmc.warmup_steps=4"),
    ("python -m bnn_zoo.train mnist_mlp train.kl_weight=0.5 train.twin=false run_dir=runs/mnist_mlp_tempered", {}, IMAGES),
    ("python scripts/scoreboard.py runs/mnist_mlp runs/lenet", {}, BOARD),
    ("python scripts/scoreboard.py runs/lenet runs/lenet_ensemble runs/lenet_lowrank --ood-size 5000 --near-size 1000", {},
     BOARD),
    ("python scripts/scoreboard.py lenet lenet_ladder --ood-size 2000 --near-size 1000", {}, BOARD),
    ("python scripts/scoreboard.py lenet lenet_ladder --out board --ood-size 2000 --near-size 1000", {}, BOARD),
    ("python scripts/scoreboard.py lenet mnist_mlp lenet_fashion", {}, BOARD),
    ("python scripts/scoreboard.py lenet --ood-size 2000 --near-size 2000 --out board", {}, BOARD),
    ("python scripts/scoreboard.py lenet --samples S --ood-size 5000 --near-size 1000", {"S": "5"}, BOARD),
    ("python scripts/scoreboard.py lenet mnist_mlp lenet_fashion runs/lenet_ens3", {}, BOARD),
    ("python scripts/scoreboard.py DIR --ood-size 5000 --near-size 1000", {"DIR": "runs/lenet"}, BOARD),
    ("python scripts/scoreboard.py RUN --ood-size 2000 --near-size 2000", {"RUN": "runs/lenet"}, BOARD),
    ("python scripts/alarm_rates.py lenet", {}, "--streams 2 --length 50 --orders 1 --samples 3"),
    # the ladder against HMC: the toy references that ship, a tiny MNIST reference built and scored against
    ("python scripts/distance_to_hmc.py --json docs/results/hmc_distance.json", {},
     "--samples 8 --size 20 --runs distance --override train.epochs=1 train.twin_epochs=1 train.progress=false"),
    # your own data: a folder of images, a table, a network of your own
    ("python -m bnn_zoo.train lenet data.name=folder data.path=my_pngs abstention.risk=0.05 run_dir=runs/mine", {}, OWN),
    ("python -m bnn_zoo.evaluate runs/mine --ood mine=my_letters", {}, EVALUATE),
    ("python -m bnn_zoo.train lenet data.name=folder data.path=DIR", {"DIR": "my_pngs"}, f"{OWN} run_dir=runs/pngs"),
    ("python scripts/export_pngs.py fashion_mnist fashion", {}, "--per-class 20"),
    ("python scripts/export_pngs.py mnist digits", {}, "--per-class 20 --test-per-class 20"),
    ('python -m bnn_zoo.train lenet data.name=folder data.path=fashion abstention.risk=0.05 "data.ood={digits: '
     'digits/test}" run_dir=runs/fashion', {}, OWN),
    ("python -m bnn_zoo.evaluate runs/fashion", {}, EVALUATE),
    ("python -m bnn_zoo.predict runs/fashion fashion/test/Sneaker/1010.png", {}, ""),
    ("python -m bnn_zoo.train table_regression data.path=prices.csv", {}, TABLE),
    ("python -m bnn_zoo.train table_regression data.path=prices.csv run_dir=runs/prices", {}, TABLE),
    ("python -m bnn_zoo.predict runs/prices new_rows.csv", {}, ""),
    ("python -m bnn_zoo.train table_classification data.path=flowers.csv data.target=species run_dir=runs/flowers", {},
     TABLE),
    ("python -m bnn_zoo.predict runs/flowers new_flowers.csv", {}, ""),
    ("python -m bnn_zoo.train arch=mynets:small_cnn model.kwargs.width=16 data.name=mnist run_dir=runs/cnn", {}, IMAGES),
    ("PYTHONPATH=. python -m bnn_zoo.predict runs/cnn my_digit.png", {}, ""),
    ("PYTHONPATH=. python -m bnn_zoo.evaluate runs/cnn", {}, EVALUATE),
    ("python -m bnn_zoo.trust NAME --kwargs JSON", {"NAME": "mynets:small_cnn", "JSON": "'{\"width\": 8}'"}, ""),
    # the measuring scripts, at their smallest
    ("python scripts/peers.py --rounds 3", {}, "--archs tiny --contenders zoo twin --steps 2 --rounds 1"),
    ("python scripts/peers.py --archs mnist_mlp lenet --contenders zoo_compiled bbb bt_reparam twin --rounds 5", {},
     "--archs tiny --contenders zoo twin --steps 2 --rounds 1"),
    ("python scripts/time_to_accuracy.py", {}, "--archs mnist_mlp --capture eager --target 0.5 "
                                                "--override data.train_limit=512 data.val_size=200"),
    ("python scripts/benchmark.py --device cpu", {}, "--archs mnist_mlp --images 40 --samples 3 --draws 3"),
    ("python scripts/augment_cost.py", {}, ""),  # two epochs of MNIST's 60,000: seconds
    ("python scripts/capture_parity.py --override train.epochs=10", {},
     "--arch mnist_mlp --seeds 0 --samples 2 --ood-size 20 --override train.epochs=1 data.train_limit=256 "
     "data.val_size=200 train.capture=trace train.progress=false"),
    ("python scripts/tables.py --seeds 0 1 2 --json docs/results/tables.json", {},
     "--tables iris --seeds 0 --members 1 --override train.steps=30"),
    ("python scripts/ddp_speed.py --ranks 2 --rounds 3", {}, "--rounds 1 --epochs 1 --override data.train_limit=512 "
                                                             "data.val_size=200"),
    ("python scripts/serve_latency.py MODEL --device cpu", {"MODEL": "lenet"}, "--drawings 2"),
]

ONE_BUILD = "CI's .ci/run does it in a fresh environment (installs, the suite, the site, the wheel)"
NOT_RUN = {
    # installs and builds: a test runs in the environment they make
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[serve]"': ONE_BUILD,
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[serve]" && python -m bnn_zoo.train':
        f"{ONE_BUILD}; its last command, python -m bnn_zoo.train, runs here",
    'pip install -e ".[dev,serve,bench,docs]" && python -m pytest': ONE_BUILD,
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu": "an install from the network",
    'pip install -e ".[docs]" && mkdocs serve': "serves the site until stopped; CI builds it (mkdocs build --strict)",
    'pip install -e ".[serve]"': ONE_BUILD,
    'pip install -e ".[bench]"': ONE_BUILD,
    "pip install": "the word in prose, not a command line",
    "python -m build": ONE_BUILD,
    "mkdocs build --strict": f"{ONE_BUILD}; it runs the tutorials for minutes",
    ".ci/run": "the whole of CI: it runs this suite",
    "python -m pytest": "this suite itself",
    "python -m pytest -m slow": "this suite's slow part, of which this test is one",
    "python -m pytest -m cuda": "needs a CUDA device (scripts/gpu_check.py runs it there)",
    "apt-get install chromium chromium-driver": "a system install (CI does it)",
    # what blocks, or needs machines a test does not have
    "python -m bnn_zoo.serve": "serves until stopped (tests/page/test_page.py starts the page and asks it)",
    "python -m bnn_zoo.serve --no-act-on-alarm": "serves until stopped (tests/page/test_page.py)",
    "python -m bnn_zoo.serve runs/lenet_ensemble --port 0 --device cpu": "serves until stopped (tests/page/test_page.py)",
    "python -m bnn_zoo.serve runs/fashion": "serves until stopped (tests/page/test_page.py)",
    "torchrun --nproc_per_node 4 -m bnn_zoo.train lenet": "four GPUs (tests/runs/training/test_ranks.py runs torchrun on two "
                                                          "CPU ranks)",
    "torchrun --nproc_per_node 4 -m bnn_zoo.train lenet run_dir=runs/lenet4": "four GPUs (tests/runs/training/test_ranks.py)",
    "torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 -m bnn_zoo.train lenet "
    "run_dir=/shared/runs/lenet16": "two machines of eight GPUs",
    'srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint '
    '"$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1):29500" -m bnn_zoo.train lenet': "a Slurm cluster",
    "python -m bnn_zoo.train lenet train.members=5 device=cuda abstention.certify=false": "needs a CUDA device",
    "python scripts/scoreboard.py runs/mnist_mlp_ensemble runs/mnist_mlp_lowrank runs/mnist_mlp_hmc "
    "runs/mnist_mlp_tempered --device cuda --ood-size 5000 --near-size 1000": "needs a CUDA device",
    "python scripts/gpu_check.py --data-root DIR": "needs a CUDA device",
    "python scripts/step_profile.py --arch mnist_mlp": "profiles on its default device, CUDA (measured on an H200; "
                                                       "tests/test_scripts.py runs it on the CPU)",
    "python scripts/gpu_check.py --data-root DIR --budget 290": "needs a CUDA device",
    "python scripts/gpu_check.py --data-root DIR --budget 235 --sections draws mnist_mlp tests peers lenet":
        "needs a CUDA device",
    # what rewrites the package's own files
    "python scripts/ship_posterior.py runs/lenet lenet": "rewrites the posteriors shipped inside the package "
                                                         "(tests/test_scripts.py runs it on a copy)",
    "python scripts/ship_posterior.py RUN NAME --test-size 10000": "rewrites a shipped posterior (tests/test_scripts.py)",
    "python scripts/ship_sets.py lenet mnist_mlp lenet_fashion": "rewrites the shipped posteriors (tests/test_scripts.py)",
    "python scripts/ship_sets.py mnist_mlp lenet_fashion --after-alarm-only": "rewrites the shipped posteriors",
    "python scripts/ship_posterior.py RUN lenet": "rewrites the posteriors shipped inside the package (tests/test_scripts.py)",
    "python scripts/ship_sets.py lenet --recertify": "rewrites the shipped posteriors (tests/test_scripts.py)",
    "python scripts/hmc_reference.py toy_mlp --chains 4 --jobs 2 --samples 1200 --warmup 400 --tree-depth 8 --out "
    "bnn_zoo/shipped/toy_mlp_hmc.npz": "rewrites a reference shipped inside the package, 4 chains for 40 minutes "
                                       "(tests/test_scripts.py builds one at a tiny size, two chains at a time)",
    "python scripts/hmc_reference.py toy_sinusoid --chains 4 --jobs 2 --samples 1200 --warmup 400 --tree-depth 8 --out "
    "bnn_zoo/shipped/toy_sinusoid_hmc.npz": "rewrites a reference shipped inside the package (as above)",
    "python scripts/hmc_reference.py mnist_mlp_hmc --samples 500 --warmup 300 --tree-depth 7 --keep runs/hmc_chains "
    "--out bnn_zoo/shipped/mnist_mlp_hmc.npz": "rewrites the package's own reference, 4 chains for an hour "
                                               "(tests/test_scripts.py builds one at a tiny size, kept and read again)",
    "curl --data-binary @bnn_zoo/shipped/seven.png http://127.0.0.1:8000/api/answer":
        "asks a running server (python -m bnn_zoo.serve); tests/page/test_page.py sends the same body to the app",
    'curl -F file=@bnn_zoo/shipped/seven.png "http://127.0.0.1:8000/api/answer?samples=200"':
        "asks a running server; tests/page/test_page.py sends the same multipart form to the app",
    "python scripts/compile_cache.py": "compiles two training steps, minutes on a CPU (tests/test_scripts.py runs it)",
    # not whole commands: a name in prose, a pattern, a command cut short
    "python -m bnn_zoo.certify": "the command's name in prose (its --help: test_documented_names.py)",
    "python -m bnn_zoo.predict": "the command's name in prose",
    "python -m bnn_zoo.evaluate": "the command's name in prose",
    "python -m bnn_zoo.trust": "the command's name in prose",
    "python -m bnn_zoo.train CONFIG key=value": "the pattern of a command line",
    "python -m bnn_zoo.train RECIPE LIMITS train.threads=N train.progress=false":
        "the pattern of the thread measurements, their recipes and limits spelled out beside it",
    "python -m bnn_zoo.train lenet run_dir=DIR train.twin=false ...": "a command cut short (...)",
    "python -m bnn_zoo.train resume=RUN train.posteriors=[...]": "a command cut short ([...])",
    "PYTHONPATH=.": "a setting in prose",
}


def _user_folder(folder: Path) -> Path:
    """A user's clone with their own files: the package, scripts/ and configs/ (linked), a folder of
    digit PNGs and one of letters, two tables and their new rows, two digits to ask about, a module
    of networks, docs/results/ for the tables' figures."""
    from bnn_zoo.data.shifted.ood_sets import load_notmnist
    from bnn_zoo.data.sets import load_torchvision

    for name in ("bnn_zoo", "scripts", "configs"):
        (folder / name).symlink_to(ROOT / name)
    digits, labels = load_torchvision("mnist", DATA, train=False, download=False)
    for part, count in (("train", 30), ("test", 10)):
        for i in range(count * 10):
            k = int(labels[i])
            (folder / "my_pngs" / part / str(k)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(digits[i].numpy()).save(folder / "my_pngs" / part / str(k) / f"{i}.png")
    (folder / "my_letters").mkdir()
    for i, letter in enumerate(load_notmnist(DATA)[:20]):
        Image.fromarray(letter.numpy()).save(folder / "my_letters" / f"{i}.png")
    Image.fromarray(digits[0].numpy()).save(folder / "my_digit.png")
    Image.fromarray(digits[1].numpy()).save(folder / "digit.png")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    rows = "\n".join(f"{a:.4f},{b:.4f},{c:.4f}" for a, b, c in x)
    prices = "\n".join(f"{a:.4f},{b:.4f},{c:.4f},{100 + 20 * a - 5 * b + rng.normal():.2f}" for a, b, c in x)
    (folder / "prices.csv").write_text(f"rooms,age,distance,price\n{prices}\n")
    (folder / "new_rows.csv").write_text("rooms,age,distance\n" + "\n".join(rows.splitlines()[:5]) + "\n")
    species = ["setosa", "versicolor", "virginica"]
    flowers = "\n".join(f"{a:.4f},{b:.4f},{c:.4f},{species[int(a > 0) + int(b > 0)]}" for a, b, c in x)
    (folder / "flowers.csv").write_text(f"sepal,petal,stem,species\n{flowers}\n")
    (folder / "new_flowers.csv").write_text("petal,sepal,stem\n0.5,1.0,0.0\n-1.0,-0.5,0.2\n")
    (folder / "mynets.py").write_text(
        "from torch import nn\n\n\ndef small_cnn(width=8):\n"
        "    return nn.Sequential(nn.Conv2d(1, width, 5), nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(),\n"
        "                         nn.Linear(width * 6 * 6, 10))\n")
    (folder / "docs" / "results").mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(NO_MNIST)
    return _user_folder(tmp_path_factory.mktemp("clone"))


def as_run(command: str, filled: dict[str, str], added: str) -> str:
    """The command as run here: each placeholder (a word in capitals) filled in, the limits added."""
    for placeholder, value in filled.items():
        command = re.sub(rf"(?<![\w-]){placeholder}(?![\w-])", value, command)
    return f"{command} {added}".strip()


def test_every_documented_command_is_run_or_listed():
    """A command the README or docs print that this test neither runs nor lists with a reason
    fails here (a new one cannot slip through), as does an entry for a command no page prints."""
    found = documented()
    run = [command for command, _, _ in RUN]
    assert len(run) == len(set(run)) and not set(run) & set(NOT_RUN)
    missing = {command: page for command, page in found.items() if command not in run and command not in NOT_RUN}
    assert not missing, f"docs commands neither run nor listed in {Path(__file__).name}: {missing}"
    gone = [command for command in [*run, *NOT_RUN] if command not in found]
    assert not gone, f"no page prints these any more: {gone}"
    for command, filled, _ in RUN:
        assert all(placeholder in command for placeholder in filled), command


@pytest.mark.slow
@pytest.mark.parametrize("command, filled, added", RUN, ids=[command[:80] for command, _, _ in RUN])
def test_each_documented_command_runs_as_printed(command, filled, added, user_folder):
    done = subprocess.run(as_run(command, filled, added), shell=True, executable="/bin/bash", cwd=user_folder,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "BNN_ZOO_DATA": DATA, "PYTHONDONTWRITEBYTECODE": "1",
                               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
