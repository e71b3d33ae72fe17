"""Rules about the repository itself: pending writes and rebases, unsafe paths, files nothing pins."""

from __future__ import annotations

import stat

from patchkit.check.state import JOURNAL, REBASE_STATE, State
from patchkit.core.findings import Finding
from patchkit.core.values import LOCKFILE_NAME


def pending(state: State) -> list[Finding]:
    """An interrupted write of several files, or a rebase waiting for its conflicts."""
    out = []
    if state.journal_foreign:
        out.append(
            Finding(
                "interrupted-write",
                JOURNAL,
                None,
                "a journal in the work tree of a git repository, where patchkit never writes one"
                " (a clone can carry one); it is never carried out",
                f"check the repository (git status), then delete {JOURNAL}",
            )
        )
    elif state.journal_pending:
        out.append(
            Finding(
                "interrupted-write",
                JOURNAL,
                None,
                "a write of several files was interrupted; the repository is between two states",
                "finish it: patchkit status",
            )
        )
    if state.rebase_pending:
        out.append(
            Finding(
                "rebase-in-progress",
                REBASE_STATE,
                None,
                "a rebase waits for its conflicts to be resolved; the repository is still at the old pin",
                "patchkit status; then patchkit rebase --continue or --abort",
                severity="note",
            )
        )
    return out


def lockfile_itself(state: State) -> list[Finding]:
    """lockfile.toml must be a regular file of the repository, like every file it pins."""
    if state.lockfile_unsafe is None:
        return []
    return [
        Finding(
            "unsafe-path",
            LOCKFILE_NAME,
            None,
            f"{LOCKFILE_NAME} {state.lockfile_unsafe}",
            'replace the link with the lockfile itself (cp --remove-destination "$(readlink -f '
            'lockfile.toml)" lockfile.toml)',
        )
    ]


def orphans(state: State) -> list[Finding]:
    """Below the managed directories, every file is pinned: no symlink, stray file or special file."""
    named = {n.path.path for n in state.named()}
    out = [
        Finding("unsafe-path", top, None, f"{top}/ is a symlink", "make it a real directory")
        for top in state.symlinked_dirs
    ]
    for e in state.tree:
        rel = e.rel
        if e.kind == "symlink":
            if rel in named:
                continue  # reported by the file check
            where = "inside" if e.link_inside else "outside"
            out.append(
                Finding(
                    "unsafe-path",
                    rel,
                    None,
                    f"{rel} is a symlink to {e.link} ({where} the repository) and is not pinned",
                    "delete the link; commit the file itself and pin it with patchkit add",
                )
            )
        elif e.kind == "file" and rel not in named:
            if e.staged:
                out.append(
                    Finding(
                        "interrupted-write",
                        rel,
                        None,
                        f"{rel} is a file patchkit staged for a write that was interrupted",
                        "finish or clean up the interrupted write: patchkit status",
                    )
                )
                continue
            out.append(
                Finding(
                    "orphan",
                    rel,
                    None,
                    f"{rel} is not named by the lockfile",
                    f"pin it (patchkit add {rel} --target …) or delete it",
                )
            )
        elif e.kind == "special":
            out.append(
                Finding(
                    "orphan",
                    rel,
                    None,
                    f"{rel} is a {special_kind(e.mode)}, not a file; nothing can pin it",
                    f"delete it (rm {rel})",
                )
            )
    return out


def special_kind(mode: int) -> str:
    """What a file that is neither regular nor a directory nor a symlink is, in words."""
    if stat.S_ISFIFO(mode):
        return "named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"
