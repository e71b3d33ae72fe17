"""The steps ``add`` and ``lock`` are built from, each on its own: targets, placement, diff consistency."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.diffs import canonical_diff
from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import ContainerPath, RepoPath, Sha256, UpstreamPath
from patchkit.edit.changes import AddRequest, _diff_is_consistent, _new_target, _placement
from patchkit.errors import BadInput
from patchkit.lockfile.model import Artifact, Base, Lockfile, Patch, PatchKind
from patchkit.store.repo import Repo

DIGEST = Sha256("0" * 64)


def _lock() -> Lockfile:
    patch = Patch("sched", PatchKind.MODULE, DIGEST, ContainerPath("/opt/app/sched.py"))
    art = Artifact("moe", RepoPath("tuning/moe.csv"), DIGEST, ContainerPath("/opt/tuning/moe.csv"))
    return Lockfile(name="d", patches=(patch,), tuning=(art,))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/opt/app/sched.py", "--target /opt/app/sched.py is already claimed by 'sched'"),
        ("/opt/tuning/moe.csv", "--target /opt/tuning/moe.csv is already claimed by 'moe'"),
        ("/opt/app/sched.py/x.py", "--target /opt/app/sched.py/x.py and the target /opt/app/sched.py of 'sched' nest"),
        ("/opt", "--target /opt and the target /opt/app/sched.py of 'sched' nest"),
        ("relative.py", "--target: "),
    ],
)
def test_a_target_taken_or_nesting_is_refused(target: str, message: str) -> None:
    with pytest.raises(BadInput) as e:
        _new_target(_lock(), AddRequest(Path("x.py"), target), "module")
    assert e.value.message.startswith(message)


def test_a_free_target_is_kept_and_only_artifacts_may_go_without() -> None:
    assert _new_target(_lock(), AddRequest(Path("x.py"), "/opt/app/other.py"), "module") == ContainerPath(
        "/opt/app/other.py"
    )
    assert _new_target(_lock(), AddRequest(Path("x.py"), "/opt/app2/sched.py"), "module") == ContainerPath(
        "/opt/app2/sched.py"
    )
    assert _new_target(_lock(), AddRequest(Path("x.py"), None), "artifact") is None
    with pytest.raises(BadInput, match="--target is required for a tuning"):
        _new_target(_lock(), AddRequest(Path("x.py"), None), "tuning")


def test_placement_copies_outside_files_by_kind(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    src = Path("/elsewhere/moe.csv")
    assert _placement(repo, AddRequest(src, None), "tuning", src, None, b"x") == (
        "tuning/moe.csv",
        {"tuning/moe.csv": b"x"},
    )
    assert _placement(repo, AddRequest(src, "/t"), "module", src, None, b"x") == (
        "patches/moe.csv",
        {"patches/moe.csv": b"x"},
    )
    assert _placement(repo, AddRequest(src, None), "artifact", src, "data/moe.csv", b"x") == ("data/moe.csv", {})
    diff_only = AddRequest(src, "/t", diff_only=True)
    assert _placement(repo, diff_only, "overlay", src, None, b"x") == (None, {})
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "moe.csv").write_bytes(b"old")
    with pytest.raises(BadInput, match=r"patches/moe\.csv already exists"):
        _placement(repo, AddRequest(src, "/t"), "module", src, None, b"x")


def test_placement_keeps_diff_only_to_overlays_from_outside(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    src = tmp_path / "patches" / "x.py"
    with pytest.raises(BadInput, match="--diff-only applies to overlays only"):
        _placement(repo, AddRequest(src, "/t", diff_only=True), "module", src, None, b"x")
    with pytest.raises(BadInput, match=r"patches/x\.py: --diff-only keeps only the diff"):
        _placement(repo, AddRequest(src, "/t", diff_only=True), "overlay", src, "patches/x.py", b"x")


def test_a_diff_is_consistent_only_when_it_names_and_gives_the_pinned_base() -> None:
    base_bytes, new_bytes = b"a\nb\nc\n", b"a\nB\nc\n"
    path = UpstreamPath("pkg/mod.py")
    base = Base("up", path, Sha256(sha256_bytes(base_bytes)))
    p = Patch("ov", PatchKind.OVERLAY, DIGEST, ContainerPath("/opt/mod.py"), base=base)
    diff = canonical_diff(base_bytes, new_bytes, path)
    assert _diff_is_consistent(p, base, new_bytes, diff)
    assert not _diff_is_consistent(p, base, b"a\nX\nc\n", diff)  # the overlay changed since
    assert not _diff_is_consistent(p, base, new_bytes, canonical_diff(base_bytes, new_bytes, UpstreamPath("other.py")))
    assert not _diff_is_consistent(p, base, new_bytes, b"not a diff\n")
