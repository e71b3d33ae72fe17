"""Review flags of clean merges: one line per function both sides changed, none for identical deletions."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Invoke
from tests.rebase.test_overlays import Upstream, make_deploy, outcomes, rebase_json

BASE = b"""import torch


class Restorer:
    def restore(self, blocks):
        count = 0
        for b in blocks:
            self.copy(b)
            count += 1
        legacy_sync(blocks)
        legacy_flush(blocks)
        log_restore(count)
        stats = collect(blocks)
        stats.flush()
        report(stats)
        return count

    def copy(self, block):
        block.to("cuda", non_blocking=True)
"""
# The patch fences the copy loop and drops the two legacy calls.
PATCHED = BASE.replace(b"        count = 0\n", b"        count = 0\n        self.stream.synchronize()\n").replace(
    b"        legacy_sync(blocks)\n        legacy_flush(blocks)\n", b""
)


def review(invoke: Invoke, tmp_path: Path, upstream: Upstream, theirs: bytes) -> tuple[str, list[str]]:
    c1 = upstream.commit({"vllm/worker.py": BASE})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"vllm/worker.py": theirs})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0
    (entry,) = doc["patches"]  # type: ignore[misc]
    return outcomes(doc)["worker"], entry["review"]


def test_one_line_names_the_function_both_sides_changed(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    theirs = BASE.replace(b"        report(stats)\n", b"        report(stats, verbose=True)\n")
    outcome, flags = review(invoke, tmp_path, upstream, theirs)
    assert outcome == "clean"
    assert flags == [
        "Restorer.restore: changed on both sides (upstream hunk @@ -12,7 +12,7 @@; patch hunk @@ -4,11 +4,10 @@): "
        "check that the two still fit together"
    ]


def test_upstream_deleting_only_what_the_patch_deletes_is_not_flagged(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    theirs = BASE.replace(b"        legacy_sync(blocks)\n        legacy_flush(blocks)\n", b"")
    outcome, flags = review(invoke, tmp_path, upstream, theirs)
    assert outcome == "clean"  # the hunk keeps its fence; upstream took only its deletion
    assert flags == []


def test_a_change_in_another_method_is_not_flagged(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    theirs = BASE.replace(b'block.to("cuda", non_blocking=True)', b'block.to("cuda", non_blocking=False)')
    outcome, flags = review(invoke, tmp_path, upstream, theirs)
    assert outcome == "clean" and flags == []
