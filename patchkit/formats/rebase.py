"""A rebase as a report: the terminal table, the pull-request summary in Markdown, and the JSON.

The overlays' rebase reports a ``Plan`` (``patchkit.rebase.overlays``); the
series' rebase a ``Done`` (``patchkit.rebase.bump``), one ``PatchRebase`` per
patch. Neither engine renders: the commands call these.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from patchkit.core.safe import printable
from patchkit.rebase import explain
from patchkit.rebase.merge import Outcome
from patchkit.rebase.overlays import PatchResult, Plan, Started, conflict_file, review_lines
from patchkit.trust.pycheck import Problem

if TYPE_CHECKING:  # the series' machinery is imported by the series' reports only: an overlays' rebase needs none
    from patchkit.rebase.bump import Done
    from patchkit.rebase.series import PatchRebase
    from patchkit.series.stalepins import StalePin

# --------------------------------------------------------------------------- an overlays' rebase


def table(result: Plan) -> str:
    """The outcome of each patch, one line each, for a terminal."""
    lines = [f"rebase {result.upstream}: {result.old_pin} -> {result.new_pin.describe()}"]
    width = max((len(n) for n in [*(r.name for r in result.results), *(s.name for s in result.skipped)]), default=4)
    for r in result.results:
        lines += _table_rows(result, r, width)
    for sk in result.skipped:
        lines.append(f"  {sk.name.ljust(width)}  {'skipped':<21} {sk.reason}")
        if sk.fix:
            lines.append(f"  {'':{width}}  {'':<21} fix: {sk.fix}")
    lines.append(_table_counts(result))
    return "\n".join(lines) + "\n"


def _table_detail(r: PatchResult) -> str:
    """What a patch's line says after its outcome: the move, the conflict regions, what upstream took, the decision."""
    if r.outcome is Outcome.MOVED or r.new_path != r.old_path:
        return f"{r.old_path} -> {r.new_path}"
    if r.outcome is Outcome.CONFLICT and r.merge is not None:
        regions = ", ".join(f"lines {c.start}-{c.end}" for c in r.merge.conflicts)
        return f"{conflict_file(r)}: {regions}"
    if r.outcome is Outcome.PARTIALLY_UPSTREAMED and r.merge is not None:
        return "upstream took " + ", ".join(h.header for h in r.merge.hunks_upstreamed)
    if r.outcome is Outcome.UPSTREAMED:
        return "drop candidate: upstream has the change"
    if r.outcome is Outcome.DELETED:
        return f"{r.old_path} is gone upstream: decide (--drop {r.name})"
    return ""


def _table_rows(result: Plan, r: PatchResult, width: int) -> list[str]:
    """One patch's lines: its outcome, then indented under it the problems, acceptance, review and interdiff."""
    pad = f"  {'':{width}}  "
    lines = [f"  {r.name.ljust(width)}  {r.outcome.value:<21} {_table_detail(r)}".rstrip()]
    lines += [f"{pad}resolved as recorded ({i[:12]})" for i in result.remembered.get(r.name, ())]
    if r.name in result.causes:
        lines += [f"{pad}{line}" for line in result.causes[r.name].lines()]
    lines += [f"{pad}{_problem_line(r, p)}" for p in r.problems]
    if r.name in result.accepted:
        lines.append(f"{pad}accepted as broken: {result.accepted[r.name]}")
    if r.merge is not None:
        lines += [f"{pad}review: {line}" for line in review_lines(r.merge.review_flags)]
    if r.name in result.interdiffs:
        head, *rest = result.interdiffs[r.name].lines()
        lines.append(f"{pad}interdiff: {head}")
        lines += [f"{pad}  {line}" for line in rest]
    return lines


def _table_counts(result: Plan) -> str:
    """The closing line: how many patches had each outcome (and were skipped), or that there were none."""
    counts: dict[str, int] = {}
    for r in result.results:
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    if result.skipped:
        counts["skipped"] = len(result.skipped)
    return "  " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) if counts else "  no patches"


def _problem_line(r: PatchResult, p: Problem) -> str:
    return f"{'broken' if p.blocking else 'not checked'}: {p.text(r.new_path)}"


