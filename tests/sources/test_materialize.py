"""Diff-only patches: committed as a diff, rebuilt from the upstream source and verified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Invoke

from tests.rebase.test_overlays import FENCED, WORKER, Upstream


@pytest.fixture
def diff_only(invoke: Invoke, tmp_path: Path) -> tuple[Path, Upstream]:
    up = Upstream(tmp_path / "vllm")
    commit = up.commit({"vllm/worker.py": WORKER})
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("upstream", "add", "vllm", "--git", up.url, "--commit", "main", repo=root).exit_code == 0
    assert f'commit = "{commit}"' in (root / "lockfile.toml").read_text()  # the branch was pinned as a commit
    edited = tmp_path / "worker.py"
    edited.write_bytes(FENCED)
    r = invoke(
        "add", str(edited), "--diff-only", "--name", "fence", "--target", "/opt/vllm/worker.py",
        "--upstream", "vllm", "--upstream-path", "vllm/worker.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert not (root / "patches" / "worker.py").exists()
    return root, up


def test_fresh_clone_materializes_from_the_source(
    invoke: Invoke, diff_only: tuple[Path, Upstream], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = diff_only
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "fresh"))
    r = invoke("check", repo=root)
    assert r.exit_code == 0
    assert "note:" in r.stdout and "was not recomputed" in r.stdout
    out = tmp_path / "rootfs"
    r = invoke("materialize", "--out", str(out), repo=root)
    assert r.exit_code == 0, r.stderr
    assert (out / "opt/vllm/worker.py").read_bytes() == FENCED
    r = invoke("check", repo=root)
    assert r.exit_code == 0 and "1 diffs verified" in r.stdout and "note:" not in r.stdout


def test_materialize_fails_on_a_wrong_pin(invoke: Invoke, diff_only: tuple[Path, Upstream]) -> None:
    root, _ = diff_only
    lock = root / "lockfile.toml"
    import hashlib

    good = hashlib.sha256(FENCED).hexdigest()
    lock.write_text(lock.read_text().replace(good, "0" * 64))
    r = invoke("materialize", "--format", "json", repo=root)
    assert r.exit_code == 1
    (entry,) = json.loads(r.stdout)
    assert not entry["ok"] and "is not the pinned 000000000000" in entry["how"]


def test_upstream_add_errors(invoke: Invoke, diff_only: tuple[Path, Upstream], tmp_path: Path) -> None:
    root, up = diff_only
    r = invoke("upstream", "add", "vllm", "--git", up.url, "--commit", "main", repo=root)
    assert r.exit_code == 2 and "already exists" in r.stderr
    r = invoke("upstream", "add", "other", "--git", up.url, repo=root)
    assert r.exit_code == 2 and "--git needs --commit" in r.stderr
    r = invoke("upstream", "add", "other", "--git", up.url, "--commit", "main", "--wheel", "x==1", repo=root)
    assert r.exit_code == 2 and "exactly one of" in r.stderr
    r = invoke("upstream", "add", "other", "--git", up.url, "--commit", "no-such-branch", repo=root)
    assert r.exit_code == 2 and "no-such-branch" in r.stderr
    r = invoke("upstream", "add", "other", "--git", (tmp_path / "missing").as_uri(), "--commit", "main", repo=root)
    assert r.exit_code == 3
    listing = json.loads(invoke("upstream", "list", "--format", "json", repo=root).stdout)
    assert [(u["name"], u["source"], u["patches"]) for u in listing] == [("vllm", "git", ["fence"])]


def test_a_fresh_clone_is_told_to_materialize(
    invoke: Invoke, diff_only: tuple[Path, Upstream], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no base cached yet, `diff` names the command that fetches it, and after it works."""
    root, _ = diff_only
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "fresh"))
    r = invoke("diff", repo=root)
    assert r.exit_code == 1
    assert "is not in the cache yet" in r.stderr
    assert "fix: fetch the pinned bases from upstream 'vllm': patchkit materialize" in r.stderr
    assert invoke("materialize", repo=root).exit_code == 0
    r = invoke("diff", "--stat", repo=root)
    assert r.exit_code == 0 and "fence" in r.stdout


def test_a_relative_out_is_below_the_repository(
    invoke: Invoke, diff_only: tuple[Path, Upstream], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-C DIR materialize --out build` writes where DIR's compose files mount ./build/…, not below the cwd."""
    root, _ = diff_only
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = invoke("materialize", "--out", "build", repo=root)
    assert r.exit_code == 0, r.stderr
    assert (root / "build/opt/vllm/worker.py").read_bytes() == FENCED
    assert list(elsewhere.iterdir()) == []
