"""patchkit rebase against real git upstreams: every outcome, the transaction, crashes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Invoke, git, snapshot

from patchkit.store.repo import journal_place

WORKER = b"""import torch


class Restorer:
    def __init__(self, stream):
        self.stream = stream

    def restore(self, blocks):
        for b in blocks:
            self.copy(b)
        return len(blocks)

    def copy(self, block):
        block.to("cuda", non_blocking=True)


def offload(blocks):
    return [b.cpu() for b in blocks]
"""


class Upstream:
    """A real git repository standing in for vLLM, with helpers to commit new versions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        git(path, "init", "-q", "-b", "main")

    def commit(self, files: dict[str, bytes | None], message: str = "change") -> str:
        for rel, data in files.items():
            target = self.path / rel
            if data is None:
                git(self.path, "rm", "-q", rel)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            git(self.path, "add", rel)
        git(self.path, "commit", "-qm", message)
        return git(self.path, "rev-parse", "HEAD").strip()

    def move(self, old: str, new: str) -> str:
        (self.path / new).parent.mkdir(parents=True, exist_ok=True)
        git(self.path, "mv", old, new)
        git(self.path, "commit", "-qm", f"move {old}")
        return git(self.path, "rev-parse", "HEAD").strip()

    @property
    def url(self) -> str:
        return self.path.as_uri()


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


def make_deploy(invoke: Invoke, tmp_path: Path, up: Upstream, commit: str, patches: dict[str, bytes]) -> Path:
    """A deployment whose overlays are ``patches`` (upstream path -> patched bytes) on ``commit``."""
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    r = invoke("upstream", "add", "vllm", "--git", up.url, "--commit", commit, repo=root)
    assert r.exit_code == 0, r.stderr
    work = tmp_path / "edits"
    work.mkdir(exist_ok=True)
    for upath, data in patches.items():
        name = Path(upath).stem.replace("_", "-")
        edited = work / Path(upath).name
        edited.write_bytes(data)
        r = invoke(
            "add", str(edited), "--name", name, "--target", f"/usr/lib/python3/dist-packages/{upath}",
            "--upstream", "vllm", "--upstream-path", upath, repo=root,
        )  # fmt: skip
        assert r.exit_code == 0, r.stderr
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "deployment")
    return root


def rebase_json(invoke: Invoke, root: Path, *args: str) -> tuple[int, dict[str, object]]:
    r = invoke("rebase", "--format", "json", *args, repo=root)
    assert r.stdout, r.stderr
    return r.exit_code, json.loads(r.stdout)


def outcomes(doc: dict[str, object]) -> dict[str, str]:
    return {p["name"]: p["outcome"] for p in doc["patches"]}  # type: ignore[index,union-attr]


FENCED = WORKER.replace(b"        for b in blocks:\n", b"        self.stream.synchronize()\n        for b in blocks:\n")


def test_clean_rebase_updates_everything_consistently(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    newer = WORKER.replace(b"import torch\n", b"import torch\nimport logging\n")
    c2 = upstream.commit({"vllm/worker.py": newer})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0
    assert outcomes(doc) == {"worker": "clean"}
    merged = (root / "patches" / "worker.py").read_bytes()
    assert b"import logging\n" in merged and b"self.stream.synchronize()" in merged
    lock = (root / "lockfile.toml").read_text()
    assert f'commit = "{c2}"' in lock and c1 not in lock
    r = invoke("check", repo=root)
    assert r.exit_code == 0, r.stdout
    sums = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=root, capture_output=True, check=False)
    assert sums.returncode == 0


def test_unchanged_upstream(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "README": b"a\n"})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"README": b"b\n"})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and outcomes(doc) == {"worker": "unchanged"}
    assert (root / "patches" / "worker.py").read_bytes() == FENCED
    assert invoke("check", repo=root).exit_code == 0


