"""Repository helpers: which paths ``.gitignore`` names, as git reads it."""

from __future__ import annotations

from pathlib import Path

from patchkit.store.repo import gitignored
from tests.conftest import git

GITIGNORE = "run/\n# each host copies the example\nconfig/secret.yaml\n*.log\n!keep.log\n"


def test_gitignored_in_a_work_tree_is_what_git_says(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text(GITIGNORE)
    (tmp_path / "models").mkdir()
    (tmp_path / "models/.gitignore").write_text("cache/\n")
    git(tmp_path, "init", "-q")
    # None of these exist: an ignored mount source is one meant to be absent.
    got = gitignored(tmp_path, ["run", "config/secret.yaml", "config/other.yaml", "x.log", "keep.log", "models/cache"])
    assert got == {
        "run": ".gitignore:1",  # a directory rule, for a directory compose creates
        "config/secret.yaml": ".gitignore:3",
        "x.log": ".gitignore:4",
        "models/cache": "models/.gitignore:1",
    }


def test_gitignored_outside_a_work_tree_reads_the_top_level_file(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text(GITIGNORE)
    got = gitignored(tmp_path, ["run", "run/x.sock", "config/secret.yaml", "config/other.yaml", "a/b.log"])
    assert got == {
        "run": ".gitignore:1",
        "run/x.sock": ".gitignore:1",
        "config/secret.yaml": ".gitignore:3",
        "a/b.log": ".gitignore:4",
    }
    assert gitignored(tmp_path / "nowhere", ["run"]) == {}
