"""Interdiffs: the old patch against the new one, pure moves suppressed, a shrinking hunk count said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core import diffs
from patchkit.trust.interdiff import compare
from tests.conftest import Invoke
from tests.rebase.test_overlays import FENCED, WORKER, Upstream, make_deploy, outcomes, rebase_json

FILLER = b"".join(b"def f%d():\n    return %d\n\n\n" % (i, i) for i in range(8))


def diff(old: bytes, new: bytes) -> bytes:
    return diffs.make(old, new, "a/w.py", "b/w.py")


def test_a_pure_move_is_suppressed() -> None:
    base = WORKER + FILLER
    old = diff(base, FENCED + FILLER)
    moved = b"import os\nimport sys\n" + base  # upstream added lines above: new line numbers, same change
    new = diff(moved, b"import os\nimport sys\n" + FENCED + FILLER)
    found = compare(old, new)
    assert found is not None and found.changes == () and found.empty


def test_a_changed_line_is_shown_exactly() -> None:
    base = WORKER + FILLER
    old = diff(base, FENCED + FILLER)
    changed = FENCED.replace(b"self.stream.synchronize()", b"self.stream.synchronize(wait=True)")
    found = compare(old, diff(base, changed + FILLER))
    assert found is not None
    assert found.lines() == [
        "1 hunk -> 1; 1 stretch changed",
        "@@ old -6,6 +6,7 / new -6,6 +6,7 @@",
        "-+        self.stream.synchronize()",
        "++        self.stream.synchronize(wait=True)",
    ]


def test_hunks_merged_are_not_called_a_shrink() -> None:
    base = b"".join(b"line %d\n" % i for i in range(40))
    ours = base.replace(b"line 10\n", b"line 10 patched\n").replace(b"line 18\n", b"line 18 patched\n")
    old = diff(base, ours)
    # Upstream inserted nothing, but the two changes now sit close: the canonical diff makes one hunk.
    theirs = base.replace(b"line 12\nline 13\nline 14\nline 15\n", b"")
    new = diff(theirs, ours.replace(b"line 12\nline 13\nline 14\nline 15\n", b""))
    found = compare(old, new)
    assert found is not None and (found.old_hunks, found.new_hunks) == (2, 1)
    assert found.all_kept and found.headline() == "2 hunks -> 1 (every change kept: hunks merged)"


def test_rebase_shows_the_hunk_that_went_upstream(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    two_hunks = FENCED.replace(
        b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]"
    )
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": two_hunks})
    took_one = WORKER.replace(
        b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]"
    )
    c2 = upstream.commit({"vllm/worker.py": took_one})
    summary = tmp_path / "summary.md"
    code, doc = rebase_json(invoke, root, "--onto", c2, "--summary", str(summary))
    assert code == 0 and outcomes(doc) == {"worker": "partially-upstreamed"}
    lines = doc["interdiffs"]["worker"]["lines"]  # type: ignore[index]
    assert lines == [
        "2 hunks -> 1: the patch shrank (part of it went upstream, or was lost)",
        "@@ old -15,4 +16,4 / new - @@",
        "--    return [b.cpu() for b in blocks]",
        "-+    return [b.cpu(non_blocking=False) for b in blocks]",
    ]
    text = summary.read_text()
    assert "- `worker`: 2 hunks -> 1: the patch shrank" in text
    assert "  --    return [b.cpu() for b in blocks]\n" in text


def test_rebase_text_shows_a_resolution_that_changed_the_patch(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    theirs = WORKER.replace(
        b"        for b in blocks:\n", b"        torch.cuda.current_stream().synchronize()\n        for b in blocks:\n"
    )
    c2 = upstream.commit({"vllm/worker.py": theirs})
    code, _ = rebase_json(invoke, root, "--onto", c2)
    assert code == 1
    work = root / ".patchkit/rebase/conflicts/worker/worker.py"
    work.write_bytes(theirs.replace(b"torch.cuda.current_stream()", b"self.stream"))
    summary = tmp_path / "summary.md"
    done = invoke("rebase", "--continue", "--summary", str(summary), repo=root)
    assert done.exit_code == 0, done.stderr
    text = summary.read_text()
    start = text.index("- `worker`: 1 hunk -> 1; 1 stretch changed")
    assert text[start:].split("\n")[2:7] == [
        "  ```diff",
        "  @@ old -6,6 +6,7 / new -6,7 +6,7 @@",
        "  +-        torch.cuda.current_stream().synchronize()",
        "   +        self.stream.synchronize()",
        "  ```",
    ]


def test_audit_since_a_revision_shows_the_interdiff(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    two_hunks = FENCED.replace(
        b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]"
    )
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": two_hunks})
    took_one = WORKER.replace(
        b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]"
    )
    c2 = upstream.commit({"vllm/worker.py": took_one})
    assert rebase_json(invoke, root, "--onto", c2)[0] == 0
    report = tmp_path / "report.md"
    r = invoke("audit", "-o", str(report), "--since", "HEAD", repo=root)
    assert r.exit_code == 0, r.stderr
    text = report.read_text()
    assert "What changed in the patch: 2 hunks -> 1: the patch shrank" in text
    assert "--    return [b.cpu() for b in blocks]\n-+    return [b.cpu(non_blocking=False) for b in blocks]\n" in text
    doc = json.loads(invoke("audit", "--format", "json", "--since", "HEAD", repo=root).stdout)
    (worker,) = doc["patches"]
    assert worker["interdiff"][0] == "2 hunks -> 1: the patch shrank (part of it went upstream, or was lost)"
    html = invoke("audit", "--format", "html", "--since", "HEAD", repo=root).stdout
    assert "What changed in the patch" in html and "-+    return [b.cpu(non_blocking=False) for b in blocks]" in html
    # Without --since, no interdiff.
    assert "What changed in the patch" not in invoke("audit", "--format", "markdown", repo=root).stdout


@pytest.mark.parametrize("rev", ["nosuchrev", "HEAD~5", "-p", "HEAD:lockfile.toml", "0" * 40])
def test_audit_since_a_revision_the_repository_lacks_is_refused(
    invoke: Invoke, tmp_path: Path, upstream: Upstream, rev: str
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    report = tmp_path / "report.md"
    r = invoke("audit", "-o", str(report), "--since", rev, repo=root)
    assert r.exit_code == 1, r.stdout + r.stderr
    assert f"--since {rev}: no such commit" in r.stderr and "Traceback" not in r.stderr
    assert not report.exists()
    assert "new since" not in r.stdout
