"""``repo.write_all``: several files as one transaction, managed files written in place under a journal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.errors import BadInput, WriteFailed
from patchkit.repo import JOURNAL, JOURNAL_DATA, recover, write_all

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
        if p.is_file() and not p.relative_to(root).as_posix().startswith(".patchkit/")
    }


def test_write_all_writes_every_file_and_leaves_no_journal(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    inode = (root / "patches/a.py").stat().st_ino
    written = write_all(root, NEW)
    assert written == list(NEW)
    assert _contents(root) == NEW
    assert (root / "patches/a.py").stat().st_ino == inode  # written in place, not replaced
    assert not (root / JOURNAL).exists() and not (root / JOURNAL_DATA).exists()
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
import patchkit.repo as repo
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
    _killed_writer(root)
    assert (root / JOURNAL).exists() and (root / JOURNAL_DATA).exists()
    assert _contents(root)["patches/b.py"] not in (OLD["patches/b.py"], NEW["patches/b.py"])  # half-written
    assert recover(root) is True
    assert _contents(root) == NEW
    assert not (root / JOURNAL).exists() and not (root / JOURNAL_DATA).exists()
    assert not list(root.rglob(".patchkit-tmp-*"))


def test_a_journal_whose_data_does_not_match_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _killed_writer(root)
    data = bytearray((root / JOURNAL_DATA).read_bytes())
    data[3] ^= 0xFF
    (root / JOURNAL_DATA).write_bytes(bytes(data))
    before = _contents(root)
    with pytest.raises(BadInput, match=r"journal.json: not a journal patchkit wrote .*patches/"):
        recover(root)
    assert _contents(root) == before
    assert (root / JOURNAL).exists()


def test_a_journal_writing_outside_the_managed_directories_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / JOURNAL_DATA).write_bytes(b"x")
    record = {"version": 2, "replace": [], "delete": [], "write": [["compose.yaml", 0, 1, "0" * 64]]}
    (root / JOURNAL).write_text(json.dumps(record))
    with pytest.raises(BadInput, match=r"compose\.yaml is not in a directory patchkit writes in place"):
        recover(root)
    assert not (root / "compose.yaml").exists()


def test_a_crash_before_the_journal_leaves_nothing_changed(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / JOURNAL_DATA).write_bytes(b"half of the new contents")
    assert recover(root) is False
    assert _contents(root) == OLD
    assert not (root / JOURNAL_DATA).exists()


def test_a_failure_before_the_journal_changes_nothing(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / JOURNAL_DATA).mkdir()  # the data file cannot be written
    with pytest.raises(WriteFailed, match=r"journal\.data: cannot write"):
        write_all(root, NEW)
    assert _contents(root) == OLD
    assert not (root / JOURNAL).exists()
    assert not list(root.rglob(".patchkit-tmp-*"))
