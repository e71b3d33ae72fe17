"""Rules about each patch's diff to upstream: it parses, names its base, and reproduces the file that runs.

``patch_diffs`` returns its findings with the number of diffs it verified
(reversed onto the overlay, or applied onto a cached base, and hashed).
"""

from __future__ import annotations

import functools

from patchkit.check.state import State
from patchkit.core import diffs
from patchkit.core.fanout import map_items
from patchkit.core.findings import Finding
from patchkit.core.hashing import sha256_bytes
from patchkit.lockfile.model import Base, Patch, PatchKind


def bases(state: State) -> list[Finding]:
    """A base older than the pinned upstream silently reverts what upstream fixed since."""
    out: list[Finding] = []
    lock = state.lock
    for i, p in enumerate(lock.patches):
        up = lock.upstream(p.base.upstream) if p.base is not None else None
        if p.base is None or up is None:
            continue
        compared = up.compared(p.base)
        if compared is None:
            continue
        field, have, want = compared
        if have == want:
            continue
        out.append(
            state.lock_finding(
                "base-outdated",
                ("patches", i, "base", field),
                f"'{p.name}' is based on {p.base.upstream} {have}, but the deployment pins "
                f"{p.base.upstream} {want}: the overlay may revert upstream changes made since",
                up.rebase_fix(want),
            )
        )
    return out


def patch_diffs(state: State) -> tuple[list[Finding], int]:
    """Each patch's own diff: it parses, covers one file, names its base, and reproduces the patch.

    The diffs are verified on every core (``fanout.map_items``) when there
    are enough of them to pay for the fork: each is a pure function of bytes
    gathered already, and reversing 5,000 diffs is a fifth of a check's work.
    """
    out: list[Finding] = []
    verified = 0
    todo = [i for i, p in enumerate(state.lock.patches) if p.diff is not None]
    for found, ok in map_items(functools.partial(_patch_diff, state), todo, min_items=SPREAD_FROM):
        out += found
        verified += ok
    return out, verified


# Diffs to verify before they go to every core: starting the workers and gathering their findings costs
# about 30 ms, what a second core saves on some 1,300 diffs (about 50 us each on the 2-core development machine).
SPREAD_FROM = 2000


def _patch_diff(state: State, i: int) -> tuple[list[Finding], int]:
    """The findings of patch ``i``'s diff and whether it was verified (1) or not (0)."""
    p = state.lock.patches[i]
    drel = p.diff.file.path if p.diff is not None else ""
    data = state.readable(drel)
    if data is None:
        return [], 0
    if not data:
        return _identical(state, i, p)
    try:
        files = diffs.parse(data)
    except diffs.DiffError as e:
        return [
            Finding(
                "diff-invalid",
                drel,
                bad.line,
                f"diff of '{p.name}' does not parse: {bad.message}",
                f"regenerate it: patchkit diff --write {p.name}",
            )
            for bad in every_bad_hunk(data, e)
        ], 0
    if len(files) != 1:
        return [
            Finding(
                "diff-invalid",
                drel,
                files[1].line,
                f"diff of '{p.name}' covers {len(files)} files; a patch's diff covers its one base file",
                f"split it, then patchkit diff --write {p.name}",
            )
        ], 0
    rebuilt, ok = _reconstruction(state, i, p, files[0])
    return _headers(p, files[0], drel) + rebuilt, ok


def _headers(p: Patch, fd: diffs.FileDiff, drel: str) -> list[Finding]:
    """The diff's headers name the patch's base path (``a/<path>`` and ``b/<path>``)."""
    if p.base is None:
        return []
    want = str(p.base.path)
    old, new = diffs.strip_prefix(fd.old_path), diffs.strip_prefix(fd.new_path)
    if old == want and new == want:
        return []
    return [
        Finding(
            "diff-header",
            drel,
            fd.line,
            f"diff headers name {fd.old_path!s} / {fd.new_path!s}; the base is {want} (expected a/{want} and b/{want})",
            f"regenerate it: patchkit diff --write {p.name}",
        )
    ]


def every_bad_hunk(data: bytes, first: diffs.DiffError) -> list[diffs.DiffError]:
    """Every bad hunk of a diff that does not parse strictly, as ``patch`` would read it; else the first error."""
    try:
        _, repairs = diffs.parse_lenient(data)
    except diffs.DiffError:
        return [first]
    return repairs or [first]


def _identical(state: State, i: int, p: Patch) -> tuple[list[Finding], int]:
    """An empty diff: the patch is its base, byte for byte (upstream took the whole change)."""
    if p.base is None:
        return [], 0
    if p.base.sha256 != p.sha256:
        return [
            state.lock_finding(
                "base-mismatch",
                ("patches", i, "base", "sha256"),
                f"the diff of '{p.name}' is empty, so the patch must equal its base, but sha256 "
                f"{p.sha256.short}… is not the base's {p.base.sha256.short}…",
                f"regenerate the diff: patchkit diff --write {p.name}",
            )
        ], 0
    return [
        state.lock_finding(
            "upstreamed",
            ("patches", i, "name"),
            f"'{p.name}' is identical to upstream {p.base.path}: upstream has the whole change",
            f"drop it: patchkit remove {p.name}",
            severity="note",
        )
    ], 1


def _reconstruction(state: State, i: int, p: Patch, fd: diffs.FileDiff) -> tuple[list[Finding], int]:
    """An overlay's diff reversed gives its pinned base; a diff-only patch's diff on its base gives the pin."""
    if p.kind is not PatchKind.OVERLAY or p.base is None:
        return [], 0
    if p.file is not None:
        return _committed(state, i, p, p.base, fd, str(p.file))
    return _diff_only(state, i, p, p.base, fd)


