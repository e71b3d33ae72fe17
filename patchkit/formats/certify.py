"""Recorded audits: an audit certified, every patch's coverage against the policy, audits imported."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.core.findings import Finding
    from patchkit.signing.certify import Audit, Import, Status


def _json(doc: object) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def certified(made: Audit, name: str, criteria: tuple[str, ...], fmt: str) -> str:
    """``audit certify``: the entry recorded."""
    if fmt == "json":
        return _json({"audit": made.index, **made.fields()})
    what = f"the change since {made.delta_from[:12]}" if made.delta_from else "in full"
    return f"recorded audit[{made.index}]: {name} ({what}) for {', '.join(criteria)} by {made.who}\n"


def statuses(found: list[Status], problems: list[Finding], ok: bool, fmt: str) -> str:
    """``audit status``: each patch's coverage of each criterion (a needed delta with its change), then problems."""
    from patchkit.signing.certify import Coverage

    if fmt == "json":
        return _json(
            {"patches": [_status_json(s) for s in found], "problems": [p.as_dict() for p in problems], "ok": ok}
        )
    lines = []
    for s in found:
        lines.append(_status_line(s))
        lines += [f"    {line}" for line in (s.change if s.coverage is Coverage.NEEDS_DELTA else ())]
    lines += [f"{p.severity}: {p.message}" for p in problems]
    return "".join(f"{line}\n" for line in lines)


def _status_line(s: Status) -> str:
    by = "; ".join(
        f"{a.who} {a.date}{' (delta)' if a.delta_from else ''}{f' via import {a.source}' if a.source else ''}"
        for a in s.audits
    )
    return f"{s.patch}: {s.criterion}: {s.coverage.value}" + (f" ({by})" if by else "")


def _status_json(s: Status) -> dict[str, object]:
    return {
        "patch": s.patch,
        "criterion": s.criterion,
        "status": s.coverage.value,
        "audits": [a.index for a in s.audits],
        "since": s.since,
        "change": list(s.change),
    }


def imported(imp: Import, fmt: str) -> str:
    """``audit import``: the audits file taken, at which revision, and whom it trusts."""
    if fmt == "json":
        return _json({"name": imp.name, **imp.fields()})
    trusting = ", ".join(imp.trust)
    return f"imported {imp.source} at {imp.rev} as {imp.file} (sha256 {imp.sha256[:12]}), trusting {trusting}\n"
