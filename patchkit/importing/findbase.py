"""``upstream find-base``: which upstream version was a hand-kept overlay copied from?

A hand-kept overlay rarely says which upstream file it started from. Given candidates (the tags
or commits of a git upstream, versions of a wheel, image references), this reads the overlay's
upstream path at every candidate (a git upstream in one batched ``git cat-file``; a wheel
reads only that member of each wheel; an image only the layers that hold it) and ranks them:

- **exact**: the candidate's file is the base the overlay's own diff rebuilds (its hand-kept
  diffs undone on it), byte for byte;
- otherwise by the number of lines that differ between the overlay and the candidate's file
  (fewest first), which is what the patch would carry if based there.

Nothing is recorded unless the caller asks (``record``); a near miss is reported as one, with
every candidate's distance as the evidence.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.core.diffs import canonical_diff, line_matcher, split_lines
from patchkit.core.hashing import sha256_bytes
from patchkit.core.outcome import Change, Outcome
from patchkit.core.values import RepoPath, Revision, Sha256, UpstreamPath
from patchkit.errors import BadInput
from patchkit.lockfile.model import (
    Base,
    DiffPin,
    GitUpstream,
    ImageUpstream,
    Lockfile,
    Patch,
    PatchKind,
    Upstream,
    WheelUpstream,
)
from patchkit.lockfile.verification import record_new_bases
from patchkit.sources.context import Context
from patchkit.store.repo import Escape, Repo


@dataclass(frozen=True)
class Candidate:
    """One upstream version to try: how the user named it and the exact ref a base records."""

    label: str
    ref: str  # a full commit (git), a version (wheel), a digest (image)
    version: str | None = None


@dataclass(frozen=True)
class Tried:
    """One candidate's evidence: its file's sha256 (None when absent) and the lines that differ."""

    candidate: Candidate
    sha256: str | None
    distance: int | None
    exact: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.label,
            "ref": self.candidate.ref,
            "sha256": self.sha256,
            "lines_differing": self.distance,
            "exact": self.exact,
        }


@dataclass(frozen=True)
class Found:
    """The verdict for one overlay: every candidate tried, the best, and whether it is exact."""

    patch: str
    path: str
    tried: tuple[Tried, ...]
    rebuilt: bool  # the overlay's diff rebuilt a base to compare with
    best: Tried | None
    ties: tuple[str, ...]  # other candidates with the same file as the best
    base_bytes: bytes | None = dataclasses.field(default=None, repr=False)
    pinned: bool = False  # the overlay's base sha256 is pinned: a candidate with that file is exact

    @property
    def exact(self) -> bool:
        return self.best is not None and self.best.exact

    def verdict(self) -> str:
        if self.best is None:
            return f"no candidate has {self.path}"
        label = self.best.candidate.label
        also = f" (same file in {', '.join(self.ties)})" if self.ties else ""
        if self.best.exact:
            what = "the base its diff rebuilds" if self.rebuilt else "the pinned base sha256"
            return f"{label}: exact, {what}{also}"
        why = (
            "its diff rebuilds a base no candidate has"
            if self.rebuilt
            else "no candidate has its pinned base sha256"
            if self.pinned
            else "it has no diff to rebuild its base"
        )
        n = self.best.distance
        return f"{label}: nearest, {n} line{'s' * (n != 1)} differ; no exact match ({why}){also}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "patch": self.patch,
            "path": self.path,
            "exact": self.exact,
            "best": self.best.candidate.label if self.best else None,
            "ties": list(self.ties),
            "verdict": self.verdict(),
            "tried": [t.as_dict() for t in self.tried],
        }


#: Reads one upstream path at many candidates: candidate -> bytes (None where absent).
ReadAt = Callable[[list[Candidate], str], list[bytes | None]]


def distance(a: bytes, b: bytes) -> int:
    """Lines that differ between two files: removed plus added in a line diff (patience, as our diffs)."""
    x, y = split_lines(a), split_lines(b)
    same: int = sum(n for _, _, n in line_matcher(x, y).get_matching_blocks())
    return len(x) + len(y) - 2 * same


def rank(
    name: str,
    path: str,
    overlay: bytes,
    rebuilt: bytes | None,
    files: list[tuple[Candidate, bytes | None]],
    pinned: str | None = None,
) -> Found:
    """Rank the candidates' files for one overlay; pure.

    A candidate is exact when its file is the base the overlay's diffs rebuild,
    or, when the base's sha256 is pinned (after ``import --normalize``, whose
    hand-kept diffs are gone), when its file has that sha256.
    """
    tried = []
    for cand, data in files:
        if data is None:
            tried.append(Tried(cand, None, None, False))
            continue
        sha = sha256_bytes(data)
        exact = (rebuilt is not None and data == rebuilt) or (pinned is not None and sha == pinned)
        tried.append(Tried(cand, sha, 0 if exact else distance(overlay, data), exact))
    present = [t for t in tried if t.sha256 is not None]
    # Exact first, then fewest lines; among equals the later candidate (the newer version).
    best = min(reversed(present), key=lambda t: (not t.exact, t.distance or 0), default=None)
    ties = tuple(t.candidate.label for t in present if best is not None and t is not best and t.sha256 == best.sha256)
    chosen = next((d for c, d in files if best is not None and c == best.candidate), None)
    return Found(name, path, tuple(tried), rebuilt is not None, best, ties, chosen, pinned is not None)


def overlays(lock: Lockfile, names: tuple[str, ...]) -> list[Patch]:
    """The overlays to look for: those named, or every committed overlay without a pinned base."""
    if names:
        by_name = {p.name: p for p in lock.patches}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise BadInput(f"not a patch of this deployment: {', '.join(unknown)}")
        return [by_name[n] for n in names]
    return [p for p in lock.patches if p.kind is PatchKind.OVERLAY and p.base is None and p.file is not None]


def upstream_path_of(p: Patch, given: str | None) -> str:
    from patchkit.importing.normalize import upstream_path

    if given is not None:
        try:
            return str(UpstreamPath(given))
        except ValueError as e:
            raise BadInput(f"--path: {e}") from e
    path = p.base.path if p.base is not None else upstream_path(p)
    if path is None:
        raise BadInput(f"'{p.name}': no upstream path stated or derivable from its target", "pass --path P")
    return str(path)


def rebuilt_base(repo: Repo, lock: Lockfile, p: Patch, data: bytes) -> bytes | None:
    """The base the overlay's hand-kept diffs give when undone on it, or None."""
    from patchkit.importing import handdiffs

    def read(d: Any) -> bytes | None:
        try:
            return repo.read(str(d.file))
        except (OSError, Escape):
            return None

    chains = handdiffs.chains(lock, read)
    if p.name not in chains.parts:
        return None
    return handdiffs.undo(data, chains.parts[p.name]).base


