"""Hashing the pinned files: the quick way for small regular files agrees with the general way on every shape."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from patchkit.check import state
from patchkit.check.state import Named, PinnedFiles, hash_pinned
from patchkit.core.values import RepoPath
from patchkit.lockfile.model import Lockfile
from patchkit.store.repo import Repo

SMALL = b"def f():\n    return 1\n"


def shapes(root: Path) -> list[str]:
    """A repository holding every kind of thing a pin can point at; the paths pinned, in order."""
    for top in ("patches", "upstream", "tuning/sub", "elsewhere"):
        (root / top).mkdir(parents=True)
    (root / "patches" / "small.py").write_bytes(SMALL)
    (root / "patches" / "empty.py").write_bytes(b"")
    (root / "patches" / "crlf.py").write_bytes(b"x = 1\r\n\x00\xff")
    (root / "patches" / "big.bin").write_bytes(b"\x01" * state.KEEP_BELOW)  # hashed the general way
    (root / "tuning" / "sub" / "deep.csv").write_bytes(b"m,n\n1,2\n")
    (root / "patches" / "link.py").symlink_to(root / "patches" / "small.py")
    (root / "patches" / "out.py").symlink_to("/etc/hostname")
    (root / "elsewhere" / "x.csv").write_bytes(b"1\n")
    (root / "tuning" / "lnk").symlink_to(root / "elsewhere")  # a symlinked directory on the way
    os.mkfifo(root / "patches" / "pipe.py")
    (root / "patches" / "dir.py").mkdir()
    (root / "upstream" / "plain").write_bytes(b"a file where a directory is named\n")
    return [
        "patches/small.py",
        "patches/empty.py",
        "patches/crlf.py",
        "patches/big.bin",
        "tuning/sub/deep.csv",
        "patches/link.py",
        "patches/out.py",
        "tuning/lnk/x.csv",
        "patches/pipe.py",
        "patches/dir.py",
        "patches/missing.py",
        "upstream/plain/x.diff",
        "nowhere/x.py",
    ]


def pins(rels: list[str]) -> list[Named]:
    return [Named(("patches", i, "sha256"), RepoPath(rel), "0" * 64, f"patch 'p{i}'") for i, rel in enumerate(rels)]


def general(root: Path, rels: list[str]) -> PinnedFiles:
    """What the general way (containment checked per path, hashed on all cores) finds for every path."""
    out = PinnedFiles()
    state._hash_checked(Repo(root), rels, out)
    return out


def test_every_shape_is_found_as_the_general_way_finds_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    rels = shapes(root)
    got = hash_pinned(Repo(root), Lockfile(), pins(rels))
    want = general(root, rels)
    assert (got.sha256, got.missing, got.unsafe, got.unreadable) == (
        want.sha256,
        want.missing,
        want.unsafe,
        want.unreadable,
    )
    assert set(got.sha256) == {"patches/small.py", "patches/empty.py", "patches/crlf.py", "patches/big.bin"} | {
        "tuning/sub/deep.csv"
    }
    assert got.missing == {"patches/missing.py", "upstream/plain/x.diff", "nowhere/x.py"}
    assert set(got.unsafe) == {"patches/link.py", "patches/out.py", "tuning/lnk/x.csv", "patches/pipe.py"} | {
        "patches/dir.py"
    }
    # The small files' bytes are kept, exactly those that hashed; the large one is read again when asked.
    assert set(got.content) == set(got.sha256) - {"patches/big.bin"}
    for rel, data in got.content.items():
        assert hashlib.sha256(data).hexdigest() == got.sha256[rel] and data == (root / rel).read_bytes()
    assert Path(got.paths["patches/big.bin"]).read_bytes() == (root / "patches" / "big.bin").read_bytes()


def test_a_path_pinned_twice_is_hashed_once_and_a_directory_looked_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    (root / "patches" / "a").mkdir(parents=True)
    for i in range(3):
        (root / "patches" / "a" / f"m{i}.py").write_bytes(SMALL + b"%d\n" % i)
    looked: list[str] = []
    real_open, real_stat = os.open, os.stat

    def open_(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        looked.append(f"open {path}")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def stat_(path: str, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        looked.append(f"stat {path}")
        return real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "stat", stat_)
    rels = ["patches/a/m0.py", "patches/a/m1.py", "patches/a/m0.py", "patches/a/m2.py"]
    got = hash_pinned(Repo(root), Lockfile(), pins(rels))
    assert sorted(got.sha256) == ["patches/a/m0.py", "patches/a/m1.py", "patches/a/m2.py"]
    # Each directory opened once (relative to its parent), each file looked at and opened once.
    files = [f"{verb} m{i}.py" for i in range(3) for verb in ("open", "stat")]
    assert sorted(looked) == sorted([f"open {root}", "open patches", "open a", *files])


def test_kept_bytes_stay_within_their_bound_and_every_file_still_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    rels = [f"patches/m{i}.py" for i in range(4)]
    for rel in rels:
        (root / rel).write_bytes(SMALL)
    monkeypatch.setattr(state, "KEEP_AT_MOST", 2 * len(SMALL))
    got = hash_pinned(Repo(root), Lockfile(), pins(rels))
    assert set(got.sha256) == set(rels) and len(got.content) == 2
    assert all(got.sha256[rel] == hashlib.sha256(SMALL).hexdigest() for rel in rels)


def test_the_managed_tree_is_listed_in_walk_order_with_each_kind(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "patches" / "b" / "deeper").mkdir(parents=True)
    (root / "patches" / "a").mkdir()
    (root / "upstream").mkdir()
    (root / "elsewhere").mkdir()
    (root / "patches" / "z.py").write_bytes(SMALL)
    (root / "patches" / "a" / "m.py").write_bytes(SMALL)
    (root / "patches" / "b" / "deeper" / "n.py").write_bytes(SMALL)
    (root / "patches" / ".patchkit-tmp-12-m.py.x.tmp").write_bytes(SMALL)
    (root / "patches" / "c").symlink_to(root / "elsewhere")  # a link to a directory is listed, not entered
    (root / "elsewhere" / "hidden.py").write_bytes(SMALL)
    (root / "upstream" / "out").symlink_to("/etc")
    os.mkfifo(root / "upstream" / "pipe")
    (root / "tuning").symlink_to(root / "elsewhere")
    tree, symlinked = state.walk_managed(Repo(root))
    assert [(e.rel, e.kind) for e in tree] == [
        ("patches/.patchkit-tmp-12-m.py.x.tmp", "file"),
        ("patches/a", "dir"),
        ("patches/b", "dir"),
        ("patches/c", "symlink"),
        ("patches/z.py", "file"),
        ("patches/a/m.py", "file"),
        ("patches/b/deeper", "dir"),
        ("patches/b/deeper/n.py", "file"),
        ("upstream/out", "symlink"),
        ("upstream/pipe", "special"),
    ]
    by = {e.rel: e for e in tree}
    assert by["patches/.patchkit-tmp-12-m.py.x.tmp"].staged and not by["patches/z.py"].staged
    assert (by["patches/c"].link, by["patches/c"].link_inside) == (str(root / "elsewhere"), True)
    assert (by["upstream/out"].link, by["upstream/out"].link_inside) == ("/etc", False)
    assert stat.S_ISFIFO(by["upstream/pipe"].mode)
    assert symlinked == ["tuning"]
