"""What provenance text may and may not be read as: repositories only in the forms people use for code,
a file called new is a module, references in every written form."""

from __future__ import annotations

import pytest

from patchkit.importing import provenance

SHA = "5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c"


def _row(upstream: str, notes: str = "-") -> provenance.Row:
    table = f"| File | Upstream | Notes |\n| --- | --- | --- |\n| `x.py` | {upstream} | {notes} |\n"
    (row,) = provenance.tables("README.md", table)
    return row


@pytest.mark.parametrize(
    ("cell", "repository"),
    [
        ("`vllm-project/vllm`", "vllm-project/vllm"),
        ("vllm-project/vllm", "vllm-project/vllm"),
        ("vllm-project/vllm main", "vllm-project/vllm"),
        ("vllm-project/vllm @ `" + SHA + "`", "vllm-project/vllm"),
        ("vllm-project/vllm v0.11.0", "vllm-project/vllm"),
        ("https://github.com/vllm-project/vllm", "vllm-project/vllm"),
        ("https://github.com/vllm-project/vllm.git", "vllm-project/vllm"),
        ("git+https://github.com/vllm-project/vllm", "vllm-project/vllm"),
        ("https://github.com/vllm-project/vllm/commit/" + SHA, "vllm-project/vllm"),
        ("[PR 123](https://github.com/vllm-project/vllm/pull/123)", "vllm-project/vllm"),
        ("`git+https://github.com/vllm-project/vllm.git`", "vllm-project/vllm"),
        (f"vllm-project/vllm@{SHA}", "vllm-project/vllm"),
        ("backport of vllm-project/vllm#27001", "vllm-project/vllm"),
        ("vLLM PR #27001", "vllm-project/vllm"),
        # Prose: words with a slash are not a repository.
        ("eviction/write coordination", None),
        ("vLLM-style eviction/write coordination", None),
        ("read/write path", None),
        ("local fix for the prefill/decode split", None),
        ("—", None),
        ("and/or", None),
        ("n/a", None),
        ("read/write", None),
    ],
)
def test_a_repository_only_from_a_form_used_for_code(cell: str, repository: str | None) -> None:
    assert _row(cell).repository == repository


@pytest.mark.parametrize(
    "notes",
    [
        "new module",
        "new file",
        "new companion module for eviction/write coordination",
        "New helper",
        "new KV helper module",
        "added module",
        "companion module (no upstream counterpart)",
        "new modules",
    ],
)
def test_a_row_calling_the_file_new_makes_it_a_module(notes: str) -> None:
    assert _row("—", notes).new_module


@pytest.mark.parametrize(
    "notes",
    [
        "fixes the new scheduler's file handle leak",  # "new" of something else
        "module of the worker",
        "helper for the sampler",
    ],
)
def test_other_words_do_not(notes: str) -> None:
    assert not _row("vllm-project/vllm", notes).new_module


def test_a_row_stating_an_upstream_path_is_never_a_new_module() -> None:
    table = "| File | Upstream | Path |\n| --- | --- | --- |\n| `x.py` | new helper | `vllm/x.py` |\n"
    (row,) = provenance.tables("README.md", table)
    assert not row.new_module and row.path == "vllm/x.py"


@pytest.mark.parametrize(
    ("text", "refs", "unresolved"),
    [
        (f"backport of vllm-project/vllm@{SHA}", [f"https://github.com/vllm-project/vllm/commit/{SHA}"], []),
        (f"see https://github.com/ROCm/aiter/commit/{SHA}", [f"https://github.com/ROCm/aiter/commit/{SHA}"], []),
        ("vLLM PR #27001 (see also #27002)", ["vllm-project/vllm#27001", "vllm-project/vllm#27002"], []),
        ("ROCm/aiter#512 and vllm-project/vllm#27003", ["ROCm/aiter#512", "vllm-project/vllm#27003"], []),
        ("[#27004](https://github.com/vllm-project/vllm/pull/27004)", ["vllm-project/vllm#27004"], []),
        ("PR #99 discusses it", [], ["#99"]),
        ("vllm-project/vllm@5d4c3b2", [], ["vllm-project/vllm@5d4c3b2"]),  # abbreviated: not checkable
        ("eviction/write coordination", [], []),
    ],
)
def test_references_in_every_written_form(text: str, refs: list[str], unresolved: list[str]) -> None:
    found = provenance.references(text)
    assert ([str(r) for r in found.refs], list(found.unresolved)) == (refs, unresolved)


def test_prose_blocks_and_the_files_they_name() -> None:
    text = (
        "# Title\n\nThe fence in `gpu_worker.py`\nbackports PR #1.\n\n- `a.py`: #2\n- `b.py`: #3\n\n"
        "```\nPR #4 in code\n```\n| `t.py` | #5 |\n\n## `sampler.py`\n\nFollows #6.\n"
    )
    blocks = [(b.source, b.text, b.heading) for b in provenance.prose("README.md", text)]
    assert blocks == [
        ("README.md:1", "Title", ""),
        ("README.md:3", "The fence in `gpu_worker.py` backports PR #1.", "Title"),
        ("README.md:6", "- `a.py`: #2", "Title"),
        ("README.md:7", "- `b.py`: #3", "Title"),
        ("README.md:14", "`sampler.py`", ""),
        ("README.md:16", "Follows #6.", "`sampler.py`"),
    ]
    assert provenance.mentions("see `vllm/v1/sample/sampler.py`", "overlay/vllm/v1/sample/sampler.py")
    assert provenance.mentions("the sampler.py change", "patches/sampler.py")
    assert not provenance.mentions("the sampler change", "patches/sampler.py")
    assert not provenance.mentions("see `v2/sampler.py`", "overlay/vllm/v1/sample/sampler.py")
