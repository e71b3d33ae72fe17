"""The rebase's terminal table and Markdown summary, line for line, for every outcome a patch can have.

The merges are real (``rebase_file`` on small Python files); the plan is put
together by hand so one report shows a moved, a partly and a fully upstreamed,
a conflicted, a deleted, a reviewed and an accepted-broken patch, an
interdiff and a skipped patch at once.
"""

from __future__ import annotations

from patchkit.core.diffs import canonical_diff
from patchkit.core.values import UpstreamPath
from patchkit.formats.rebase import summary_markdown, table
from patchkit.rebase.merge import MergeResult, Outcome, rebase_file
from patchkit.rebase.overlays import PatchResult, Plan, Skipped
from patchkit.sources.interface import Pin
from patchkit.trust import interdiff
from patchkit.trust.pycheck import Problem

BASE = b"""def load(path):
    return open(path).read()


def free(blocks):
    n = len(blocks)
    a = 1
    b = 2
    c = 3
    d = 4
    e = 5
    blocks.clear()
    return n
"""
OURS = BASE.replace(b"open(path).read()", b"open(path, 'rb').read()").replace(
    b"    blocks.clear()", b"    blocks.clear()\n    gc()"
)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def merged(theirs: bytes) -> MergeResult:
    return rebase_file(BASE, OURS, theirs, path="w.py")


def result(
    name: str,
    outcome: Outcome,
    merge: MergeResult | None,
    *,
    new_path: str = "w.py",
    problems: tuple[Problem, ...] = (),
    text_outcome: Outcome | None = None,
) -> PatchResult:
    """A patch of ``w.py`` (deployed as ``/app/w.py``), at ``new_path`` after the rebase."""
    return PatchResult(
        name, outcome, "w.py", new_path, "/app/w.py", f"/app/{new_path}", merge, None, problems, text_outcome
    )


def every_outcome() -> Plan:
    """One patch per outcome (each merge checked to be the outcome it stands for), plus a skipped one."""
    moved = merged(b"import os\n\n\n" + BASE)
    partly = merged(BASE.replace(b"open(path).read()", b"open(path, 'rb').read()"))
    took = merged(OURS)
    clash = merged(BASE.replace(b"open(path).read()", b"open(path, 'rt').read()"))
    review = merged(BASE.replace(b"    n = len(blocks)", b"    n = len(list(blocks))"))
    assert (moved.outcome, partly.outcome, took.outcome) == (
        Outcome.CLEAN,
        Outcome.PARTIALLY_UPSTREAMED,
        Outcome.UPSTREAMED,
    )
    assert (clash.outcome, review.outcome) == (Outcome.CONFLICT, Outcome.CLEAN) and review.review_flags
    broken = (Problem("undefined-name", 3, "gc", "name 'gc' is not defined"), Problem("unknown", 1, "", "not checked"))
    plan = Plan("vllm", "v0.6.0", Pin("git", commit=COMMIT))
    plan.results = [
        result("moved", Outcome.MOVED, moved, new_path="v1/w.py"),
        result("partly", Outcome.PARTIALLY_UPSTREAMED, partly),
        result("took", Outcome.UPSTREAMED, took),
        result("clash", Outcome.CONFLICT, clash),
        result("gone", Outcome.DELETED, None),
        result("review", Outcome.CLEAN, review),
        result("broken", Outcome.BROKEN, moved, problems=broken, text_outcome=Outcome.CLEAN),
    ]
    plan.skipped = [
        Skipped("wheel", "/app/x.py", "its upstream is another one"),
        Skipped("cfg", "/app/cfg.py", "no base recorded", "re-add it: patchkit add cfg --base FILE"),
    ]
    plan.accepted = {"broken": "gc comes from a plugin"}
    path = UpstreamPath("w.py")
    found = interdiff.compare(
        canonical_diff(BASE, OURS, path), canonical_diff(BASE, OURS.replace(b"gc()", b"gc(2)"), path)
    )
    assert found is not None
    plan.interdiffs = {"moved": found}
    return plan


REVIEW = (
    "free: changed on both sides (upstream hunk @@ -3,7 +3,7 @@; patch hunk @@ -10,4 +10,5 @@): "
    "check that the two still fit together"
)


def test_table_has_one_line_per_patch_with_what_to_do() -> None:
    plan = every_outcome()
    head, *rest = plan.interdiffs["moved"].lines()
    assert table(plan) == "\n".join(
        [
            "rebase vllm: v0.6.0 -> 0123456789ab",
            "  moved   moved                 w.py -> v1/w.py",
            f"          interdiff: {head}",
            *(f"            {line}" for line in rest),
            "  partly  partially-upstreamed  upstream took @@ -1,5 +1,5 @@",
            "  took    upstreamed            drop candidate: upstream has the change",
            "  clash   conflict              .patchkit/rebase/conflicts/clash/w.py: lines 2-8",
            "  gone    deleted               w.py is gone upstream: decide (--drop gone)",
            "  review  clean",
            f"          review: {REVIEW}",
            "  broken  broken",
            "          broken: w.py:3: name 'gc' is not defined",
            "          not checked: w.py:1: not checked",
            "          accepted as broken: gc comes from a plugin",
            "  wheel   skipped               its upstream is another one",
            "  cfg     skipped               no base recorded",
            "                                fix: re-add it: patchkit add cfg --base FILE",
            "  1 broken, 1 clean, 1 conflict, 1 deleted, 1 moved, 1 partially-upstreamed, 2 skipped, 1 upstreamed",
            "",
        ]
    )


def test_table_of_nothing_to_rebase() -> None:
    assert table(Plan("vllm", "v0.6.0", Pin("git", commit=COMMIT))) == (
        "rebase vllm: v0.6.0 -> 0123456789ab\n  no patches\n"
    )


def test_summary_names_drops_skips_breakage_interdiffs_and_review() -> None:
    plan = every_outcome()
    head, *rest = plan.interdiffs["moved"].lines()
    assert summary_markdown(plan) == "\n".join(
        [
            "## Rebase of `vllm`",
            "",
            "From `v0.6.0` to `0123456789ab`.",
            "",
            "| patch | outcome | notes |",
            "| --- | --- | --- |",
            "| `moved` | moved | moved `w.py` → `v1/w.py` |",
            "| `partly` | partially-upstreamed | upstream took `@@ -1,5 +1,5 @@` |",
            "| `took` | upstreamed | upstream took `@@ -1,5 +1,5 @@`, `@@ -10,4 +10,5 @@` |",
            "| `clash` | conflict | conflict at lines 2-8 |",
            "| `gone` | deleted |  |",
            "| `review` | clean |  |",
            "| `broken` | broken | line 3: undefined-name `gc` |",
            "",
            "### Drop candidates",
            "",
            "- `took`: upstream has the change",
            "- `gone`: file deleted upstream",
            "",
            "### Not rebased",
            "",
            "- `wheel`: its upstream is another one",
            "- `cfg`: no base recorded; fix: re-add it: `patchkit add cfg --base FILE`",
            "",
            "### Broken (the merge would fail when imported)",
            "",
            "- `broken`: **accepted as broken**: gc comes from a plugin",
            "  - `w.py:3`: name 'gc' is not defined",
            "",
            "### What changed in each patch (old patch against new)",
            "",
            f"- `moved`: {head}",
            "",
            "  ```diff",
            *(f"  {line}" for line in rest),
            "  ```",
            "",
            "### Review",
            "",
            f"- `review`: {REVIEW}",
            "",
        ]
    )
