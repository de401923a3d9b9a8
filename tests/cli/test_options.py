import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bnn_zoo
from bnn_zoo.cli import options as cli
from bnn_zoo.core.errors import CheckpointError, ConfigError, DataError


@pytest.mark.parametrize("error", [ConfigError("bad config key 'x'"), DataError("MNIST not found"),
                                   CheckpointError("no checkpoint"), ValueError("quantile must lie in [0, 1]"),
                                   FileNotFoundError("no such file")])
def test_a_user_s_mistake_is_one_line_and_exit_code_2(error, capsys):
    def command():
        raise error

    assert cli.run(command) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


def test_a_bug_is_not_dressed_up_as_a_user_s_mistake():
    def command():
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        cli.run(command)


SHARED = "--samples SAMPLES     posterior samples per input, at most 10000 (default 100)"


@pytest.mark.slow  # a process per command, a few seconds each
@pytest.mark.parametrize("command", [["-m", "bnn_zoo.evaluate"], ["-m", "bnn_zoo.predict"],
                                     ["scripts/reject_notmnist.py"], ["scripts/prune.py"]])
def test_every_command_line_shares_the_same_options(command):
    done = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    help_text = " ".join(done.stdout.split())
    for option in (SHARED, "--seed SEED seed for the posterior draws (default 0)",
                   "--quantile QUANTILE quantile rule: quantile of each class's sampled probability"):
        assert " ".join(option.split()) in help_text, (command, option)


@pytest.mark.parametrize("argv, message", [
    (["--samples", "10001"], "argument --samples: at most 10000 posterior samples, got 10001"),
    (["--samples", "10000000000000"], "argument --samples: at most 10000 posterior samples, got 10000000000000"),
    (["--samples", "1e13"], "argument --samples: expected a whole number, got '1e13'"),
    (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_a_mistaken_argument_is_one_line_and_exit_code_2(argv, message, capsys):
    parser = cli.command_parser("python -m bnn_zoo.evaluate", "Evaluate.")
    cli.add_sampling_options(parser)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"error: {message} (see --help)\n"
    assert parser.parse_args(["--samples", "10000"]).samples == 10000  # the bound itself is allowed


def test_counts_take_an_upper_bound():
    assert cli.count("4", most=4) == 4
    with pytest.raises(argparse.ArgumentTypeError, match="^at most 4 images, got 5$"):
        cli.count("5", most=4, unit="images")


def test_help_texts_say_what_a_user_needs(capsys):
    from omegaconf import OmegaConf

    from bnn_zoo.cli import certify as calibrate
    from bnn_zoo.cli import evaluate, train
    from bnn_zoo.runs.plans.config import Config

    for main in (train.main, calibrate.main, evaluate.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = capsys.readouterr().out
        assert "``" not in text  # no raw reStructuredText
        if main is train.main:
            assert "resume=DIR" in text and "overwrite=true" in text and "default runs/ARCH" in text
            flat = " ".join(text.split())
            for section, keys in OmegaConf.to_container(OmegaConf.structured(Config)).items():
                for key in keys if isinstance(keys, dict) else [section]:
                    assert f" {key}," in flat or f" {key} " in flat or flat.endswith(f" {key}"), key
        else:
            assert "run_dir" in text and "a trained classifier run's directory" in " ".join(text.split())


def test_a_mistyped_shipped_name_lists_the_shipped_ones(capsys):
    from bnn_zoo.cli.predict import main

    assert main(["lenett", "x.png"]) == 2
    assert capsys.readouterr().err.strip() == ("error: lenett is neither a run directory nor a shipped posterior "
                                               "(those are lenet, lenet_fashion, mnist_mlp)")


def test_train_s_help_names_the_files_that_document_the_keys(capsys):
    """Issue 47: train --help said the keys were "each documented in bnn_zoo/config.py", a file long gone."""
    from bnn_zoo.cli.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    named = re.findall(r"documented in (\S+), the data section's in (\S+)\):", said)
    assert named == [("bnn_zoo/runs/plans/schema.py", "bnn_zoo/data/config.py")], said
    root = Path(bnn_zoo.__file__).parents[1]
    assert "class Config:" in (root / named[0][0]).read_text() and "class DataConfig:" in (root / named[0][1]).read_text()
