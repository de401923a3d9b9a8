"""Keys that fit some data only (bnn_zoo.runs.plans.data_keys): a recipe's value adapts to the data its
run reads, saying so in one line; the same value given on the command line for other data is refused."""
import pytest
from omegaconf import OmegaConf

from bnn_zoo.core.errors import ConfigError
from bnn_zoo.runs.plans import data_keys
from bnn_zoo.runs.plans.config import load_config, resolved

REMADE = "arch: lenet\ndata:\n  remade: true\n"  # a recipe that reads digits as MNIST made them


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
    """Issue 47: the README's line was refused for a recipe's MNIST-only key, which the user never set;
    configs/lenet.yaml's augmentation fits a folder of images, so it is kept, in silence."""
    given = [*(["data.name=folder"] if named else []), f"data.path={pngs}", "abstention.risk=0.05", "run_dir=runs/mine"]
    cfg = resolved(load_config("lenet", given))
    assert (cfg.data.name, cfg.train.epochs, cfg.abstention.risk) == ("folder", 40, 0.05)
    recipe = OmegaConf.to_container(OmegaConf.load("configs/lenet.yaml").augment)
    assert {key: cfg.augment[key] for key in recipe} == recipe and cfg.augment.p == 0.8
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("named", [True, False], ids=["data.name=folder", "told by data.path"])
def test_a_recipe_s_mnist_only_key_is_left_at_its_default_on_your_images(named, pngs, tmp_path, nothing_said, capsys):
    recipe = tmp_path / "remade.yaml"
    recipe.write_text(REMADE)
    given = [*(["data.name=folder"] if named else []), f"data.path={pngs}"]
    assert resolved(load_config(str(recipe), given)).data.remade is False
    assert capsys.readouterr().err == (f"note: {recipe} sets data.remade=true, which fits mnist only; this run reads "
                                       "folder, so it is left at data.remade=false\n")
    assert load_config(str(recipe), ["data.train_limit=100"]).data.remade is True  # on MNIST it keeps it, silently
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("named", [True, False], ids=["data.name=folder", "told by data.path"])
def test_your_own_value_for_data_it_does_not_fit_is_refused(named, pngs):
    given = [*(["data.name=folder"] if named else []), f"data.path={pngs}", "data.remade=true"]
    with pytest.raises(ConfigError, match=r"^bad config key 'data.remade': it reads inputs as MNIST's digits were made, "
                                          r"and this run reads folder: leave it out \(data.remade=false\)"):
        resolved(load_config("lenet", given))


def test_a_recipe_s_augmentation_is_left_out_of_a_table_and_yours_refused(tmp_path, nothing_said, capsys):
    """The augment section fits images only: a recipe's is left out of a CSV run, in a line; an
    augment key given on the command line for one (a key of the section) is refused, the recipe's
    section not dropped behind it."""
    table = tmp_path / "t.csv"
    table.write_text("a,b,label\n0.1,0.2,x\n0.3,0.4,y\n")
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("arch: table_mlp\naugment:\n  rotate: 10\n")
    assert load_config(str(recipe), [f"data.path={table}"]).augment.rotate is None
    assert capsys.readouterr().err == (f'note: {recipe} sets augment={{"rotate": 10}}, which fits mnist, fashion_mnist, '
                                       "folder or tensors of images only; this run reads csv, so it is left out\n")
    with pytest.raises(ConfigError, match=r"^bad config key 'augment': it transforms images, and this run reads csv"):
        resolved(load_config(str(recipe), [f"data.path={table}", "augment.rotate=5"]))


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


def test_outliers_fit_image_classifiers_only(tmp_path):
    """The outliers section makes images and observes them as no class: a run that reads a table is
    refused one, and so is a network that regresses; each in a line naming the key."""
    table = tmp_path / "t.csv"
    table.write_text("a,b,label\n0.1,0.2,x\n0.3,0.4,y\n")
    with pytest.raises(ConfigError, match=r"^bad config key 'outliers': it makes outliers from images, and this run "
                                          r"reads csv: leave it out$"):
        resolved(load_config("table_classification", [f"data.path={table}", "outliers.noise=0.1"]))
    with pytest.raises(ConfigError, match=r"^bad config key 'outliers': outliers are observed as 'no class', and "
                                          r"toy_mlp regresses \(no classes\): leave it out$"):
        resolved(load_config("toy_mlp", ["outliers.noise=0.1"]))
    with pytest.raises(ConfigError, match=r"^bad value for outliers.weight: the term's weight, above 0"):
        resolved(load_config("lenet", ["outliers.noise=0.1", "outliers.weight=-1"]))
    assert resolved(load_config("lenet", ["outliers.noise=0.1"])).outliers.noise == 0.1


@pytest.fixture
def tensors(tmp_path):
    """A tensors file of rows (a table) and one of images, each of two classes."""
    import torch

    torch.save({"x": torch.randn(40, 4), "y": torch.arange(40) % 2}, tmp_path / "rows.pt")
    torch.save({"x": torch.randint(0, 255, (40, 8, 8), dtype=torch.uint8), "y": torch.arange(40) % 2},
               tmp_path / "images.pt")
    return tmp_path


@pytest.mark.parametrize("named", [True, False], ids=["data.name=tensors", "told by data.path"])
def test_a_recipe_s_augmentation_is_left_out_of_a_tensors_file_of_rows_with_a_note(named, tensors, nothing_said,
                                                                                   capsys):
    """Issue 51: tensors of rows are a table, not images: a recipe's augment section is left out of
    such a run, in a line, as data.remade is; a tensors file of images keeps it, in silence."""
    given = [*(["data.name=tensors"] if named else []), "arch=mnist_mlp"]
    cfg = load_config("lenet", [*given, f"data.path={tensors / 'rows.pt'}"])
    assert cfg.augment.rotate is None and cfg.augment.p == 1.0
    assert capsys.readouterr().err == (
        'note: configs/lenet.yaml sets augment={"translate": 0.12, "scale": [0.65, 1.15], "rotate": 25, "shear": 25, '
        '"stroke": 1, "ink": [0.4, 1.0], "background": 0.5, "p": 0.8}, which fits mnist, fashion_mnist, folder or '
        "tensors of images only; this run reads tensors of rows, so it is left out\n")
    assert load_config("lenet", [*given, f"data.path={tensors / 'images.pt'}"]).augment.rotate == 25
    assert capsys.readouterr().err == ""


def test_your_augmentation_of_a_tensors_file_of_rows_is_refused_before_the_run_folder(tensors, capsys):
    """Issue 51: augment given on the command line for a .pt of rows was refused only once the run
    folder held the run's config (the same command then met "holds a run already")."""
    from bnn_zoo.cli.train import main

    run = tensors / "run"
    assert main(["table_classification", f"data.path={tensors / 'rows.pt'}", "augment.rotate=10", f"run_dir={run}",
                 "train.progress=false", "device=cpu"]) == 2
    assert capsys.readouterr().err == (
        "error: bad config key 'augment': it transforms images [channels, height, width], and this run's inputs are "
        "of shape [4] (rows of tensors: a table, not images): leave it out\n")
    assert not run.exists()
