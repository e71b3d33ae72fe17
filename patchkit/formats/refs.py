"""``patchkit refs``: each patch's upstream references and their states, what a refresh found, drop candidates."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.core.values import Reference
    from patchkit.tracking.refs import PatchRefs, Refresh, RefreshStatus


def render(assessed: list[PatchRefs], result: Refresh | None, written: list[str], fmt: str) -> str:
    """The report of ``refs`` (``result``: what ``--refresh`` found, None without it; ``written``: files it wrote)."""
    if fmt == "json":
        doc: dict[str, object] = {"patches": [a.as_dict() for a in assessed], "written": written}
        if result is not None:
            doc["refresh"] = {
                "outcomes": {o.ref.text: o.status.value for o in result.outcomes},
                "head_moved": [
                    {"ref": m.ref.text, "recorded": m.recorded.sha, "now": m.now.sha} for m in result.head_moves
                ],
                "rate_limit": result.rate.__dict__ if result.rate else None,
                "error": result.failure.message if result.failure else None,
            }
        return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    return "".join(f"{line}\n" for line in _text(assessed, result, written))


def _text(assessed: list[PatchRefs], result: Refresh | None, written: list[str]) -> list[str]:
    outcomes = {o.ref: o.status for o in result.outcomes} if result is not None else {}
    lines: list[str] = []
    for pr in assessed:
        if pr.refs:
            lines += _patch_refs(pr, outcomes)
    if result is not None:
        lines += _refresh(result, written)
    drops = [pr.patch for pr in assessed if pr.drop_candidate]
    if drops:
        lines.append(f"drop candidates: {', '.join(drops)}")
    if not any(pr.refs for pr in assessed):
        lines.append("no patch has upstream references")
    return lines


def _patch_refs(pr: PatchRefs, outcomes: dict[Reference, RefreshStatus]) -> list[str]:
    """One patch's standing and each reference's state, with what this refresh did to it unless it changed."""
    from patchkit.tracking.refs import RefreshStatus

    lines = [f"{pr.patch}: {pr.standing.value}"]
    for v in pr.refs:
        title = f"  {v.title}" if v.title else ""
        checked = f" (checked {v.age})" if v.age else ""
        how = outcomes.get(v.ref)
        fresh = f" [{how.value}]" if how is not None and how is not RefreshStatus.CHANGED else ""
        lines.append(f"  {v.ref.text}: {v.summary}{checked}{fresh}{title}")
    return lines


def _refresh(result: Refresh, written: list[str]) -> list[str]:
    """What a refresh found beyond the states: moved heads, references not found, the rate limit, files written."""
    lines = [
        f"head moved: {m.ref.text} {m.recorded.short} -> {m.now.short} "
        "(force-push or new commits): the backport may be out of date"
        for m in result.head_moves
    ]
    lines += [f"not found: {ref.text} does not exist upstream (or is private)" for ref in result.not_found]
    if result.rate is not None:
        lines.append(f"GitHub API: {result.rate.describe()}")
    lines += [f"wrote {rel}" for rel in written]
    if not written and result.failure is None:
        lines.append("recorded states are up to date")
    return lines
