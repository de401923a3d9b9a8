"""Keys that fit some data only (bnn_zoo.runs.data_keys): a recipe's value adapts to the data its
run reads, saying so in one line; the same value given on the command line for other data is refused."""
import pytest
from omegaconf import OmegaConf

from bnn_zoo.core.errors import ConfigError
from bnn_zoo.runs import data_keys
from bnn_zoo.runs.config import load_config, resolved

NOTE = ("note: configs/lenet.yaml sets data.remade=true, which fits mnist only; this run reads folder, so it is left "
        "at data.remade=false\n")


@pytest.fixture
def nothing_said(monkeypatch):
    from bnn_zoo.core import errors

    monkeypatch.setattr(errors, "_SAID", set())


@pytest.fixture
def pngs(tmp_path):
    (tmp_path / "my_pngs" / "a").mkdir(parents=True)
    return tmp_path / "my_pngs"


@pytest.mark.parametrize("named", [True, False], ids=["data.name=folder", "told by data.path"])
def test_the_readme_s_folder_line_trains_the_lenet_recipe_on_your_images(named, pngs, nothing_said, capsys):
    """Issue 47: the README's line was refused for configs/lenet.yaml's data.remade=true, which the
    user never set."""
    given = [*(["data.name=folder"] if named else []), f"data.path={pngs}", "abstention.risk=0.05", "run_dir=runs/mine"]
    cfg = resolved(load_config("lenet", given))
    assert (cfg.data.name, cfg.data.remade, cfg.train.epochs, cfg.abstention.risk) == ("folder", False, 40, 0.05)
    assert capsys.readouterr().err == NOTE


def test_on_mnist_the_recipe_keeps_its_value_and_says_nothing(nothing_said, capsys):
    assert load_config("lenet", ["data.train_limit=100"]).data.remade is True
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("named", [True, False], ids=["data.name=folder", "told by data.path"])
def test_your_own_value_for_data_it_does_not_fit_is_refused(named, pngs):
    given = [*(["data.name=folder"] if named else []), f"data.path={pngs}", "data.remade=true"]
    with pytest.raises(ConfigError, match=r"^bad config key 'data.remade': it reads inputs as MNIST's digits were made, "
                                          r"and this run reads folder: leave it out \(data.remade=false\)"):
        resolved(load_config("lenet", given))


def test_any_key_of_the_table_adapts_alike(tmp_path, monkeypatch, nothing_said, capsys):
    """The mechanism is the table's, not data.remade's: a key entered there adapts as it does."""
    monkeypatch.setitem(data_keys.FITS_DATA, "train.twin_dropout", (("fashion_mnist",), "it drops out"))
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("arch: lenet\ntrain:\n  twin_dropout: 0.5\n")
    assert load_config(str(recipe), ["data.name=fashion_mnist"]).train.twin_dropout == 0.5
    assert load_config(str(recipe)).train.twin_dropout == 0.0
    assert capsys.readouterr().err == (f"note: {recipe} sets train.twin_dropout=0.5, which fits fashion_mnist only; "
                                       "this run reads mnist, so it is left at train.twin_dropout=0.0\n")
    with pytest.raises(ConfigError, match="'train.twin_dropout': it drops out, and this run reads mnist"):
        load_config(str(recipe), ["train.twin_dropout=0.25"])
    assert OmegaConf.select(OmegaConf.load(recipe), "train.twin_dropout") == 0.5  # the recipe itself untouched


def test_a_whole_section_adapts_as_a_key_does(tmp_path, monkeypatch, nothing_said, capsys):
    """A section that fits some data only (an image augmentation, say) is entered once, by its name."""
    monkeypatch.setitem(data_keys.FITS_DATA, "mcmc", (("fashion_mnist",), "it samples"))
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("arch: lenet\nmcmc:\n  num_samples: 7\n")
    assert load_config(str(recipe)).mcmc.num_samples == 300  # the schema's default section
    assert capsys.readouterr().err.startswith(f"note: {recipe} sets mcmc=")
    assert load_config(str(recipe), ["data.name=fashion_mnist"]).mcmc.num_samples == 7
