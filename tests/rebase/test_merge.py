from __future__ import annotations

import random
import time
from typing import Any

import pytest

from patchkit.core import diffs
from patchkit.core.diffs import split_lines
from patchkit.errors import EXIT_BAD_INPUT, BadInput
from patchkit.rebase.merge import (
    BASE_MARKER,
    OURS_MARKER,
    SEPARATOR,
    THEIRS_MARKER,
    BinaryFileError,
    Conflict,
    LineRange,
    MergeResult,
    Outcome,
    conflict_markers_remain,
    rebase_file,
    rebase_files,
)

# A vLLM-like KV offloading worker. Line numbers used below: 30 `def restore_blocks`,
# 31 its docstring, 34 the restore copy, 35 its logger.debug, 37 `def offload_blocks`,
# 42 `self.stream.synchronize()`, 45 `def make_worker`, 47 its return.
BASE = b'''"""CPU<->GPU KV block transfers for the offloading worker."""

import torch

from vllm.logger import init_logger

logger = init_logger(__name__)


class CpuGpuBuffers:
    """Pinned CPU buffers that mirror GPU KV blocks."""

    def __init__(self, num_blocks: int, block_bytes: int) -> None:
        self.num_blocks = num_blocks
        self.block_bytes = block_bytes
        self.cpu = torch.empty((num_blocks, block_bytes), dtype=torch.uint8, pin_memory=True)

    def size(self) -> int:
        return self.num_blocks * self.block_bytes


class GpuWorker:
    """Moves KV blocks between the GPU cache and pinned CPU memory."""

    def __init__(self, buffers: CpuGpuBuffers, gpu_cache: torch.Tensor) -> None:
        self.buffers = buffers
        self.gpu_cache = gpu_cache
        self.stream = torch.cuda.Stream()

    def restore_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy CPU blocks back into the GPU KV cache."""
        with torch.cuda.stream(self.stream):
            for s, d in zip(src, dst):
                self.gpu_cache[d].copy_(self.buffers.cpu[s], non_blocking=True)
        logger.debug("restored %d blocks", len(src))

    def offload_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy GPU blocks out to pinned CPU memory."""
        with torch.cuda.stream(self.stream):
            for s, d in zip(src, dst):
                self.buffers.cpu[d].copy_(self.gpu_cache[s], non_blocking=True)
        self.stream.synchronize()


def make_worker(num_blocks: int, block_bytes: int, gpu_cache: torch.Tensor) -> GpuWorker:
    buffers = CpuGpuBuffers(num_blocks, block_bytes)
    return GpuWorker(buffers, gpu_cache)
'''

RESTORE_DOC = b'        """Copy CPU blocks back into the GPU KV cache."""\n'
FENCE = (
    b"        # Restores must not overtake compute still reading these blocks (vllm#47282).\n"
    b"        self.stream.wait_stream(torch.cuda.current_stream())\n"
)
OFFLOAD_SYNC = b"        self.stream.synchronize()\n"
OFFLOAD_EVENT = b"        torch.cuda.current_stream().wait_stream(self.stream)\n"
MAKE_RETURN = b"    return GpuWorker(buffers, gpu_cache)\n"
MAKE_RETURN_NEW = (
    b'    worker = GpuWorker(buffers, gpu_cache)\n    logger.info("KV offload worker ready")\n    return worker\n'
)
RESTORE_LOG = b'logger.debug("restored %d blocks", len(src))'


