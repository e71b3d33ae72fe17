"""Why a patch could not move, in upstream's terms: the upstream commits that touched its lines.

When a rebase stops on a conflict, a broken merge or a hunk upstream now
carries, the maintainer's first question is which upstream change did it.
For a git upstream the answer is in its history: ``git log -L`` over the
lines of the new upstream file that the conflict (or the patch's hunks)
covers, between the old base and the new pin, names the commits that touched
them, renames followed. vLLM ends a commit's subject with its pull request,
``Subject (#NNNNN)``, so each commit comes with its PR (``owner/repo#N`` in
the Markdown summary of a GitHub upstream, which GitHub links).

Wheels and images carry no history: their explanation is the version range
(old -> new), which is where a maintainer starts reading release notes.

The git reads are bounded: at most ``MAX_COMMITS`` commits listed per patch
(the count of the rest said), and ``TIME_BUDGET`` seconds for all of them in
one rebase; what was not read is said, never guessed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.core.diffs import line_matcher, split_lines
from patchkit.rebase.merge import LineRange, MergeResult, Outcome
from patchkit.vcs import gitclient

#: The most commits listed for one patch; the rest are counted.
MAX_COMMITS = 8
#: Seconds all the ``git log`` runs of one rebase may take together.
TIME_BUDGET = 30.0

#: Outcomes a maintainer needs explained: the patch did not move as it was.
EXPLAINED = (Outcome.CONFLICT, Outcome.BROKEN, Outcome.UPSTREAMED, Outcome.PARTIALLY_UPSTREAMED)

_PR = re.compile(r"\(#(\d{1,9})\)")
_GITHUB = re.compile(r"github\.com[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")
_FULL = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


@dataclass(frozen=True)
class Touch:
    """One upstream commit that changed the patch's lines: its id, subject and pull request (if it names one)."""

    commit: str
    subject: str
    pr: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "subject": self.subject, "pr": self.pr}


@dataclass(frozen=True)
class Cause:
    """What upstream did to one patch's lines between its old base and the new pin.

    ``commits`` (newest first) for a git upstream, with ``more`` not listed;
    ``versions`` (old, new) for a wheel or an image; ``unknown`` says why
    neither could be told (history not in the cache, git too slow).
    """

    patch: str
    old: str
    new: str
    commits: tuple[Touch, ...] = ()
    more: int = 0
    versions: tuple[str, str] | None = None
    github: str | None = None  # owner/repo, for the summary's PR links
    unknown: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.old,
            "to": self.new,
            "commits": [t.as_dict() for t in self.commits],
            "more_commits": self.more,
            "versions": list(self.versions) if self.versions else None,
            "github": self.github,
            "unknown": self.unknown,
        }

    def lines(self) -> list[str]:
        """The explanation for a terminal, one line per commit (or the version range, or why it is unknown)."""
        if self.versions is not None:
            old, new = self.versions
            return [f"upstream changed it between {old} and {new} (no history in a wheel or an image)"]
        if self.unknown is not None:
            return [f"upstream commits unknown: {self.unknown}"]
        if not self.commits:
            return [f"no upstream commit in {self.old[:12]}..{self.new[:12]} touched these lines"]
        out = [f"upstream {t.commit[:12]} {t.subject}" for t in self.commits]
        if self.more:
            out.append(f"upstream … and {self.more} more commit{'s' if self.more > 1 else ''}")
        return out

    def markdown(self) -> str:
        """The explanation in a summary cell: each commit and its PR link (``owner/repo#N`` on GitHub, else in code)."""
        if self.versions is not None or self.unknown is not None or not self.commits:
            return self.lines()[0].replace("|", "\\|")
        parts = []
        for t in self.commits:
            subject = _PR.sub("", t.subject).strip().replace("|", "\\|").replace("`", "'")
            # owner/repo#N links on GitHub; a bare #N would link an issue of the deployment's own repository.
            pr = "" if t.pr is None else f" ({self.github}#{t.pr})" if self.github else f" (`#{t.pr}`)"
            parts.append(f"`{t.commit[:12]}` {subject}{pr}")
        if self.more:
            parts.append(f"and {self.more} more")
        return "upstream changes: " + "; ".join(parts)


def pr_number(subject: str) -> int | None:
    """The pull request a commit subject names as vLLM (and GitHub's squash merge) writes it: ``… (#12345)``."""
    found = _PR.findall(subject)
    return int(found[-1]) if found else None


def github_repo(url: str) -> str | None:
    """``owner/repo`` of a GitHub URL (https or ssh form), None for any other host."""
    m = _GITHUB.search(url.strip())
    return f"{m.group(1)}/{m.group(2)}" if m else None