def summary_markdown(result: Plan) -> str:
    """A pull-request description: revisions, outcomes, drop candidates, what to review."""
    out = [
        f"## Rebase of `{result.upstream}`",
        "",
        f"From `{result.old_pin}` to `{result.new_pin.describe()}`.",
        "",
        "| patch | outcome | notes |",
        "| --- | --- | --- |",
    ]
    out += [f"| `{r.name}` | {r.outcome.value} | {'; '.join(_summary_notes(r, result))} |" for r in result.results]
    out += _summary_drops(result)
    out += _summary_skipped(result)
    out += _summary_broken(result)
    out += _summary_interdiffs(result)
    out += _summary_review(result)
    return "\n".join(out) + "\n"


def _summary_notes(r: PatchResult, result: Plan) -> list[str]:
    """The notes cell of a patch's row: its move, what upstream took, the conflicts, the blocking problems.

    Then the recorded resolutions replayed, and the upstream commits (with their PRs) that touched its lines.
    """
    notes = [f"resolved as recorded (`{i[:12]}`)" for i in result.remembered.get(r.name, ())]
    if r.new_path != r.old_path:
        notes.append(f"moved `{r.old_path}` → `{r.new_path}`")
    if r.merge is not None and r.merge.hunks_upstreamed:
        notes.append("upstream took " + ", ".join(f"`{h.header}`" for h in r.merge.hunks_upstreamed))
    if r.merge is not None and r.merge.conflicts:
        notes.append(", ".join(f"conflict at lines {c.start}-{c.end}" for c in r.merge.conflicts))
    notes += [f"line {p.line}: {p.kind}" + (f" `{p.name}`" if p.name else "") for p in r.problems if p.blocking]
    if r.name in result.causes:
        notes.append(result.causes[r.name].markdown())
    return notes


def _summary_drops(result: Plan) -> list[str]:
    """The section naming the patches that may go: upstream has their change, or their file is gone."""
    drops = [r for r in result.results if r.outcome in (Outcome.UPSTREAMED, Outcome.DELETED)]
    if not drops:
        return []
    return ["", "### Drop candidates", ""] + [
        f"- `{r.name}`: {'upstream has the change' if r.outcome is Outcome.UPSTREAMED else 'file deleted upstream'}"
        for r in drops
    ]


def _summary_skipped(result: Plan) -> list[str]:
    """The section naming the patches the rebase did not move, with why and the fix."""
    if not result.skipped:
        return []
    return ["", "### Not rebased", ""] + [
        f"- `{sk.name}`: {sk.reason}" + (f"; fix: {_code(sk.fix)}" if sk.fix else "") for sk in result.skipped
    ]


def _summary_broken(result: Plan) -> list[str]:
    """The section naming the merges that would fail when imported, each problem at its line."""
    broken = [r for r in result.results if any(p.blocking for p in r.problems)]
    if not broken:
        return []
    out = ["", "### Broken (the merge would fail when imported)", ""]
    for r in broken:
        accepted = result.accepted.get(r.name)
        head = f"- `{r.name}`" + (f": **accepted as broken**: {accepted}" if accepted is not None else ":")
        out.append(head)
        out += [f"  - `{r.new_path}:{p.line}`: {p.message}" for p in r.problems if p.blocking]
    return out


def _summary_interdiffs(result: Plan) -> list[str]:
    """The section showing how each patch itself changed (old patch against new), as a diff block."""
    if not result.interdiffs:
        return []
    out = ["", "### What changed in each patch (old patch against new)", ""]
    for name, found in result.interdiffs.items():
        head, *rest = found.lines()
        out += [f"- `{name}`: {head}"] + (["", "  ```diff", *(f"  {line}" for line in rest), "  ```"] if rest else [])
    return out


def _summary_review(result: Plan) -> list[str]:
    """The section listing, per patch, the definitions both sides changed, for a reviewer to check."""
    review = [r for r in result.results if r.merge is not None and r.merge.review_flags]
    if not review:
        return []
    out = ["", "### Review", ""]
    for r in review:
        flags = r.merge.review_flags if r.merge is not None else ()
        out += [f"- `{r.name}`: {line}" for line in review_lines(flags)]
    return out


def _code(fix: str) -> str:
    """A fix in Markdown: the command in backticks, the prose around it as it is."""
    head, sep, command = fix.rpartition("patchkit ")
    return f"{head}`{sep}{command}`" if sep else fix


