"""``patchkit verify``: each file's signature verdict and signer, then the totals."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from patchkit.core.safe import printable

if TYPE_CHECKING:
    from patchkit.signing.signatures import FileResult


def verified(results: list[FileResult], fmt: str) -> str:
    """The report of ``verify`` over ``results``; names and principals come from files, so no raw controls."""
    from patchkit.signing.signatures import Outcome

    failed = [r for r in results if r.outcome is Outcome.FAILED]
    if fmt == "json":
        return json.dumps({"ok": not failed, "files": [r.as_dict() for r in results]}, indent=2, sort_keys=True) + "\n"
    lines = []
    for r in results:
        by = f"  signed by {printable(r.signer)} ({r.key})" if r.signer else ""
        lines.append(f"{'ok  ' if r.outcome is Outcome.VERIFIED else 'FAIL'} {printable(r.file)}{by}")
        lines += [f"       {printable(line)}" for line in (*r.problems, *r.details)]
    lines.append(f"verify: {len(results) - len(failed)} ok, {len(failed)} failed")
    return "".join(f"{line}\n" for line in lines)
