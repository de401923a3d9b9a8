"""A CSV table's columns, classes and target as the product reads them, and a file of the wrong
kind named as such: each mistake in one line naming the file and, for a table, its line."""
import numpy as np
import pytest
import torch
from conftest import splits_of, tiny_config

from bnn_zoo.core.errors import DataError
from bnn_zoo.data.csv_tables import read_csv, table_columns
from bnn_zoo.data.own import MAX_CLASSES, read_own, read_rows
from bnn_zoo.runs.plans.config import with_profile


def own(tmp_path, kind, path, arch="mnist_mlp", **overrides):
    return tiny_config(arch, **{"run_dir": str(tmp_path / "run"), "data.train_limit": "null", "data.test_limit": "null",
                                "data.val_size": "null", "data.name": kind, "data.path": str(path), **overrides})


def table(tmp_path, text, name="t.csv"):
    (tmp_path / name).write_text(text)
    return tmp_path / name


def refused(cfg, message):
    with pytest.raises(DataError, match=message) as err:
        read_own(cfg.data, True)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("header, message", [
    ("a,a,label", r"t.csv line 1: columns 1 and 2 are both named 'a'; give each column its own name"),
    ("x,y,y", r"t.csv line 1: columns 2 and 3 are both named 'y'"),  # the last, the target, read as the first
    ("a, ,label", r"t.csv line 1: column 2 has no name; name every column in the header"),
])
def test_a_column_name_twice_or_blank_is_refused(tmp_path, header, message):
    path = table(tmp_path, header + "\n" + "".join(f"{i},{i * 10},{i % 2}\n" for i in range(20)))
    refused(own(tmp_path, "csv", path), message)
    with pytest.raises(DataError, match=message):  # predict's reader too
        table_columns(path, ["x"])


def test_numeric_labels_are_one_class_per_value_in_training_and_test_tables(tmp_path):
    labels = ["1", "1.0", "01", "2", "2.50", "1e0"]
    train = table(tmp_path, "a,label\n" + "".join(f"{i},{labels[i % 6]}\n" for i in range(30)), "train.csv")
    test = table(tmp_path, "a,label\n1,1.00\n2,02\n3,2.5\n", "test.csv")
    train_part, test_part = read_own(own(tmp_path, "csv", train, **{"data.test_path": str(test)}).data, True)
    assert train_part.classes == ["1", "2", "2.5"]
    assert train_part.y.tolist() == [[0, 0, 0, 1, 2, 0][i % 6] for i in range(30)]
    assert sorted(zip(test_part.x[:, 0].tolist(), test_part.y.tolist())) == [(1.0, 0), (2.0, 1), (3.0, 2)]
    table(tmp_path, "a,label\n1,3\n", "test.csv")
    with pytest.raises(DataError, match=r"test.csv line 2: column 'label' holds '3', not one of the training classes"):
        read_own(own(tmp_path, "csv", train, **{"data.test_path": str(test)}).data, True)


def test_numbers_among_text_labels_stay_text_unless_one_is_written_two_ways(tmp_path):
    path = table(tmp_path, "a,label\n" + "".join(f"{i},{['01', 'none', '2'][i % 3]}\n" for i in range(30)))
    assert read_own(own(tmp_path, "csv", path).data, True)[0].classes == ["01", "2", "none"]
    path = table(tmp_path, "a,label\n" + "".join(f"{i},{['1', 'none', '1.0'][i % 3]}\n" for i in range(30)))
    refused(own(tmp_path, "csv", path), r"t.csv line 4: column 'label' holds '1.0' where line 2 holds '1': one number "
                                        r"written two ways among text labels; write each class one way")


