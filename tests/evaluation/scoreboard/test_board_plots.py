"""The scoreboard's pictures (``bnn_zoo.evaluation.scoreboard.plots``) of a run scored by hand."""
from PIL import Image
from test_scored import board

from bnn_zoo.evaluation.scoreboard.plots import draw_ladder, draw_runs


def test_a_picture_per_run_and_the_ladder(tmp_path):
    runs = board()
    draw_runs(runs, tmp_path)
    draw_ladder(runs, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ladder.png", "scoreboard_a.png"]
    for path in tmp_path.iterdir():
        with Image.open(path) as img:
            assert min(img.size) > 300 and len(img.convert("L").getcolors(256) or ()) > 20  # a drawn figure
