"""The docs as a reader meets them: each guide reads in one sitting (at most 350 lines), every link to
a page or to a section of one resolves (the README, the changelog, the docs), and so does every
mention of a page's section by its title (``docs/guides/shift.md, "After the alarm"`` in a comment);
and the site's build hooks (docs/hooks.py): a tutorial that runs past its cap fails the build in
one line naming it and the cap, as mkdocs prints a PluginError, not a traceback."""
import importlib.util
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE_LINES = 350  # a guide longer than this is split by the question a reader comes with
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Where a page's section is named by its title: code comments and docstrings, configs, the pages
MENTIONS = [*PAGES, *sorted((ROOT / "bnn_zoo").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py")),
            *sorted((ROOT / "configs").glob("*.yaml")), *sorted((ROOT / "tests").rglob("*.py"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A page under docs/ and a quoted title after it (after a comma, 's or a space), or a link and ("title")
MENTION = re.compile(r"(docs/[\w/]+\.md)(?:'s|,)? \"([^\"]+)\"|\]\(([\w./]+\.md)\) \(\"([^\"]+)\"\)")


def slug(title: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    title = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
    title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())


def prose(text: str) -> str:
    """A page without its fenced blocks and inline code, where brackets are code, not links."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def headings(page: Path) -> list[str]:
    return re.findall(r"^#{1,6} +(.+?) *$", prose(page.read_text()), flags=re.M)


def test_no_guide_passes_350_lines():
    long = {guide.name: n for guide in sorted((ROOT / "docs" / "guides").glob("*.md"))
            if (n := len(guide.read_text().splitlines())) > GUIDE_LINES}
    assert not long, f"guides over {GUIDE_LINES} lines (split each by the question a reader comes with): {long}"


def test_every_link_to_a_page_or_a_section_resolves():
    broken = []
    for page in PAGES:
        base = ROOT / "docs" if page.name == "CHANGELOG.md" else page.parent  # the site renders it as docs/changelog.md
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (base / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in {slug(h) for h in headings(linked)}:
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such section)")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_every_section_named_by_its_title_is_there():
    """A section named by title (its heading, or the bold words that open its paragraph) is in the
    page named beside it."""
    missing = []
    for source in MENTIONS:
        text = re.sub(r"\n\s*(?:#\s*)?", " ", source.read_text())  # a mention broken over comment lines, joined
        for path, title, link, linked_title in MENTION.findall(text):
            page = ROOT / path if path else (source.parent / link).resolve()
            title = (title or linked_title).lower()
            found = page.exists() and (any(h.lower() == title for h in headings(page)) or any(
                lead.lower().startswith(title) for lead in re.findall(r"^\*\*([^*]+)\*\*", page.read_text(), flags=re.M)))
            if not found:
                missing.append(f"{source.relative_to(ROOT)}: {path or link}, \"{title}\"")
    assert not missing, "sections named where they are not:\n" + "\n".join(missing)


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    """docs/hooks.py, reading its tutorials from tmp_path/tutorials."""
    pytest.importorskip("mkdocs", reason='the site needs the docs extra: pip install -e ".[docs]"')
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "tutorials").mkdir()
    monkeypatch.setattr(module, "DOCS", tmp_path)
    return module


@pytest.mark.slow
def test_a_tutorial_past_its_cap_fails_the_build_in_one_line(hooks, tmp_path, monkeypatch):
    from mkdocs.exceptions import PluginError

    (tmp_path / "tutorials" / "slow.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    monkeypatch.setattr(hooks, "TUTORIAL_TIMEOUT", 2)
    with pytest.raises(PluginError) as stopped:
        hooks.on_page_markdown("<!-- run: slow.py -->\n")
    assert str(stopped.value) == ("tutorial slow.py ran past its cap of 2 s and was stopped: build the site on a "
                                  "quieter machine, or raise TUTORIAL_TIMEOUT in docs/hooks.py")


def test_a_failing_tutorial_fails_the_build_with_its_words(hooks, tmp_path):
    from mkdocs.exceptions import PluginError

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