def test_a_regression_target_given_to_a_classifier_is_refused(tmp_path):
    g = torch.Generator().manual_seed(0)
    prices = (torch.rand(200, generator=g) * 100).tolist()
    path = table(tmp_path, "a,price\n" + "".join(f"{i},{v:.2f}\n" for i, v in enumerate(prices)))
    refused(own(tmp_path, "csv", path), r"t.csv: column 'price' holds \d+ distinct numbers, not all whole, among 200 "
                                        r"rows: too many for a classifier's classes. Was a regression meant "
                                        r"\(python -m bnn_zoo.train table_regression data.path=PATH\), or is another "
                                        r"column the target \(data.target=NAME\)\?")
    few = table(tmp_path, "a,price\n" + "".join(f"{i},{v:.2f}\n" for i, v in enumerate(prices[:30])), "few.csv")
    refused(own(tmp_path, "csv", few), r"holds 30 distinct numbers, not all whole, among 30 rows")  # fewer than 50
    ids = table(tmp_path, "a,id\n" + "".join(f"{i},{i}\n" for i in range(200)), "ids.csv")
    refused(own(tmp_path, "csv", ids), r"column 'id' holds 200 distinct values among 200 rows")
    steps = table(tmp_path, "a,stars\n" + "".join(f"{i},{i % 10 / 2}\n" for i in range(200)), "steps.csv")
    assert read_own(own(tmp_path, "csv", steps).data, True)[0].classes[:3] == ["0", "0.5", "1"]  # few: classes they are


def test_a_label_far_beyond_the_others_builds_no_class_for_each_number(tmp_path):
    torch.save({"x": torch.randn(20, 3), "y": torch.tensor([0, 1] * 9 + [1, 10 ** 7])}, tmp_path / "d.pt")
    refused(own(tmp_path, "tensors", tmp_path / "d.pt"), rf"d.pt: y holds the label 10000000, where a classifier's "
                                                         rf"labels are 0..K-1, K at most {MAX_CLASSES}: was a "
                                                         r"regression meant\? python -m bnn_zoo.train "
                                                         r"table_regression data.name=tensors data.path=PATH regresses")


def test_the_line_of_a_bad_cell_is_its_line_in_the_file_after_a_cell_of_two_lines(tmp_path):
    path = table(tmp_path, 'a,label\n1,"two\nlines"\n2,x\n3,x\nfour,x\n')
    refused(own(tmp_path, "csv", path), r"t.csv line 6, column 'a': 'four' is not a number")


@pytest.mark.parametrize("header, target", [("Label,f1,f2", "Label"), ("f1,CLASS,f2", "CLASS"), ("f1,f2,kind", "kind")])
def test_without_data_target_a_column_named_as_targets_are_is_the_target(tmp_path, header, target):
    """The one column named target, label, class or y (in any case), else the last; the run's
    config records the one read (data.target), for its log and for the runs that resume it."""
    names = header.split(",")
    rows = [",".join(str(i % 2) if n == target else f"{i / 7:.3f}" for n in names) for i in range(40)]
    path = table(tmp_path, "\n".join([header, *rows]) + "\n")
    cfg = own(tmp_path, "csv", path)
    splits = splits_of(cfg)
    assert splits.profile.features == [n for n in names if n != target]
    assert splits.profile.target == target and with_profile(cfg, splits).data.target == target
    table(tmp_path, "y,f1,label\n1,2,3\n")
    with pytest.raises(DataError, match=r"t.csv: the columns 'y' and 'label' could each be the target: name it, "
                                        r"data.target=NAME"):
        read_csv(path, None, True)


def test_a_feature_taken_for_the_target_is_refused_as_a_classifier_s_classes(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 3, generator=g).tolist()
    path = table(tmp_path, "u,v,w\n" + "".join(f"{a:.3f},{b:.3f},{c:.3f}\n" for a, b, c in x))  # the target left out
    refused(own(tmp_path, "csv", path), r"column 'w' holds \d+ distinct numbers.*or is another column the target "
                                        r"\(data.target=NAME\)\?")


