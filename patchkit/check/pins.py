"""Rules about the pins themselves: every pinned file is there and matches, targets are distinct, the form canonical."""

from __future__ import annotations

from patchkit.check.state import State, field_name
from patchkit.core.findings import Finding
from patchkit.core.values import LOCKFILE_NAME
from patchkit.lockfile.tomlpos import FieldPath


def pinned_files(state: State) -> list[Finding]:
    """Existence, containment and hashes of every pinned file."""
    out: list[Finding] = []
    files = state.files
    named = state.named() if files.missing or files.unsafe else []
    for n in named:
        rel = n.path.path
        if rel in files.missing:
            out.append(
                state.lock_finding(
                    "missing",
                    (*n.field[:-1], "file") if n.field[-1] == "sha256" else n.field,
                    f"{rel} ({n.owner}) is pinned but does not exist",
                    f"restore it (git checkout -- {rel}) or drop the entry (patchkit remove)",
                )
            )
        elif rel in files.unsafe:
            out.append(
                Finding(
                    "unsafe-path", rel, None, f"{rel} ({n.owner}) {files.unsafe[rel]}", "replace it with a regular file"
                )
            )
    told: set[str] = set()
    for n in state.named():
        rel = n.path.path
        if rel in files.unreadable and rel not in told:
            told.add(rel)
            out.append(Finding("unreadable", rel, None, f"cannot read: {files.unreadable[rel]}"))
            continue
        got = files.sha256.get(rel)
        if got is not None and got != n.sha256:
            out.append(
                state.lock_finding(
                    "hash-mismatch",
                    n.field,
                    f"{rel} ({n.owner}) does not match its pin: pinned {n.sha256[:12]}…, file has {got[:12]}…",
                    "if the change is intended: patchkit lock; if not: git checkout -- " + rel,
                )
            )
    return out


def targets(state: State) -> list[Finding]:
    """Every container target is claimed once, and none lies below another file's target."""
    out: list[Finding] = []
    lock = state.lock
    claimed: dict[str, FieldPath] = {}
    owners: list[tuple[FieldPath, str]] = []
    for i, p in enumerate(lock.patches):
        owners.append((("patches", i, "target"), str(p.target)))
    for key, items in (("tuning", lock.tuning), ("artifacts", lock.artifacts)):
        for i, a in enumerate(items):
            if a.target is not None:
                owners.append(((key, i, "target"), str(a.target)))
    files_at = {target: path for path, target in reversed(owners)}  # the first claim of each
    for path, target in owners:
        outer = next((d for d in parent_dirs(target) if d in files_at), None)
        if outer is not None:
            out.append(
                state.lock_finding(
                    "nested-target",
                    path,
                    f"target {target} lies below {outer}, which {field_name(files_at[outer], lock)} mounts as a file",
                    "give each file a target that is not below another file's target",
                )
            )
        if target in claimed:
            out.append(
                state.lock_finding(
                    "duplicate-target",
                    path,
                    f"target {target} is already claimed by {field_name(claimed[target], lock)}",
                    "give each file its own container target (edit lockfile.toml or patchkit remove one)",
                )
            )
        else:
            claimed[target] = path
    return out


def parent_dirs(target: str) -> list[str]:
    """``/a/b/c`` -> ``['/a', '/a/b']``: the directories a container path lies in."""
    parts = target.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts))]


def canonical(state: State) -> list[Finding]:
    """The lockfile is in the form patchkit writes, so reviews see only real changes."""
    from patchkit.lockfile.writer import dumps

    canonical = dumps(state.lock).encode()
    if canonical == state.lock_bytes:
        return []
    have, want = state.lock_bytes.split(b"\n"), canonical.split(b"\n")
    line = next((i + 1 for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), None)
    if line is None:
        line = min(len(have), len(want))
    return [
        Finding(
            "lockfile-format",
            LOCKFILE_NAME,
            line,
            "is not in canonical form (hand-edited layout, order or comments); the content is valid",
            "rewrite it canonically: patchkit lock",
        )
    ]
