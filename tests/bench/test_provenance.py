"""What a figure records beside it (``bnn_zoo.bench.provenance``): the command as typed, the commit of
the package's own clone and never another repository's, the machine."""
import subprocess
import sys

import bnn_zoo.bench.provenance as provenance


def test_the_commit_is_the_clone_s_own(monkeypatch):
    described = subprocess.run(["git", "describe", "--always", "--dirty=+changes"], cwd=provenance.ROOT,
                               capture_output=True, text=True)
    if described.returncode:
        assert provenance.commit() == "unknown"  # a copy of the package that is no clone
    else:
        assert provenance.commit() == described.stdout.strip()
    monkeypatch.setattr(sys, "argv", ["scripts/peers.py", "--rounds", "3", "--json", "my file.json"])
    found = provenance.provenance()
    assert found["command"] == "python scripts/peers.py --rounds 3 --json 'my file.json'"
    assert "CPU cores" in found["machine"] and found["commit"] == provenance.commit()


def test_a_package_installed_inside_another_repository_does_not_take_its_commit(tmp_path, monkeypatch):
    """A wheel installed into a virtual environment inside some other clone: git would describe that
    clone's commit, which is not the code that ran."""
    outer = tmp_path / "project"
    site = outer / ".venv" / "site-packages"
    site.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    subprocess.run([*git, "-C", str(outer), "commit", "-q", "--allow-empty", "-m", "theirs"], check=True)
    monkeypatch.setattr(provenance, "ROOT", site)
    assert provenance.commit() == "unknown"