def edit(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, old
    return data.replace(old, new)


def fenced(data: bytes) -> bytes:
    """The patch vllm#47291 proposes: fence the restore behind in-flight compute."""
    return edit(data, RESTORE_DOC, RESTORE_DOC + FENCE)


def headers(old: bytes, new: bytes) -> list[str]:
    """The hunk headers of patchkit's own diff, as a reviewer sees them in upstream/."""
    made = diffs.make(old, new, "a/f", "b/f")
    return [line.decode() for line in made.splitlines() if line.startswith(b"@@")]


def test_outcome_values_are_the_issue_words() -> None:
    assert [o.value for o in Outcome] == [
        "clean",
        "conflict",
        "upstreamed",
        "partially-upstreamed",
        "unchanged",
        "moved",
        "deleted",
        "broken",
    ]


def test_clean_merge_with_upstream_changes_elsewhere() -> None:
    ours = fenced(BASE)
    theirs = edit(BASE, MAKE_RETURN, MAKE_RETURN_NEW)
    result = rebase_file(BASE, ours, theirs, path="vllm/v1/kv_offload/cpu/gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == fenced(theirs)
    assert result.conflicts == ()
    assert result.hunks_upstreamed == result.hunks_partly_upstreamed == ()
    (hunk,) = result.hunks_remaining
    assert [hunk.header] == headers(BASE, ours) == ["@@ -29,6 +29,8 @@"]
    assert (hunk.base, hunk.new) == (LineRange(29, 34), LineRange(29, 36))
    # Upstream changed make_worker, the patch GpuWorker.restore_blocks: no top-level definition in
    # common, so the file is not even parsed (hunk definitions stay empty) and there is nothing to review.
    assert hunk.definitions == ()
    assert result.review_flags == ()


def test_conflict_on_the_same_lines_has_diff3_markers_and_line_numbers() -> None:
    copy = b"self.gpu_cache[d].copy_(self.buffers.cpu[s], non_blocking=True)"
    ours = edit(
        edit(BASE, copy, copy.replace(b"True", b"False")), MAKE_RETURN, b"    return GpuWorker(buffers, cache)\n"
    )
    theirs = edit(
        edit(BASE, copy, copy.replace(b"True", b"self.async_restore")),
        MAKE_RETURN,
        b"    return GpuWorker(buffers, gpu_cache.contiguous())\n",
    )
    result = rebase_file(BASE, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CONFLICT
    lines = result.merged.splitlines(keepends=True)
    assert lines[32:41] == [
        b"            for s, d in zip(src, dst):\n",
        b"<<<<<<< ours (patch)\n",
        b"                self.gpu_cache[d].copy_(self.buffers.cpu[s], non_blocking=False)\n",
        b"||||||| base\n",
        b"                self.gpu_cache[d].copy_(self.buffers.cpu[s], non_blocking=True)\n",
        b"=======\n",
        b"                self.gpu_cache[d].copy_(self.buffers.cpu[s], non_blocking=self.async_restore)\n",
        b">>>>>>> theirs (upstream)\n",
        b'        logger.debug("restored %d blocks", len(src))\n',
    ]
    # The first conflict replaced one base line by seven, so the second one starts six lines later.
    assert result.conflicts == (
        Conflict(34, 40, LineRange(34, 34), LineRange(34, 34), LineRange(34, 34)),
        Conflict(53, 59, LineRange(47, 47), LineRange(47, 47), LineRange(47, 47)),
    )
    assert lines[52] == OURS_MARKER + b"\n"
    assert lines[58] == THEIRS_MARKER + b"\n"
    assert conflict_markers_remain(result.merged) == [34, 36, 38, 40, 53, 55, 57, 59]
    assert result.review_flags == ()
    assert len(result.hunks_remaining) == 2
    # Taking the ours section of every conflict gives back the patched file.
    ours_side = b"".join(lines[:33] + lines[34:35] + lines[40:52] + lines[53:54] + lines[59:])
    assert ours_side == ours


def test_conflict_on_an_insertion_at_the_same_place_has_an_empty_base_section() -> None:
    theirs = edit(BASE, RESTORE_DOC, RESTORE_DOC + b"        torch.cuda.synchronize()\n")
    result = rebase_file(BASE, fenced(BASE), theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CONFLICT
    (conflict,) = result.conflicts
    assert conflict == Conflict(32, 38, LineRange(32, 31), LineRange(32, 33), LineRange(32, 32))
    assert str(conflict.base) == "after line 31"
    block = result.merged.splitlines(keepends=True)[31:38]
    assert block == [
        OURS_MARKER + b"\n",
        *FENCE.splitlines(keepends=True),
        BASE_MARKER + b"\n",
        SEPARATOR + b"\n",
        b"        torch.cuda.synchronize()\n",
        THEIRS_MARKER + b"\n",
    ]


def test_fully_upstreamed_when_upstream_has_the_change_plus_more() -> None:
    ours = fenced(BASE)
    theirs = edit(fenced(BASE), MAKE_RETURN, MAKE_RETURN_NEW)
    result = rebase_file(BASE, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.UPSTREAMED
    assert result.merged == theirs
    assert [h.header for h in result.hunks_upstreamed] == headers(BASE, ours)
    assert (result.hunks_remaining, result.review_flags, result.conflicts) == ((), (), ())


def test_upstream_identical_to_the_patch_is_upstreamed() -> None:
    result = rebase_file(BASE, fenced(BASE), fenced(BASE))
    assert result.outcome is Outcome.UPSTREAMED
    assert result.merged == fenced(BASE)


def test_partially_upstreamed_reports_which_hunk_went() -> None:
    ours = edit(fenced(BASE), OFFLOAD_SYNC, OFFLOAD_EVENT)
    assert headers(BASE, ours) == ["@@ -29,6 +29,8 @@", "@@ -39,7 +41,7 @@"]
    # Upstream merged the fence (PR #47291) and changed make_worker; the offload change is still ours.
    theirs = edit(fenced(BASE), MAKE_RETURN, MAKE_RETURN_NEW)
    result = rebase_file(BASE, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.PARTIALLY_UPSTREAMED
    assert result.merged == edit(theirs, OFFLOAD_SYNC, OFFLOAD_EVENT)
    (went,) = result.hunks_upstreamed
    (left,) = result.hunks_remaining
    assert (went.header, went.definitions) == ("@@ -29,6 +29,8 @@", ("GpuWorker.restore_blocks",))
    assert (left.header, left.definitions) == ("@@ -39,7 +41,7 @@", ("GpuWorker.offload_blocks",))
    assert result.hunks_partly_upstreamed == ()
    # The patch shrank to one hunk: diff(theirs, merged) is exactly the remaining change.
    (remaining,) = diffs.parse(diffs.make(theirs, result.merged, "a/f", "b/f"))
    assert remaining.added == remaining.removed == 1
    # The fence upstream took is the patch's own change, not an upstream edit to review.
    assert result.review_flags == ()


def test_a_hunk_upstream_took_part_of_is_still_clean() -> None:
    # Two changes three lines apart: one hunk, of which upstream took the second change.
    # No whole hunk of the patch is upstream, so it is not "partially upstreamed": it is clean.
    doc = b"back into the GPU KV cache."
    ours = edit(edit(BASE, doc, doc + b" Fenced."), RESTORE_LOG, RESTORE_LOG.replace(b"debug", b"info"))
    theirs = edit(BASE, RESTORE_LOG, RESTORE_LOG.replace(b"debug", b"info"))
    result = rebase_file(BASE, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == edit(theirs, doc, doc + b" Fenced.")
    assert result.hunks_upstreamed == ()
    assert result.hunks_partly_upstreamed == result.hunks_remaining
    assert [h.header for h in result.hunks_remaining] == headers(BASE, ours)


def test_unchanged_upstream_keeps_the_patch() -> None:
    ours = fenced(BASE)
    result = rebase_file(BASE, ours, BASE, path="gpu_worker.py")
    assert result.outcome is Outcome.UNCHANGED
    assert result.merged == ours
    assert [h.header for h in result.hunks_remaining] == headers(BASE, ours)
    assert (result.hunks_upstreamed, result.conflicts, result.review_flags) == ((), (), ())


def test_empty_patch() -> None:
    theirs = edit(BASE, MAKE_RETURN, MAKE_RETURN_NEW)
    upstreamed = rebase_file(BASE, BASE, theirs)
    assert upstreamed.outcome is Outcome.UPSTREAMED
    assert upstreamed.merged == theirs
    assert upstreamed.hunks_upstreamed == upstreamed.hunks_remaining == ()
    assert rebase_file(BASE, BASE, BASE).outcome is Outcome.UNCHANGED


def test_crlf_file_survives_byte_exact() -> None:
    def crlf(data: bytes) -> bytes:
        return data.replace(b"\n", b"\r\n")

    base, ours = crlf(BASE), crlf(fenced(BASE))
    theirs = crlf(edit(BASE, MAKE_RETURN, MAKE_RETURN_NEW))
    result = rebase_file(base, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == crlf(fenced(edit(BASE, MAKE_RETURN, MAKE_RETURN_NEW)))
    # Conflict markers follow the file's line endings.
    conflicted = rebase_file(base, ours, crlf(edit(BASE, RESTORE_DOC, RESTORE_DOC + b"        pass\n")))
    assert conflicted.outcome is Outcome.CONFLICT
    assert OURS_MARKER + b"\r\n" in conflicted.merged
    assert b"\n\n" not in conflicted.merged.replace(b"\r\n", b"")
    assert conflict_markers_remain(conflicted.merged) == [32, 35, 36, 38]


def test_a_lone_carriage_return_is_part_of_a_line() -> None:
    base = b"a\rb\nc\nd\ne\nf\n"
    ours = b"a\rB\nc\nd\ne\nf\n"
    theirs = b"a\rb\nc\nd\ne\nF\n"
    result = rebase_file(base, ours, theirs, path="odd.py")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == b"a\rB\nc\nd\ne\nF\n"
    # Python would count the \r as a line end: no analysis rather than wrong line numbers.
    assert result.hunks_remaining[0].definitions == ()


def test_non_utf8_bytes_survive_and_python_analysis_is_skipped() -> None:
    # Latin-1 in a comment (CPython's tokenizer lets that pass) and in a string (it does not).
    base = edit(BASE, b"import torch\n", b'import torch  # \xe9t\xe9 \xff\n\nDEVICE = "MI300X \xe0"\n')
    ours, theirs = fenced(base), edit(base, RESTORE_LOG, RESTORE_LOG.replace(b"restored", b"restored \xe0"))
    result = rebase_file(base, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == fenced(theirs)
    # Not UTF-8 and no coding cookie: ast refuses it, so no definitions and no flags, and no crash.
    assert result.hunks_remaining[0].definitions == ()
    assert result.review_flags == ()


def test_latin1_with_a_coding_cookie_is_analysed() -> None:
    base = b"# -*- coding: latin-1 -*-\n" + edit(BASE, b"import torch\n", b"import torch  # \xe9t\xe9\n")
    theirs = edit(base, RESTORE_LOG, RESTORE_LOG.replace(b"restored", b"restored \xe0"))
    result = rebase_file(base, fenced(base), theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert [f.definition for f in result.review_flags] == ["GpuWorker.restore_blocks"]


def test_missing_final_newline_survives() -> None:
    base = BASE.rstrip(b"\n")
    theirs = edit(base, b"import torch\n", b"import torch\nimport torch.nn\n")
    result = rebase_file(base, fenced(base), theirs)
    assert result.outcome is Outcome.CLEAN
    assert result.merged == fenced(theirs)
    assert result.merged.endswith(b"return GpuWorker(buffers, gpu_cache)")
    # A patch that only adds the final newline, against an upstream that did not touch the end.
    result = rebase_file(base, base + b"\n", theirs)
    assert result.merged == theirs + b"\n"


def test_conflict_at_a_last_line_without_newline_keeps_markers_on_their_own_lines() -> None:
    base = b"a\nb\nc\nlast"
    result = rebase_file(base, b"a\nb\nc\nours", b"a\nb\nc\ntheirs\n")
    assert result.outcome is Outcome.CONFLICT
    assert result.merged == (
        b"a\nb\nc\n<<<<<<< ours (patch)\nours\n||||||| base\nlast\n=======\ntheirs\n>>>>>>> theirs (upstream)\n"
    )
    assert result.conflicts == (Conflict(4, 10, LineRange(4, 4), LineRange(4, 4), LineRange(4, 4)),)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_binary_input_is_refused(which: int) -> None:
    versions = [BASE, fenced(BASE), BASE.replace(b"torch.uint8", b"torch.int8")]
    versions[which] = versions[which][:100] + b"\x00\x01" + versions[which][100:]
    with pytest.raises(BinaryFileError) as caught:
        rebase_file(*versions, path="vllm/kernels/table.bin")
    message = str(caught.value)
    assert message.startswith("vllm/kernels/table.bin: the ")
    assert ["old upstream (base)", "patched", "new upstream"][which] in message
    assert "patchkit merges text files only" in message
    assert isinstance(caught.value, BadInput)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert caught.value.hint


def test_review_flag_when_upstream_edited_the_same_function() -> None:
    theirs = edit(BASE, RESTORE_LOG, b'logger.debug("restored %d blocks to the GPU", len(src))')
    result = rebase_file(BASE, fenced(BASE), theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == fenced(theirs)
    (flag,) = result.review_flags
    assert flag.definition == "GpuWorker.restore_blocks"
    assert flag.hunk == result.hunks_remaining[0]
    assert flag.upstream.header == headers(BASE, theirs)[0] == "@@ -32,7 +32,7 @@"
    assert flag.upstream.new == LineRange(32, 38)
    assert flag.upstream.definitions == ("GpuWorker.restore_blocks",)
    assert flag.message == (
        "upstream hunk @@ -32,7 +32,7 @@ changed GpuWorker.restore_blocks, which patch hunk "
        "@@ -29,6 +29,8 @@ also changes: check that the two still fit together"
    )


def test_no_review_flag_when_upstream_edited_another_function() -> None:
    theirs = edit(BASE, OFFLOAD_SYNC, OFFLOAD_EVENT)  # another method of the same class
    result = rebase_file(BASE, fenced(BASE), theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.review_flags == ()


def test_review_flags_only_for_python_files() -> None:
    theirs = edit(BASE, RESTORE_LOG, b'logger.debug("restored %d blocks to the GPU", len(src))')
    result = rebase_file(BASE, fenced(BASE), theirs, path="gpu_worker.txt")
    assert result.outcome is Outcome.CLEAN
    assert result.review_flags == ()
    assert result.hunks_remaining[0].definitions == ()


def test_review_flag_on_a_partially_upstreamed_patch() -> None:
    ours = edit(fenced(BASE), OFFLOAD_SYNC, OFFLOAD_EVENT)
    offload_doc = b'"""Copy GPU blocks out to pinned CPU memory."""'
    theirs = edit(fenced(BASE), offload_doc, b'"""Copy GPU blocks out to pinned CPU memory, on the side stream."""')
    result = rebase_file(BASE, ours, theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.PARTIALLY_UPSTREAMED
    (flag,) = result.review_flags
    assert flag.definition == "GpuWorker.offload_blocks"
    assert flag.hunk == result.hunks_remaining[0]


def test_invalid_python_gives_no_flags_and_no_crash() -> None:
    theirs = edit(BASE, RESTORE_LOG, b'logger.debug("restored %d blocks to the GPU", len(src))')
    theirs = edit(theirs, MAKE_RETURN, b"    return GpuWorker(buffers, gpu_cache\n")  # unclosed bracket
    result = rebase_file(BASE, fenced(BASE), theirs, path="gpu_worker.py")
    assert result.outcome is Outcome.CLEAN
    assert result.review_flags == ()
    broken_base = edit(BASE, b"class GpuWorker:\n", b"class GpuWorker\n")
    result = rebase_file(broken_base, fenced(broken_base), edit(broken_base, MAKE_RETURN, MAKE_RETURN_NEW), path="w.py")
    assert result.outcome is Outcome.CLEAN
    assert result.review_flags == ()
    assert result.hunks_remaining[0].definitions == ()


def test_syntax_warnings_do_not_leak_or_stop_the_analysis() -> None:
    # "\d" is an invalid escape: compiling it warns, which this suite turns into errors.
    base = edit(BASE, b"logger = init_logger(__name__)\n", b'logger = init_logger(__name__)\nPATTERN = "\\d+"\n')
    theirs = edit(base, RESTORE_LOG, b'logger.debug("restored %d blocks to the GPU", len(src))')
    result = rebase_file(base, fenced(base), theirs, path="gpu_worker.py")
    assert [f.definition for f in result.review_flags] == ["GpuWorker.restore_blocks"]


NESTED = b"""import functools


def build(n):
    total = 0

    def step(x):
        return x + 1

    for i in range(n):
        total += step(i)
    return total


class Engine:
    max_batch = 8

    def run(self, batch):
        out = []
        for item in batch:
            out.append(item)
        return out

    def stop(self):
        pass
"""


def test_definitions_of_nested_functions_count_for_the_enclosing_function() -> None:
    ours = edit(NESTED, b"        return x + 1\n", b"        return x + 2\n")
    theirs = edit(NESTED, b"    return total\n", b"    return int(total)\n")
    result = rebase_file(NESTED, ours, theirs, path="nested.py")
    assert result.outcome is Outcome.CLEAN
    assert result.hunks_remaining[0].definitions == ("build.<locals>.step",)
    (flag,) = result.review_flags
    assert flag.definition == "build"


def test_class_level_and_method_edits_are_different_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = edit(NESTED, b"    max_batch = 8\n", b"    max_batch = 16\n")
    theirs = edit(NESTED, b"        pass\n", b"        return None\n")
    assert rebase_file(NESTED, ours, theirs, path="nested.py").review_flags == ()
    analysed = _analysed(monkeypatch, NESTED, ours, theirs, "nested.py")
    assert analysed.hunks_remaining[0].definitions == ("Engine",)
    assert analysed.review_flags == ()


def test_a_class_level_edit_meets_a_line_inserted_between_methods() -> None:
    # Both are the class's own lines: the inserted one could extend run or stop, or be the class's.
    ours = edit(NESTED, b"    max_batch = 8\n", b"    max_batch = 16\n")
    theirs = edit(NESTED, b"        return out\n\n", b"        return out\n\n    min_batch = 1\n\n")
    result = rebase_file(NESTED, ours, theirs, path="nested.py")
    assert [f.definition for f in result.review_flags] == ["Engine"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # Appended to a body (indented deeper than its def): part of that function.
        (b"        return out\n", b"        return out\n        # done\n", ("Engine.run",)),
        # A new method after run, at method indentation: part of the class only.
        (b"        return out\n", b"        return out\n\n    def size(self):\n        return 0\n", ("Engine",)),
        # A decorator added right before a def belongs to that def.
        (b"    def stop(self):\n", b"    @functools.cache\n    def stop(self):\n", ("Engine.stop",)),
        # Module level: no definition.
        (b"import functools\n", b"import functools\nimport os\n", ()),
    ],
)
def test_where_inserted_lines_belong(old: bytes, new: bytes, expected: tuple[str, ...]) -> None:
    result = rebase_file(NESTED, edit(NESTED, old, new), NESTED + b"\n\nX = 1\n", path="nested.py")
    assert result.hunks_remaining[0].definitions == expected


def test_conflict_markers_remain() -> None:
    text = (
        b"ok\n<<<<<<< ours (patch)\nx\n||||||| base\ny\n=======\nz\n>>>>>>> theirs (upstream)\n"
        b"<<<<<<<\r\n=======\r\n>>>>>>>"
        b"\n======== not a marker\n<<<<<<<< eight\n  =======\nx <<<<<<< y\n"
    )
    assert conflict_markers_remain(text) == [2, 4, 6, 8, 9, 10, 11]
    assert conflict_markers_remain(BASE) == []
    assert conflict_markers_remain(b"") == []


def test_hunk_headers_match_patchkits_own_diffs() -> None:
    rng = random.Random(11)
    for _ in range(200):
        base = [f"line {i}\n".encode() for i in range(rng.randint(0, 40))]
        ours = list(base)
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(ours))
            ours[at : at + rng.randint(0, 2)] = [f"new {rng.random()}\n".encode()] * rng.randint(0, 2)
        old, new = b"".join(base), b"".join(ours)
        result = rebase_file(old, new, old)
        assert [h.header for h in result.hunks_remaining] == headers(old, new)


def _apply(base: list[bytes], edits: list[tuple[int, int, list[bytes]]]) -> bytes:
    out = list(base)
    for start, end, lines in sorted(edits, reverse=True):
        out[start:end] = lines
    return b"".join(out)


def test_random_disjoint_edits_merge_cleanly_in_either_order() -> None:
    rng = random.Random(2024)
    cases: list[tuple[int, bytes, tuple[bytes, bytes, bytes, str]]] = []
    for case in range(300):
        base = [f"base {case}.{i}\n".encode() for i in range(rng.randint(1, 50))]
        edits: dict[str, list[tuple[int, int, list[bytes]]]] = {"ours": [], "theirs": []}
        pos = 0
        while (start := pos + rng.randint(0, 4)) <= len(base):
            end = min(len(base), start + rng.randint(0, 3))
            side = rng.choice(["ours", "theirs"])
            new = [f"{side} {case}.{start}.{k}\n".encode() for k in range(rng.randint(end == start, 3))]
            edits[side].append((start, end, new))
            pos = end + 1  # at least one untouched base line between two edits
        if not edits["ours"] or not edits["theirs"]:
            continue
        old, ours, theirs = b"".join(base), _apply(base, edits["ours"]), _apply(base, edits["theirs"])
        both = _apply(base, edits["ours"] + edits["theirs"])
        for a, b in ((ours, theirs), (theirs, ours)):
            cases.append((case, both, (old, a, b, "")))
    # One batch: git merges them all at once, as a rebase does.
    for (case, both, _), result in zip(cases, rebase_files([item for _, _, item in cases]), strict=True):
        assert result.outcome is Outcome.CLEAN, case
        assert result.merged == both, case
        assert result.hunks_upstreamed == ()


def test_a_large_repetitive_file_merges_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,500 lines, two in five of them repeated hundreds of times (blank lines, "return x"):
    # the shape that makes difflib slow, kept small enough to stay fast here.
    body = b"".join(b"    def f%d(self):\n        x = %d\n\n        return x\n\n" % (i, i) for i in range(300))
    base = b"class Big:\n" + body
    ours = edit(base, b"        x = 100\n", b"        x = -100\n")
    theirs = edit(edit(base, b"        x = 7\n", b"        x = -7\n"), b"        x = 290\n", b"        x = -290\n")
    started = time.perf_counter()
    result = rebase_file(base, ours, theirs, path="big.py")
    assert time.perf_counter() - started < 2
    assert result.outcome is Outcome.CLEAN
    assert result.merged == edit(theirs, b"        x = 100\n", b"        x = -100\n")
    # Upstream changed other methods only: the pre-filter spares the analysis, so no names are given.
    assert result.hunks_remaining[0].definitions == ()
    assert result.review_flags == ()
    analysed = _analysed(monkeypatch, base, ours, theirs, "big.py")
    assert analysed.hunks_remaining[0].definitions == ("Big.f100",)
    assert analysed.review_flags == ()


def _analysed(monkeypatch: pytest.MonkeyPatch, base: bytes, ours: bytes, theirs: bytes, path: str) -> MergeResult:
    """The merge with the review-flag analysis run whatever the pre-filter says."""
    from patchkit.rebase import merge

    with monkeypatch.context() as m:
        m.setattr(merge, "_may_share_block", lambda *a: True)
        return rebase_file(base, ours, theirs, path=path)


def _decorators(rng: random.Random, indent: bytes) -> list[bytes]:
    """Zero to three stacked decorators, sometimes with a comment between them or arguments over lines."""
    lines = []
    for d in range(rng.choice((0, 0, 1, 2, 3))):
        if rng.random() < 0.25:
            lines += [indent + b"@dataclass(\n", indent + b"    frozen=True,\n", indent + b")\n"]
        else:
            lines.append(indent + (b"@functools.lru_cache(maxsize=%d)\n" % d if d else b"@functools.cache\n"))
        if rng.random() < 0.3:
            lines.append(indent + b"# keep this cached\n")
    return lines


def _method_body(rng: random.Random, indent: bytes, i: int) -> list[bytes]:
    body = [indent + b"v%d = %d\n" % (k, k) for k in range(rng.randint(2, 4))]
    if rng.random() < 0.3:
        body += [indent + b"def inner():\n", indent + b"    return v0\n"]
    if rng.random() < 0.2:
        body += [indent + b"# trailing note %d\n" % i]
    return [*body, indent + b"return v0\n"]


def _class(rng: random.Random, i: int) -> list[bytes]:
    """A class: a docstring, class-level statements (one spanning lines), methods, sometimes a nested class."""
    lines = [b"class C%d:\n" % i, b'    """Engine %d."""\n' % i, b"    size = %d\n" % i]
    for m in range(rng.randint(1, 4)):
        lines.append(b"\n")
        lines += _decorators(rng, b"    ")
        lines.append(b"    def m%d(self, x):\n" % m)
        lines += _method_body(rng, b"        ", m)
        if rng.random() < 0.3:
            lines += [b"\n", b"    # between methods\n", b"    table_%d = {\n" % m, b"        'a': 1,\n", b"    }\n"]
        if rng.random() < 0.15:
            lines += [b"\n", b"    class Inner%d:\n" % m, b"        def a(self):\n", b"            return 1\n"]
            lines += [b"\n", b"        def b(self):\n", b"            return 2\n"]
    return lines


def _decorated_module(rng: random.Random) -> list[bytes]:
    """A module of top-level functions and classes, decorated or not, with module-level statements between."""
    lines = [b"import functools\n", b"\n"]
    for i in range(rng.randint(3, 7)):
        lines += _decorators(rng, b"")
        if rng.random() < 0.4:
            lines += _class(rng, i)
        else:
            lines.append(b"def f%d(x):\n" % i)
            lines += _method_body(rng, b"    ", i)
        lines += [b"\n", b"\n"]
        if rng.random() < 0.3:
            lines += [b"LIMIT_%d = %d\n" % (i, i), b"\n"]
    return lines


def _edit_one_line(rng: random.Random, lines: list[bytes], mark: bytes) -> list[bytes]:
    """One edit anywhere: a line changed, a line deleted, or a statement inserted at its neighbour's indentation."""
    out = list(lines)
    i = rng.randrange(len(out))
    what = rng.random()
    if what < 0.5:
        out[i] = out[i].rstrip(b"\n") + b"  # " + mark + b"\n"
    elif what < 0.7 and out[i].strip() and not out[i].rstrip().endswith(b":"):
        del out[i]
    else:
        line = out[i]
        indent = line[: len(line) - len(line.lstrip(b" "))] if line.strip() else b""
        out.insert(i, indent + mark + b" = 1\n")
    return out


def test_the_review_flag_prefilter_never_hides_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap block test before the ast analysis agrees with the analysis run on every file.

    Edits on both sides anywhere (lines changed, deleted, inserted) in modules
    of decorated functions and classes (methods, class-level statements over
    several lines, comments and blank lines between methods, nested classes
    and functions): the flags with the pre-filter are those without it.
    """
    from patchkit.rebase import merge

    rng = random.Random(7)
    exact = merge._may_share_block
    items = []
    for _ in range(1500):
        base_lines = _decorated_module(rng)
        base = b"".join(base_lines)
        mine = b"".join(_edit_one_line(rng, base_lines, b"patched"))
        new = b"".join(_edit_one_line(rng, base_lines, b"upstream"))
        items.append((base, mine, new, "m.py"))
    filtered = [r.review_flags for r in rebase_files(items)]
    monkeypatch.setattr(merge, "_may_share_block", lambda *a: True)
    unfiltered = [r.review_flags for r in rebase_files(items)]
    monkeypatch.setattr(merge, "_may_share_block", exact)
    for item, with_filter, without in zip(items, filtered, unfiltered, strict=True):
        assert with_filter == without, item
    flagged = sum(bool(flags) for flags in unfiltered)
    assert flagged > 50  # the generated edits do meet in one definition, often enough to test the filter


def test_scanning_only_the_segments_both_sides_touch_gives_the_whole_scans_answer() -> None:
    """The pre-filter scans only the top-level segments both diffs touch; the whole file's scan agrees.

    Modules of decorated functions and classes with statements between them, edited anywhere on
    both sides (a decorator, a column-0 statement after a function, a class line): the answer of
    ``_may_share_block`` equals that of ``_Blocks`` over every line, and both answers occur.
    """
    from patchkit.rebase import merge

    rng = random.Random(11)
    answers = set()
    for _ in range(1500):
        base_lines = _decorated_module(rng)
        base = b"".join(base_lines)
        mine = _changes(base, b"".join(_edit_one_line(rng, base_lines, b"p")))
        new = _changes(base, b"".join(_edit_one_line(rng, base_lines, b"u")))
        whole = merge._Blocks(split_lines(base))
        expected = bool(whole.of(mine) & whole.of(new))
        assert merge._may_share_block(split_lines(base), mine, new) is expected, base.decode()
        answers.add(expected)
    assert answers == {True, False}


def _changes(base: bytes, new: bytes) -> list[Any]:
    """The changes of diff(base, new), as the merge finds them."""
    from patchkit.rebase import merge

    return merge._changes(merge._matching_blocks(split_lines(base), split_lines(new)))


def test_a_column_0_statement_after_a_function_is_in_the_functions_segment() -> None:
    base = b"def f(x):\n    return x\n\n\nLIMIT = f(1)\n\n\ndef g():\n    return 2\n"
    ours = base.replace(b"LIMIT = f(1)\n", b"LIMIT = f(2)\n")
    theirs = base.replace(b"    return x\n", b"    return x + 1\n")
    assert [f.definition for f in rebase_file(base, ours, theirs, path="m.py").review_flags] == []
    from patchkit.rebase import merge

    lines = split_lines(base)
    assert merge._segment_starts(lines) == [0, 7]
    mine, new = _changes(base, ours), _changes(base, theirs)
    assert merge._may_share_block(lines, mine, new)  # one segment: scanned, the analysis then decides
    other = _changes(base, base.replace(b"return 2", b"return 3"))
    assert not merge._may_share_block(lines, mine, other)  # g is another segment: nothing is scanned


#: Lines an edit puts in: most break the syntax somewhere (a bracket or a string left open, an
#: indentation, a clause with no statement before it, a continuation), some do not.
_EDIT_LINES = (
    b"    x = (\n",
    b"'''\n",
    b'"""\n',
    b"else:\n",
    b"  y = 1\n",
    b"\tz = 2\n",
    b"def (\n",
    b"]\n",
    b"x = 1 \\\n",
    b"@dec\n",
    b"class A:\n",
    b"    return\n",
    b"s = '''a\n",
    b"pass\n",
    b"\n",
    b"if x:\n",
    b"except E:\n",
    b"patched = 1\n",
    b"    # patched\n",
)


def _side(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """One to three edits: a line from ``_EDIT_LINES`` inserted or put instead of another, or a line deleted."""
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(out) + 1)
        what = rng.random()
        if what < 0.5:
            out.insert(i, rng.choice(_EDIT_LINES))
        elif what < 0.7 and i < len(out):
            del out[i]
        elif i < len(out):
            out[i] = rng.choice(_EDIT_LINES)
    return out


def _module_with_strings(rng: random.Random) -> bytes:
    """A generated module with a multi-line string holding code at column 0, an if/else and a try at the top."""
    lines = _decorated_module(rng)
    at = rng.choice((2, len(lines)))  # after the import, or at the end
    lines[at:at] = [b'EXAMPLE = """\n', b"def shown():\n", b"    return 1\n", b'"""\n']
    lines += [b"if LIMIT:\n", b"    pass\n", b"else:\n", b"    pass\n", b"try:\n", b"    pass\n", b"except E:\n"]
    return b"".join([*lines, b"    pass\n"])


def test_whether_an_edited_file_parses_is_told_from_the_pieces_it_changed() -> None:
    """Parsing only the runs of top-level statements an edit touches says what parsing the whole file says.

    Generated modules (decorated functions and classes, a multi-line string holding a column-0
    ``def``, if/else and try/except at the top) edited one to three times, the edits breaking
    the syntax in every way a piece could hide (an open bracket or string, a clause with nothing
    before it, an indentation, a continuation), or not.
    """
    from patchkit.rebase import merge

    rng = random.Random(13)
    seen = set()
    for _ in range(800):
        base = _module_with_strings(rng)
        defs = merge._python_defs(base)
        assert defs is not None
        lines = split_lines(base)
        side = _side(rng, lines)
        changes = merge._changes(merge._matching_blocks(lines, side))
        expected = merge._parses(b"".join(side))
        assert merge._edit_parses(defs, len(lines), side, changes) is expected, (base, b"".join(side))
        seen.add(expected)
    assert seen == {True, False}


@pytest.mark.parametrize(
    ("first", "piece"),
    [
        # A coding declaration on a piece's first line would decode it apart from the file (UTF-8 here).
        (b"x = 1\n", b"# -*- coding: latin-1 -*-\ns = '\xe9'\n"),
        # Barry's future import makes '<>' an operator for the whole file, not for a piece.
        (b"from __future__ import barry_as_FLUFL\n", b"y = 1 <> 2\n"),
    ],
)
def test_what_reads_a_file_as_a_whole_sends_it_to_the_parser_whole(first: bytes, piece: bytes) -> None:
    from patchkit.rebase import merge

    base = first + b"\n\ndef f():\n    return 1\n"
    side = first + b"\n\ndef f():\n    return 1\n" + piece
    defs = merge._python_defs(base)
    assert defs is not None
    lines = split_lines(base)
    changes = merge._changes(merge._matching_blocks(lines, split_lines(side)))
    assert merge._edit_parses(defs, len(lines), split_lines(side), changes) is merge._parses(side)


def test_a_class_decorator_over_lines_after_another_class_belongs_to_its_class() -> None:
    base = b"class A:\n    x = 1\n\n    def m(self):\n        return 1\n\n\n"
    base += b"@dataclass(\n    frozen=True,\n)\nclass B:\n    y = 2\n\n    def n(self):\n        return 2\n"
    ours = base.replace(b"    frozen=True,\n", b"    frozen=False,\n")
    theirs = base.replace(b"    y = 2\n", b"    y = 3\n")
    assert [f.definition for f in rebase_file(base, ours, theirs, path="m.py").review_flags] == ["B"]


def test_a_patched_decorator_and_an_upstream_body_edit_of_one_function_are_flagged() -> None:
    base = b"def g():\n    return 0\n\n\n@a\n@b\ndef f():\n    x = 1\n    y = 2\n    z = 3\n    w = 4\n    return x\n"
    ours = base.replace(b"@a\n", b"@a(1)\n")
    theirs = base.replace(b"    return x\n", b"    return x + 1\n")
    result = rebase_file(base, ours, theirs, path="m.py")
    assert result.outcome is Outcome.CLEAN
    assert [f.definition for f in result.review_flags] == ["f"]


def test_the_common_first_and_last_lines_are_those_a_line_by_line_walk_finds() -> None:
    """The halving search for the lines two files share at each end equals the plain walk, on every length."""
    from patchkit.rebase.merge import _common_run

    rng = random.Random(11)
    for _ in range(20_000):
        a = [rng.choice((b"x\n", b"y\n", b"x", b"\r\n")) for _ in range(rng.randrange(0, 14))]
        b = [rng.choice((b"x\n", b"y\n", b"x", b"\r\n")) for _ in range(rng.randrange(0, 14))]
        limit = min(len(a), len(b))
        head = next((k for k in range(limit) if a[k] != b[k]), limit)
        assert _common_run(a, b, limit, 0, 0, 1) == head
        rest = limit - head
        tail = next((k for k in range(rest) if a[-1 - k] != b[-1 - k]), rest)
        assert _common_run(a, b, rest, len(a) - 1, len(b) - 1, -1) == tail
