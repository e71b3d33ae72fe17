"""``patchkit import --normalize``: hand-kept diffs become one canonical diff per patch.

For each overlay that hand-kept diffs describe, the diffs are undone on the
overlay newest first (incremental ones included); what remains is the
upstream base. Its sha256 becomes the patch's [base], and the diff from that
base to the overlay, with stable ``a/<upstream path>`` / ``b/<upstream path>``
headers, is written to ``upstream/<name>.diff``. A hand-kept diff whose every
part was normalized is deleted (git keeps its history); the rest stay pinned
as they are and are reported with the reason.

With a ``fetch`` function (``--fetch``), the upstream file at the stated
base commit is the truth: a base rebuilt from the diffs must equal it, and
an overlay whose diffs are stale or missing is normalized against it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from patchkit.cache import BlobStore
from patchkit.edit import canonical_diff, finish, sums_dropped
from patchkit.errors import PatchkitError
from patchkit.hashing import sha256_bytes
from patchkit.importing import handdiffs
from patchkit.lockfile import Base, DiffPin, HandDiff, Lockfile, Patch, PatchKind, Upstream
from patchkit.repo import Repo
from patchkit.values import RepoPath, Revision, Sha256, UpstreamPath

_PYTHON_TREE = re.compile(r"/(?:site|dist)-packages/")

# Reads one file of an upstream at a commit: (upstream, path, commit) -> bytes (None: no such file).
Fetch = Callable[[Upstream, UpstreamPath, str], "bytes | None"]


@dataclass
class Normalized:
    """What ``--normalize`` did: patches given a canonical diff, and those it could not."""

    done: list[str] = field(default_factory=list)
    from_upstream: list[str] = field(default_factory=list)  # bases read from upstream (with fetch)
    modules: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    dropped_sums: list[str] = field(default_factory=list)  # SHA256SUMS entries for files nothing pins

    def as_dict(self) -> dict[str, object]:
        return {
            "normalized": self.done,
            "base_from_upstream": self.from_upstream,
            "modules": self.modules,
            "not_normalized": [{"patch": n, "why": w} for n, w in self.failed],
            "written": self.written,
            "removed": self.removed,
            "sums_dropped": self.dropped_sums,
        }


def normalize(repo: Repo, lock: Lockfile, store: BlobStore, fetch: Fetch | None = None) -> Normalized:
    """Rewrite every hand-kept diff that can be rebuilt into patchkit's canonical form, atomically.

    With ``fetch``, each overlay whose origin states a full base commit gets
    its base from upstream: a base rebuilt from the diffs must equal it (else
    a diff is stale or the commit is wrong), and an overlay without usable
    diffs is normalized against it.
    """
    result = Normalized()
    chains = handdiffs.chains(lock, lambda d: repo.check_inside(d.file).read_bytes())
    patches: list[Patch] = []
    extra: dict[str, bytes] = {}
    for p in lock.patches:
        covered = any(p.name in d.patches for d in lock.diffs)
        if p.kind is not PatchKind.OVERLAY:
            if covered:  # a module's or transformer's whole file is what runs: no diff to upstream
                result.modules.append(p.name)
            patches.append(p)
            continue
        wanted = covered or (fetch is not None and p.origin is not None)
        if p.base is not None or p.file is None or not wanted:
            patches.append(p)
            continue
        outcome = _settle(repo, lock, p, chains, fetch, store)
        if isinstance(outcome, str):
            result.failed.append((p.name, outcome))
            patches.append(p)
            continue
        new_patch, text, fetched = outcome
        assert new_patch.diff is not None  # noqa: S101 - _settle always pins the diff it made
        extra[str(new_patch.diff.file)] = text
        patches.append(new_patch)
        result.done.append(p.name)
        if fetched:
            result.from_upstream.append(p.name)

    kept: list[HandDiff] = []
    deletes: list[str] = []
    for d in lock.diffs:
        # Deleted only when replaced: every patch it covers got a canonical diff, and it holds nothing else.
        if d.patches and all(n in result.done for n in d.patches) and str(d.file) not in chains.leftover:
            deletes.append(str(d.file))
        else:
            # It stays for what it still describes; the parts now replaced are no longer its patches'.
            kept.append(dataclasses.replace(d, patches=tuple(n for n in d.patches if n not in result.done)))
    if not result.done:
        return result
    new_lock = dataclasses.replace(lock, patches=tuple(patches), diffs=tuple(kept))
    # Entries of the deleted diffs go with them (reported as removed); any other is named.
    dropped = (c.what.removeprefix("SHA256SUMS ") for c in sums_dropped(repo, new_lock))
    result.dropped_sums = [name for name in dropped if name not in deletes]
    result.written = finish(repo, new_lock, extra, deletes)
    result.removed = deletes
    return result


def _settle(
    repo: Repo, lock: Lockfile, p: Patch, chains: handdiffs.Chains, fetch: Fetch | None, store: BlobStore
) -> tuple[Patch, bytes, bool] | str:
    """The overlay with its base and canonical diff (and whether the base came from upstream), or why not."""
    assert p.file is not None  # noqa: S101 - the caller only settles committed overlays
    data = repo.check_inside(p.file).read_bytes()
    rebuilt: bytes | None = None
    why_not: str
    if p.name in chains.unreadable:
        why_not = chains.unreadable[p.name]
    elif p.name in chains.parts:
        undone = handdiffs.undo(data, chains.parts[p.name])
        rebuilt = undone.base
        why_not = "; ".join(f"{rel}:{line} does not reproduce {p.file}: {stale}" for rel, line, stale in undone.stale)
    elif p.name in chains.adds_whole_file:
        why_not = "its diffs only add whole files"
    elif any(p.name in d.patches for d in lock.diffs):
        why_not = "no part of its diffs names its file"
    else:
        why_not = "it has no diff"
    upstream, why = upstream_of(lock, p)
    path = _upstream_path(p)
    if upstream is None or path is None:
        return why if upstream is None else "no upstream path stated or derivable"
    commit = p.origin.commit if p.origin is not None else None
    full = commit if commit is not None and len(commit) == 40 else None
    fetched: bytes | None = None
    up = lock.upstream(upstream)
    if fetch is not None and full is not None and up is not None:
        try:
            fetched = fetch(up, path, full)
        except PatchkitError as e:
            return f"cannot read {path} at {full[:12]} from upstream '{upstream}': {e.message}"
        if fetched is None:
            return f"upstream '{upstream}' has no {path} at {full[:12]}"
        if rebuilt is not None and rebuilt != fetched:
            return (
                f"its diffs rebuild a base that is not {path} at {full[:12]} in upstream '{upstream}' "
                "(a diff is stale beyond its hunks, or the stated commit is wrong)"
            )
    base = fetched if fetched is not None else rebuilt
    if base is None:
        if fetch is None and full is not None:
            return f"{why_not}; --fetch would read the base from upstream at {full[:12]}"
        if fetch is not None and full is None:
            return f"{why_not}; no full base commit is stated to read the base from upstream"
        return why_not
    base_sha = Sha256(store.put(base))
    diff_rel = f"upstream/{p.name}.diff"
    text = canonical_diff(base, data, path)
    new_patch = dataclasses.replace(
        p,
        base=Base(upstream=upstream, path=path, sha256=base_sha, commit=Revision(full) if full else None),
        diff=DiffPin(RepoPath(diff_rel), Sha256(sha256_bytes(text))),
    )
    return new_patch, text, fetched is not None


def upstream_of(lock: Lockfile, p: Patch) -> tuple[str | None, str]:
    """The declared upstream a patch's origin names, or the one its target's package is named after."""
    repository = p.origin.repository if p.origin is not None else None
    if repository is not None:
        for u in lock.upstreams:
            if u.git is not None and u.git.rstrip("/").removesuffix(".git").endswith("/" + repository):
                return u.name, ""
        # import names the upstream after the repository; its URL may since point at a mirror.
        named = repository.split("/")[1].lower()
        if lock.upstream(named) is not None:
            return named, ""
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


def source_fetch(repo: Repo) -> Fetch:
    """A ``Fetch`` that reads from each upstream's own source (a git clone in the cache, a wheel, …)."""
    from patchkit.cache import cache_dir
    from patchkit.sources.factory import open_source, pinned_snapshot

    def fetch(up: Upstream, path: UpstreamPath, commit: str) -> bytes | None:
        source = open_source(up, cache_dir(), repo.root)
        return pinned_snapshot(source, up, commit).read([str(path)]).get(str(path))

    return fetch