def candidates(
    up: Upstream, cache: Context, repo_root: Path, wanted: tuple[str, ...], tags: str | None
) -> tuple[list[Candidate], ReadAt]:
    """The candidates and a reader of one path at all of them, for the upstream's kind of source."""
    from patchkit.sources.factory import open_source

    source = open_source(up, cache, repo_root)
    from patchkit.sources.git import GitSource

    if isinstance(source, GitSource):
        found: list[Candidate] = []
        if tags is not None or not wanted:
            found += [
                Candidate(name, commit) for name, commit in source.tags() if fnmatch.fnmatchcase(name, tags or "*")
            ]
        for ref in wanted:
            found.append(Candidate(ref, source.snapshot(ref).commit))

        def read_git(cands: list[Candidate], path: str) -> list[bytes | None]:
            return source.read_at([(c.ref, path) for c in cands])

        return found, read_git
    if tags is not None:
        raise BadInput(
            f"--tags: upstream '{up.name}' is a {up.source} source, not git", "list the versions with --candidate"
        )
    if not wanted:
        raise BadInput("name the candidates to try: --candidate VERSION (a wheel version, an image reference) …")
    snaps = {ref: source.snapshot(ref) for ref in wanted}
    found = [Candidate(ref, snap.pin.exact, snap.pin.version) for ref, snap in snaps.items()]

    def read_each(cands: list[Candidate], path: str) -> list[bytes | None]:
        return [snaps[c.label].read([path]).get(path) for c in cands]

    return found, read_each


def find(
    repo: Repo, lock: Lockfile, targets: list[Patch], path: str | None, cands: list[Candidate], read: ReadAt
) -> list[Found]:
    """Rank every candidate for each overlay."""
    if path is not None and len(targets) != 1:
        raise BadInput("--path names the upstream path of one overlay: name that one patch")
    out = []
    for p in targets:
        if p.file is None:
            raise BadInput(f"'{p.name}' is diff-only: its base is what makes its file; nothing to search with")
        data = repo.read(str(p.file))
        upath = upstream_path_of(p, path)
        files = read(cands, upath)
        pinned = p.base.sha256.hex if p.base is not None else None
        found = list(zip(cands, files, strict=True))
        out.append(rank(p.name, upath, data, rebuilt_base(repo, lock, p, data), found, pinned))
    return out


def record(
    repo: Repo, lock: Lockfile, up: Upstream, found: list[Found], nearest: bool
) -> tuple[Lockfile, dict[str, bytes], Outcome]:
    """The lockfile with each found base pinned (exact ones; nearest ones too with ``nearest``) and its diff."""
    by_name = {f.patch: f for f in found}
    files: dict[str, bytes] = {}
    outcome = Outcome()
    patches = []
    for p in lock.patches:
        f = by_name.get(p.name)
        if f is None or f.best is None or f.base_bytes is None or (not f.exact and not nearest) or p.file is None:
            patches.append(p)
            continue
        data = repo.read(str(p.file))
        text = canonical_diff(f.base_bytes, data, UpstreamPath(f.path))
        rel = str(p.diff.file) if p.diff is not None else f"upstream/{p.name}.diff"
        files[rel] = text
        c = f.best.candidate
        base = Base(
            upstream=up.name,
            path=UpstreamPath(f.path),
            sha256=Sha256(sha256_bytes(f.base_bytes)),
            commit=Revision(c.ref) if isinstance(up, GitUpstream) else None,
            version=c.version if isinstance(up, WheelUpstream | ImageUpstream) else None,
        )
        patches.append(dataclasses.replace(p, base=base, diff=DiffPin(RepoPath(rel), Sha256(sha256_bytes(text)))))
        outcome.changes.append(Change(f"patches[{p.name}].base", "unknown", f"{up.name} {c.label} ({f.path})"))
    new_lock = record_new_bases(dataclasses.replace(lock, patches=tuple(patches)), lock, repo.root)
    return new_lock, files, outcome
