"""References in prose and provenance tables, as hand-kept repositories write them."""

from __future__ import annotations

from patchkit.core import diffs
from patchkit.importing.provenance import references, tables


def refs(text: str, default: str | None = None) -> list[str]:
    return [str(r) for r in references(text, default).refs]


def test_a_bare_number_belongs_to_the_project_named_before_it() -> None:
    assert refs("vLLM #47282 / PR #47291 sync fix") == ["vllm-project/vllm#47282", "vllm-project/vllm#47291"]
    assert refs("AITER #812, then vllm #9") == ["ROCm/aiter#812", "vllm-project/vllm#9"]


def test_urls_and_qualified_references() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    text = (
        "see https://github.com/vllm-project/vllm/pull/47291 and ROCm/aiter#12 and "
        f"https://github.com/vllm-project/vllm/commit/{sha}"
    )
    assert refs(text) == [
        "vllm-project/vllm#47291",
        f"https://github.com/vllm-project/vllm/commit/{sha}",
        "ROCm/aiter#12",
    ]


def test_a_number_without_a_project_is_unresolved_not_guessed() -> None:
    found = references("fixes PR #123")
    assert found.refs == ()
    assert found.unresolved == ("#123",)
    assert refs("fixes PR #123", "vllm-project/vllm") == ["vllm-project/vllm#123"]


def test_provenance_table_columns_are_found_by_their_headers() -> None:
    text = (
        "Intro\n\n"
        "| Local file | Upstream path | Repository | Commit | Notes |\n"
        "|:--|--|--|--|--|\n"
        "| [`a.py`](patches/a.py) | `vllm/a.py` | https://github.com/vllm-project/vllm.git | `abcdef1234` | PR #5 |\n"
        "| b.py | vllm/b.py | vllm | | |\n"
    )
    rows = tables("README.md", text)
    assert [(r.source, r.file, r.repository, r.commit, r.path) for r in rows] == [
        ("README.md:5", "a.py", "vllm-project/vllm", "abcdef1234", "vllm/a.py"),
        ("README.md:6", "b.py", "vllm-project/vllm", None, "vllm/b.py"),
    ]


def test_lenient_parse_repairs_hand_edited_hunks() -> None:
    base = b"".join(b"line %d\n" % i for i in range(1, 31))
    new = base.replace(b"line 3\n", b"line 3\nadded\n").replace(b"line 20\n", b"line 20 changed\n")
    made = diffs.make(base, new, "a/x.py", "b/x.py")
    edited = made.replace(b"+added\n", b"+added\n+added by hand\n")
    on_disk = new.replace(b"added\n", b"added\nadded by hand\n")
    files, repairs = diffs.parse_lenient(edited)
    assert [(r.line, r.message) for r in repairs] == [
        (3, "hunk header says -6 +7 lines, its body has -6 +8"),
        (12, "hunk header starts the new side at 18; the earlier hunks put it at 19"),
    ]
    assert diffs.apply(files[0].reversed(), on_disk) == base
    # A diff that parses strictly comes back as it is, with no repairs.
    assert diffs.parse_lenient(made) == (diffs.parse(made), [])


SHA = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"
HEAD = "9f1c2e3d4b5a69788796a5b4c3d2e1f0a9b8c7d6"


def test_provenance_rows_in_the_forms_real_readmes_use() -> None:
    """Commit, path and references stated in one upstream cell, several files in one cell, follow-ups, links."""
    text = (
        "| Patch | Upstream | Why |\n"
        "|---|---|---|\n"
        f"| `gpu_worker.py` | `vllm-project/vllm` `main` @ `{SHA}` — `vllm/v1/worker/gpu_worker.py` | vLLM #47282 |\n"
        f"| `mla.py` | `ROCm/aiter` @ `{SHA}`; backport of PR #812 head `{HEAD}` — `aiter/ops/triton/mla.py` | |\n"
        f"| `a.py`, `b.py` | `vllm-project/vllm` @ `{SHA}` — `vllm/x/a.py`, `vllm/y/b.py` |"
        " [#48001](https://github.com/vllm-project/vllm/pull/48001) |\n"
        "| `gpu_worker.py` reasoning-token follow-up | `vllm-project/vllm` |"
        " https://github.com/vllm-project/vllm/pull/48100 |\n"
        "| `helper.py` | new module | |\n"
    )
    rows = tables("patches/README.md", text)
    assert [(r.source, r.file, r.repository, r.commit, r.path, r.new_module) for r in rows] == [
        ("patches/README.md:3", "gpu_worker.py", "vllm-project/vllm", SHA, "vllm/v1/worker/gpu_worker.py", False),
        ("patches/README.md:4", "mla.py", "ROCm/aiter", SHA, "aiter/ops/triton/mla.py", False),
        ("patches/README.md:5", "a.py", "vllm-project/vllm", SHA, "vllm/x/a.py", False),
        ("patches/README.md:5", "b.py", "vllm-project/vllm", SHA, "vllm/y/b.py", False),
        ("patches/README.md:6", "gpu_worker.py", "vllm-project/vllm", None, None, False),
        ("patches/README.md:7", "helper.py", None, None, None, True),
    ]
    # The PR number belongs to the row's project, not to "triton" in the path; a linked number once.
    assert refs(rows[1].text, rows[1].repository) == ["ROCm/aiter#812"]
    assert refs(rows[2].text, rows[2].repository) == ["vllm-project/vllm#48001"]


def test_a_project_word_inside_a_path_names_no_project() -> None:
    assert refs("aiter/ops/triton/x.py #12", "vllm-project/vllm") == ["vllm-project/vllm#12"]
    assert refs("see vllm.config #7 then aiter #8") == ["ROCm/aiter#8"]
    assert references("see vllm.config #7").unresolved == ("#7",)


def test_a_link_to_a_reference_counts_once_and_repeats_are_dropped() -> None:
    url = "https://github.com/vllm-project/vllm/pull/47291"
    found = references(f"[#47291]({url}) and again vllm-project/vllm#47291, then #1 and #1")
    assert [str(r) for r in found.refs] == ["vllm-project/vllm#47291"]
    assert found.unresolved == ("#1",)