def _committed(
    state: State, i: int, p: Patch, pinned: Base, fd: diffs.FileDiff, prel: str
) -> tuple[list[Finding], int]:
    """A committed overlay: its diff undone onto it gives its pinned base, with every hunk where it says."""
    drel = str(p.diff.file) if p.diff else ""
    patch_bytes = state.readable(prel)
    if patch_bytes is None:
        return [], 0
    try:
        base, placed = diffs.apply_placed(fd, patch_bytes, reverse=True)
    except diffs.ApplyError as e:
        return [
            Finding(
                "diff-stale",
                drel,
                e.line,
                f"diff no longer matches the overlay {prel}: {e.message}",
                "regenerate the diff from the base: patchkit lock (after an intended edit of the "
                f"overlay) or patchkit diff --write {p.name}",
            )
        ], 0
    misplaced = _misplaced(placed, drel, f"the overlay {prel}", p.name)
    if misplaced:
        return misplaced, 0
    got = sha256_bytes(base)
    if got != pinned.sha256.hex:
        return [
            state.lock_finding(
                "base-mismatch",
                ("patches", i, "base", "sha256"),
                f"reversing {drel} on {prel} gives a base with sha256 {got[:12]}…, "
                f"not the pinned base {pinned.sha256.short}…",
                f"regenerate the diff against the pinned base: patchkit diff --write {p.name}",
            )
        ], 0
    return [], 1


def _diff_only(state: State, i: int, p: Patch, pinned: Base, fd: diffs.FileDiff) -> tuple[list[Finding], int]:
    """A diff-only overlay: the file that runs is base + diff; verifiable when the base is at hand."""
    drel = str(p.diff.file) if p.diff else ""
    base_bytes = state.view.blob(pinned.sha256.hex)
    if base_bytes is None:
        return [
            state.lock_finding(
                "base-unavailable",
                ("patches", i, "base"),
                f"diff-only patch '{p.name}': base {pinned.path} is not in the local cache, "
                "so the materialized file's sha256 was not recomputed",
                "fetch the base and verify the file that runs: patchkit materialize",
                severity="note",
            )
        ], 0
    try:
        materialized, placed = diffs.apply_placed(fd, base_bytes)
    except diffs.ApplyError as e:
        return [Finding("diff-stale", drel, e.line, f"diff does not apply to the pinned base: {e.message}")], 0
    misplaced = _misplaced(placed, drel, "the pinned base", p.name)
    if misplaced:
        return misplaced, 0
    got = sha256_bytes(materialized)
    if got != p.sha256.hex:
        return [
            state.lock_finding(
                "hash-mismatch",
                ("patches", i, "sha256"),
                f"base + {drel} gives sha256 {got[:12]}…, not the pinned {p.sha256.short}…",
                "if the diff change is intended: patchkit lock",
            )
        ], 0
    return [], 1


def _misplaced(placed: list[diffs.Placed], drel: str, onto: str, name: str) -> list[Finding]:
    """A hunk ``git apply`` takes, but not where its header says: patchkit's diffs state their lines exactly.

    ``git apply`` looks for a hunk near its stated line and takes it there
    (an offset), and never checks the new side's start; a diff patchkit
    verifies must state both exactly, so such a hunk is a ``diff-stale``
    finding naming what is wrong, never a result other than git's.
    """
    return [
        Finding(
            "diff-stale",
            drel,
            hunk.line,
            f"the diff's hunk headers do not say where it applies to {onto} (git apply would still take it): "
            f"{hunk.problem}",
            f"regenerate the diff from the base: patchkit diff --write {name}",
        )
        for hunk in placed
        if hunk.problem is not None
    ][:1]


def overlays_have_diffs(state: State) -> list[Finding]:
    """Every overlay shows reviewers what it changes: a diff to upstream, from a known base."""
    out: list[Finding] = []
    lock = state.lock
    covered = {n for d in lock.diffs for n in d.patches}
    for i, p in enumerate(lock.patches):
        if p.kind is not PatchKind.OVERLAY:
            continue
        if p.diff is None and p.name not in covered:
            out.append(
                state.lock_finding(
                    "no-diff",
                    ("patches", i, "name"),
                    f"overlay '{p.name}' ({p.file}) has no diff to upstream: reviewers cannot see what it changes",
                    "state its upstream and full base commit ([patches.origin]), then "
                    "patchkit import --normalize --fetch",
                )
            )
        if p.base is None and p.origin is not None and p.origin.commit and len(p.origin.commit) == 40:
            # A full commit is stated: the base is known, only not pinned ([base]) yet.
            out.append(
                state.lock_finding(
                    "base-unpinned",
                    ("patches", i, "name"),
                    f"overlay '{p.name}': its base is stated ({p.origin.repository or '?'} @ {p.origin.commit[:12]}…"
                    f"{', ' + str(p.origin.path) if p.origin.path else ''}) but not pinned in [base] yet",
                    "patchkit import --normalize pins it (--fetch reads the base from upstream at that commit)",
                    severity="note",
                )
            )
        elif p.base is None and p.origin is not None:
            stated = f" (stated: {p.origin.repository or '?'} {p.origin.commit})" if p.origin.commit else ""
            out.append(
                state.lock_finding(
                    "base-unknown",
                    ("patches", i, "name"),
                    f"overlay '{p.name}': its upstream base is not established{stated}",
                    "patchkit import --normalize rebuilds it from the diffs (--fetch: from upstream at its commit)",
                    severity="note",
                )
            )
    return out
