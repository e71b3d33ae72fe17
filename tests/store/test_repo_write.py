"""``repo.write_all``: several files as one transaction, managed files written in place under a journal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.errors import BadInput, Refused, WriteFailed
from patchkit.store.repo import JournalRefused, journal_place, recover, write_all

OLD = {
    "patches/a.py": b"a = 1\n" * 50,
    "patches/b.py": b"b = 2\n" * 50,
    "upstream/a.diff": b"--- a\n+++ b\n",
    "lockfile.toml": b'schema = 1\nname = "x"\n',
}
NEW = {
    "patches/a.py": b"a = 10\n",  # shorter: nothing of the old bytes may remain after it
    "patches/b.py": b"b = 20\n" * 80,  # longer
    "upstream/a.diff": b"--- a\n+++ b\n@@ -1 +1 @@\n",
    "lockfile.toml": b'schema = 1\nname = "y"\n',
    "tuning/new.csv": b"1,2\n",  # new: staged and renamed in
}


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "deploy"
    for rel, data in OLD.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / ".patchkit").mkdir()
    return root


def _contents(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith((".patchkit/", ".git/"))
    }


def test_write_all_writes_every_file_and_leaves_no_journal(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    inode = (root / "patches/a.py").stat().st_ino
    written = write_all(root, NEW)
    assert written == list(NEW)
    assert _contents(root) == NEW
    assert (root / "patches/a.py").stat().st_ino == inode  # written in place, not replaced
    assert not journal_place(root).journal.exists() and not journal_place(root).data.exists()
    assert sorted(p.name for p in (root / ".patchkit").iterdir()) == []


def test_unchanged_files_are_not_touched_nor_listed(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    before = {rel: (root / rel).stat().st_mtime_ns for rel in OLD}
    os.utime(root / "patches/a.py", ns=(1, 1))
    written = write_all(root, {**OLD, "patches/b.py": NEW["patches/b.py"], "lockfile.toml": NEW["lockfile.toml"]})
    assert written == ["patches/b.py", "lockfile.toml"]
    assert (root / "patches/a.py").stat().st_mtime_ns == 1
    assert (root / "upstream/a.diff").stat().st_mtime_ns == before["upstream/a.diff"]


def test_a_hard_linked_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    other = tmp_path / "elsewhere.py"
    os.link(root / "patches/a.py", other)
    write_all(root, NEW)
    assert (root / "patches/a.py").read_bytes() == NEW["patches/a.py"]
    assert other.read_bytes() == OLD["patches/a.py"]


def test_deletes_are_part_of_the_transaction(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    written = write_all(root, {"patches/b.py": NEW["patches/b.py"]}, deletes=["upstream/a.diff", "upstream/gone"])
    assert written == ["patches/b.py", "upstream/a.diff"]
    assert not (root / "upstream/a.diff").exists()


# A writer killed in the middle of the in-place writes: one file half-written.
KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
import patchkit.store.repo as repo
real = repo._carry_out
def carry_out(root, replace, write, delete):
    rel, data = next(item for item in write if item[0] == "patches/b.py")
    with open(root / rel, "r+b") as f:
        f.write(data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
repo._carry_out = carry_out
new = {k: bytes.fromhex(v) for k, v in __import__("json").loads(sys.argv[2]).items()}
repo.write_all(Path(sys.argv[1]), new)
"""


def _killed_writer(root: Path) -> None:
    arg = json.dumps({k: v.hex() for k, v in NEW.items()})
    done = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(root), arg], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr


