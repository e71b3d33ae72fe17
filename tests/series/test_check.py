"""``patchkit check`` on patch series: parses, order, pins, and applying at the pinned commit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import Invoke
from tests.series.queue import MXFP4_V1, Queue, clone_tree, commit


def _findings(invoke: Invoke, root: Path) -> tuple[int, list[dict[str, object]]]:
    run = invoke("check", "--format", "json", repo=root)
    return run.exit_code, [f for f in json.loads(run.stdout)["findings"] if str(f["code"]).startswith("series")]


def test_a_clean_queue_passes_and_every_profile_applies(queue: Queue, invoke: Invoke) -> None:
    run = invoke("check", repo=queue.root)
    assert run.exit_code == 0, run.stdout
    assert run.stdout == "check: ok: 6 files hashed, 0 diffs verified, 0 errors\n"


def test_the_series_file_order_must_match_the_lockfile(queue: Queue, invoke: Invoke) -> None:
    series = queue.root / "patches/vllm/series"
    lines = series.read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    series.write_text("\n".join(lines) + "\n")
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 1
    assert found == [
        {
            "code": "series-order",
            "severity": "error",
            "file": "patches/vllm/series",
            "line": None,
            "field": None,
            "message": "the series file and the lockfile disagree on the order of series 'vllm': entry 1 is "
            "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch, the lockfile's patch 1 of series 'vllm' is "
            "patches/vllm/vllm-48303-mxfp4-flashinfer-cutlass.patch",
            "fix": "list the patches in patches/vllm/series in the order of [[series.vllm.patches]] (or reorder "
            "those), then patchkit lock",
        }
    ]


def test_a_series_made_for_another_commit_than_the_upstream_pin(queue: Queue, invoke: Invoke) -> None:
    c2 = commit(queue.vllm, {"vllm/__init__.py": b'__version__ = "0.26.1"\n'}, "0.26.1")
    text = (queue.root / "lockfile.toml").read_text()
    head, _, rest = text.partition("[upstreams.vllm]")
    (queue.root / "lockfile.toml").write_text(head + "[upstreams.vllm]" + rest.replace(queue.vllm_c1, c2, 1))
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 1
    assert [(f["code"], f["field"], f["message"], f["fix"]) for f in found] == [
        (
            "series-pin",
            "series.vllm.commit",
            f"series 'vllm' applies to {queue.vllm_c1[:12]}, but upstream 'vllm' is pinned at {c2[:12]}: the image "
            "would carry patches made for another commit",
            f"patchkit rebase --series vllm --onto {c2}",
        )
    ]
    line = found[0]["line"]
    assert isinstance(line, int)
    assert (queue.root / "lockfile.toml").read_text().splitlines()[line - 1] == f'commit = "{queue.vllm_c1}"'


def test_a_series_that_no_longer_applies_at_its_commit(queue: Queue, invoke: Invoke) -> None:
    # The upstream history was rewritten under the pin's name: the series' commit now has another mxfp4.py.
    (queue.vllm / "vllm/model_executor/layers/quant/mxfp4.py").write_bytes(MXFP4_V1.replace(b'"aiter"', b'"ck"'))
    new = commit(queue.vllm, {}, "ck backend")
    text = (queue.root / "lockfile.toml").read_text().replace(queue.vllm_c1, new)
    (queue.root / "lockfile.toml").write_text(text)
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 1
    assert [(f["code"], f["file"], f["message"]) for f in found] == [
        (
            "series-apply",
            "patches/vllm/vllm-48303-mxfp4-flashinfer-cutlass.patch",
            "series 'vllm' (profile full): patch 'vllm-48303-mxfp4-flashinfer-cutlass' does not apply to "
            "vllm/model_executor/layers/quant/mxfp4.py at the pinned commit: line 8 of the file does not match the "
            "hunk (expected b'        return \"aiter\"\\n', found b'        return \"ck\"\\n')",
        )
    ]
    patch = (queue.root / str(found[0]["file"])).read_bytes().splitlines()
    assert patch[int(str(found[0]["line"])) - 1] == b"@@ -6,6 +6,8 @@ import torch"


def test_a_binary_patch_is_refused_clearly(queue: Queue, invoke: Invoke) -> None:
    p = queue.root / "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch"
    binary = (
        b"diff --git a/vllm/_C.so b/vllm/_C.so\nindex 4f3c2a1..9b8e7d6 100755\nGIT binary patch\nliteral 4\n"
        b"LcmZQzU|;|M00aO5\n\nliteral 4\nLcmZQzWMKdR00jU8\n\n"
    )
    data = p.read_bytes()
    at = data.index(b"diff --git")
    p.write_bytes(data[:at] + binary + data[at:])
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 1
    line = data[:at].count(b"\n") + 1
    assert found == [
        {
            "code": "series-parse",
            "severity": "error",
            "file": "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch",
            "line": line,
            "field": None,
            "message": "patch 'vllm-48512-mxfp4-cutlass-env': changes the binary file 'vllm/_C.so' (a binary hunk); "
            "patchkit applies text patches only",
            "fix": "ship the file as an artifact pinned by sha256 ([[artifacts]]), or drop it from the patch",
        }
    ]


def test_a_hunk_count_edited_by_hand_is_reported_at_its_line(queue: Queue, invoke: Invoke) -> None:
    p = queue.root / "patches/flashinfer/flashinfer-1520-jit-cache-env.patch"
    data = p.read_bytes()
    p.write_bytes(data.replace(b"@@ -1,7 +1,7 @@", b"@@ -1,8 +1,7 @@", 1))
    assert b"@@ -1,8 +1,7 @@" in p.read_bytes()
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 1
    assert [(f["code"], f["file"], f["line"]) for f in found] == [
        ("series-parse", "patches/flashinfer/flashinfer-1520-jit-cache-env.patch", _line_of(p, b"@@ -1,8 +1,7 @@"))
    ]
    assert "hunk declares 8 old / 7 new lines" in str(found[0]["message"])


def _line_of(path: Path, needle: bytes) -> int:
    return next(i for i, line in enumerate(path.read_bytes().splitlines(), 1) if line.startswith(needle))


def test_an_unpinned_patch_file_is_an_orphan_and_an_edited_one_a_mismatch(queue: Queue, invoke: Invoke) -> None:
    (queue.root / "patches/vllm/vllm-49999-extra.patch").write_bytes(b"")
    p = queue.root / "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch"
    p.write_bytes(p.read_bytes() + b"\n")
    run = invoke("check", "--format", "json", repo=queue.root)
    found = {(f["code"], f["file"], f["field"]) for f in json.loads(run.stdout)["findings"]}
    assert ("orphan", "patches/vllm/vllm-49999-extra.patch", None) in found
    assert ("hash-mismatch", "lockfile.toml", "series.vllm.patches[1].sha256") in found


def test_an_offset_at_the_pinned_commit_is_a_note_not_an_error(queue: Queue, invoke: Invoke) -> None:
    header = b"# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: vLLM\n"
    new = commit(queue.vllm, {"vllm/model_executor/layers/quant/mxfp4.py": header + MXFP4_V1}, "license headers")
    (queue.root / "lockfile.toml").write_text((queue.root / "lockfile.toml").read_text().replace(queue.vllm_c1, new))
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 0
    assert [(f["code"], f["severity"], f["file"], f["message"]) for f in found] == [
        (
            "series-offset",
            "note",
            "patches/vllm/vllm-48303-mxfp4-flashinfer-cutlass.patch",
            "patch 'vllm-48303-mxfp4-flashinfer-cutlass' applies to vllm/model_executor/layers/quant/mxfp4.py 2 "
            "lines away from its hunk headers",
        )
    ]


def test_a_wheel_like_upstream_tree_notes_the_files_it_does_not_carry(queue: Queue, invoke: Invoke) -> None:
    site = queue.root.parent / "site-packages"
    clone_tree(queue.flashinfer, queue.fi_c1, site)
    clone_tree(queue.vllm, queue.vllm_c1, queue.root.parent / "src")
    shutil.copytree(queue.root.parent / "src/vllm", site / "vllm")
    text = (queue.root / "lockfile.toml").read_text()
    head, _, rest = text.partition("[upstreams.vllm]\n")
    rest = rest.split("\n\n", 1)[1]
    (queue.root / "lockfile.toml").write_text(head + f'[upstreams.vllm]\nsource = "dir"\ndir = "{site}"\n\n' + rest)
    assert invoke("lock", repo=queue.root).exit_code == 0
    code, found = _findings(invoke, queue.root)
    assert code == 0, found
    assert sorted((f["code"], f["message"]) for f in found) == [
        (
            "series-absent",
            "patch 'vllm-48303-mxfp4-flashinfer-cutlass' changes requirements/cuda.txt (modify), which the upstream "
            "tree does not carry; apply skips it",
        ),
        (
            "series-absent",
            "patch 'vllm-48303-mxfp4-flashinfer-cutlass' changes tests/quant/test_mxfp4.py (modify), which the "
            "upstream tree does not carry; apply skips it",
        ),
    ]
