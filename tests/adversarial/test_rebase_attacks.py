"""Hostile rebase states: resolutions through links, markers git would flag, a broken state file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from patchkit.rebase.merge import conflict_markers_remain
from tests.conftest import Invoke, git
from tests.rebase.test_overlays import FENCED, WORKER, Upstream, make_deploy, rebase_json, upstream  # noqa: F401


def _conflicted(invoke: Invoke, tmp_path: Path, up: Upstream) -> tuple[Path, Path, bytes]:
    """A rebase stopped at a conflict: (repository, the conflict file, a clean resolution)."""
    c1 = up.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, up, c1, {"vllm/worker.py": FENCED})
    theirs = WORKER.replace(
        b"        for b in blocks:\n", b"        torch.cuda.current_stream().synchronize()\n        for b in blocks:\n"
    )
    c2 = up.commit({"vllm/worker.py": theirs})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1
    resolved = theirs.replace(
        b"        torch.cuda.current_stream().synchronize()\n", b"        self.stream.synchronize()\n"
    )
    return root, root / doc["work_files"][0], resolved  # type: ignore[index]


def test_continue_never_reads_a_resolution_through_a_symlink(
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    root, work, _ = _conflicted(invoke, tmp_path, upstream)
    work.unlink()
    os.symlink("/etc/passwd", work)
    before = (root / "patches" / "worker.py").read_bytes()
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 1
    rel = work.relative_to(root).as_posix()
    assert f"{rel} is a symlink to /etc/passwd, outside the repository; write the resolution into the file itself" in (
        r.stderr
    )
    assert (root / "patches" / "worker.py").read_bytes() == before
    assert invoke("check", repo=root).exit_code == 0


@pytest.mark.parametrize(
    "line",
    [b"=======   \n", b"=======\t\n", b"======= \n", b"<<<<<<< ours\n", b">>>>>>>\r\n", b"||||||| base\n", b"======="],
)
def test_git_conflict_marker_rules(line: bytes, tmp_path: Path) -> None:
    data = b"a = 1\n" + line + (b"" if not line.endswith(b"\n") else b"b = 2\n")
    assert conflict_markers_remain(data) == [2]
    # git diff --check flags the same line.
    repo = tmp_path / "g"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f.py").write_bytes(b"a = 1\n")
    git(repo, "add", "f.py")
    git(repo, "commit", "-qm", "base")
    (repo / "f.py").write_bytes(data)
    import subprocess

    out = subprocess.run(["git", "diff", "--check"], cwd=repo, capture_output=True, text=True, check=False)
    if line.endswith(b"\n"):
        assert "leftover conflict marker" in out.stdout, out.stdout


@pytest.mark.parametrize("text", [b"========\n", b"=======x\n", b" =======\n", b"<<<<<<\n", b"# =======\n"])
def test_lines_that_are_not_markers(text: bytes) -> None:
    assert conflict_markers_remain(b"a\n" + text) == []


def test_a_marker_with_trailing_spaces_blocks_continue(
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    root, work, resolved = _conflicted(invoke, tmp_path, upstream)
    work.write_bytes(resolved.replace(b"        self.stream.synchronize()\n", b"=======   \n"))
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 1 and "conflict markers remain" in r.stderr


@pytest.mark.parametrize(
    "state",
    ["[]", "{}", '{"version": 1}', '{"version": 1, "lockfile_sha256": 5, "patches": "x"}', "not json"],
)
def test_a_malformed_state_file_is_bad_input(
    state: str,
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    root, _, _ = _conflicted(invoke, tmp_path, upstream)
    (root / ".patchkit" / "rebase" / "state.json").write_text(state)
    for args in (("status",), ("rebase", "--continue"), ("status", "--format", "json")):
        r = invoke(*args, repo=root)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert args[0] == "rebase" or ".patchkit/rebase/state.json" in r.stderr + r.stdout
        assert "rebase --abort" in r.stderr + r.stdout and "Traceback" not in r.stderr
    assert invoke("rebase", "--abort", repo=root).exit_code == 0
    assert json.loads(invoke("status", "--format", "json", repo=root).stdout)["rebase"] is None
