"""Remembered resolutions: a conflict resolved at --continue is resolved the same way when it comes back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Invoke, git, snapshot

from patchkit.rebase import resolutions
from patchkit.rebase.merge import rebase_file
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy, rebase_json

FENCE = b"        for b in blocks:\n"
PATCHED = WORKER.replace(FENCE, b"        self.stream.synchronize()\n" + FENCE)
THEIRS = WORKER.replace(FENCE, b"        torch.cuda.current_stream().synchronize()\n" + FENCE)
RESOLVED = WORKER.replace(FENCE, b"        self.stream.wait_stream(torch.cuda.current_stream())\n" + FENCE)


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


def _resolve_once(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> tuple[Path, Path]:
    """A deployment whose rebase onto THEIRS conflicted and was resolved (RESOLVED), then undone but the record.

    As when a nightly's bump was resolved but not merged, and the next nightly is tried from the same base.
    """
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"vllm/worker.py": THEIRS}, "Sync (#22222)")
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1
    work = root / doc["work_files"][0]  # type: ignore[index]
    work.write_bytes(RESOLVED)
    done = invoke("rebase", "--continue", repo=root)
    assert done.exit_code == 0, done.stderr
    (record,) = (root / "resolutions").iterdir()
    assert f"wrote resolutions/{record.name}" in done.stdout
    saved = record.read_bytes()
    git(root, "checkout", "-q", "--", ".")
    git(root, "clean", "-fdq")
    record.parent.mkdir()
    record.write_bytes(saved)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "keep the resolution")
    return root, record


def test_the_same_conflict_in_a_later_bump_is_resolved_as_recorded(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    root, record = _resolve_once(invoke, tmp_path, upstream)
    rec_id = record.stem
    later = THEIRS.replace(b"return [b.cpu() for b in blocks]", b"return [b.to('cpu') for b in blocks]")
    c3 = upstream.commit({"vllm/worker.py": later}, "Offload (#33333)")
    summary = tmp_path / "summary.md"
    code, doc = rebase_json(invoke, root, "--onto", c3, "--summary", str(summary))
    assert code == 0, doc
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert entry["resolved_as_recorded"] == [rec_id] and entry["outcome"] == "clean"
    assert (root / "patches" / "worker.py").read_bytes() == RESOLVED.replace(
        b"return [b.cpu() for b in blocks]", b"return [b.to('cpu') for b in blocks]"
    )
    assert b"<<<<<<<" not in (root / "patches" / "worker.py").read_bytes()
    assert f"resolved as recorded (`{rec_id[:12]}`)" in summary.read_text()
    assert invoke("check", repo=root).exit_code == 0


def test_the_replay_is_said_in_the_table_and_can_be_turned_off(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    root, record = _resolve_once(invoke, tmp_path, upstream)
    c3 = upstream.commit({"vllm/other.py": b"x = 1\n"})
    off = invoke("rebase", "--onto", c3, "--no-remembered", repo=root)
    assert off.exit_code == 1 and "resolved as recorded" not in off.stdout and "conflict" in off.stdout
    assert invoke("rebase", "--abort", repo=root).exit_code == 0
    on = invoke("rebase", "--onto", c3, repo=root)
    assert on.exit_code == 0, on.stdout + on.stderr
    assert f"resolved as recorded ({record.stem[:12]})" in on.stdout


def test_a_different_conflict_is_not_replayed(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    root, _ = _resolve_once(invoke, tmp_path, upstream)
    other = WORKER.replace(FENCE, b"        torch.cuda.synchronize()\n" + FENCE)
    c3 = upstream.commit({"vllm/worker.py": other}, "Another sync (#44444)")
    code, doc = rebase_json(invoke, root, "--onto", c3)
    assert code == 1
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert entry["outcome"] == "conflict" and entry["resolved_as_recorded"] == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda doc: {**doc, "resolution": ["        os.system('rm -rf /')\n"]},
        lambda doc: {**doc, "sides": [doc["sides"][1], doc["sides"][0]]},
        lambda doc: {k: v for k, v in doc.items() if k != "sha256"},
        lambda doc: "not json",
    ],
    ids=["hand-edited-resolution", "swapped-sides", "no-sha256", "not-json"],
)
def test_an_edited_or_corrupt_record_is_refused(invoke: Invoke, tmp_path: Path, upstream: Upstream, damage) -> None:  # type: ignore[no-untyped-def]
    root, record = _resolve_once(invoke, tmp_path, upstream)
    bad = damage(json.loads(record.read_text()))
    record.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    c3 = upstream.commit({"vllm/other.py": b"x = 1\n"})
    before = snapshot(root)
    r = invoke("rebase", "--onto", c3, repo=root)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert f"resolutions/{record.name}" in r.stderr and "not trusted" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr
    assert snapshot(root) == before
    assert invoke("rebase", "--onto", c3, "--no-remembered", repo=root).exit_code == 1


def test_a_replayed_resolution_still_goes_through_the_semantic_checks(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"vllm/worker.py": THEIRS})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    work = root / doc["work_files"][0]  # type: ignore[index]
    work.write_bytes(WORKER.replace(FENCE, b"        fence_everything()\n" + FENCE))
    refused = invoke("rebase", "--continue", repo=root)
    assert refused.exit_code == 1 and "fence_everything" in refused.stderr
    done = invoke("rebase", "--continue", "--accept-broken", "worker", "--reason", "defined at runtime", repo=root)
    assert done.exit_code == 0, done.stderr
    git(root, "add", "resolutions")
    git(root, "commit", "-qm", "keep the resolution")
    saved = {p.name: p.read_bytes() for p in (root / "resolutions").iterdir()}
    git(root, "reset", "-q", "--hard", "HEAD~1")
    (root / "resolutions").mkdir()
    for name, data in saved.items():
        (root / "resolutions" / name).write_bytes(data)
    c3 = upstream.commit({"vllm/other.py": b"x = 1\n"})
    code, doc = rebase_json(invoke, root, "--onto", c3)
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert code == 1 and entry["outcome"] == "broken" and entry["resolved_as_recorded"], json.dumps(doc)


def test_identity_is_the_two_sides_sorted_as_in_git_rerere() -> None:
    assert resolutions.conflict_id(b"a\n", b"b\n") == resolutions.conflict_id(b"b\n", b"a\n")
    assert resolutions.conflict_id(b"a\n", b"b\n") != resolutions.conflict_id(b"a\n", b"c\n")
    merge = rebase_file(WORKER, PATCHED, THEIRS)
    (c,) = merge.conflicts
    assert resolutions.sides(c, PATCHED, THEIRS) == (
        b"        self.stream.synchronize()\n",
        b"        torch.cuda.current_stream().synchronize()\n",
    )
    assert resolutions.resolution_of(merge.merged, RESOLVED, c) == (
        b"        self.stream.wait_stream(torch.cuda.current_stream())\n"
    )