def result_json(result: Plan) -> dict[str, Any]:
    return {
        "upstream": result.upstream,
        "from": result.old_pin,
        "to": dataclasses.asdict(result.new_pin),
        "patches": [
            {
                **r.as_dict(),
                "resolved_as_recorded": list(result.remembered.get(r.name, ())),
                "upstream_changes": result.causes[r.name].as_dict() if r.name in result.causes else None,
            }
            for r in result.results
        ],
        "skipped": [sk.as_dict() for sk in result.skipped],
        "blocked": [r.name for r in result.blocked],
        "accepted_broken": dict(result.accepted),
        "interdiffs": {name: found.as_dict() for name, found in result.interdiffs.items()},
    }


def started_json(started: Started) -> dict[str, object]:
    """A started rebase as ``--format json`` shows it: the plan, whether it was committed, and its work files."""
    doc = result_json(started.plan)
    doc["committed"] = started.outcome is not None
    doc["work_files"] = started.conflict_files
    doc["nothing_moved"] = started.nothing_moved
    changes = started.outcome.changes if started.outcome is not None else []
    doc["sums_dropped"] = [c.what.removeprefix("SHA256SUMS ") for c in changes if c.what.startswith("SHA256SUMS ")]
    return doc


def started_text(started: Started) -> str:
    """A started rebase as text: the table, then why nothing moved, what was written, or what waits resolved."""
    lines: list[str] = []
    if started.nothing_moved is not None:
        lines.append(f"nothing in the repository changed: {started.nothing_moved}")
        lines += [f"  fix: {fix}" for fix in dict.fromkeys(sk.fix for sk in started.plan.skipped if sk.fix)]
    elif started.outcome is not None:
        lines += [f"{c.what}: {c.old} -> {c.new}" for c in started.outcome.changes if c.what.startswith("SHA256SUMS ")]
        lines += [f"wrote {printable(rel)}" for rel in started.outcome.written]
    else:
        lines.append("nothing in the repository changed; resolve, then: patchkit rebase --continue")
        lines += [f"  resolve {rel}" for rel in started.conflict_files]
    return table(started.plan) + "".join(line + "\n" for line in lines)


# --------------------------------------------------------------------------- a series' rebase


def series_json(done: Done, stale: list[StalePin]) -> dict[str, object]:
    """A series rebase as ``--format json`` shows it; ``stale`` the repository's own pins of the old patches."""
    return {
        "stale_pins": [p.as_dict() for p in stale],
        "series": done.series.name,
        "from": done.old,
        "onto": done.new,
        "committed": done.outcome is not None,
        "patches": [series_patch_json(r, done.causes) for r in done.result.patches],
        "work_files": list(done.work_files),
    }


def series_text(done: Done) -> list[str]:
    """A series rebase as text: its table, then what was written or what waits to be resolved or fixed."""
    lines = series_table(done)
    if done.outcome is not None:
        return lines + [f"wrote {rel}" for rel in done.outcome.written]
    stopped = done.result.stopped
    fix = "resolve" if stopped is None or stopped.conflicted else "fix"
    lines.append(f"nothing in the repository changed; {fix}, then: patchkit rebase --continue")
    lines += [f"  {fix} {rel}" for rel in done.work_files]
    if stopped is not None and stopped.broken and not stopped.conflicted:
        lines.append(f"  or: patchkit rebase --continue --accept-broken {stopped.name} --reason TEXT")
    return lines


def series_table(done: Done) -> list[str]:
    """The per-patch table ``patchkit rebase --series`` prints."""
    lines = [f"rebase series {done.series.name}: {done.old[:12]} -> {done.new[:12]}"]
    width = max((len(p.name) for p in done.series.patches), default=0)
    for r in done.result.patches:
        detail = []
        for f in r.files:
            if f.outcome == "conflict":
                detail.append(f"{f.path} conflicts at {', '.join(f.regions)}")
            elif f.outcome in ("deleted", "upstreamed", "partially-upstreamed"):
                detail.append(f"{f.path} {f.outcome}")
        detail += [f"{p} not in the source (kept as is)" for p in r.absent]
        lines.append(
            f"  {printable(r.name).ljust(width)}  {r.outcome.value:<20}  {printable('; '.join(detail))}".rstrip()
        )
        lines += [f"    {printable(line)}" for line in _series_trust_lines(r)]
        lines += [f"    {printable(line)}" for line in _series_memory_lines(done, r)]
    waiting = [p for p in done.series.patches if p.name not in {r.name for r in done.result.patches}]
    lines += [f"  {p.name.ljust(width)}  waiting" for p in waiting]
    return lines


