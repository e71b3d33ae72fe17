"""Rules about the diffs ``patchkit import`` adopted from a hand-kept repository.

They parse, reproduce the files they describe, and are against upstream
(not incremental against an earlier overlay, not a whole new file hiding what an
overlay changes), and each part describes a pinned file (``diff-unmatched``,
as import reports it). ``hand_diffs`` returns its findings with the number of
chains it verified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.check.state import State
from patchkit.core.findings import Finding
from patchkit.lockfile.model import Patch, PatchKind

if TYPE_CHECKING:
    from patchkit.importing import handdiffs


def hand_diffs(state: State) -> tuple[list[Finding], int]:
    """Diffs adopted by ``patchkit import``: they parse, reproduce their files, and are against upstream."""
    if not state.lock.diffs:
        return [], 0
    return _checked(state)


def _checked(state: State) -> tuple[list[Finding], int]:
    """Every finding, and the chains verified."""
    from patchkit.importing import handdiffs

    lock = state.lock
    out: list[Finding] = []
    found = handdiffs.chains(lock, lambda d: state.readable(str(d.file)))
    for d in lock.diffs:
        rel = str(d.file)
        out += [
            Finding(
                "diff-invalid",
                rel,
                e.line,
                f"does not parse: {e.message}",
                "rewrite it canonically: patchkit import --normalize",
            )
            for e in found.strict.get(rel, [])
        ]
        if d.against == "overlay" and rel in found.first_line:
            out.append(
                Finding(
                    "diff-incremental",
                    rel,
                    found.first_line[rel],
                    "is against an earlier version of the overlay, not against upstream: "
                    "it does not show what the deployment changes",
                    "fold it into one diff against upstream: patchkit import --normalize",
                )
            )
    by_name = {p.name: p for p in lock.patches}
    for name in sorted(found.adds_whole_file):
        p = by_name[name]
        if p.kind is PatchKind.OVERLAY:
            # An overlay (the provenance says upstream has the file) that a diff adds whole.
            out.append(
                state.lock_finding(
                    "diff-new-file",
                    ("patches", lock.patches.index(p), "name"),
                    f"overlay '{name}' ({p.file}) exists upstream, but its hand-kept diff adds it as a new "
                    "file (--- /dev/null): the diff hides what the overlay changes",
                    "patchkit import --normalize --fetch rebuilds the diff against upstream at the stated commit",
                )
            )
        else:
            out += _module_maybe_upstream(state, p, found)
    out += _whole_files_stale(state, found)
    out += _unmatched(state, found)
    verified = 0
    for name, chain in found.parts.items():
        p = by_name[name]
        prel = str(p.file)
        data = state.readable(prel) if p.kind is PatchKind.OVERLAY else None
        if data is None:
            continue
        undone = handdiffs.undo(data, chain)
        out += [
            Finding(
                "diff-stale",
                rel,
                line,
                f"no longer reproduces {prel}: {why}",
                f"regenerate the diff of '{name}' against upstream (the overlay changed after it was made)",
            )
            for rel, line, why in undone.stale
        ]
        if not undone.stale:
            verified += 1
    return out, verified


def _whole_files_stale(state: State, found: handdiffs.Chains) -> list[Finding]:
    """A ``/dev/null`` part (of a multi-file diff, often) whose body is no longer the file it adds."""
    from patchkit.importing.handdiffs import whole_file_stale

    by_name = {p.name: p for p in state.lock.patches}
    out = []
    for name, parts in sorted(found.whole_parts.items()):
        prel = str(by_name[name].file)
        data = state.readable(prel)
        for rel, fd in parts if data is not None else ():
            if (why := whole_file_stale(data, fd)) is not None:  # type: ignore[arg-type]
                out.append(
                    Finding(
                        "diff-stale",
                        rel,
                        fd.line,
                        f"no longer reproduces {prel}: {why}",
                        f"regenerate this part of the diff from {prel}, or drop it (a module needs no diff)",
                    )
                )
    return out


def _unmatched(state: State, found: handdiffs.Chains) -> list[Finding]:
    """Each part of a hand-kept diff that describes no pinned patch (``diff-unmatched``), at its file header.

    Import reports such a part of a multi-file diff (a file since deleted or
    renamed, a file the deployment never mounted); it describes nothing the
    deployment runs, so nothing checks it. A part the entry's patches do not
    match is matched again, as import matched it, against every pinned patch:
    one that describes another pinned file is not unmatched.
    """
    from patchkit.core import diffs
    from patchkit.importing import handdiffs

    pinned = [p for p in state.lock.patches if p.file is not None]
    paths = {p.name: str(p.origin.path) if p.origin and p.origin.path else None for p in pinned}
    index = handdiffs.Index([handdiffs.Candidate(p.name, str(p.file), str(p.target), paths[p.name]) for p in pinned])
    out = []
    for rel in sorted(found.unmatched):
        data = state.readable(rel)
        try:
            parts = diffs.parse_lenient(data)[0] if data is not None else []
        except diffs.DiffError:
            continue  # diff-invalid says it
        out += [
            Finding(
                "diff-unmatched",
                rel,
                fd.line,
                f"the file diff for {fd.new_path or fd.old_path} matches no pinned file: it describes nothing "
                "the deployment runs",
                "mount the file it describes, or delete this part of the diff",
            )
            for fd in parts
            if handdiffs.match(fd, index).candidate is None
        ]
    return out


def _module_maybe_upstream(state: State, p: Patch, found: handdiffs.Chains) -> list[Finding]:
    """A note for a module only a ``/dev/null`` diff made a module, mounted in an upstream's package tree.

    Offline, nothing tells whether that upstream has the file: if it does, the
    module is an overlay whose diff hides what it changes. A provenance row
    naming the file decides instead, so then nothing is said.
    """
    from patchkit.importing.normalize import maybe_upstream_note, module_maybe_upstream

    asks = module_maybe_upstream(state.lock, p, found, state.view.provenance_names)
    if asks is None:
        return []
    rel, line = found.new_file_parts[p.name][0]
    message, fix = maybe_upstream_note(p.name, str(p.file), str(asks[1]), asks[0].name)
    return [Finding("module-maybe-upstream", rel, line, message, fix, severity="note")]
