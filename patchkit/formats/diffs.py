"""``patchkit diff``: each overlay's diff against its base, as JSON or a diffstat (the diffs themselves are bytes)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.edit.changes import PatchDiff


def render(result: list[PatchDiff], show_stat: bool, fmt: str) -> bytes:
    """What ``diff`` prints: the JSON document, the diffstat, or every diff's bytes as they are."""
    if fmt == "json":
        doc = [
            {
                "name": d.name,
                "path": d.path,
                "added": d.added,
                "removed": d.removed,
                "diff": d.diff.decode("utf-8", "replace"),
            }
            for d in result
        ]
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    if show_stat:
        width = max((len(d.name) for d in result), default=0)
        lines = [f" {d.name.ljust(width)} | +{d.added} -{d.removed}  {d.path}" for d in result]
        total_a, total_r = sum(d.added for d in result), sum(d.removed for d in result)
        patches = "patch" if len(result) == 1 else "patches"
        lines.append(f" {len(result)} {patches}, {total_a} insertions(+), {total_r} deletions(-)")
        return "".join(f"{line}\n" for line in lines).encode()
    return b"".join(d.diff for d in result)
