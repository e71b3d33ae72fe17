"""Patches read at every strip level as git reads them: the cases found wrong, by name, and the CLI on one queue."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from patchkit.core.hashing import sha256_bytes
from patchkit.rebase.series import canonical_patch
from patchkit.series.apply import Item, apply_series
from patchkit.series.parse import PatchParseError, parse_patch
from tests.conftest import Invoke
from tests.series.queue import commit, git

QUOTED = 'q"uo\tt é.py'  # quote, tab, space, non-ASCII: git writes "q\"uo\tt \303\251.py"
BASE = {
    "old.py": b"a\nb\nc\nd\ne\nf\n",
    "pkg/sp ace.py": b"x = 1\n",
    QUOTED: b"q1\nq2\nq3\nq4\nq5\nq6\n",
    "keep.py": b"k\n",
}


def _upstream(tmp: Path) -> tuple[Path, str, str]:
    """An upstream whose last commit renames, changes a mode, adds an empty file, renames-with-edit a quoted name."""
    repo = tmp / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, BASE, "base")
    (repo / "old.py").chmod(0o755)  # renamed, it stays executable
    base = commit(repo, {}, "old.py is a script")
    git(repo, "mv", "old.py", "new.py")
    git(repo, "mv", QUOTED, 'q2"uo\tt é.py')
    (repo / 'q2"uo\tt é.py').write_bytes(b"q1\nq2\nq3\nq4\nq5\nQ6\n")
    (repo / "pkg/sp ace.py").chmod(0o755)
    (repo / "new dir").mkdir()
    (repo / "new dir/n.py").write_bytes(b"")
    head = commit(repo, {}, "Move things around (#30)")
    return repo, base, head


def _patch(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "format-patch", "--stdout", "-M", *args, "HEAD~1..HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, str, str]:
    return _upstream(tmp_path)


def _read(data: bytes, strip: int) -> list[tuple[str, str | None, str | None, str | None]]:
    return [(f.kind, f.old_path, f.new_path, f.new_mode) for f in parse_patch(data, "p.patch", strip=strip).files]


EXPECTED = [
    ("add", None, "new dir/n.py", "100644"),
    ("rename", "old.py", "new.py", None),
    ("modify", "pkg/sp ace.py", "pkg/sp ace.py", "100755"),
    ("rename", QUOTED, 'q2"uo\tt é.py', None),
]


@pytest.mark.parametrize(
    ("args", "strip"), [((), 1), (("--no-prefix",), 0), (("--src-prefix=s/", "--dst-prefix=d/"), 1)]
)
def test_the_same_change_reads_the_same_at_every_strip_level(
    upstream: tuple[Path, str, str], args: tuple[str, ...], strip: int
) -> None:
    repo, _, _ = upstream
    assert _read(_patch(repo, *args), strip) == EXPECTED


def test_strip_0_a_rename_looks_for_old_py_not_a_old_py(upstream: tuple[Path, str, str]) -> None:
    repo, _, _ = upstream
    rename = next(f for f in parse_patch(_patch(repo, "--no-prefix"), "p", strip=0).files if f.kind == "rename")
    assert (rename.old_path, rename.new_path) == ("old.py", "new.py")


def test_strip_0_a_mode_change_of_a_name_with_a_space_keeps_its_one_path(upstream: tuple[Path, str, str]) -> None:
    repo, _, _ = upstream
    files = parse_patch(_patch(repo, "--no-prefix"), "p", strip=0).files
    mode = next(f for f in files if f.new_mode == "100755")
    assert (mode.kind, mode.old_path, mode.new_path) == ("modify", "pkg/sp ace.py", "pkg/sp ace.py")


def test_strip_0_an_empty_new_file_in_a_directory_with_a_space_is_written_there(
    upstream: tuple[Path, str, str],
) -> None:
    repo, _, _ = upstream
    parsed = parse_patch(_patch(repo, "--no-prefix"), "p", strip=0)
    result = apply_series([Item("p", "p", parsed)], lambda paths: {p: BASE.get(p) for p in paths})
    assert result.files["new dir/n.py"] == b""
    assert "dir/n.py" not in result.files


def test_a_rename_with_an_edit_from_a_quoted_name_is_one_change(upstream: tuple[Path, str, str]) -> None:
    repo, _, _ = upstream
    for args, strip in (((), 1), (("--no-prefix",), 0)):
        files = [f for f in parse_patch(_patch(repo, *args), "p", strip=strip).files if QUOTED in f.paths]
        assert len(files) == 1
        assert files[0].kind == "rename"
        assert files[0].diff is not None
        assert [len(h.lines) for h in files[0].diff.hunks] == [5]


@pytest.mark.parametrize(
    ("data", "strip", "line", "message"),
    [
        # git: "git diff header lacks filename information when removing 2 leading pathname components"
        (b"diff --git x/old.py y/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n", 2, 1, "-p2"),
        # git: "inconsistent old filename"
        (
            b"diff --git a/x.py b/y.py\nrename from x.py\nrename to y.py\n"
            b"--- a/z.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+b\n",
            1,
            4,
            "differs from the one",
        ),
        # git: "expected /dev/null"
        (b"diff --git a/x b/x\nnew file mode 100644\n--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n", 1, 3, "/dev/null"),
        (b"diff --git a/x b/x\nold mode 100644\nnew mode 10075\n", 1, 3, "six octal digits"),
        (b'diff --git "a/x\\q" "b/x\\q"\nold mode 100644\nnew mode 100755\n', 1, 1, "an escape git never writes"),
        (b"--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n", 1, 1, "no file name is left"),
        (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nBinary files a/y and b/y differ\n", 1, 6, "binary file"),
    ],
)
def test_what_git_refuses_is_refused_at_its_line(data: bytes, strip: int, line: int, message: str) -> None:
    with pytest.raises(PatchParseError) as e:
        parse_patch(data, "p.patch", strip=strip)
    assert e.value.line == line
    assert message in e.value.detail


def test_a_plain_diff_never_renames_it_changes_the_new_name_as_git_does() -> None:
    data = (
        b"--- a/x.py.orig\t2026-01-05 10:00:00.000000000 +0000\n+++ b/x.py\t2026-01-05 10:00:01 +0000\n"
        b"@@ -1 +1 @@\n-a\n+b\n"
    )
    assert _read(data, 1) == [("modify", "x.py", "x.py", None)]
    # GNU diff -N marks a missing side with the epoch: a new file.
    new = b"--- a/n.py\t1970-01-01 00:00:00.000000000 +0000\n+++ b/n.py\t2026-01-05 10:00:01 +0000\n@@ -0,0 +1 @@\n+a\n"
    assert _read(new, 1) == [("add", None, "n.py", None)]


def test_git_paths_stay_refused_in_every_form() -> None:
    for header, strip in (
        (b"diff --git .git/hooks/x .git/hooks/x\nnew file mode 100755\n", 0),
        (b'diff --git "a/.GIT/config" "b/.GIT/config"\nnew file mode 100644\n', 1),
        (b"diff --git a/x b/.git/x\nsimilarity index 100%\nrename from x\nrename to .git/x\n", 1),
    ):
        with pytest.raises(PatchParseError, match=r"\.git directory"):
            parse_patch(header, "p.patch", strip=strip)


# --------------------------------------------------------------------------- the CLI on a --no-prefix queue


def _deployment(repo: Path, base: str, invoke: Invoke, tmp_path: Path) -> Path:
    """A deployment pinning the upstream's last commit as a one-patch ``--no-prefix`` series at strip 0."""
    root = tmp_path / "deploy"
    (root / "patches/up").mkdir(parents=True)
    data = _patch(repo, "--no-prefix")
    (root / "patches/up/0001-move.patch").write_bytes(data)
    (root / "lockfile.toml").write_text(
        f'schema = 1\n\n[deployment]\nname = "q"\n\n[upstreams.up]\ngit = "{repo.as_uri()}"\ncommit = "{base}"\n\n'
        f'[series.up]\ncommit = "{base}"\nstrip = 0\n\n[[series.up.patches]]\nname = "0001-move"\n'
        f'file = "patches/up/0001-move.patch"\nsha256 = "{sha256_bytes(data)}"\n'
    )
    run = invoke("lock", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    return root


def test_a_no_prefix_queue_applies_and_checks_through_the_cli(
    upstream: tuple[Path, str, str], invoke: Invoke, tmp_path: Path
) -> None:
    repo, base, _ = upstream
    root = _deployment(repo, base, invoke, tmp_path)
    run = invoke("check", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    tree = tmp_path / "src"
    subprocess.run(["git", "clone", "-q", str(repo), str(tree)], check=True, capture_output=True)
    git(tree, "checkout", "-q", "--detach", base)
    run = invoke("apply", "--series", "up", "--to", str(tree), repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert (tree / "new dir/n.py").read_bytes() == b""
    assert not (tree / "dir").exists()
    assert (tree / "new.py").read_bytes() == BASE["old.py"]
    assert not (tree / "old.py").exists()
    assert (tree / 'q2"uo\tt é.py').read_bytes() == b"q1\nq2\nq3\nq4\nq5\nQ6\n"
    assert (tree / "pkg/sp ace.py").stat().st_mode & 0o111
    assert (tree / "new.py").stat().st_mode & 0o111
    record = json.loads((tree / ".patchkit/series/up.json").read_bytes())
    assert record["steps"][0]["paths"] == ["new dir/n.py", "old.py", "new.py", "pkg/sp ace.py", QUOTED, 'q2"uo\tt é.py']
    # What git leaves, byte for byte: the tree equals the upstream's next commit.
    git(tree, "add", "-A")
    status = git(tree, "diff", "--cached", "--name-status", "main", "--", ".", ":!.patchkit")
    assert status == ""


# --------------------------------------------------------------------------- written back at the level it was read at


def test_a_no_prefix_series_rebased_through_the_cli_reads_back_at_strip_0(
    upstream: tuple[Path, str, str], invoke: Invoke, tmp_path: Path
) -> None:
    repo, base, _ = upstream
    root = _deployment(repo, base, invoke, tmp_path)
    git(repo, "checkout", "-q", "-b", "next", base)
    onto = commit(repo, {"keep.py": b"k2\n"}, "upstream moves on")
    run = invoke("rebase", "--series", "up", "--onto", onto, "--format", "json", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert [p["outcome"] for p in json.loads(run.stdout)["patches"]] == ["clean"]
    again = (root / "patches/up/0001-move.patch").read_bytes()
    assert b"diff --git old.py new.py\n" in again
    assert _read(again, 0) == EXPECTED
    assert invoke("check", repo=root).exit_code == 0
    tree = tmp_path / "next"
    subprocess.run(["git", "clone", "-q", "-b", "next", str(repo), str(tree)], check=True, capture_output=True)
    subprocess.run(["git", "apply", "-p0", "--check", str(root / "patches/up/0001-move.patch")], cwd=tree, check=True)
    run = invoke("apply", "--series", "up", "--to", str(tree), repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert (tree / "pkg/sp ace.py").stat().st_mode & 0o111


@pytest.mark.parametrize("strip", [0, 1, 2, 3])
def test_a_regenerated_patch_reads_back_to_the_same_paths_in_patchkit_and_git(
    upstream: tuple[Path, str, str], strip: int, tmp_path: Path
) -> None:
    repo, _, _ = upstream
    subprocess.run(["git", "mv", "pkg/sp ace.py", "pkg/sp ace moved.py"], cwd=repo, check=True)
    commit(repo, {"pkg/sp ace moved.py": b"x = 2\n", "keep.py": None}, "move the spaced name too")
    data = subprocess.run(
        ["git", "format-patch", "--stdout", "-M", "HEAD~2..HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout
    # Read at -p1, written again as a series read at -p<strip> is.
    parsed = dataclasses.replace(parse_patch(data, "p.patch"), strip=strip)
    result = apply_series([Item("p", "p", parsed)], lambda paths: {p: BASE.get(p) for p in paths})
    changes = [(c, BASE.get(c.old_path or ""), result.files.get(c.new_path or "")) for c in parsed.files]
    again = canonical_patch(parsed, changes, [])
    reread = parse_patch(again, "p.patch", strip=strip)
    assert [(c.kind, c.old_path, c.new_path, c.new_mode) for c in reread.files] == [
        (c.kind, c.old_path, c.new_path, c.new_mode) for c in parsed.files
    ]
    (tmp_path / "again.patch").write_bytes(again)
    numstat = subprocess.run(
        ["git", "apply", "--numstat", "-z", f"-p{strip}", str(tmp_path / "again.patch")],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    ).stdout
    names = [entry.split(b"\t", 2)[2].decode() for entry in numstat.split(b"\0") if entry]
    assert names == [c.new_path or c.old_path for c in parsed.files]
