"""``patchkit import --normalize``: hand-kept diffs become one canonical diff per patch.

For each overlay that hand-kept diffs describe, the diffs are undone on the
overlay newest first (incremental ones included); what remains is the
upstream base. Its sha256 becomes the patch's [base], and the diff from that
base to the overlay, with stable ``a/<upstream path>`` / ``b/<upstream path>``
headers, is written to ``upstream/<name>.diff``. A hand-kept diff whose every
part was normalized is deleted (git keeps its history); the rest stay pinned
as they are and are reported with the reason.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from patchkit import diffs
from patchkit.cache import BlobStore
from patchkit.edit import canonical_diff, finish
from patchkit.hashing import sha256_bytes
from patchkit.importing import handdiffs
from patchkit.lockfile import Base, DiffPin, HandDiff, Lockfile, Patch, PatchKind
from patchkit.repo import Repo
from patchkit.values import RepoPath, Revision, Sha256, UpstreamPath

_PYTHON_TREE = re.compile(r"/(?:site|dist)-packages/")


@dataclass
class Normalized:
    """What ``--normalize`` did: patches given a canonical diff, and those it could not."""

    done: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "normalized": self.done,
            "modules": self.modules,
            "not_normalized": [{"patch": n, "why": w} for n, w in self.failed],
            "written": self.written,
            "removed": self.removed,
        }


def normalize(repo: Repo, lock: Lockfile, store: BlobStore) -> Normalized:
    """Rewrite every hand-kept diff that can be rebuilt into patchkit's canonical form, atomically."""
    result = Normalized()
    by_name = {p.name: p for p in lock.patches}
    chains: dict[str, list[tuple[str, diffs.FileDiff]]] = {}
    new_sides: set[str] = set()
    unparsed: dict[str, str] = {}
    for d in lock.diffs:
        rel = str(d.file)
        try:
            sections, _ = diffs.parse_lenient(repo.check_inside(d.file).read_bytes())
        except (OSError, diffs.DiffError) as e:
            for n in d.patches:
                unparsed[n] = f"{rel} cannot be read as a diff ({e})"
            continue
        candidates = [
            handdiffs.Candidate(p.name, str(p.file), str(p.target))
            for n in d.patches
            if (p := by_name.get(n)) is not None and p.file is not None
        ]
        for fd in sections:
            m = handdiffs.match(fd, candidates)
            if m.candidate is None:
                continue
            if m.against == "new":
                new_sides.add(m.candidate.key)
            else:
                chains.setdefault(m.candidate.key, []).append((rel, fd))

    patches: list[Patch] = []
    extra: dict[str, bytes] = {}
    settled: set[str] = set()
    for p in lock.patches:
        covered = any(p.name in d.patches for d in lock.diffs)
        if not covered:
            patches.append(p)
            continue
        if p.name in unparsed:
            result.failed.append((p.name, unparsed[p.name]))
            patches.append(p)
            continue
        if p.kind is not PatchKind.OVERLAY:
            # A module's or transformer's whole file is what runs: it has no diff to upstream.
            settled.add(p.name)
            result.modules.append(p.name)
            patches.append(p)
            continue
        if p.file is None or p.name not in chains:
            why = "its diffs only add whole files" if p.name in new_sides else "no part of its diffs names its file"
            result.failed.append((p.name, why))
            patches.append(p)
            continue
        data = repo.check_inside(p.file).read_bytes()
        undone = handdiffs.undo(data, chains[p.name])
        if undone.base is None:
            rel, line, why_stale = undone.stale or ("?", 0, "")
            result.failed.append((p.name, f"{rel}:{line} does not reproduce {p.file}: {why_stale}"))
            patches.append(p)
            continue
        upstream, why = _upstream_of(lock, p)
        path = _upstream_path(p)
        if upstream is None or path is None:
            result.failed.append((p.name, why if upstream is None else "no upstream path stated or derivable"))
            patches.append(p)
            continue
        commit = p.origin.commit if p.origin is not None else None
        base_sha = Sha256(store.put(undone.base))
        diff_rel = f"upstream/{p.name}.diff"
        text = canonical_diff(undone.base, data, path)
        extra[diff_rel] = text
        patches.append(
            dataclasses.replace(
                p,
                base=Base(
                    upstream=upstream,
                    path=path,
                    sha256=base_sha,
                    commit=Revision(commit) if commit is not None and len(commit) == 40 else None,
                ),
                diff=DiffPin(RepoPath(diff_rel), Sha256(sha256_bytes(text))),
            )
        )
        settled.add(p.name)
        result.done.append(p.name)

    kept: list[HandDiff] = []
    deletes: list[str] = []
    for d in lock.diffs:
        left = tuple(n for n in d.patches if n not in settled)
        if left:
            kept.append(dataclasses.replace(d, patches=left))
        else:
            deletes.append(str(d.file))
    if not result.done and not result.modules:
        return result
    new_lock = dataclasses.replace(lock, patches=tuple(patches), diffs=tuple(kept))
    result.written = finish(repo, new_lock, extra, deletes)
    result.removed = deletes
    return result


def _upstream_of(lock: Lockfile, p: Patch) -> tuple[str | None, str]:
    """The declared upstream a patch's origin names, or the one its target's package is named after."""
    repository = p.origin.repository if p.origin is not None else None
    if repository is not None:
        for u in lock.upstreams:
            if u.git is not None and u.git.rstrip("/").removesuffix(".git").endswith("/" + repository):
                return u.name, ""
        return None, f"its stated upstream {repository} is not declared (patchkit upstream add …)"
    package = _upstream_path(p)
    if package is not None:
        top = package.path.split("/", 1)[0]
        if lock.upstream(top) is not None:
            return top, ""
    return None, "no source states its upstream repository (add it to the provenance table)"


def _upstream_path(p: Patch) -> UpstreamPath | None:
    if p.origin is not None and p.origin.path is not None:
        return p.origin.path
    parts = _PYTHON_TREE.split(str(p.target), 1)
    return UpstreamPath(parts[1]) if len(parts) == 2 else None
