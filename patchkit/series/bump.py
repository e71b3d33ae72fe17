"""``patchkit rebase --series NAME --onto REV``: reading the trees, the resumable state, the one transaction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from patchkit.errors import BadInput, Refused
from patchkit.hashing import sha256_bytes
from patchkit.lockfile.model import GitUpstream, Lockfile
from patchkit.outcome import Change, Outcome
from patchkit.persist import finish
from patchkit.repo import Repo
from patchkit.series import rebase as core
from patchkit.series.model import Series
from patchkit.series.tree import find_series, load
from patchkit.values import Revision, Sha256


@dataclass
class Done:
    """A series rebase: the per-patch results; ``outcome`` when committed, else the files waiting to be resolved."""

    series: Series
    old: str
    new: str
    result: core.SeriesRebase
    outcome: Outcome | None = None
    work_files: tuple[str, ...] = ()


def _snapshots(repo: Repo, lock: Lockfile, s: Series, onto: str, cache: Path) -> tuple[Any, Any, str]:
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


def start(repo: Repo, lock: Lockfile, lock_bytes: bytes, name: str | None, onto: str | None, cache: Path) -> Done:
    """Rebase the series onto ``onto``; commit it when no patch conflicts, else save the state and stop."""
    if core.in_progress(repo.root):
        raise Refused("a series rebase is in progress", "patchkit rebase --continue, or patchkit rebase --abort")
    if onto is None:
        raise BadInput("--onto REV is required to rebase a series", "give the new upstream commit, branch or tag")
    s = find_series(lock.series, name)
    return _run(repo, lock, lock_bytes, s, onto, cache, {})


def resume(repo: Repo, lock: Lockfile, lock_bytes: bytes, cache: Path) -> Done:
    """Go on with the series rebase in progress, with the resolved files of the patch it stopped at."""
    doc = core.load_state(repo.root)
    if doc.get("lockfile_sha256") != sha256_bytes(lock_bytes):
        raise Refused(
            "lockfile.toml changed since the series rebase started",
            "patchkit rebase --abort, then start the rebase again",
        )
    resolved = core.read_resolved(repo.root, doc)
    s = find_series(lock.series, str(doc["series"]))
    return _run(repo, lock, lock_bytes, s, str(doc["onto"]), cache, resolved)


def abort(repo: Repo) -> bool:
    return core.clear(repo.root)


def _run(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    s: Series,
    onto: str,
    cache: Path,
    resolved: dict[str, dict[str, bytes]],
) -> Done:
    items = load(repo, s, None)
    originals = {it.name: (repo.root / it.file).read_bytes() for it in items}
    old, new, commit = _snapshots(repo, lock, s, onto, cache)
    result = core.rebase_series(items, originals, old.read, new.read, resolved)
    done = Done(s, str(s.commit), commit, result)
    if result.stopped is not None:
        doc = {
            "series": s.name,
            "onto": commit,
            "lockfile_sha256": sha256_bytes(lock_bytes),
            "stopped": result.stopped.name,
            "conflicts": sorted(result.stopped.conflicted),
            "resolved": core.encode_resolved({k: v for k, v in resolved.items() if k != result.stopped.name}),
        }
        done.work_files = tuple(core.save_state(repo.root, doc, result.stopped.conflicted, result.stopped.name))
        return done
    done.outcome = _commit(repo, lock, s, commit, result)
    core.clear(repo.root)
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
        patches.append(dataclasses.replace(p, sha256=Sha256(digest)))
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
    outcome.written = finish(repo, dataclasses.replace(lock, series=series, upstreams=upstreams), files, deletes)
    return outcome


def table(done: Done) -> list[str]:
    """The per-patch table ``patchkit rebase --series`` prints."""
    from patchkit.formats.safe import printable

    lines = [f"rebase series {done.series.name}: {done.old[:12]} -> {done.new[:12]}"]
    width = max((len(r.name) for r in done.result.patches), default=0)
    for r in done.result.patches:
        detail = []
        for f in r.files:
            if f.outcome == "conflict":
                detail.append(f"{f.path} conflicts at {', '.join(f.regions)}")
            elif f.outcome in ("deleted", "upstreamed", "partially-upstreamed"):
                detail.append(f"{f.path} {f.outcome}")
        detail += [f"{p} not in the source (kept as is)" for p in r.absent]
        lines.append(
            f"  {printable(r.name).ljust(width)}  {r.outcome.value:<20}  {printable('; '.join(detail))}".rstrip()
        )
        lines += [f"    note: {printable(n)}" for n in r.notes]
    waiting = [p for p in done.series.patches if p.name not in {r.name for r in done.result.patches}]
    lines += [f"  {p.name.ljust(width)}  waiting" for p in waiting]
    return lines
