"""The one rebase driver, through the CLI: both kinds refuse, stop, continue and commit the same way."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import Invoke
from tests.rebase.test_overlays import FENCED, WORKER, Upstream, make_deploy, rebase_json, upstream  # noqa: F401
from tests.series.conftest import queue  # noqa: F401
from tests.series.queue import REQS_V1, Queue, commit
from tests.series.test_rebase import MXFP4_V2

OVERLAY_STATE = ".patchkit/rebase/state.json"
SERIES_STATE = ".patchkit/series-rebase/state.json"
STOPPED = "vllm-48303-mxfp4-flashinfer-cutlass"
MXFP4 = "vllm/model_executor/layers/quant/mxfp4.py"
REQS = "requirements/cuda.txt"


def _outside(root: Path) -> dict[str, bytes]:
    """The repository's files, its work area left out: what a refused command must not change."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".patchkit" not in p.parts and ".git" not in p.parts)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def _overlay_stopped(invoke: Invoke, tmp_path: Path, up: Upstream) -> tuple[Path, Path]:
    """An overlays' rebase stopped at a conflict: (repository, the file to resolve)."""
    tmp_path.mkdir(exist_ok=True)
    c1 = up.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, up, c1, {"vllm/worker.py": FENCED})
    theirs = WORKER.replace(b"        for b in blocks:\n", b"        wait()\n        for b in blocks:\n")
    code, doc = rebase_json(invoke, root, "--onto", up.commit({"vllm/worker.py": theirs}))
    assert code == 1, doc
    return root, root / doc["work_files"][0]  # type: ignore[index]


def _series_stopped(q: Queue, invoke: Invoke) -> tuple[Path, Path]:
    """A series rebase stopped at its first patch with two conflicted files: (mxfp4.py's, requirements')."""
    commit(q.vllm, {MXFP4: MXFP4_V2, REQS: REQS_V1.replace(b"triton==3.5.0", b"triton==3.6.0")}, "Release 0.27.0")
    run = invoke("rebase", "--series", "vllm", "--onto", "main", repo=q.root)
    assert run.exit_code == 1, run.stdout + run.stderr
    work = q.root / ".patchkit/series-rebase/work" / STOPPED
    assert f"  resolve .patchkit/series-rebase/work/{STOPPED}/{REQS}" in run.stdout.splitlines()
    return work / MXFP4, work / REQS


def _resolve(mxfp4: Path, reqs: Path) -> None:
    """Both conflicts resolved: the patch's lines on upstream's."""
    mxfp4.write_bytes(
        MXFP4_V2.replace(
            b'    return "marlin"\n',
            b'    if device.has_flashinfer:\n        return "flashinfer-cutlass"\n    return "marlin"\n',
        )
    )
    reqs.write_bytes(b"torch==2.9.0\ntriton==3.6.0\nflashinfer-python==0.5.2\n")


def test_series_continue_names_every_unresolved_file_at_once(queue: Queue, invoke: Invoke) -> None:  # noqa: F811
    mxfp4, reqs = _series_stopped(queue, invoke)
    before = _outside(queue.root)
    rel = f".patchkit/series-rebase/work/{STOPPED}"
    blocked = invoke("rebase", "--continue", repo=queue.root)
    assert blocked.exit_code == 1
    assert f"{rel}/{MXFP4}:9: conflict markers remain" in blocked.stderr
    assert f"{rel}/{REQS}:" in blocked.stderr and blocked.stderr.count("conflict markers remain") == 2
    assert "edit the files to the intended result, remove the markers" in blocked.stderr
    # A work file removed by hand is named too, never a crash.
    reqs.unlink()
    gone = invoke("rebase", "--continue", repo=queue.root)
    assert gone.exit_code == 1
    assert f"{rel}/{REQS}: missing (resolve the conflict in this file)" in gone.stderr
    assert f"{rel}/{MXFP4}:9: conflict markers remain" in gone.stderr
    assert _outside(queue.root) == before
    _resolve(mxfp4, reqs)
    done = invoke("rebase", "--continue", repo=queue.root)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert not (queue.root / ".patchkit/series-rebase").exists()


