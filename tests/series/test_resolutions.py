"""A series conflict resolved once at --continue is resolved as recorded when it comes back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import Invoke
from tests.series.queue import Queue, commit
from tests.series.test_rebase import MXFP4_V2, _bump

WORK = ".patchkit/series-rebase/work/vllm-48303-mxfp4-flashinfer-cutlass/vllm/model_executor/layers/quant/mxfp4.py"
RESOLVED = MXFP4_V2.replace(
    b'    return "marlin"\n',
    b'    if device.has_flashinfer:\n        return "flashinfer-cutlass"\n    return "marlin"\n',
)
PATCH = "patches/vllm/vllm-48303-mxfp4-flashinfer-cutlass.patch"


def _resolved_once(queue: Queue, invoke: Invoke, tmp_path: Path) -> tuple[Path, bytes]:
    """The series rebased with its conflict resolved, then put back as it was but for the record; and the patch."""
    before = tmp_path / "before"
    shutil.copytree(queue.root, before, symlinks=True)
    _bump(queue)
    assert invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root).exit_code == 1
    (queue.root / WORK).write_bytes(RESOLVED)
    done = invoke("rebase", "--continue", repo=queue.root)
    assert done.exit_code == 0, done.stdout + done.stderr
    (record,) = (queue.root / "resolutions").iterdir()
    assert f"wrote resolutions/{record.name}" in done.stdout
    first, kept = (queue.root / PATCH).read_bytes(), record.read_bytes()
    shutil.rmtree(queue.root)
    shutil.copytree(before, queue.root, symlinks=True)
    record.parent.mkdir()
    record.write_bytes(kept)
    return record, first


def test_a_series_conflict_is_recorded_then_replayed(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    record, first = _resolved_once(queue, invoke, tmp_path)
    later = commit(queue.vllm, {"docs/later.md": b"later\n"}, "Docs (#12345)")
    run = invoke("rebase", "--series", "vllm", "--onto", later, "--format", "json", repo=queue.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    (entry, *_) = json.loads(run.stdout)["patches"]
    assert entry["outcome"] == "clean"
    assert entry["resolved_as_recorded"] == {"vllm/model_executor/layers/quant/mxfp4.py": [record.stem]}
    assert (queue.root / PATCH).read_bytes() == first and b"<<<<<<<" not in first


def test_no_remembered_leaves_the_series_conflict(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    _resolved_once(queue, invoke, tmp_path)
    run = invoke("rebase", "--series", "vllm", "--onto", "main", "--no-remembered", repo=queue.root)
    assert run.exit_code == 1 and "resolved as recorded" not in run.stdout
    on = invoke("rebase", "--abort", repo=queue.root)
    assert on.exit_code == 0
    run = invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root)
    assert run.exit_code == 0 and "resolved as recorded" in run.stdout, run.stdout + run.stderr


def test_a_hand_edited_series_record_is_refused(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    record, _ = _resolved_once(queue, invoke, tmp_path)
    doc = json.loads(record.read_text())
    doc["resolution"] = ['    return "anything"\n']
    record.write_text(json.dumps(doc))
    r = invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root)
    assert r.exit_code == 2 and f"resolutions/{record.name}" in r.stderr and "hand-edited" in r.stderr
    assert not (queue.root / ".patchkit" / "series-rebase").exists()
