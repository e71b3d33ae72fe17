"""``patchkit upstream find-base``: ten tags of a real git upstream, an exact match and a near miss."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from patchkit.core import diffs
from tests.conftest import Invoke, git
from tests.rebase.test_overlays import WORKER, Upstream

TARGET = "/usr/lib/python3/dist-packages/vllm/worker.py"


def version(i: int) -> bytes:
    """The upstream file at tag v0.<i>: each release changes one constant and grows one helper."""
    helpers = b"".join(b"\n\ndef helper_%d():\n    return %d\n" % (k, k) for k in range(i))
    return WORKER.replace(b"import torch\n", b"import torch\n\nRELEASE = %d\n" % i) + helpers


def tagged(upstream: Upstream) -> dict[str, str]:
    tags = {}
    for i in range(1, 11):
        commit = upstream.commit({"vllm/worker.py": version(i), "README": b"release %d\n" % i})
        git(upstream.path, "tag", f"v0.{i}")
        tags[f"v0.{i}"] = commit
    return tags


def imported(invoke: Invoke, tmp_path: Path, upstream: Upstream, overlay: bytes, diff: bytes | None) -> Path:
    """A deployment as ``patchkit import`` leaves a hand-kept one: an overlay with no base, maybe a hand diff."""
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    tip = git(upstream.path, "rev-parse", "HEAD").strip()
    assert invoke("upstream", "add", "vllm", "--git", upstream.url, "--commit", tip, repo=root).exit_code == 0
    (root / "patches" / "worker.py").write_bytes(overlay)
    entry = (
        '\n[[patches]]\nname = "worker"\nkind = "overlay"\nfile = "patches/worker.py"\n'
        f'sha256 = "{hashlib.sha256(overlay).hexdigest()}"\ntarget = "{TARGET}"\n\n'
        '[patches.origin]\npath = "vllm/worker.py"\n'
    )
    if diff is not None:
        (root / "patches" / "diffs").mkdir()
        (root / "patches" / "diffs" / "worker.diff").write_bytes(diff)
        entry += (
            '\n[[diffs]]\nfile = "patches/diffs/worker.diff"\n'
            f'sha256 = "{hashlib.sha256(diff).hexdigest()}"\npatches = ["worker"]\n'
        )
    with (root / "lockfile.toml").open("a") as f:
        f.write(entry)
    assert invoke("sums", repo=root).exit_code == 0
    git(root, "init", "-q")
    return root


def fenced(data: bytes) -> bytes:
    return data.replace(b"        for b in blocks:\n", b"        self.stream.synchronize()\n        for b in blocks:\n")


def find(invoke: Invoke, root: Path, *args: str) -> tuple[int, dict[str, object]]:
    r = invoke("upstream", "find-base", "--format", "json", *args, repo=root)
    assert r.stdout, r.stderr
    return r.exit_code, json.loads(r.stdout)


def test_exact_base_among_ten_tags(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    tags = tagged(upstream)
    overlay = fenced(version(6))
    hand = diffs.make(version(6), overlay, "a/vllm/worker.py", "b/vllm/worker.py")
    root = imported(invoke, tmp_path, upstream, overlay, hand)
    before = (root / "lockfile.toml").read_bytes()
    code, doc = find(invoke, root, "--tags", "v0.*")
    assert code == 0
    (found,) = doc["found"]  # type: ignore[misc]
    assert found["best"] == "v0.6" and found["exact"] is True
    assert found["verdict"] == "v0.6: exact, the base its diff rebuilds"
    tried = {t["candidate"]: (t["ref"], t["lines_differing"], t["exact"]) for t in found["tried"]}
    assert len(tried) == 10 and tried["v0.6"] == (tags["v0.6"], 0, True)
    # The evidence: every other tag's distance: the constant (2 lines), the fence (1), 4 lines a helper.
    assert [tried[f"v0.{i}"][1] for i in range(1, 11)] == [23, 19, 15, 11, 7, 0, 7, 11, 15, 19]
    assert (root / "lockfile.toml").read_bytes() == before  # nothing recorded without --record

    r = invoke("upstream", "find-base", "--tags", "v0.*", "--record", repo=root)
    assert r.exit_code == 0, r.stderr
    assert "patches[worker].base: unknown -> vllm v0.6 (vllm/worker.py)" in r.stdout
    lock = (root / "lockfile.toml").read_text()
    assert f'commit = "{tags["v0.6"]}"' in lock
    assert (root / "upstream" / "worker.diff").read_bytes() == diffs.canonical_diff(
        version(6), overlay, "vllm/worker.py"
    )  # type: ignore[arg-type]


def test_near_miss_is_reported_as_one(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    tagged(upstream)
    # Copied from v0.4, then a local edit of the constant nobody recorded; no hand diff to rebuild the base.
    overlay = fenced(version(4)).replace(b"RELEASE = 4\n", b"RELEASE = 4  # local\n")
    root = imported(invoke, tmp_path, upstream, overlay, None)
    code, doc = find(invoke, root, "--tags", "v0.*")
    assert code == 1
    (found,) = doc["found"]  # type: ignore[misc]
    assert found["best"] == "v0.4" and found["exact"] is False
    assert found["verdict"] == "v0.4: nearest, 3 lines differ; no exact match (it has no diff to rebuild its base)"
    r = invoke("upstream", "find-base", "--tags", "v0.*", repo=root)
    assert r.exit_code == 1
    assert "  v0.4   " in r.stdout and "3 lines differ" in r.stdout
    assert "nothing recorded; pin what was found with --record" in r.stdout
    before = (root / "lockfile.toml").read_bytes()
    invoke("upstream", "find-base", "--tags", "v0.*", "--record", repo=root)
    assert (root / "lockfile.toml").read_bytes() == before  # a near miss is pinned only with --nearest
    r = invoke("upstream", "find-base", "--tags", "v0.*", "--record", "--nearest", repo=root)
    assert "patches[worker].base: unknown -> vllm v0.4" in r.stdout


def test_a_stale_hand_diff_is_not_an_exact_match(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    tagged(upstream)
    overlay = fenced(version(3))
    # The hand diff was written against a file no tag has (an unreleased commit): nearest, said so.
    other = version(3).replace(b"RELEASE = 3\n", b"RELEASE = 3\nDEBUG = False\n")
    hand = diffs.make(other, overlay, "a/vllm/worker.py", "b/vllm/worker.py")
    root = imported(invoke, tmp_path, upstream, overlay, hand)
    code, doc = find(invoke, root, "worker", "--candidate", "v0.2", "--candidate", "v0.3")
    (found,) = doc["found"]  # type: ignore[misc]
    assert code == 1 and [t["candidate"] for t in found["tried"]] == ["v0.2", "v0.3"]
    assert (
        found["verdict"] == "v0.3: nearest, 1 line differ; no exact match (its diff rebuilds a base no candidate has)"
    )


def test_a_pinned_base_is_matched_by_its_hash(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    # After normalize the hand-kept diffs are gone; the pinned base sha256 still names the candidate's file.
    tagged(upstream)
    overlay = fenced(version(5))
    hand = diffs.make(version(5), overlay, "a/vllm/worker.py", "b/vllm/worker.py")
    root = imported(invoke, tmp_path, upstream, overlay, hand)
    assert invoke("upstream", "find-base", "--tags", "v0.*", "--record", repo=root).exit_code == 0
    lock = (root / "lockfile.toml").read_text()
    head, _, _ = lock.partition("\n[[diffs]]")
    (root / "lockfile.toml").write_text(head + "\n")
    (root / "patches" / "diffs" / "worker.diff").unlink()
    code, doc = find(invoke, root, "worker", "--candidate", "v0.4", "--candidate", "v0.5", "--candidate", "v0.6")
    (found,) = doc["found"]  # type: ignore[misc]
    assert code == 0 and found["exact"] is True and found["best"] == "v0.5"
    assert found["verdict"] == "v0.5: exact, the pinned base sha256"