def test_a_lockfile_changed_under_a_waiting_rebase_is_refused_the_same_for_both(
    queue: Queue,  # noqa: F811
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    _series_stopped(queue, invoke)
    root, _ = _overlay_stopped(invoke, tmp_path / "o", upstream)
    for repo, what, state in ((queue.root, "series rebase", SERIES_STATE), (root, "rebase", OVERLAY_STATE)):
        lock = repo / "lockfile.toml"
        lock.write_bytes(lock.read_bytes() + b"# edited by hand\n")
        before = _outside(repo)
        r = invoke("rebase", "--continue", repo=repo)
        assert r.exit_code == 1, (what, r.stderr)
        assert f"lockfile.toml changed since the {what} started; the saved state no longer applies" in r.stderr
        assert "patchkit rebase --abort, then run the rebase again" in r.stderr
        assert _outside(repo) == before and (repo / state).exists()


def test_no_rebase_starts_while_either_kind_waits(
    queue: Queue,  # noqa: F811
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    root, _ = _overlay_stopped(invoke, tmp_path / "o", upstream)
    again = invoke("rebase", "--onto", "main", repo=root)
    assert again.exit_code == 1 and "a rebase is already in progress (.patchkit/rebase/)" in again.stderr
    # A series rebase waits: the overlays' cannot start, and the other way round.
    (root / ".patchkit/rebase").rename(root / ".patchkit/series-rebase")
    r = invoke("rebase", "--onto", "main", repo=root)
    assert r.exit_code == 1 and "a series rebase is already in progress (.patchkit/series-rebase/)" in r.stderr
    (queue.root / ".patchkit/rebase").mkdir(parents=True)
    (queue.root / OVERLAY_STATE).write_text("{}")
    before = _outside(queue.root)
    r = invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root)
    assert r.exit_code == 1 and "a rebase is already in progress (.patchkit/rebase/)" in r.stderr
    assert _outside(queue.root) == before and not (queue.root / ".patchkit/series-rebase").exists()


CRASH_BEFORE_CLEAN_UP = """
import os, signal, sys
from patchkit.rebase.state import WorkArea
WorkArea.clear = lambda self, root: os.kill(os.getpid(), signal.SIGKILL)  # the commit went through, then death
from patchkit.cli import main
sys.argv = ["patchkit", "--repo", sys.argv[1], "rebase", "--continue"]
main()
"""


def test_a_series_rebase_killed_after_its_commit_is_finished_by_continue(
    queue: Queue,  # noqa: F811
    invoke: Invoke,
) -> None:
    mxfp4, reqs = _series_stopped(queue, invoke)
    _resolve(mxfp4, reqs)
    killed = subprocess.run(
        [sys.executable, "-c", CRASH_BEFORE_CLEAN_UP, str(queue.root)], capture_output=True, check=False
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    committed = _outside(queue.root)
    assert (queue.root / SERIES_STATE).exists()
    r = invoke("rebase", "--continue", repo=queue.root)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "the rebase had already been committed; cleaned up its work area\n"
    assert not (queue.root / ".patchkit/series-rebase").exists()
    assert _outside(queue.root) == committed
    assert invoke("check", repo=queue.root).exit_code == 0


def test_overlay_continue_names_a_deletion_and_every_unresolved_file_at_once(
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/other.py": b"x = 1\n"})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED, "vllm/other.py": b"x = 2\n"})
    theirs = WORKER.replace(b"        for b in blocks:\n", b"        wait()\n        for b in blocks:\n")
    code, doc = rebase_json(invoke, root, "--onto", upstream.commit({"vllm/worker.py": theirs, "vllm/other.py": None}))
    assert code == 1 and {p["name"]: p["outcome"] for p in doc["patches"]} == {  # type: ignore[index,union-attr]
        "worker": "conflict",
        "other": "deleted",
    }
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 1
    assert "vllm/other.py was deleted upstream: keep nothing (--drop other) or abort; " in r.stderr
    assert ".patchkit/rebase/conflicts/worker/worker.py:" in r.stderr and "conflict markers remain" in r.stderr
    (root / ".patchkit/rebase/conflicts/worker/worker.py").write_bytes(
        theirs.replace(b"        wait()\n", b"        wait()\n        self.stream.synchronize()\n")
    )
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 1 and "markers remain" not in r.stderr and "--drop other" in r.stderr
    done = invoke("rebase", "--continue", "--drop", "other", repo=root)
    assert done.exit_code == 0, done.stderr
    assert not (root / ".patchkit/rebase").exists()