def test_a_file_of_the_other_kind_is_named_with_the_reader_it_needs(tmp_path):
    path = table(tmp_path, "a,b,label\n" + "".join(f"{i},{i},{i % 2}\n" for i in range(20)))
    torch.save({"x": torch.zeros(20, 2), "y": torch.arange(20) % 2}, tmp_path / "d.pt")
    np.savez(tmp_path / "d.npz", x=np.zeros((20, 2)), y=np.arange(20) % 2)
    refused(own(tmp_path, "tensors", path), r"t.csv is text, a CSV table perhaps, not a tensor file \(.pt or .npz\): "
                                            r"data.name=tensors reads tensor files, data.name=csv tables")
    for name in ("d.pt", "d.npz"):
        refused(own(tmp_path, "csv", tmp_path / name), rf"{name} is a zip archive, a .pt or .npz tensor file perhaps, "
                                                       r"not a CSV table: data.name=csv reads tables")
    torch.save({"x": torch.zeros(20, 2), "y": torch.arange(20) % 2}, tmp_path / "d.pt",
               _use_new_zipfile_serialization=False)  # an older torch's pickle
    refused(own(tmp_path, "csv", tmp_path / "d.pt"), r"d.pt is a pickle, a .pt or .npz tensor file perhaps")
    (tmp_path / "d.npz").rename(tmp_path / "npz.pt")  # told by what it holds, not by its name
    assert len(read_own(own(tmp_path, "tensors", tmp_path / "npz.pt").data, True)[0].y) == 16


def test_rows_of_uint8_are_the_numbers_they_are_in_training_and_predict(tmp_path):
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 256, (40, 3), generator=g)
    torch.save({"x": rows.to(torch.uint8), "y": torch.arange(40) % 2}, tmp_path / "d.pt")
    cfg = own(tmp_path, "tensors", tmp_path / "d.pt")
    train_part, test_part = read_own(cfg.data, True)
    assert sorted(torch.cat([train_part.x, test_part.x]).tolist()) == sorted(rows.float().tolist())
    cfg = with_profile(cfg, splits_of(cfg))
    torch.save({"x": rows.float()}, tmp_path / "f.pt")
    torch.save({"x": rows.to(torch.uint8)}, tmp_path / "u.pt")
    assert torch.equal(read_rows(cfg.data, tmp_path / "u.pt"), read_rows(cfg.data, tmp_path / "f.pt"))
    assert torch.equal(read_rows(cfg.data, tmp_path / "u.pt"), rows.float())


@pytest.mark.parametrize("marker", ["NaN", "nan", "NA", "N/A", "null", "None", "", "#N/A", "<NA>"])
@pytest.mark.parametrize("categorical", [True, False], ids=["classes", "numbers"])
def test_a_target_that_marks_a_missing_value_is_refused_naming_its_line(tmp_path, marker, categorical):
    """NaN, NA, null and the other marks pandas reads as missing are no class (a classifier trained
    "NaN" as one) and no number: the row is named, as an empty target's is; "none" is a class."""
    rows = [f"{i},{'ab'[i % 2] if categorical else round(i / 3, 3)}" for i in range(20)]
    rows[6] = f"6,{marker}"
    path = table(tmp_path, "f,label\n" + "\n".join(rows) + "\n")
    held = "is empty" if not marker else f"holds {marker!r}, which marks a missing value"
    with pytest.raises(DataError) as err:
        read_csv(path, "label", categorical)
    assert str(err.value) == (f"{path} line 8: the target 'label' {held}; fill or drop the row"
                              + (", or name that class otherwise" if marker and categorical else ""))


def test_a_header_in_another_unicode_form_matches_its_column_by_name(tmp_path):
    """"café" typed as e and a combining accent (NFD, as macOS names files) is the config's "café"
    (NFC): names are compared composed, so both spellings name one column."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    path = table(tmp_path, f"{decomposed},size,label\n" + "".join(f"{i},{i % 3},{'xy'[i % 2]}\n" for i in range(20)))
    found = read_csv(path, "label", True, features=[composed, "size"])
    assert found.features == [composed, "size"] and found.x[:3].tolist() == [[0, 0], [1, 1], [2, 2]]
    assert torch.equal(table_columns(path, [composed]), found.x[:, :1])
    by_target = read_csv(table(tmp_path, f"x,{decomposed}\n" + "".join(f"{i},{'xy'[i % 2]}\n" for i in range(20)),
                               "u.csv"), composed, True)
    assert by_target.target == composed and by_target.classes == ["x", "y"]
    with pytest.raises(DataError, match=r"columns 1 and 2 are both named 'café'"):  # one name, spelt two ways
        read_csv(table(tmp_path, f"{composed},{decomposed},label\n1,2,x\n3,4,y\n", "twice.csv"), "label", True)
