"""The site's build hooks (docs/hooks.py): a tutorial that runs past its cap fails the build in one
line naming it and the cap, as mkdocs prints a PluginError, not a traceback."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason='the site needs the docs extra: pip install -e ".[docs]"')
from mkdocs.exceptions import PluginError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    """docs/hooks.py, reading its tutorials from tmp_path/tutorials."""
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "tutorials").mkdir()
    monkeypatch.setattr(module, "DOCS", tmp_path)
    return module


@pytest.mark.slow
def test_a_tutorial_past_its_cap_fails_the_build_in_one_line(hooks, tmp_path, monkeypatch):
    (tmp_path / "tutorials" / "slow.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    monkeypatch.setattr(hooks, "TUTORIAL_TIMEOUT", 2)
    with pytest.raises(PluginError) as stopped:
        hooks.on_page_markdown("<!-- run: slow.py -->\n")
    assert str(stopped.value) == ("tutorial slow.py ran past its cap of 2 s and was stopped: build the site on a "
                                  "quieter machine, or raise TUTORIAL_TIMEOUT in docs/hooks.py")


def test_a_failing_tutorial_fails_the_build_with_its_words(hooks, tmp_path):
    (tmp_path / "tutorials" / "broken.py").write_text("raise SystemExit('the data is missing')\n")
    with pytest.raises(PluginError, match=r"^tutorial broken.py failed \(exit code 1\):\nthe data is missing"):
        hooks.on_page_markdown("<!-- run: broken.py -->\n")


def test_the_results_page_draws_the_distance_to_hmc_from_its_json(hooks, tmp_path):
    import json

    recipe = {"chains": [{}, {}, {}, {}], "num_samples": 400, "warmup_steps": 300, "seconds": 512.4,
              "built": {"machine": "2 CPU cores"}, "sets": {"test": {"max_r_hat": 1.031}, "beyond": {"max_r_hat": 1.5}}}
    data = {"command": "python scripts/distance_to_hmc.py toy_sinusoid", "commit": "abc1234", "machine": "2 CPU cores",
            "problems": {"toy_sinusoid": {"reference": "toy_sinusoid_hmc", "recipe": recipe, "table": "| a |\n| --- |"}}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "distance.json").write_text(json.dumps(data))
    assert hooks.on_page_markdown("<!-- hmc_distance: distance.json -->\n") == (
        "`python scripts/distance_to_hmc.py toy_sinusoid` at commit abc1234 (2 CPU cores):\n\n**toy_sinusoid** against "
        "`toy_sinusoid_hmc` (4 NUTS chains of 400 samples after 300, 512 s on 2 CPU cores; the predictive's largest "
        "R-hat: test 1.03, beyond 1.50):\n\n| a |\n| --- |\n\n")
