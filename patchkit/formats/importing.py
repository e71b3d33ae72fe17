"""``patchkit import``: what adopting a hand-kept repository wrote and found, and what --normalize did."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.importing.adopt import ImportResult
    from patchkit.importing.normalize import Normalized


def render(result: ImportResult | None, normalized: Normalized | None, dry_run: bool, fmt: str) -> str:
    """The import's report, the normalization's after it (either may be absent)."""
    if fmt == "json":
        payload: dict[str, object] = {}
        if result is not None:
            payload["import"] = result.as_dict()
        if normalized is not None:
            payload["normalize"] = normalized.as_dict()
        return json.dumps(payload, indent=2, sort_keys=True) + "\n"
    lines = _imported(result, dry_run) if result is not None else []
    lines += _normalized(normalized) if normalized is not None else []
    return "".join(f"{line}\n" for line in lines)


def _imported(result: ImportResult, dry_run: bool) -> list[str]:
    found = result.summary
    head = "would write" if dry_run else "wrote" if result.written else "unchanged:"
    lines = [f"import: {head} lockfile.toml"]
    if result.ignored:
        lines.append(f"import: {'would add' if dry_run else 'added'} .patchkit/ to .gitignore (patchkit's work area)")
    lines.append(
        "found: {images} image(s), {model} model, {upstreams} upstream(s), {overlays} overlay(s), "
        "{modules} module(s), {transformers} transformer(s), {tuning} tuning table(s), {artifacts} other "
        "file(s), {diffs} hand-kept diff(s), {references} upstream reference(s)".format(**found)
    )
    if result.issues:
        notes = sum(1 for i in result.issues if i.severity == "note")
        problems = len(result.issues) - notes
        lines.append(f"\n{problems} problem(s) and {notes} note(s) in the hand-kept repository:")
        for i in result.issues:
            where = i.file if i.line is None else f"{i.file}:{i.line}"
            lines.append(f"  {where}: {i.kind}{' (note)' if i.severity == 'note' else ''}: {i.message}")
            if i.fix:
                lines.append(f"      fix: {i.fix}")
    lines.append("\nnext:")
    lines += [f"  {cmd}" for cmd in result.next_commands]
    return lines


def _normalized(n: Normalized) -> list[str]:
    lines = [f"\nnormalize: {len(n.done)} patch(es) now have a canonical diff under upstream/"]
    for name in n.done:
        where = " (base read from upstream)" if name in n.from_upstream else ""
        lines.append(f"  {name}: upstream/{name}.diff{where}")
    lines += [f"  diff-new-file {rel}:{line}: {message}" for _name, rel, line, message in n.found_upstream]
    asked = dict(n.not_upstream)
    for name in n.modules:
        lines.append(f"  {name}: {asked.pop(name, 'a whole new file')}; needs no diff to upstream")
    lines += [f"  {name}: {why}; needs no diff to upstream" for name, why in asked.items()]
    lines += [f"  {name}: {why}\n    fix: {fix}" for name, why, fix in n.unknown]
    lines += _files(n)
    if n.failed:
        lines.append(f"{len(n.failed)} patch(es) keep their hand-kept diffs:")
        lines += [f"  {name}: {why}" for name, why in n.failed]
    return lines


def _files(n: Normalized) -> list[str]:
    """The hand-kept diffs normalize deleted or kept, and the SHA256SUMS entries it dropped."""
    lines = [f"  removed {rel} ({'only a new module' if rel in n.unneeded else 'replaced'})" for rel in n.removed]
    lines += [
        f"  kept {rel}: replaced, but {where} names it (--delete-referenced deletes it)"
        for rel, where in n.kept_referenced
    ]
    lines += [f"  SHA256SUMS: dropped {rel} (the lockfile does not pin it)" for rel in n.dropped_sums]
    return lines
