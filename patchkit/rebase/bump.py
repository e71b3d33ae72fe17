"""``patchkit rebase --series NAME --onto REV``: reading the trees, the resumable state, the one transaction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from patchkit.core.hashing import sha256_bytes
from patchkit.core.outcome import Change, Outcome
from patchkit.core.values import Revision, Sha256
from patchkit.errors import BadInput
from patchkit.lockfile.accepted import Accepted
from patchkit.lockfile.model import GitUpstream, Lockfile
from patchkit.lockfile.series import Series
from patchkit.lockfile.verification import record_verified
from patchkit.lockfile.writer import dumps
from patchkit.rebase import driver, explain
from patchkit.rebase import series as core
from patchkit.rebase.state import SeriesState
from patchkit.series.tree import find_series, load
from patchkit.sources.context import Context
from patchkit.store.persist import finish
from patchkit.store.repo import Repo


@dataclass
class Done:
    """A series rebase: the per-patch results; ``outcome`` when committed, else the files waiting to be resolved."""

    series: Series
    old: str
    new: str
    result: core.SeriesRebase
    outcome: Outcome | None = None
    work_files: tuple[str, ...] = ()
    # What upstream did to the lines of each conflicted file, by (patch, path) (``patchkit.rebase.explain``).
    causes: dict[tuple[str, str], explain.Cause] = dataclasses.field(default_factory=dict)


def _snapshots(repo: Repo, lock: Lockfile, s: Series, onto: str, cache: Context) -> tuple[Any, Any, str]:
    from patchkit.sources.factory import open_source

    up = lock.upstream(s.upstream)
    if not isinstance(up, GitUpstream) or s.commit is None:
        raise BadInput(
            f"series '{s.name}': rebasing needs a git upstream and the series' commit (series.{s.name}.commit)",
            f"declare [upstreams.{s.upstream}] with git and commit, and set series.{s.name}.commit",
        )
    source = open_source(up, cache, repo.root)
    old = source.snapshot(str(s.commit))
    new = source.snapshot(onto)
    return old, new, new.pin.commit or onto


def start(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    name: str | None,
    onto: str | None,
    cache: Context,
    accept: dict[str, str] | None = None,
    remembered: bool = True,
) -> Done:
    """Rebase the series onto ``onto``; commit it when no patch conflicts or is broken, else save the state and stop.

    ``accept`` names the broken patches to commit all the same, with the reason; ``remembered``:
    replay the recorded resolutions of known conflicts (``patchkit.rebase.resolutions``).
    """
    driver.refuse_if_waiting(repo.root)
    if onto is None:
        raise BadInput("--onto REV is required to rebase a series", "give the new upstream commit, branch or tag")
    s = find_series(lock.series, name)
    return _run(repo, lock, lock_bytes, s, onto, cache, {}, accept or {}, accept or {}, remembered=remembered)


def resume(
    repo: Repo, lock: Lockfile, lock_bytes: bytes, cache: Context, accept: dict[str, str] | None = None
) -> Done | None:
    """Go on with the series rebase in progress, with the resolved (or fixed) files of the patch it stopped at.

    None when the rebase was already committed (a crash came before the clean-up): the work area is removed.
    """

    def go_on(state: SeriesState, files: dict[str, bytes]) -> Done:
        resolved = {**state.resolved, state.stopped: files}
        s = find_series(lock.series, state.series)
        accepted = {**state.accepted, **(accept or {})}
        return _run(repo, lock, lock_bytes, s, state.onto, cache, resolved, accepted, accept or {})

    return driver.resume(core.KIND, repo, lock_bytes, lambda state: state, go_on)


def abort(repo: Repo) -> bool:
    """Forget the series rebase in progress (the repository itself was never changed); whether one waited."""
    return driver.abort(core.KIND, repo.root)


def _run(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    s: Series,
    onto: str,
    cache: Context,
    resolved: dict[str, dict[str, bytes]],
    accept: dict[str, str],
    given: dict[str, str],
    *,
    remembered: bool = True,
) -> Done:
    """Rebase, then commit or save the state; ``given`` are the --accept-broken names of this command."""
    from patchkit.rebase import resolutions

    unknown = sorted(set(given) - {p.name for p in s.patches})
    if unknown:
        raise BadInput(
            f"--accept-broken: series '{s.name}' has no patch {', '.join(unknown)}",
            "name a patch the rebase reports as broken",
        )
    items = load(repo, s, None)
    old, new, commit = _snapshots(repo, lock, s, onto, cache)
    memory = resolutions.Memory(repo, replay=remembered)
    result = core.rebase_series(items, old.read, new.read, resolved, accept, memory)
    done = Done(s, str(s.commit), commit, result)
    done.causes = explain.series_causes(result, new, str(s.commit))
    if result.stopped is None:
        broken = {r.name for r in result.patches if r.outcome is core.PatchOutcome.BROKEN}
        wrong = sorted(set(given) - broken)
        if wrong:
            raise BadInput(
                f"--accept-broken: not a broken patch: {', '.join(wrong)}",
                "name only the patches the rebase reports as broken",
            )
    if result.stopped is not None:
        waiting = result.stopped.waiting
        state = SeriesState(
            series=s.name,
            onto=commit,
            lockfile_sha256=sha256_bytes(lock_bytes),
            stopped=result.stopped.name,
            conflicts=tuple(sorted(waiting)),
            broken=tuple(sorted(result.stopped.broken)),
            resolved={k: v for k, v in resolved.items() if k != result.stopped.name},
            accepted=accept,
        )
        done.work_files = tuple(core.save_state(repo.root, state, waiting))
        return done
    done.outcome = _commit(repo, lock, s, commit, result)
    done.outcome.written += driver.done(core.KIND, repo, [rec for r in result.patches for rec in r.learned])
    return done


def _commit(repo: Repo, lock: Lockfile, s: Series, commit: str, result: core.SeriesRebase) -> Outcome:
    outcome = Outcome()
    files: dict[str, bytes] = {}
    deletes: list[str] = []
    patches = []
    by_name = {r.name: r for r in result.patches}
    for p in s.patches:
        r = by_name[p.name]
        if r.new_bytes is None:
            deletes.append(str(p.file))
            outcome.changes.append(Change(f"series.{s.name}.patches[{p.name}]", r.outcome.value, "dropped"))
            continue
        files[str(p.file)] = r.new_bytes
        digest = sha256_bytes(r.new_bytes)
        if digest != p.sha256.hex:
            outcome.changes.append(Change(f"series.{s.name}.patches[{p.name}].sha256", p.sha256.hex, digest))
        patches.append(dataclasses.replace(p, sha256=Sha256(digest), accepted=_accepted_record(r) or p.accepted))
    new = dataclasses.replace(s, patches=tuple(patches), commit=Revision(commit))
    if s.series_file is not None:
        here = PurePosixPath(str(s.series_file)).parent
        listing = "".join(str(PurePosixPath(str(p.file)).relative_to(here)) + "\n" for p in patches).encode()
        files[str(s.series_file)] = listing
        new = dataclasses.replace(new, series_sha256=Sha256(sha256_bytes(listing)))
    outcome.changes.append(Change(f"series.{s.name}.commit", str(s.commit), commit))
    upstreams = tuple(
        dataclasses.replace(u, commit=Revision(commit)) if u.name == s.upstream and u.commit == s.commit else u
        for u in lock.upstreams
    )
    series = tuple(new if x.name == s.name else x for x in lock.series)
    new_lock = dataclasses.replace(lock, series=series, upstreams=upstreams)
    # The series now applies onto the new commit: recorded for the image it is applied onto.
    new_lock = record_verified(new_lock, series=(s.name,), root=repo.root)
    outcome.written = driver.commit(
        core.KIND, repo, lambda: finish(repo, new_lock, files, deletes), dumps(new_lock).encode()
    )
    return outcome


def _accepted_record(r: core.PatchRebase) -> Accepted | None:
    """What ``--accept-broken`` committed of ``r``, for the lockfile: the reason, each blocking problem's kind and name.

    As an overlay's ``[patches.accepted]``: ``check`` notes each problem
    while the files the series produces still have it.
    """
    if r.accepted is None:
        return None
    found = (p for problems in r.problems.values() for p in problems if p.blocking)
    return Accepted(r.accepted, tuple(dict.fromkeys(f"{p.kind} {p.name}".strip() for p in found)))
