"""Upstream references of patches: their recorded states, refreshing them, and what they mean.

A patch names the upstream issues, pull requests and commits behind it.
``refresh`` asks an ``IssueTracker`` for the current state of each and
returns the new ``[refs]`` states, what changed and any pull request whose
head moved since it was recorded (a force-push or new commits: the backport
may be out of date). ``record`` writes the states with the lockfile and
SHA256SUMS in one transaction, and writes nothing when nothing changed.

``assess`` works offline on recorded states: a merged fix whose merge commit
the pinned upstream contains (asked of a ``Containment``, normally the git
upstream's cached clone) makes its patch a **drop candidate**.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from patchkit.core.findings import Finding
from patchkit.core.progress import StartProgress, no_progress
from patchkit.core.values import LOCKFILE_NAME, Reference, Revision
from patchkit.errors import PatchkitError
from patchkit.lockfile.model import GitUpstream, Lockfile, Patch, RefState, Upstream
from patchkit.net.github import AnswerStatus, IssueTracker, RateLimit, split_reference, web_url
from patchkit.sources.context import Context
from patchkit.store.repo import Repo

#: ``(owner/repo, commit)`` -> whether the pinned upstream of that repository contains the commit (None: unknown).
Containment = Callable[[str, Revision], "Contained"]


@dataclass(frozen=True)
class Contained:
    """The answer of a ``Containment``: which upstream pin was asked, and whether it contains the commit."""

    upstream: str | None  # the [upstreams] name, None when no git upstream is that repository
    pin: str | None  # the pinned commit (short), for messages
    contains: bool | None


class Landing(Enum):
    """Where a reference stands, seen from the deployment."""

    UNCHECKED = "unchecked"  # never refreshed
    OPEN = "open"
    CLOSED = "closed"  # an issue closed, or a pull request closed without merging
    GONE = "unknown"  # the tracker does not know it (404), or an unknown state was recorded
    IN_PIN = "in-pinned-upstream"  # merged, and the pinned upstream commit contains it: drop candidate
    AFTER_PIN = "merged-after-pin"  # merged, but not (yet) in the pinned upstream commit
    MERGED_UNKNOWN = "merged-containment-unknown"  # merged; no git upstream can tell whether the pin has it


class PatchStanding(Enum):
    """A patch's standing upstream, from the strongest signal among its references."""

    DROP_CANDIDATE = "drop-candidate"
    MERGED_AFTER_PIN = "merged-after-pin"
    MERGED_UNKNOWN = "merged-containment-unknown"
    WAITING = "waiting-upstream"
    UNCHECKED = "unchecked"
    CLOSED = "closed"
    NO_REFS = "no-references"


_STANDING_ORDER = {
    Landing.IN_PIN: PatchStanding.DROP_CANDIDATE,
    Landing.AFTER_PIN: PatchStanding.MERGED_AFTER_PIN,
    Landing.MERGED_UNKNOWN: PatchStanding.MERGED_UNKNOWN,
    Landing.OPEN: PatchStanding.WAITING,
    Landing.UNCHECKED: PatchStanding.UNCHECKED,
    Landing.CLOSED: PatchStanding.CLOSED,
    Landing.GONE: PatchStanding.CLOSED,
}


