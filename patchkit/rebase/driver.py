"""The one driver of both rebases, an upstream's overlays and a patch series: start, stop, continue, abort, commit.

What differs between the two is what is merged and how the result goes
into the lockfile (``overlays.py``; ``series.py`` with ``bump.py``); each
hands the driver a ``Kind``: its work area and the reader of its typed
state (``state.OverlayState``, ``state.SeriesState``). Everything else is
this module's, the same for both:

- **start** is refused while any rebase waits (exit 1): one at a time;
- **stop**: the files to resolve and the state, one journaled transaction
  (``stop``); nothing else in the repository changes;
- **--continue** (``resume``) refuses a lockfile changed since the rebase
  started (exit 1: the saved state no longer applies), recognises a rebase
  that was committed but not cleaned up (a crash in between), and reads
  every file waiting, refusing every one still unresolved (missing, a link,
  markers left) in one message (exit 1), before the kind goes on;
- **commit**: records in the state where the lockfile is going, then writes
  the lockfile, the files and SHA256SUMS in one transaction (``commit``),
  then the resolutions learned and the clean-up (``done``);
- **--abort** removes the work area; the repository was never changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from patchkit.core.hashing import sha256_bytes
from patchkit.errors import PatchkitError, Refused
from patchkit.rebase import resolutions
from patchkit.rebase.merge import conflict_markers_remain
from patchkit.rebase.state import OVERLAYS, SERIES, WorkArea
from patchkit.store.repo import Escape, Repo

CONTINUE_HINT = "edit the files to the intended result, remove the markers, then patchkit rebase --continue"
AGAIN_HINT = "patchkit rebase --abort, then run the rebase again"


class Saved(Protocol):
    """A stopped rebase's typed state, as each kind records it."""

    @property
    def lockfile_sha256(self) -> str: ...

    @property
    def committed_lockfile_sha256(self) -> str | None: ...

    def waiting(self) -> tuple[tuple[str, str], ...]: ...

    def as_doc(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=Saved)
P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Kind(Generic[S]):
    """One kind of rebase as the driver sees it: where it waits, how its state reads, what it is called."""

    area: WorkArea
    read: Callable[[Path], S | None]
    what: str


class RebaseInProgress(Refused):
    """A rebase waits for --continue or --abort; another cannot start (exit 1)."""


class RebaseBlocked(PatchkitError):
    """--continue refused: files still unresolved, each named (exit 1)."""

    exit_code = 1

    def __init__(self, problems: list[str], hint: str = CONTINUE_HINT) -> None:
        self.problems = problems
        super().__init__("; ".join(problems), hint)


def refuse_if_waiting(root: Path) -> None:
    """Refuse to start a rebase while one of either kind waits in its work area (exit 1)."""
    for area, what in ((OVERLAYS, "rebase"), (SERIES, "series rebase")):
        if area.present(root):
            raise RebaseInProgress(
                f"a {what} is already in progress ({area.directory}/)",
                "resolve it (patchkit status; patchkit rebase --continue) or patchkit rebase --abort",
            )


def saved(kind: Kind[S], root: Path, lock_bytes: bytes) -> S | None:
    """The state of the rebase ``--continue`` goes on with; None when it was already committed.

    Refused (exit 1) when none waits, or when the lockfile changed since the
    rebase started: the saved state was made for the old one. A lockfile
    that is the one the rebase was committing means the commit went through
    and only the clean-up is left.
    """
    state = kind.read(root)
    if state is None:
        raise Refused(f"no {kind.what} in progress", "start one with patchkit rebase --onto REV")
    digest = sha256_bytes(lock_bytes)
    if state.committed_lockfile_sha256 == digest:
        return None
    if state.lockfile_sha256 != digest:
        raise Refused(
            f"lockfile.toml changed since the {kind.what} started; the saved state no longer applies", AGAIN_HINT
        )
    return state