def _series_memory_lines(done: Done, r: PatchRebase) -> list[str]:
    """The resolutions replayed into the patch's files, and what upstream did to the lines of each conflict."""
    lines = [f"{path}: resolved as recorded ({i[:12]})" for path, ids in r.remembered.items() for i in ids]
    for (name, path), cause in done.causes.items():
        if name == r.name:
            lines += [f"{path}: {line}" for line in cause.lines()]
    return lines


def _series_trust_lines(r: PatchRebase) -> list[str]:
    """What the semantic checks found in the patch's files, the acceptance, and each file's interdiff."""
    lines = [
        f"{'broken' if p.blocking else 'not checked'}: {p.text(path)}"
        for path, problems in r.problems.items()
        for p in problems
    ]
    if r.accepted is not None:
        lines.append(f"accepted as broken: {r.accepted}")
    for path, found in r.interdiffs.items():
        head, *rest = found.lines()
        lines.append(f"interdiff {path}: {head}")
        lines += [f"  {line}" for line in rest]
    return lines


def series_patch_json(r: PatchRebase, causes: dict[tuple[str, str], explain.Cause] | None = None) -> dict[str, Any]:
    """One patch's result for ``--format json``; ``causes``: the rebase's explanations (``Done.causes``)."""
    mine = {path: cause.as_dict() for (name, path), cause in (causes or {}).items() if name == r.name}
    return {
        "resolved_as_recorded": {path: list(ids) for path, ids in r.remembered.items()},
        "upstream_changes": mine,
        "name": r.name,
        "outcome": r.outcome.value,
        "files": [{"path": f.path, "outcome": f.outcome, "regions": list(f.regions)} for f in r.files],
        "absent": r.absent,
        "problems": {path: [p.as_dict() for p in problems] for path, problems in r.problems.items()},
        "accepted_broken": r.accepted,
        "interdiffs": {path: found.as_dict() for path, found in r.interdiffs.items()},
    }


def series_summary_markdown(done: Done) -> str:
    """A pull-request description of a series rebase: outcomes, drop candidates, broken files, interdiffs."""
    from patchkit.rebase.series import PatchOutcome

    out = [
        f"## Rebase of series `{done.series.name}`",
        "",
        f"From `{done.old}` to `{done.new}`.",
        "",
        "| patch | outcome | notes |",
        "| --- | --- | --- |",
    ]
    for r in done.result.patches:
        notes = [f"`{f.path}` {f.outcome}" for f in r.files if f.outcome in ("conflict", "deleted", "upstreamed")]
        notes += [f"`{path}:{p.line}`: {p.kind}" for path, ps in r.problems.items() for p in ps if p.blocking]
        notes += [f"`{path}` resolved as recorded (`{i[:12]}`)" for path, ids in r.remembered.items() for i in ids]
        notes += [f"`{path}`: {c.markdown()}" for (name, path), c in done.causes.items() if name == r.name]
        out.append(f"| `{r.name}` | {r.outcome.value} | {'; '.join(notes)} |")
    seen = {r.name for r in done.result.patches}
    out += [f"| `{p.name}` | waiting | |" for p in done.series.patches if p.name not in seen]
    drops = [r for r in done.result.patches if r.outcome is PatchOutcome.UPSTREAMED]
    if drops:
        out += ["", "### Drop candidates", ""]
        out += [f"- `{r.name}`: upstream has the change (dropped from the series)" for r in drops]
    broken = [r for r in done.result.patches if r.broken]
    if broken:
        out += ["", "### Broken (the merge would fail when imported)", ""]
        for r in broken:
            out.append(f"- `{r.name}`" + (f": **accepted as broken**: {r.accepted}" if r.accepted is not None else ":"))
            out += [f"  - `{path}:{p.line}`: {p.message}" for path, ps in r.problems.items() for p in ps if p.blocking]
    changed = [r for r in done.result.patches if r.interdiffs]
    if changed:
        out += ["", "### What changed in each patch (old patch against new)", ""]
        for r in changed:
            for path, found in r.interdiffs.items():
                head, *rest = found.lines()
                out += [f"- `{r.name}` `{path}`: {head}"]
                out += ["", "  ```diff", *(f"  {line}" for line in rest), "  ```"] if rest else []
    return "\n".join(out) + "\n"