@dataclass(frozen=True)
class RefView:
    """One reference of one patch, as a report shows it."""

    ref: Reference
    url: str
    kind: str | None
    state: str | None
    title: str | None
    checked_at: str | None
    age: str | None
    merge_commit: str | None
    head_commit: str | None
    merged_at: str | None
    landing: Landing
    contained: Contained | None

    @property
    def summary(self) -> str:
        """One phrase: the state and what it means for the deployment."""
        if self.landing is Landing.UNCHECKED:
            return "never checked"
        if self.landing is Landing.IN_PIN:
            return (
                f"merged; in the pinned {self.contained.upstream} {self.contained.pin}" if self.contained else "merged"
            )
        if self.landing is Landing.AFTER_PIN and self.contained:
            return f"merged; not in the pinned {self.contained.upstream} {self.contained.pin} yet"
        if self.landing is Landing.MERGED_UNKNOWN:
            return "merged; containment in the pinned upstream unknown"
        if self.landing is Landing.GONE:
            return "unknown (not found upstream)"
        return self.state or "unknown"

    def as_dict(self) -> dict[str, object]:
        return {
            "ref": self.ref.text,
            "url": self.url,
            "kind": self.kind,
            "state": self.state,
            "title": self.title,
            "checked_at": self.checked_at,
            "age": self.age,
            "merge_commit": self.merge_commit,
            "head_commit": self.head_commit,
            "merged_at": self.merged_at,
            "landing": self.landing.value,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class PatchRefs:
    """A patch's references and its standing."""

    patch: str
    refs: tuple[RefView, ...]
    standing: PatchStanding

    @property
    def drop_candidate(self) -> bool:
        return self.standing is PatchStanding.DROP_CANDIDATE

    def as_dict(self) -> dict[str, object]:
        return {
            "patch": self.patch,
            "standing": self.standing.value,
            "drop_candidate": self.drop_candidate,
            "refs": [r.as_dict() for r in self.refs],
        }


# --------------------------------------------------------------------------- time


def timestamp(now: dt.datetime) -> str:
    """RFC 3339 UTC, to the second: how the lockfile records times."""
    return now.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_time(text: str | None) -> dt.datetime | None:
    """An RFC 3339 time from the lockfile, or None when absent or unreadable."""
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def age(text: str | None, now: dt.datetime) -> str | None:
    """How long ago ``text`` was, for people: "3 days ago", "just now"; None when unknown."""
    when = parse_time(text)
    if when is None:
        return None
    seconds = int((now - when).total_seconds())
    if seconds < 0:
        return "in the future (clock skew?)"
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' * (n != 1)} ago"
    return "just now"


# --------------------------------------------------------------------------- assessing (offline)


def _landing(state: RefState | None, contained: Contained | None) -> Landing:
    if state is None:
        return Landing.UNCHECKED
    if state.state == "open":
        return Landing.OPEN
    if state.state == "closed":
        return Landing.CLOSED
    if state.state != "merged":
        return Landing.GONE
    if contained is None or contained.contains is None:
        return Landing.MERGED_UNKNOWN
    return Landing.IN_PIN if contained.contains else Landing.AFTER_PIN


def owner_repo(ref: Reference) -> str:
    """``owner/repo`` of a reference, as written."""
    owner, repo, _ = split_reference(ref)
    return f"{owner}/{repo}"


def assess(lock: Lockfile, containment: Containment | None, now: dt.datetime) -> list[PatchRefs]:
    """Every patch's references with their recorded state, and each patch's standing.

    ``containment`` is asked only about merged references with a merge
    commit; without it, merged references are "containment unknown".
    """
    asked: dict[tuple[str, Revision], Contained] = {}
    out = []
    for p in lock.patches:
        views = []
        for ref in p.refs:
            state = lock.ref_state(ref)
            contained = None
            if state is not None and state.state == "merged" and state.merge_commit is not None and containment:
                key = (owner_repo(ref).lower(), state.merge_commit)
                if key not in asked:
                    asked[key] = containment(owner_repo(ref), state.merge_commit)
                contained = asked[key]
            views.append(
                RefView(
                    ref=ref,
                    url=web_url(ref),
                    kind=state.kind if state else ("commit" if ref.is_commit else None),
                    state=state.state if state else None,
                    title=state.title if state else None,
                    checked_at=state.checked_at if state else None,
                    age=age(state.checked_at, now) if state else None,
                    merge_commit=str(state.merge_commit) if state and state.merge_commit else None,
                    head_commit=str(state.head_commit) if state and state.head_commit else None,
                    merged_at=state.merged_at if state else None,
                    landing=_landing(state, contained),
                    contained=contained,
                )
            )
        out.append(PatchRefs(p.name, tuple(views), standing(views)))
    return out


def standing(views: Iterable[RefView]) -> PatchStanding:
    """The strongest signal among a patch's references (a drop candidate outranks everything)."""
    found = {_STANDING_ORDER[v.landing] for v in views}
    order = list(PatchStanding)
    return min(found, key=order.index) if found else PatchStanding.NO_REFS


_REPO_IN_URL = re.compile(r"[/:](?P<owner>[^/:]+)/(?P<repo>[^/]+?)(?:\.git)?/?$")


def upstream_for(lock: Lockfile, repo: str) -> Upstream | None:
    """The git upstream that is the GitHub repository ``owner/repo``: its URL ends in /owner/repo[.git]."""
    for up in lock.upstreams:
        if not isinstance(up, GitUpstream) or up.git is None or up.commit is None:
            continue
        m = _REPO_IN_URL.search(up.git)
        if m and f"{m['owner']}/{m['repo']}".lower() == repo.lower():
            return up
    return None


def git_containment(
    lock: Lockfile, cache: Path, *, fetch: bool = False, progress: StartProgress = no_progress
) -> Containment:
    """A ``Containment`` answered by the cached clone of the matching git upstream.

    Without ``fetch`` it never uses the network (unknown when the pinned
    commit is not cached); with it, the pinned commit is fetched if needed
    (shown on ``progress``).
    """
    from patchkit.sources.git import GitSource

    def ask(repo: str, commit: Revision) -> Contained:
        up = upstream_for(lock, repo)
        if up is None or up.git is None or up.commit is None:
            return Contained(None, None, None)
        found = GitSource(up.git, cache, progress=progress).contains(commit.sha, up.commit.sha, fetch=fetch)
        return Contained(up.name, up.commit.short, found)

    return ask


# --------------------------------------------------------------------------- refreshing


class RefreshStatus(Enum):
    """What a refresh did for one reference."""

    CHANGED = "changed"  # the tracker's answer differs from the recorded state
    UNCHANGED = "unchanged"  # answered again with the recorded state
    NOT_MODIFIED = "not-modified"  # 304 for the recorded ETag: confirmed, no rate limit spent
    NOT_FOUND = "not-found"  # the tracker does not know it
    SKIPPED = "skipped"  # not asked: the refresh stopped at a failure first


@dataclass(frozen=True)
class RefOutcome:
    ref: Reference
    status: RefreshStatus
    old: RefState | None
    new: RefState | None


@dataclass(frozen=True)
class HeadMoved:
    """A pull request whose head is no longer the one recorded: the backport may be out of date."""

    ref: Reference
    recorded: Revision
    now: Revision


@dataclass(frozen=True)
class Refresh:
    """The result of asking the tracker about every reference of the lockfile's patches."""

    states: tuple[RefState, ...]
    outcomes: tuple[RefOutcome, ...]
    head_moves: tuple[HeadMoved, ...]
    rate: RateLimit | None
    failure: PatchkitError | None
    changed: bool

    @property
    def not_found(self) -> list[Reference]:
        return [o.ref for o in self.outcomes if o.status is RefreshStatus.NOT_FOUND]


def _content(s: RefState) -> RefState:
    return dataclasses.replace(s, checked_at=None)


def cited(lock: Lockfile) -> list[Reference]:
    """Every reference some patch cites, once, sorted."""
    return sorted({r for p in lock.patches for r in p.refs}, key=lambda r: r.text)


def refresh(lock: Lockfile, tracker: IssueTracker, now: dt.datetime) -> Refresh:
    """Ask ``tracker`` for every cited reference; the new states, what changed and moved heads.

    A network failure or a used-up rate limit stops the refresh: what was
    learned before it is kept (``failure`` says why the rest was skipped).
    ``checked_at`` is set to ``now`` for every reference answered, but only
    a change of content makes ``changed`` true, so an unchanged refresh
    writes nothing.
    """
    stamp = timestamp(now)
    states = {s.ref: s for s in lock.refs}
    outcomes: list[RefOutcome] = []
    moves: list[HeadMoved] = []
    failure: PatchkitError | None = None
    answered: set[Reference] = set()
    for ref in cited(lock):
        old = states.get(ref)
        if failure is not None:
            outcomes.append(RefOutcome(ref, RefreshStatus.SKIPPED, old, old))
            continue
        try:
            answer = tracker.fetch(ref, old)
        except PatchkitError as e:
            failure = e
            outcomes.append(RefOutcome(ref, RefreshStatus.SKIPPED, old, old))
            continue
        answered.add(ref)
        if answer.status is AnswerStatus.NOT_MODIFIED and old is not None:
            outcomes.append(RefOutcome(ref, RefreshStatus.NOT_MODIFIED, old, old))
            continue
        if answer.status is AnswerStatus.FOUND and answer.state is not None:
            new = answer.state
            status = (
                RefreshStatus.UNCHANGED
                if old is not None and _content(old) == _content(new)
                else (RefreshStatus.CHANGED)
            )
        else:
            new = RefState(ref, "unknown", kind=old.kind if old else None, title=old.title if old else None)
            status = RefreshStatus.NOT_FOUND
        if old is not None and old.head_commit and new.head_commit and old.head_commit != new.head_commit:
            moves.append(HeadMoved(ref, old.head_commit, new.head_commit))
        states[ref] = dataclasses.replace(new, checked_at=old.checked_at if old else None)
        outcomes.append(RefOutcome(ref, status, old, states[ref]))
    changed = {_content(s) for s in lock.refs} != {_content(s) for s in states.values()}
    if changed:
        # Written anyway: every answered reference gets the time it was confirmed.
        for ref in answered:
            states[ref] = dataclasses.replace(states[ref], checked_at=stamp)
        outcomes = [dataclasses.replace(o, new=states.get(o.ref)) for o in outcomes]
    return Refresh(
        states=tuple(sorted(states.values(), key=lambda s: s.ref.text)),
        outcomes=tuple(outcomes),
        head_moves=tuple(moves),
        rate=tracker.rate,
        failure=failure,
        changed=changed,
    )


def record(repo: Repo, lock: Lockfile, result: Refresh) -> list[str]:
    """Write the refreshed states (lockfile and SHA256SUMS, one transaction); nothing when unchanged."""
    if not result.changed:
        return []
    from patchkit.store.persist import finish

    return finish(repo, dataclasses.replace(lock, refs=result.states))


def with_states(lock: Lockfile, result: Refresh) -> Lockfile:
    """``lock`` as it would be with the refreshed states (for reporting without writing)."""
    return dataclasses.replace(lock, refs=result.states)


# --------------------------------------------------------------------------- findings (check --online)

Locate = Callable[[tuple[str | int, ...]], int | None]


def findings(lock: Lockfile, assessed: list[PatchRefs], result: Refresh | None, locate: Locate) -> list[Finding]:
    """What references tell ``check``: drop candidates, merged fixes, moved heads, references that name nothing."""
    out: list[Finding] = []
    index = {p.name: i for i, p in enumerate(lock.patches)}
    moved = {m.ref: m for m in (result.head_moves if result else ())}
    missing = set(result.not_found if result else ())
    for pr in assessed:
        i = index[pr.patch]
        patch = lock.patches[i]
        for j, view in enumerate(pr.refs):
            where = locate(("patches", i, "refs", j))
            field = f"patches[{pr.patch}].refs[{j}]"
            if view.ref in missing:
                out.append(
                    Finding(
                        "ref-not-found",
                        LOCKFILE_NAME,
                        where,
                        f"'{pr.patch}': {view.ref} does not exist upstream (404), or is private",
                        "fix the reference (owner/repo#N or a commit URL); for a private repository set GITHUB_TOKEN",
                        field=field,
                    )
                )
            if view.landing is Landing.IN_PIN and view.contained is not None:
                out.append(
                    Finding(
                        "drop-candidate",
                        LOCKFILE_NAME,
                        where,
                        f"'{pr.patch}': {view.ref} is merged ({_short(view.merge_commit)}) and the pinned "
                        f"{view.contained.upstream} {view.contained.pin} contains it: the patch may be dropped",
                        f"confirm, then: patchkit remove {pr.patch}" + _drop_when(patch),
                        field=field,
                        severity="note",
                    )
                )
            elif view.landing is Landing.AFTER_PIN and view.contained is not None:
                out.append(
                    Finding(
                        "ref-merged",
                        LOCKFILE_NAME,
                        where,
                        f"'{pr.patch}': {view.ref} is merged ({_short(view.merge_commit)}) but the pinned "
                        f"{view.contained.upstream} {view.contained.pin} does not contain it yet",
                        "drop the patch when the deployment moves past that commit (patchkit rebase reports it)",
                        field=field,
                        severity="note",
                    )
                )
            elif view.landing is Landing.MERGED_UNKNOWN:
                out.append(
                    Finding(
                        "ref-merged",
                        LOCKFILE_NAME,
                        where,
                        f"'{pr.patch}': {view.ref} is merged ({_short(view.merge_commit)}); whether the pinned "
                        f"upstream contains it is unknown (no git upstream for {owner_repo(view.ref)})",
                        f"declare the git upstream: patchkit upstream add … --git https://github.com/{owner_repo(view.ref)}",
                        field=field,
                        severity="note",
                    )
                )
            move = moved.get(view.ref)
            if move is not None:
                out.append(
                    Finding(
                        "ref-head-moved",
                        LOCKFILE_NAME,
                        where,
                        f"'{pr.patch}': the head of {view.ref} moved from {move.recorded.short} to {move.now.short} "
                        "since it was recorded (force-push or new commits): the backport may be out of date",
                        "compare the pull request's new commits with the patch, then record: patchkit refs --refresh",
                        field=field,
                        severity="note",
                    )
                )
    return out


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "no merge commit recorded"


def _drop_when(patch: Patch) -> str:
    return f" (its drop_when: {patch.drop_when})" if patch.drop_when else ""


def ref_findings(
    lock: Lockfile, locate: Locate, cache: Context, tracker: Callable[[], IssueTracker] | IssueTracker
) -> list[Finding]:
    """``check --online``: refresh every reference in memory (nothing is recorded) and report what it means.

    A failure to reach GitHub, or a used-up rate limit, raises: the check was
    asked to be online and cannot be completed.
    """
    if not cited(lock):
        return []
    asked = tracker() if callable(tracker) else tracker
    result = refresh(lock, asked, dt.datetime.now(dt.UTC))
    if result.failure is not None:
        raise result.failure
    fresh = with_states(lock, result)
    assessed = assess(
        fresh, git_containment(fresh, cache.cache_dir, fetch=True, progress=cache.progress), dt.datetime.now(dt.UTC)
    )
    return findings(fresh, assessed, result, locate)
