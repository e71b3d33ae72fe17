"""What ships: the files materialized at their targets, a bundle verified, a series applied to a tree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.core.safe import json_safe, printable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from patchkit.sources.materialize import Materialized


def materialized(results: list[Materialized], out: Path | None, fmt: str) -> str:
    """``materialize``: each file's verdict, how it was made and its target, then the totals."""
    if fmt == "json":
        return json.dumps([r.__dict__ for r in results], indent=2, sort_keys=True) + "\n"
    width = max((len(r.name) for r in results), default=0)
    lines = [f"{'ok  ' if r.ok else 'FAIL'} {r.name.ljust(width)}  {r.how}  {r.target}" for r in results]
    bad = sum(not r.ok for r in results)
    lines.append(f"materialize: {len(results) - bad} ok, {bad} failed" + (f"; written under {out}" if out else ""))
    return "".join(f"{line}\n" for line in lines)


def bundle_verified(problems: list[str], fmt: str) -> str:
    """``verify-bundle``: each problem (names from the archive made safe), then the verdict."""
    if fmt == "json":
        return json.dumps({"ok": not problems, "problems": json_safe(problems)}, indent=2) + "\n"
    lines = [printable(problem) for problem in problems]
    lines.append("verify-bundle: " + ("ok" if not problems else f"FAILED: {len(problems)} problem(s)"))
    return "".join(f"{line}\n" for line in lines)


def applied(lines: list[str], doc: Mapping[str, object], fmt: str) -> str:
    """``apply --to``: the series' report (``series.tree.report`` gives both forms)."""
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    return "".join(f"{line}\n" for line in lines)