def test_fully_upstreamed_is_a_drop_candidate_not_deleted(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": FENCED.replace(b"import torch\n", b"import torch  # upstream\n")})
    summary = tmp_path / "summary.md"
    code, doc = rebase_json(invoke, root, "--onto", c2, "--summary", str(summary))
    assert code == 0 and outcomes(doc) == {"worker": "upstreamed"}
    assert (root / "patches" / "worker.py").exists()  # kept: a drop is the user's decision
    assert (root / "upstream" / "worker.diff").read_bytes() == b""
    r = invoke("check", repo=root)
    assert r.exit_code == 0
    assert "upstream has the whole change" in r.stdout and "patchkit remove worker" in r.stdout
    assert "### Drop candidates" in summary.read_text()


def test_partially_upstreamed_says_which_hunk_went(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    two_hunks = FENCED.replace(
        b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]"
    )
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": two_hunks})
    took_one = WORKER.replace(
        b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]"
    )
    c2 = upstream.commit({"vllm/worker.py": took_one})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and outcomes(doc) == {"worker": "partially-upstreamed"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert len(entry["hunks_upstreamed"]) == 1
    diff = (root / "upstream" / "worker.diff").read_bytes()
    assert b"+        self.stream.synchronize()" in diff and b"non_blocking=False" not in diff
    assert invoke("check", repo=root).exit_code == 0


def test_conflict_continue_and_refusal_while_markers_remain(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    theirs = WORKER.replace(
        b"        for b in blocks:\n", b"        torch.cuda.current_stream().synchronize()\n        for b in blocks:\n"
    )
    c2 = upstream.commit({"vllm/worker.py": theirs})
    before = snapshot(root)
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"worker": "conflict"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    (region,) = entry["conflicts"]
    work = root / doc["work_files"][0]  # type: ignore[index]
    lines = work.read_bytes().split(b"\n")
    assert lines[region["start"] - 1].startswith(b"<<<<<<< ")
    assert lines[region["end"] - 1].startswith(b">>>>>>> ")
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == before
    st = invoke("status", repo=root)
    assert "rebase of vllm in progress" in st.stdout and "markers at lines" in st.stdout
    check = invoke("check", repo=root)
    assert check.exit_code == 0 and "rebase-in-progress" not in check.stdout and "a rebase waits" in check.stdout

    refused = invoke("rebase", "--continue", repo=root)
    assert refused.exit_code == 1
    assert "conflict markers remain" in refused.stderr
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == before

    resolved = theirs.replace(
        b"        torch.cuda.current_stream().synchronize()\n", b"        self.stream.synchronize()\n"
    )
    work.write_bytes(resolved)
    done = invoke("rebase", "--continue", repo=root)
    assert done.exit_code == 0, done.stderr
    assert (root / "patches" / "worker.py").read_bytes() == resolved
    assert not (root / ".patchkit" / "rebase").exists()
    assert invoke("check", repo=root).exit_code == 0


def test_abort_restores_byte_identical(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit(
        {"vllm/worker.py": WORKER.replace(b"        for b in blocks:\n", b"        wait()\n        for b in blocks:\n")}
    )
    before = snapshot(root)
    assert invoke("rebase", "--onto", c2, repo=root).exit_code == 1
    r = invoke("rebase", "--abort", repo=root)
    assert r.exit_code == 0 and "aborted" in r.stdout
    assert snapshot(root) == before
    assert not (root / ".patchkit" / "rebase").exists()
    assert invoke("check", repo=root).exit_code == 0


def test_moved_upstream_follows_the_rename_and_target(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.move("vllm/worker.py", "vllm/v1/worker.py")
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and outcomes(doc) == {"worker": "moved"}
    lock = (root / "lockfile.toml").read_text()
    assert 'path = "vllm/v1/worker.py"' in lock
    assert 'target = "/usr/lib/python3/dist-packages/vllm/v1/worker.py"' in lock
    assert (root / "upstream" / "worker.diff").read_bytes().startswith(b"--- a/vllm/v1/worker.py\n")
    assert invoke("check", repo=root).exit_code == 0


def test_deleted_upstream_needs_a_decision(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/other.py": b"x = 1\n"})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED, "vllm/other.py": b"x = 2\n"})
    c2 = upstream.commit({"vllm/other.py": None})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"worker": "unchanged", "other": "deleted"}
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 1 and "deleted upstream" in r.stderr
    r = invoke("rebase", "--continue", "--drop", "other", repo=root)
    assert r.exit_code == 0, r.stderr
    assert not (root / "patches" / "other.py").exists()
    assert "other" not in (root / "lockfile.toml").read_text()
    assert invoke("check", repo=root).exit_code == 0


def test_a_missing_overlay_stops_the_rebase_only_when_its_merge_needs_it(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/other.py": b"x = 1\n"})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED, "vllm/other.py": b"x = 2\n"})
    (root / "patches" / "other.py").unlink()
    # Upstream deleted the file: nothing to merge, the patch is reported deleted as before.
    c2 = upstream.commit({"vllm/other.py": None})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"worker": "unchanged", "other": "deleted"}
    assert invoke("rebase", "--abort", repo=root).exit_code == 0
    # Upstream kept it: its merge needs the overlay, and the rebase stops on it, writing nothing.
    c3 = upstream.commit({"vllm/other.py": b"x = 1\ny = 0\n"})
    lock = (root / "lockfile.toml").read_bytes()
    r = invoke("rebase", "--onto", c3, repo=root)
    assert r.exit_code == 2
    assert "patches/other.py (patch 'other') is pinned but missing" in r.stderr
    assert (root / "lockfile.toml").read_bytes() == lock


def test_crlf_patch_file_survives(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    crlf = WORKER.replace(b"\n", b"\r\n")
    c1 = upstream.commit({"vllm/worker.py": crlf})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED.replace(b"\n", b"\r\n")})
    c2 = upstream.commit({"vllm/worker.py": crlf.replace(b"import torch\r\n", b"import torch\r\nimport os\r\n")})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and outcomes(doc) == {"worker": "clean"}
    merged = (root / "patches" / "worker.py").read_bytes()
    assert b"import os\r\n" in merged and b"self.stream.synchronize()\r\n" in merged
    assert b"\n" not in merged.replace(b"\r\n", b"")
    assert invoke("check", repo=root).exit_code == 0


def test_binary_upstream_file_refused_clearly(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": b"\x7fELF\x00\x01\x02"})
    before = snapshot(root)
    r = invoke("rebase", "--onto", c2, repo=root)
    assert r.exit_code == 2
    assert "binary" in r.stderr and "Traceback" not in r.stderr
    assert snapshot(root) == before


def test_unreachable_upstream_is_exit_3_and_changes_nothing(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    lock = root / "lockfile.toml"
    lock.write_text(lock.read_text().replace(upstream.url, (tmp_path / "gone").as_uri()))
    assert invoke("sums", repo=root).exit_code == 0
    before = snapshot(root)
    r = invoke("rebase", "--onto", "f" * 40, repo=root)
    assert r.exit_code == 3, r.stderr
    assert r.stderr.startswith("patchkit: error:") and "Traceback" not in r.stderr
    assert snapshot(root) == before


def test_review_flag_when_upstream_edits_the_same_function(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit(
        {"vllm/worker.py": WORKER.replace(b"        return len(blocks)\n", b"        return len(list(blocks))\n")}
    )
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and outcomes(doc) == {"worker": "clean"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert any("Restorer.restore" in flag for flag in entry["review"])


def test_second_rebase_refused_while_one_is_in_progress(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit(
        {"vllm/worker.py": WORKER.replace(b"        for b in blocks:\n", b"        wait()\n        for b in blocks:\n")}
    )
    assert invoke("rebase", "--onto", c2, repo=root).exit_code == 1
    r = invoke("rebase", "--onto", c2, repo=root)
    assert r.exit_code == 1 and "already in progress" in r.stderr


# --------------------------------------------------------------------------- crashes


CRASH_AFTER_FIRST_RENAME = """
import os, signal, sys
from pathlib import Path
import patchkit.store.repo as repo
real = os.replace
count = 0
def replace(*args, **kwargs):
    global count
    result = real(*args, **kwargs)
    count += "src_dir_fd" in kwargs  # a rename the journal lists (not the journal's own atomic write)
    if count == 2:  # two repository files renamed in, the rest not: die mid-transaction
        os.kill(os.getpid(), signal.SIGKILL)
    return result
os.replace = replace
from patchkit.cli import main
sys.argv = ["patchkit", "--repo", sys.argv[1], "rebase", "--onto", sys.argv[2]]
main()
"""


def test_killed_mid_transaction_is_finished_by_the_next_command(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": WORKER.replace(b"import torch\n", b"import torch\nimport os\n")})
    r = subprocess.run(
        [sys.executable, "-c", CRASH_AFTER_FIRST_RENAME, str(root), c2], capture_output=True, check=False
    )
    assert r.returncode == -signal.SIGKILL
    assert journal_place(root).journal.exists()
    check = invoke("check", repo=root)
    assert check.exit_code == 1 and "interrupted" in check.stdout
    st = invoke("status", repo=root)
    assert "finished a write of several files that was interrupted" in st.stdout
    assert invoke("check", repo=root).exit_code == 0
    assert f'commit = "{c2}"' in (root / "lockfile.toml").read_text()


def test_kill_at_any_moment_leaves_old_or_resumable_state(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    """SIGKILL a real `patchkit rebase` at increasing delays; every time the repo checks clean afterwards."""
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": WORKER.replace(b"import torch\n", b"import torch\nimport os\n")})
    old = snapshot(root)
    exe = [sys.executable, "-m", "patchkit", "--repo", str(root)]
    for delay_ms in range(0, 1200, 60):
        proc = subprocess.Popen([*exe, "rebase", "--onto", c2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        subprocess.run([*exe, "status"], capture_output=True, check=True)  # finishes an interrupted write
        result = subprocess.run([*exe, "check"], capture_output=True, text=True, check=False)
        assert result.returncode == 0, (delay_ms, result.stdout)
        now = (root / "lockfile.toml").read_text()
        if f'commit = "{c2}"' in now:
            break  # this run got through: the new state, checked clean above
        assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == old
    # However many runs were killed, the rebase still completes afterwards.
    done = subprocess.run([*exe, "rebase", "--onto", c2], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f'commit = "{c2}"' in (root / "lockfile.toml").read_text()
    assert subprocess.run([*exe, "check"], capture_output=True, check=False).returncode == 0


def test_rebase_from_a_directory_source(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    """--source dir:PATH: the new files come from a plain tree, e.g. an extracted image filesystem."""
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    tree = tmp_path / "site-packages"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "worker.py").write_bytes(WORKER.replace(b"import torch\n", b"import torch\nimport os\n"))
    code, doc = rebase_json(invoke, root, "--source", f"dir:{tree}")
    assert code == 0, doc
    assert outcomes(doc) == {"worker": "clean"}
    lock = (root / "lockfile.toml").read_text()
    assert 'source = "dir"' in lock and f'dir = "{tree}"' in lock and "dir_sha256 = " in lock
    assert invoke("check", repo=root).exit_code == 0
