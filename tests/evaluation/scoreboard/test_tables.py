"""The scoreboard's markdown tables (``bnn_zoo.evaluation.scoreboard.tables``) of a run scored by hand:
each cell the figure it heads."""
from test_scored import board

from bnn_zoo.evaluation.results import Detection
from bnn_zoo.evaluation.scoreboard.tables import markdown


def _row(text: str, start: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_in_distribution_table_and_the_table_per_ood_set():
    text = markdown(board())
    cells = _row(text, "| runs/a | mean-field VI |")
    assert cells[2] == "q>=0.2, MI<=0.5" and cells[3:6] == ["98.00%", "0.0500", "0.0100"]
    assert cells[14:20] == ["91.00%", "1.0000", "96.00%", "1.2000", "99.50%", "2.5000"]  # sets at 90/95/99%
    assert cells[-2:] == ["55.00%", "80.00%"]  # near refused (overlaid: handled), and in a stream
    assert _row(text, "| runs/a | MAP (the twin) |")[2] == "q>=0.2" and "(letters drawn in 1 fonts)" in text
    letters = _row(text, "| letters (near) | mean-field VI |")
    assert letters[2:6] == ["60.00%", "70.00%", "30.00%", "0.8000"] and letters[-1] == "n/a"  # not overlaid
    assert _row(text, "| overlaid (near) | mean-field VI |")[-1] == "50.00%"
    # no MI, no max prob (an older eval.json); its density's AUROC and FPR95
    assert _row(text, "| notmnist | MAP (the twin) |")[8:14] == ["n/a"] * 4 + ["0.8000", "0.2000"]


def test_a_near_set_an_outlier_kind_covers_is_named_and_left_out_of_the_near_means():
    runs = board()
    run = runs["runs/a"]
    run.evaluation.ood_seen_in_training = ("overlaid",)
    bayes = run.evaluation.posteriors["bayes"]
    bayes.ood["letters"].by_max_prob = Detection(0.9, 0.88, 0.125)
    text = markdown(runs)
    assert _row(text, "| runs/a | mean-field VI |")[-2:] == ["60.00%", "70.00%"]  # letters alone
    assert _row(text, "| overlaid (near, seen in training) | mean-field VI |")[-1] == "50.00%"
    assert _row(text, "| letters (near) | mean-field VI |")[11] == "0.1250"  # FPR95 by max prob


def test_the_ladder_and_the_density_table():
    text = markdown(board())
    ladder = _row(text, "| a: mean-field VI | 98.00% |")
    assert ladder[3:6] == ["0.9700", "0.8500", "0.6500"] and ladder[6] == "0.7500"  # by MI; the near mean
    assert ladder[7:] == ["2.0", "2.5", "120", "2,000"]  # training minutes, predict s and MB, numbers stored
    twin = _row(text, "| a: MAP (the twin) | 97.00% |")
    assert twin[3:6] == ["0.7000", "0.6000", "0.5500"] and twin[7:] == ["n/a", "0.1", "n/a", "1,000"]
    density = _row(text, "| a: MAP (the twin) | 0.8000 |")
    assert density == ["a: MAP (the twin)", "0.8000", "0.7500", "n/a", "0.7500"]


def test_under_shift_the_seen_corruption_apart_and_the_wrong_answers_around_the_alarm():
    text = markdown(board())
    summary = _row(text, "| a: mean-field VI | 2 |")
    assert summary[2:] == ["30.00% (15.00%)", "1.40% (2.80%)", "2.00% (fog)", "1 of 2", "2 of 2", "none",
                           "1: 10.00% / 0.10%"]
    assert _row(text, "| fog |")[1] == "40.00% / 2.00% / 5"
    assert _row(text, "| blur (seen in training) |")[1] == "10.00% / 0.10% / none"
    around = [line for line in text.splitlines() if line.startswith("| fog |")][1]
    assert around.split("|")[2].strip() == "1 of 4 (25.00%) / 2 of 16 (12.50%) / 40.00% (20.00%)"
