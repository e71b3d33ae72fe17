"""Upstream reports: the upstreams and their pins, and ``upstream find-base``'s evidence per overlay."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.core.outcome import Outcome
    from patchkit.edit.upstreams import UpstreamRow
    from patchkit.importing.findbase import Found


def listing(rows: list[UpstreamRow], fmt: str) -> str:
    """``upstream list``: each upstream's name, source kind, pin, patches and location."""
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True) + "\n"
    if not rows:
        return "no upstreams (register one: patchkit upstream add NAME --git URL --commit REV)\n"
    width = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        patches = f"{len(r['patches'])} patch{'es' * (len(r['patches']) != 1)}"
        lines.append(
            f"{r['name'].ljust(width)}  {r['source']:<5}  {r['pin']}  {patches}  {r['location'] or ''}".rstrip()
        )
    return "".join(f"{line}\n" for line in lines)


def found(upstream: str, results: list[Found], outcome: Outcome | None, fmt: str) -> str:
    """``upstream find-base``: every candidate's evidence per overlay, then what was recorded."""
    if fmt == "json":
        doc = {
            "upstream": upstream,
            "found": [f.as_dict() for f in results],
            "recorded": bool(outcome and outcome.changes),
        }
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    lines = []
    for f in results:
        lines.append(f"{f.patch} ({f.path}) in upstream {upstream}, {len(f.tried)} candidates:")
        width = max(len(t.candidate.label) for t in f.tried)
        for t in f.tried:
            what = "absent" if t.sha256 is None else "exact" if t.exact else f"{t.distance} lines differ"
            lines.append(f"  {t.candidate.label.ljust(width)}  {t.candidate.ref[:12]:<12}  {what}")
        lines.append(f"  -> {f.verdict()}")
    if outcome is not None:
        lines += [f"{c.what}: {c.old} -> {c.new}" for c in outcome.changes]
        lines += [f"wrote {rel}" for rel in outcome.written]
    elif any(f.best is not None for f in results):
        lines.append("nothing recorded; pin what was found with --record")
    return "".join(f"{line}\n" for line in lines)
