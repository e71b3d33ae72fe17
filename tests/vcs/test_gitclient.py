"""The one git client, against real git: object reads, a file at a revision, a command with input."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from patchkit.vcs import gitclient

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
ENV |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def work(tmp_path: Path) -> tuple[Path, str]:
    """A work tree with one commit: text, a file without a final newline, binary, a directory, a space in a name."""
    root = tmp_path / "work"
    root.mkdir()
    git(root, "init", "-q")
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_bytes(b"A = 1\n\n")
    (root / "pkg" / "no-newline.txt").write_bytes(b"last line")
    (root / "pkg" / "blob.bin").write_bytes(bytes(range(256)) * 40)
    (root / "pkg" / "with space.py").write_bytes("\u00fc = 1\n".encode())
    for i in range(300):
        (root / "pkg" / f"m{i:03}.py").write_bytes(b"N = %d\n" % i)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    return root, git(root, "rev-parse", "HEAD").strip()


def test_read_objects_answers_every_name_in_order(work: tuple[Path, str]) -> None:
    root, head = work
    names = [f"{head}:pkg/m{i:03}.py" for i in range(300)]
    names += [f"{head}:pkg/a.py", f"{head}:pkg", f"{head}:nope.py", f"{head}:pkg/with space.py"]
    names += [f"{head}:pkg/blob.bin", f"{head}:pkg/no-newline.txt", "0" * 40, head]
    got = gitclient.read_objects(root / ".git", names)
    assert got[:300] == [b"N = %d\n" % i for i in range(300)]
    assert got[300:] == [
        b"A = 1\n\n",  # byte-exact: no newline stripped
        None,  # a directory
        None,  # no such path
        "\u00fc = 1\n".encode(),
        bytes(range(256)) * 40,
        b"last line",
        None,  # no such object
        None,  # a commit, not a blob
    ]
    assert gitclient.read_objects(root / ".git", []) == []
    # A name with a line break names nothing, and the answers after it stay in place.
    split = [f"{head}:pkg/a.py\n{head}:pkg/m001.py", f"{head}:pkg/m002.py"]
    assert gitclient.read_objects(root / ".git", split) == [None, b"N = 2\n"]
    assert gitclient.read_objects(root / ".git", ["x\ny"]) == [None]
    # Nor does one git would read as another: a final CR dropped, a NUL ending the name.
    assert gitclient.read_objects(root / ".git", [f"{head}:pkg/a.py\r", f"{head}:pkg/a.py\0x"]) == [None, None]


def test_read_objects_in_what_is_no_repository_fails_with_gits_reason(tmp_path: Path) -> None:
    with pytest.raises(gitclient.GitFailed) as e:
        gitclient.read_objects(tmp_path, ["HEAD:a"])
    assert f"git cat-file in {tmp_path} failed: " in str(e.value)
    assert "not a git repository" in str(e.value)
    assert e.value.exit_code == 3


def test_git_missing_is_one_line_with_a_hint(work: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = work
    monkeypatch.setenv("PATH", str(root))  # a directory with no git in it
    with pytest.raises(gitclient.GitMissing) as e:
        gitclient.run(root, ["status"])
    assert (str(e.value), e.value.hint) == ("git is not installed (or not on PATH)", "install git")
    assert gitclient.show(root, "HEAD", "pkg/a.py") is None  # "not known to git", as without a repository


def test_show_reads_a_file_as_committed(work: tuple[Path, str]) -> None:
    root, head = work
    (root / "pkg" / "a.py").write_bytes(b"changed\n")
    assert gitclient.show(root, "HEAD", "pkg/a.py") == b"A = 1\n\n"
    assert gitclient.show(root, head, "pkg/no-newline.txt") == b"last line"
    assert gitclient.show(root, "HEAD", "pkg/absent.py") is None
    assert gitclient.show(root, "--output=/tmp/x", "pkg/a.py") is None  # never taken as an option
    assert gitclient.show(root.parent, "HEAD", "work/pkg/a.py") is None  # not a work tree


def test_run_feeds_stdin_and_keeps_stdout_exact(work: tuple[Path, str]) -> None:
    root, _ = work
    (root / ".gitignore").write_text("*.log\n")
    status, out, _ = gitclient.run(root, ["check-ignore", "-z", "--stdin"], stdin=b"x.log\0y.py\0")
    assert (status, out) == (0, b"x.log\0")
    status, out, err = gitclient.run(root, ["rev-parse", "--verify", "nope"])
    assert status == 128 and out == b"" and "fatal" in err


def test_write_config_is_read_back_by_git(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "--bare", "r.git")
    config = tmp_path / "r.git" / "config"
    gitclient.write_config(config, {("gc", "auto"): "0", ('remote "origin"', "url"): "https://example.com/r"})
    assert git(tmp_path / "r.git", "config", "gc.auto").strip() == "0"
    assert git(tmp_path / "r.git", "config", "remote.origin.url").strip() == "https://example.com/r"