def theirs_ranges(merge: MergeResult, base: bytes, theirs: bytes, outcome: Outcome) -> list[LineRange]:
    """The lines of the new upstream file to trace: each conflict's, else where the patch's hunks land in it.

    A conflict names its lines in theirs; a hunk upstream took, or any hunk of
    a broken merge, is mapped from base to theirs through their diff. An empty
    range (upstream deleted the lines) widens to the lines around it: git
    traces lines, not gaps.
    """
    if merge.conflicts:
        found = [c.theirs for c in merge.conflicts]
    else:
        hunks = merge.hunks_upstreamed + merge.hunks_partly_upstreamed
        if outcome is Outcome.BROKEN or not hunks:
            hunks = merge.hunks_upstreamed + merge.hunks_remaining
        found = map_ranges(split_lines(base), split_lines(theirs), [h.base for h in hunks])
    count = len(split_lines(theirs))
    return [r for r in (_traceable(r, count) for r in found) if r is not None]


def map_ranges(a: Sequence[bytes], b: Sequence[bytes], ranges: Iterable[LineRange]) -> list[LineRange]:
    """Each range of ``a`` as the range of ``b`` that took its place (by the diff of ``a`` and ``b``)."""
    blocks: list[tuple[int, int, int]] = [tuple(blk) for blk in line_matcher(a, b).get_matching_blocks()]

    def where(i: int, after: bool) -> int:  # a's line boundary i as b's
        for ai, bj, n in blocks:
            if ai <= i <= ai + n and n:
                return bj + (i - ai)
        prev = [bj + n for ai, bj, n in blocks if ai + n <= i]
        nxt = [bj for ai, bj, n in blocks if ai >= i]
        return (min(nxt) if nxt else len(b)) if after else (max(prev) if prev else 0)

    out = []
    for r in ranges:
        start, stop = where(r.start - 1, after=False), where(r.end, after=True)
        out.append(LineRange(start + 1, max(stop, start)))
    return out


def _traceable(r: LineRange, count: int) -> LineRange | None:
    """``r`` as ``git log -L`` takes it: at least one line, inside the file; None for an empty file."""
    if count == 0:
        return None
    start, end = r.start, r.end
    if end < start:  # a gap: the lines on either side of it
        start, end = start - 1, start
    start, end = max(1, min(start, count)), max(1, min(end, count))
    return LineRange(min(start, end), max(start, end))


class Budget:
    """The time left for the git reads of one rebase (``TIME_BUDGET`` seconds in all)."""

    def __init__(self, seconds: float = TIME_BUDGET) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def git_cause(
    patch: str, git_dir: Path, url: str, old: str, new: str, path: str, ranges: list[LineRange], budget: Budget
) -> Cause:
    """The commits of ``old..new`` that touched ``ranges`` of ``path`` (as at ``new``), newest first, bounded."""
    github = github_repo(url)
    base = Cause(patch, old, new, github=github)
    if not ranges:
        return base
    left = budget.left()
    if left <= 0:
        return _unknown(base, f"the {TIME_BUDGET:.0f} s for reading upstream history were spent on other patches")
    args = ["log", "--no-color", "-s", "--format=%H%x00%s", f"--max-count={MAX_COMMITS + 1}"]
    args += [f"-L{r.start},{r.end}:{path}" for r in ranges]
    args.append(f"{old}..{new}")
    try:
        status, out, err = gitclient.run(
            git_dir.parent,
            ["-c", f"core.hooksPath={os.devnull}", f"--git-dir={git_dir}", *args],
            env=gitclient.repo_env(git_dir),
            timeout=left,
        )
    except gitclient.GitMissing:
        return _unknown(base, "git is not installed")
    if status != 0:
        reason = (err.strip().splitlines() or [f"git exited {status}"])[-1][:200]
        return _unknown(base, f"git log {old[:12]}..{new[:12]} in the upstream cache failed: {reason}")
    touches = _touches(out)
    more = 0
    if len(touches) > MAX_COMMITS:
        more = max(_count(git_dir, old, new, path, ranges, budget) - MAX_COMMITS, 1)
        touches = touches[:MAX_COMMITS]
    return Cause(patch, old, new, tuple(touches), more, github=github)


def _unknown(cause: Cause, why: str) -> Cause:
    return Cause(cause.patch, cause.old, cause.new, github=cause.github, unknown=why)


def _touches(out: bytes) -> list[Touch]:
    found = []
    for line in out.decode("utf-8", "replace").splitlines():
        commit, sep, subject = line.partition("\0")
        if sep and _FULL.fullmatch(commit):
            found.append(Touch(commit, subject, pr_number(subject)))
    return found


def _count(git_dir: Path, old: str, new: str, path: str, ranges: list[LineRange], budget: Budget) -> int:
    """How many commits touched the ranges in all (``MAX_COMMITS + 1`` when that cannot be told in time)."""
    args = ["log", "--no-color", "-s", "--format=%H", *(f"-L{r.start},{r.end}:{path}" for r in ranges), f"{old}..{new}"]
    left = budget.left()
    if left <= 0:
        return MAX_COMMITS + 1
    status, out, _ = gitclient.run(
        git_dir.parent,
        ["-c", f"core.hooksPath={os.devnull}", f"--git-dir={git_dir}", *args],
        env=gitclient.repo_env(git_dir),
        timeout=left,
    )
    return len(out.split()) if status == 0 else MAX_COMMITS + 1