def resume(
    kind: Kind[S],
    repo: Repo,
    lock_bytes: bytes,
    prepare: Callable[[S], P],
    go_on: Callable[[P, dict[str, bytes]], R],
    refused: Callable[[P], list[str]] = lambda saved: [],
) -> R | None:
    """``--continue``: the saved state (``saved``), every file waiting read back resolved, then the kind goes on.

    ``prepare`` is the kind's reading of its state (the overlays' saved plan,
    its merges from the cache), so that a state that cannot be used is
    refused before any work file is read; ``refused`` the kind's own reasons
    to refuse, said with the unresolved files; ``go_on`` merges or commits
    with the resolutions (by the key ``state.waiting()`` gives). None when the
    rebase had already been committed: its work area is removed.
    """
    state = saved(kind, repo.root, lock_bytes)
    if state is None:
        kind.area.clear(repo.root)
        return None
    ready = prepare(state)
    return go_on(ready, read_resolutions(repo, state.waiting(), refused(ready)))


def read_resolutions(repo: Repo, waiting: Iterable[tuple[str, str]], refused: Iterable[str] = ()) -> dict[str, bytes]:
    """The resolved bytes of every file waiting, by its key; every file still unresolved refused at once (exit 1).

    ``waiting`` is (key, work file) pairs; ``refused`` the kind's own reasons
    to refuse, said first (an overlay's file deleted upstream with no decision).
    """
    problems = list(refused)
    out: dict[str, bytes] = {}
    for key, rel in waiting:
        data, problem = _read_resolution(repo, rel)
        if problem is not None:
            problems.append(problem)
        elif data is not None:
            out[key] = data
    if problems:
        raise RebaseBlocked(problems)
    return out


def _read_resolution(repo: Repo, rel: str) -> tuple[bytes | None, str | None]:
    """One work file's bytes, or why it cannot be committed: missing, read through a link, markers left."""
    try:
        data = repo.read(rel)
    except FileNotFoundError:
        return None, f"{rel}: missing (resolve the conflict in this file)"
    except Escape as e:
        # A resolution read through a link would commit whatever it points at.
        return None, f"{rel} {e}; write the resolution into the file itself"
    lines = conflict_markers_remain(data)
    if lines:
        shown = ", ".join(str(n) for n in lines[:5]) + (" …" if len(lines) > 5 else "")
        return None, f"{rel}:{lines[0]}: conflict markers remain (lines {shown})"
    return data, None


def stop(kind: Kind[S], root: Path, files: dict[str, bytes], state: S) -> list[str]:
    """Stop at a conflict: the files to resolve and the state, one journaled transaction; the files, in order."""
    kind.area.save(root, files, state.as_doc())
    return list(files)


def commit(kind: Kind[S], repo: Repo, write: Callable[[], list[str]], new_lock_text: bytes) -> list[str]:
    """Commit the rebase: ``write`` (the lockfile, files and SHA256SUMS, one transaction), its paths returned.

    When a rebase waits, its state first records the lockfile being written,
    so that a crash between the write and the clean-up is recognised by
    ``saved`` as a finished rebase, not as a lockfile changed by hand.
    """
    state = kind.read(repo.root) if kind.area.present(repo.root) else None
    if state is not None:
        marked = dataclasses.replace(state, committed_lockfile_sha256=sha256_bytes(new_lock_text))  # type: ignore[type-var]
        kind.area.rewrite(repo.root, marked.as_doc())
    return write()


def done(kind: Kind[S], repo: Repo, learned: list[resolutions.Record]) -> list[str]:
    """After the commit: the conflict resolutions learned written (their paths returned), the work area removed."""
    written = resolutions.save(repo, learned)
    kind.area.clear(repo.root)
    return written


def abort(kind: Kind[S], root: Path) -> bool:
    """Forget the rebase waiting (the repository itself was never changed); whether one waited."""
    return kind.area.clear(root)