def test_a_crash_mid_write_is_finished_by_recover(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    place = journal_place(root)
    _killed_writer(root)
    assert place.journal.exists() and place.data.exists()
    assert _contents(root)["patches/b.py"] not in (OLD["patches/b.py"], NEW["patches/b.py"])  # half-written
    assert recover(root) == "finished"
    assert _contents(root) == NEW
    assert not place.journal.exists() and not place.data.exists()
    assert not list(root.rglob(".patchkit-tmp-*"))


def test_a_journal_whose_data_does_not_match_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    place = journal_place(root)
    _killed_writer(root)
    data = bytearray(place.data.read_bytes())
    data[3] ^= 0xFF
    place.data.write_bytes(bytes(data))
    before = _contents(root)
    with pytest.raises(JournalRefused, match=r"journal.json: not a journal patchkit wrote here .*patches/"):
        recover(root)
    assert _contents(root) == before
    assert place.journal.exists()


def test_a_journal_writing_outside_the_managed_directories_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    place = journal_place(root)
    place.data.write_bytes(b"x")
    st = root.stat()
    record = {
        "version": 3,
        "kind": "repository",
        "state": "commit",
        "pid": 1,
        "run": "0" * 32,
        "dev": st.st_dev,
        "ino": st.st_ino,
        "replace": [],
        "delete": [],
        "write": [["compose.yaml", 0, 1, "0" * 64]],
    }
    place.journal.write_text(json.dumps(record))
    with pytest.raises(JournalRefused, match=r"compose\.yaml is not in a directory patchkit writes in place"):
        recover(root)
    assert not (root / "compose.yaml").exists()


def test_a_crash_before_the_journal_leaves_nothing_changed(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    place = journal_place(root)
    place.data.write_bytes(b"half of the new contents")
    assert recover(root) is None
    assert _contents(root) == OLD
    assert not place.data.exists()


def test_a_failure_before_the_journal_changes_nothing(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    place = journal_place(root)
    place.data.mkdir()  # the data file cannot be written
    with pytest.raises(WriteFailed, match=r"journal\.data: cannot write"):
        write_all(root, NEW)
    assert _contents(root) == OLD
    assert not place.journal.exists()
    assert not list(root.rglob(".patchkit-tmp-*"))


# --------------------------------------------------------------------------- where the journal lives, what it may name


def _bound(root: Path, **entries: object) -> dict[str, object]:
    st = root.stat()
    base = {"version": 3, "kind": "repository", "state": "commit", "pid": 1, "run": "0" * 32}
    return {**base, "dev": st.st_dev, "ino": st.st_ino, "replace": [], "delete": [], "write": [], **entries}


def test_in_a_git_work_tree_the_journal_lives_in_the_git_directory(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert journal_place(root).journal == root / ".git" / "patchkit" / "journal.json"
    sub = root / "deploy2"
    sub.mkdir()
    assert journal_place(sub).journal.parent == root / ".git" / "patchkit"  # one per deployment of the work tree
    assert journal_place(sub).journal != journal_place(root).journal
    _killed_writer(root)
    assert (root / ".git" / "patchkit" / "journal.json").exists() and not (root / ".patchkit" / "journal.json").exists()
    assert recover(root) == "finished" and _contents(root) == NEW


def test_a_linked_worktree_keeps_its_journal_in_its_own_git_directory(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    git_dir = tmp_path / "main.git" / "worktrees" / "deploy"
    git_dir.mkdir(parents=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/x\n")
    (root / ".git").write_text(f"gitdir: {git_dir}\n")
    assert journal_place(root).journal == git_dir / "patchkit" / "journal.json"
    (root / ".git").unlink()
    (root / ".git").symlink_to(git_dir)
    assert journal_place(root).journal == git_dir / "patchkit" / "journal.json"
    (root / ".git").unlink()
    (root / ".git").write_text("gitdir: /nonexistent\n")  # not a git directory: the work area, bound
    assert journal_place(root).journal == root / ".patchkit" / "journal.json"


def test_a_journal_in_the_work_tree_of_a_git_repository_is_never_carried_out(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "config").write_text("[core]\n")
    tmp = root / "patches" / ".patchkit-tmp-1-a.py.0000.tmp"
    tmp.write_bytes(b"evil\n")
    (root / ".patchkit" / "journal.json").write_text(
        json.dumps(_bound(root, replace=[[str(tmp.relative_to(root)), "patches/a.py"]]))
    )
    before = _contents(root)
    with pytest.raises(JournalRefused, match=r"^\.patchkit/journal\.json: a journal in the work tree") as e:
        recover(root)
    assert e.value.exit_code == 1
    assert _contents(root) == before and tmp.exists()


@pytest.mark.parametrize(
    "entries",
    [
        {"delete": [".git/HEAD"]},
        {"delete": [".GIT/config"]},
        {"delete": ["patches/.Git/x"]},
        {"delete": [".github/workflows/ci.yml"]},
        {"delete": [".envrc"]},
        {"replace": [[".git/hooks/.patchkit-tmp-1-post-checkout.0.tmp", ".git/hooks/post-checkout"]]},
        {"replace": [["patches/.patchkit-tmp-1-a.py.0.tmp", ".gitattributes"]]},
        {"replace": [["patches/.patchkit-tmp-2-a.py.0.tmp", "patches/a.py"]]},  # staged by another writer
        {"replace": [["tuning/.patchkit-tmp-1-a.py.0.tmp", "patches/a.py"]]},  # not beside its target
        {"delete": ["../outside"]},
        {"delete": ["patches/a\0.py"]},
        {"state": "staging", "stage": [".git/config"]},
        {"dev": 0},
        {"ino": 0},
        {"version": 2},
        {"kind": "tree"},
        {"state": "other"},
        {"run": None},
    ],
)
def test_a_journal_naming_what_patchkit_never_writes_is_refused_and_changes_nothing(
    tmp_path: Path, entries: dict[str, object]
) -> None:
    root = _repo(tmp_path)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    (root / ".envrc").write_text("export X=1\n")
    (root / "tuning").mkdir()
    for tmp in (
        "patches/.patchkit-tmp-1-a.py.0.tmp",
        "patches/.patchkit-tmp-2-a.py.0.tmp",
        "tuning/.patchkit-tmp-1-a.py.0.tmp",
    ):
        (root / tmp).write_bytes(b"staged\n")
    (root / ".git" / "hooks").mkdir()
    (root / ".git" / "hooks" / ".patchkit-tmp-1-post-checkout.0.tmp").write_bytes(b"#!/bin/sh\n")
    place = journal_place(root)
    place.prepare()
    place.journal.write_text(json.dumps(_bound(root, **entries)))
    every = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p != place.journal}
    with pytest.raises(Refused, match=r"journal\.json: not a journal patchkit wrote here"):
        recover(root)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p != place.journal} == every


def test_write_all_refuses_a_path_into_git_in_any_case(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    for rel in (".git/config", ".GIT/hooks/post-checkout", "patches/.Git/x", ".github/workflows/x.yml"):
        with pytest.raises(BadInput, match="refusing to write it"):
            write_all(root, {rel: b"x", "lockfile.toml": b"y"})
    assert _contents(root) == OLD


CRASH_WHILE_STAGING = """
import os, signal, sys
from pathlib import Path
import patchkit.store.repo as repo
real = repo._stage_in
count = 0
def stage(dirs, parent, name, data, sync, mode=None):
    global count
    count += 1
    if count == 6:  # the journal, lockfile.toml, tuning/new.csv, two files in directories of their own
        os.kill(os.getpid(), signal.SIGKILL)
    return real(dirs, parent, name, data, sync, mode)
repo._stage_in = stage
new = {k: bytes.fromhex(v) for k, v in __import__("json").loads(sys.argv[2]).items()}
repo.write_all(Path(sys.argv[1]), new)
"""


def test_a_crash_while_staging_is_undone_and_leaves_no_staged_file(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    deep = {f"patches/deep/{n}/x.py": b"%d\n" % n for n in range(6)}
    arg = json.dumps({k: v.hex() for k, v in {**NEW, **deep}.items()})
    done = subprocess.run([sys.executable, "-c", CRASH_WHILE_STAGING, str(root), arg], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert len(list(root.rglob(".patchkit-tmp-*"))) == 4  # four files were staged, two in new directories
    assert recover(root) == "undone"
    assert _contents(root) == OLD
    assert not list(root.rglob(".patchkit-tmp-*"))
    assert not journal_place(root).journal.exists()


def test_the_one_atomic_write_sets_a_mode_refuses_to_overwrite_when_asked_and_moves_finished_files(
    tmp_path: Path,
) -> None:
    from patchkit.store.repo import atomic_write, move_into

    key = tmp_path / "keys" / "k"
    atomic_write(key, b"secret", mode=0o600, overwrite=False)
    assert key.read_bytes() == b"secret" and key.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError) as e:
        atomic_write(key, b"other", overwrite=False)
    assert e.value.filename == str(key)  # the file in the way, not the staged one
    assert key.read_bytes() == b"secret"
    assert sorted(p.name for p in key.parent.iterdir()) == ["k"]  # nothing staged stays behind
    made = tmp_path / "keys" / "made-elsewhere"
    made.write_bytes(b"new")
    move_into(made, key)
    assert key.read_bytes() == b"new" and not made.exists()