def version_cause(patch: str, old: str | None, new: str | None) -> Cause:
    """The explanation a wheel or an image upstream allows: the version range."""
    return Cause(patch, old or "?", new or "?", versions=(old or "unknown version", new or "unknown version"))


def old_ref(up: Any, base: Any) -> str | None:
    """Where a patch's base was taken: its commit (git), else its version (a wheel's, an image's runtime version)."""
    from patchkit.lockfile.model import GitUpstream, WheelUpstream

    if isinstance(up, GitUpstream):
        return up.base_ref(base)
    if base.version:
        return str(base.version)
    return str(up.wheel_version if isinstance(up, WheelUpstream) else up.version or "") or None


def causes(up: Any, new: Any, bases: dict[str, Any], results: Iterable[Any], sides: dict[str, Any]) -> dict[str, Cause]:
    """The explanation of every patch of a rebase that did not move as it was (``EXPLAINED``), by patch name.

    ``up`` is the upstream in the lockfile, ``new`` the snapshot rebased
    onto, ``bases`` each patch's ``Base``, ``sides`` each patch's
    (base, ours, theirs, new path). A git upstream's history is read from its
    cache; a wheel's or an image's explanation is its version range (their
    pins carry a version); a directory has neither.
    """
    from patchkit.sources.git import GitSnapshot

    budget = Budget()
    old_refs = {name: old_ref(up, base) for name, base in bases.items()}
    out: dict[str, Cause] = {}
    for r in results:
        if r.outcome not in EXPLAINED or r.merge is None or r.name not in sides:
            continue
        base, _, theirs, path = sides[r.name]
        if isinstance(new, GitSnapshot):
            old = old_refs.get(r.name)
            if not old:
                out[r.name] = Cause(r.name, "?", new.commit, unknown="the old base names no commit")
                continue
            ranges = theirs_ranges(r.merge, base, theirs, r.outcome)
            out[r.name] = git_cause(r.name, new.source.path, new.source.url, old, new.commit, path, ranges, budget)
        elif new.pin.version:  # a wheel, an image: versions, no history
            out[r.name] = version_cause(r.name, old_refs.get(r.name) or getattr(up, "version", None), new.pin.version)
    return out


def series_causes(result: Any, new: Any, old: str) -> dict[tuple[str, str], Cause]:
    """The explanation of each conflicted file of a series rebase, by (patch, path): the commits of ``old..new``.

    A conflict's lines are those of the new tree with the earlier patches of
    the series laid over it; they are traced back to the upstream file first.
    """
    from patchkit.sources.git import GitSnapshot

    if not isinstance(new, GitSnapshot):
        return {}
    wanted = [(r.name, path, found) for r in result.patches for path, found in r.conflicts.items()]
    upstream = new.read([path for _, path, _ in wanted]) if wanted else {}
    budget = Budget()
    out: dict[tuple[str, str], Cause] = {}
    for name, path, (theirs, conflicts) in wanted:
        clean = upstream.get(path) or b""
        count = len(split_lines(clean))
        mapped = map_ranges(split_lines(theirs), split_lines(clean), [c.theirs for c in conflicts])
        ranges = [r for r in (_traceable(m, count) for m in mapped) if r is not None]
        out[(name, path)] = git_cause(name, new.source.path, new.source.url, old, new.commit, path, ranges, budget)
    return out


def saved_causes(found: Any) -> dict[str, Cause]:
    """The explanations a saved rebase state kept (``Cause.as_dict`` by patch), for the summary after --continue.

    The state is untrusted input: an entry not of the form ``as_dict`` writes is left out, never trusted in part.
    """
    out: dict[str, Cause] = {}
    for name, doc in found.items() if isinstance(found, dict) else ():
        try:
            out[str(name)] = _cause_of(str(name), doc)
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _cause_of(name: str, doc: dict[str, Any]) -> Cause:
    commits = tuple(
        Touch(_str(t["commit"]), _str(t["subject"]), t["pr"] if isinstance(t["pr"], int) else None)
        for t in doc["commits"]
    )
    if any(not _FULL.fullmatch(t.commit) for t in commits) or not isinstance(doc["more_commits"], int):
        raise ValueError(name)
    versions = doc["versions"]
    return Cause(
        name,
        _str(doc["from"]),
        _str(doc["to"]),
        commits,
        doc["more_commits"],
        (_str(versions[0]), _str(versions[1])) if versions is not None else None,
        _str(doc["github"]) if doc["github"] is not None else None,
        _str(doc["unknown"]) if doc["unknown"] is not None else None,
    )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value
