"""``patchkit import --normalize``: hand-kept diffs become one canonical diff per patch.

For each overlay that hand-kept diffs describe, the diffs are undone on the
overlay newest first (incremental ones included); what remains is the
upstream base. Its sha256 becomes the patch's [base], and the diff from that
base to the overlay, with stable ``a/<upstream path>`` / ``b/<upstream path>``
headers, is written to ``upstream/<name>.diff``. A hand-kept diff whose every
part was normalized (or is the whole file of a module upstream was asked about
and does not have) is deleted (git keeps its history); the rest stay pinned as
they are and are reported with the reason.

With a ``fetch`` function (``--fetch``), the upstream file at the stated
base commit is the truth: a base rebuilt from the diffs must equal it, and
an overlay whose diffs are stale or missing is normalized against it. An
upstream also decides what a ``/dev/null`` diff cannot: a module that only such
a diff made a module (no provenance row names it), mounted in an upstream's
tree, is an overlay when that upstream has the file at its pinned commit.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from patchkit.core.diffs import canonical_diff
from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import RepoPath, Revision, Sha256, UpstreamPath
from patchkit.errors import PatchkitError
from patchkit.importing import handdiffs, provenance
from patchkit.lockfile.model import Base, DiffPin, HandDiff, Lockfile, Patch, PatchKind, Upstream
from patchkit.lockfile.verification import record_new_bases
from patchkit.sources.context import Context
from patchkit.store.cache import BlobStore
from patchkit.store.persist import finish, sums_dropped
from patchkit.store.repo import Repo

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
    # Replaced diffs kept because the repository's own scripts, tests or build files name them: (diff, where)
    kept_referenced: list[tuple[str, str]] = field(default_factory=list)
    unneeded: list[str] = field(default_factory=list)  # of removed: diffs that only held such modules' whole files
    dropped_sums: list[str] = field(default_factory=list)  # SHA256SUMS entries for files nothing pins
    # Modules an upstream was asked about (with fetch): found there, so now overlays, as (patch, diff, line, message);
    found_upstream: list[tuple[str, str, int, str]] = field(default_factory=list)
    # ... not there, so modules, as (patch, why); and those it could not tell, as (patch, why, fix).
    not_upstream: list[tuple[str, str]] = field(default_factory=list)
    unknown: list[tuple[str, str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "normalized": self.done,
            "base_from_upstream": self.from_upstream,
            "modules": self.modules,
            "found_upstream": [
                {"patch": n, "kind": "diff-new-file", "file": f, "line": line, "message": m}
                for n, f, line, m in self.found_upstream
            ],
            "not_upstream": [{"patch": n, "why": w} for n, w in self.not_upstream],
            "unknown": [{"patch": n, "why": w, "fix": f} for n, w, f in self.unknown],
            "not_normalized": [{"patch": n, "why": w} for n, w in self.failed],
            "written": self.written,
            "removed": self.removed,
            "removed_unneeded": self.unneeded,
            "kept_referenced": [{"diff": d, "referenced_at": w} for d, w in self.kept_referenced],
            "sums_dropped": self.dropped_sums,
        }


def normalize(
    repo: Repo, lock: Lockfile, store: BlobStore, fetch: Fetch | None = None, *, delete_referenced: bool = False
) -> Normalized:
    """Rewrite every hand-kept diff that can be rebuilt into patchkit's canonical form, atomically.

    A replaced diff that the repository's own scripts, tests or build files
    name (a test applying it, a Makefile checking it) stays, pinned and
    checked as before, unless ``delete_referenced``: deleting it would break
    what the repository itself runs.

    With ``fetch``, each overlay whose origin states a full base commit gets
    its base from upstream: a base rebuilt from the diffs must equal it (else
    a diff is stale or the commit is wrong), and an overlay without usable
    diffs is normalized against it.
    """
    result = Normalized()
    original = lock
    read = lambda d: repo.read(d.file)  # noqa: E731 - read twice, the same way
    chains = handdiffs.chains(lock, read)
    extra: dict[str, bytes] = {}
    if fetch is not None:
        made = _overlays_found_upstream(repo, lock, chains, fetch, store, result, extra)
        if made is not lock:
            lock = made
            chains = handdiffs.chains(lock, read)  # its /dev/null part now belongs to an overlay: it can be replaced
    patches = [_normalized(repo, lock, p, chains, fetch, store, result, extra) for p in lock.patches]
    kept, deletes = _replaced_diffs(lock, chains, result)
    if deletes and not delete_referenced:
        kept, deletes = _keep_referenced(repo, lock, kept, deletes, result)
    if not result.done and not deletes:
        return result
    new_lock = dataclasses.replace(lock, patches=tuple(patches), diffs=tuple(kept))
    new_lock = record_new_bases(new_lock, original, repo.root)  # a base verified at the upstream's pin says so
    # Entries of the deleted diffs go with them (reported as removed); any other is named.
    dropped = (c.what.removeprefix("SHA256SUMS ") for c in sums_dropped(repo, new_lock))
    result.dropped_sums = [name for name in dropped if name not in deletes]
    result.written = finish(repo, new_lock, extra, deletes)
    result.removed = deletes
    return result


def _overlays_found_upstream(
    repo: Repo,
    lock: Lockfile,
    chains: handdiffs.Chains,
    fetch: Fetch,
    store: BlobStore,
    result: Normalized,
    extra: dict[str, bytes],
) -> Lockfile:
    """The lockfile with each module that upstream has turned into an overlay (``lock`` itself when none is).

    Each such overlay's canonical diff goes into ``extra``; it counts as normalized with its base from upstream.
    """
    decided = [_module_or_overlay(repo, lock, p, chains, fetch, store, result) for p in lock.patches]
    found = False
    for p, made in zip(lock.patches, decided, strict=True):
        if made is not None:
            assert made[0].diff is not None  # noqa: S101 - an overlay found upstream gets its canonical diff
            extra[str(made[0].diff.file)] = made[1]
            result.done.append(p.name)
            result.from_upstream.append(p.name)
            found = True
    if not found:
        return lock
    patched = tuple(p if made is None else made[0] for p, made in zip(lock.patches, decided, strict=True))
    return dataclasses.replace(lock, patches=patched)


def _normalized(
    repo: Repo,
    lock: Lockfile,
    p: Patch,
    chains: handdiffs.Chains,
    fetch: Fetch | None,
    store: BlobStore,
    result: Normalized,
    extra: dict[str, bytes],
) -> Patch:
    """``p`` with a base and canonical diff when it is a committed overlay without a base that can be settled.

    Wanted are overlays hand-kept diffs cover, and (with fetch) those whose origin states a base.
    """
    covered = any(p.name in d.patches for d in lock.diffs)
    if p.kind is not PatchKind.OVERLAY:
        if covered:  # a module's or transformer's whole file is what runs: no diff to upstream
            result.modules.append(p.name)
        return p
    wanted = covered or (fetch is not None and p.origin is not None)
    if p.base is not None or p.file is None or not wanted:
        return p
    outcome = _settle(repo, lock, p, chains, fetch, store)
    if isinstance(outcome, str):
        result.failed.append((p.name, outcome))
        return p
    new_patch, text, fetched = outcome
    assert new_patch.diff is not None  # noqa: S101 - _settle always pins the diff it made
    extra[str(new_patch.diff.file)] = text
    result.done.append(p.name)
    if fetched:
        result.from_upstream.append(p.name)
    return new_patch


def _replaced_diffs(lock: Lockfile, chains: handdiffs.Chains, result: Normalized) -> tuple[list[HandDiff], list[str]]:
    """The hand-kept diffs that stay (without the patches now normalized), and those to delete.

    A diff is deleted only when replaced: every patch it covers got a canonical
    diff (or is a module upstream was asked about and does not have, whose
    /dev/null part is no longer needed), and it holds nothing else.
    """
    kept: list[HandDiff] = []
    deletes: list[str] = []
    modules = {n for n, _ in result.not_upstream}
    for d in lock.diffs:
        rel = str(d.file)
        settled = all(n in result.done or n in modules for n in d.patches)
        only_modules = chains.whole_modules.get(rel, set()) <= modules  # true when it adds no module whole
        if d.patches and settled and only_modules and rel not in chains.unmatched:
            deletes.append(rel)
            if all(n in modules for n in d.patches):
                result.unneeded.append(rel)
        else:
            # It stays for what it still describes; the parts now replaced are no longer its patches'.
            kept.append(dataclasses.replace(d, patches=tuple(n for n in d.patches if n not in result.done)))
    return kept, deletes


def _keep_referenced(
    repo: Repo, lock: Lockfile, kept: list[HandDiff], deletes: list[str], result: Normalized
) -> tuple[list[HandDiff], list[str]]:
    """Move back to ``kept`` (whole, with every patch it covers) each diff to delete that the repository names."""
    from patchkit.importing.reliance import referenced

    named = referenced(repo.root, deletes)
    by_file = {str(d.file): d for d in kept}
    for d in lock.diffs:
        if (rel := str(d.file)) in named:
            by_file[rel] = d
            result.kept_referenced.append((rel, named[rel]))
            if rel in result.unneeded:
                result.unneeded.remove(rel)
    order = [by_file[str(d.file)] for d in lock.diffs if str(d.file) in by_file]
    return order, [rel for rel in deletes if rel not in named]


def _rebuilt(lock: Lockfile, p: Patch, data: bytes, chains: handdiffs.Chains) -> tuple[bytes | None, str]:
    """The base the hand-kept diffs give when undone on the overlay (if any), and why it is not usable alone."""
    if p.name in chains.unreadable:
        return None, chains.unreadable[p.name]
    if p.name in chains.parts:
        undone = handdiffs.undo(data, chains.parts[p.name])
        stale = "; ".join(f"{rel}:{line} does not reproduce {p.file}: {why}" for rel, line, why in undone.stale)
        return undone.base, stale
    if p.name in chains.adds_whole_file:
        return None, "its diffs only add whole files"
    if any(p.name in d.patches for d in lock.diffs):
        return None, "no part of its diffs names its file"
    return None, "it has no diff"


def _fetched(fetch: Fetch, up: Upstream, path: UpstreamPath, full: str, rebuilt: bytes | None) -> bytes | str:
    """The base read from upstream at ``full``, or why not: unreadable, absent, or not the rebuilt base."""
    try:
        fetched = fetch(up, path, full)
    except PatchkitError as e:
        return f"cannot read {path} at {full[:12]} from upstream '{up.name}': {e.message}"
    if fetched is None:
        return f"upstream '{up.name}' has no {path} at {full[:12]}"
    if rebuilt is not None and rebuilt != fetched:
        return (
            f"its diffs rebuild a base that is not {path} at {full[:12]} in upstream '{up.name}' "
            "(a diff is stale beyond its hunks, or the stated commit is wrong)"
        )
    return fetched


def _no_base(why_not: str, fetch: Fetch | None, full: str | None) -> str:
    """Why no base could be had, with what ``--fetch`` would (or could not) change."""
    if fetch is None and full is not None:
        return f"{why_not}; --fetch would read the base from upstream at {full[:12]}"
    if fetch is not None and full is None:
        return f"{why_not}; no full base commit is stated to read the base from upstream"
    return why_not


def _settle(
    repo: Repo, lock: Lockfile, p: Patch, chains: handdiffs.Chains, fetch: Fetch | None, store: BlobStore
) -> tuple[Patch, bytes, bool] | str:
    """The overlay with its base and canonical diff (and whether the base came from upstream), or why not."""
    assert p.file is not None  # noqa: S101 - the caller only settles committed overlays
    data = repo.read(p.file)
    rebuilt, why_not = _rebuilt(lock, p, data, chains)
    upstream, why = upstream_of(lock, p)
    path = upstream_path(p)
    if upstream is None or path is None:
        return why if upstream is None else "no upstream path stated or derivable"
    commit = p.origin.commit if p.origin is not None else None
    full = commit if commit is not None and len(commit) == 40 else None
    fetched: bytes | None = None
    up = lock.upstream(upstream)
    if fetch is not None and full is not None and up is not None:
        read = _fetched(fetch, up, path, full, rebuilt)
        if isinstance(read, str):
            return read
        fetched = read
    base = fetched if fetched is not None else rebuilt
    if base is None:
        return _no_base(why_not, fetch, full)
    base_sha = Sha256(store.put(base))
    diff_rel = f"upstream/{p.name}.diff"
    text = canonical_diff(base, data, path)
    new_patch = dataclasses.replace(
        p,
        base=Base(upstream=upstream, path=path, sha256=base_sha, commit=Revision(full) if full else None),
        diff=DiffPin(RepoPath(diff_rel), Sha256(sha256_bytes(text))),
    )
    return new_patch, text, fetched is not None


def _module_or_overlay(
    repo: Repo, lock: Lockfile, p: Patch, chains: handdiffs.Chains, fetch: Fetch, store: BlobStore, result: Normalized
) -> tuple[Patch, bytes] | None:
    """Ask upstream whether a module that only a ``/dev/null`` diff made a module is an upstream file.

    Only a module a hand-kept diff adds whole, that no provenance row names
    (a row calling it new decides), mounted in the tree of a declared upstream
    (its target maps to an upstream path as an overlay's does). Found there at
    the upstream's pinned commit: the overlay it is, with that file as its base
    and a canonical diff, and its diff reported as ``diff-new-file``. Not there:
    it stays a module. No pinned commit, or the upstream cannot be read:
    unknown, with the reason and the command that would tell. Never a guess.
    """
    asks = maybe_upstream(repo, lock, p, chains)
    if asks is None:
        return None
    up, path = asks
    ref = up.fetch_ref
    asked = f"whether upstream '{up.name}' has {path}"
    if ref is None:
        result.unknown.append(
            (
                p.name,
                f"{asked} is unknown: it pins no {up.pin_noun}{f' ({up.note})' if up.note else ''}",
                f"pin upstream '{up.name}' at the commit the image ships ([upstreams.{up.name}] commit in "
                "lockfile.toml), then patchkit import --normalize --fetch",
            )
        )
        return None
    at = up.show_ref(ref)
    try:
        base = fetch(up, path, ref)
    except PatchkitError as e:
        result.unknown.append(
            (
                p.name,
                f"{asked} is unknown: {path} at {at} cannot be read ({e.message})",
                "patchkit import --normalize --fetch, once the upstream can be read",
            )
        )
        return None
    if base is None:
        result.not_upstream.append((p.name, f"upstream '{up.name}' has no {path} at {at}: a new module"))
        return None
    assert p.file is not None  # noqa: S101 - maybe_upstream only asks about committed modules
    data = repo.read(p.file)
    text = canonical_diff(base, data, path)
    diff_rel = f"upstream/{p.name}.diff"
    overlay = dataclasses.replace(
        p,
        kind=PatchKind.OVERLAY,
        base=Base(
            upstream=up.name,
            path=path,
            sha256=Sha256(store.put(base)),
            commit=up.new_base()[0],
        ),
        diff=DiffPin(RepoPath(diff_rel), Sha256(sha256_bytes(text))),
    )
    for rel, line in chains.new_file_parts[p.name]:
        result.found_upstream.append(
            (
                p.name,
                rel,
                line,
                f"adds {p.file} as a new file (--- /dev/null), but upstream '{up.name}' has {path} at {at}: "
                f"an overlay, now based on that file ({diff_rel})",
            )
        )
    return overlay, text


def maybe_upstream(
    repo: Repo, lock: Lockfile, p: Patch, chains: handdiffs.Chains
) -> tuple[Upstream, UpstreamPath] | None:
    """The upstream and path to ask when only a ``/dev/null`` diff made ``p`` a module, else None.

    That is a module a hand-kept diff adds whole, that no provenance row names
    (a row calling it new decides), whose target lies in a declared upstream's
    tree (it maps to an upstream path as an overlay's does). Offline nothing
    tells whether that upstream has the file; ``--fetch`` asks it.
    """
    return module_maybe_upstream(lock, p, chains, lambda rel: bool(provenance.rows_naming(repo.root, rel)))


def module_maybe_upstream(
    lock: Lockfile, p: Patch, chains: handdiffs.Chains, provenance_names: Callable[[str], bool]
) -> tuple[Upstream, UpstreamPath] | None:
    """``maybe_upstream`` over what it reads: ``provenance_names`` says whether a provenance row names a file."""
    if p.kind is not PatchKind.MODULE or p.file is None or p.name not in chains.new_file_parts:
        return None
    upstream, _ = upstream_of(lock, p)
    path = upstream_path(p)
    up = lock.upstream(upstream) if upstream is not None else None
    if up is None or path is None or provenance_names(str(p.file)):
        return None
    return up, path


def maybe_upstream_note(name: str, file: str, path: str, upstream: str) -> tuple[str, str]:
    """The note (message, fix) for a module only a ``/dev/null`` diff made a module, as import and check give it."""
    return (
        f"adds module '{name}' ({file}) as a new file (--- /dev/null) and no provenance row names it, "
        f"but it is mounted as {path} in the tree of upstream '{upstream}': it may be an upstream file, "
        "which would make it an overlay whose diff hides what it changes",
        f"patchkit import --normalize --fetch decides (it asks upstream '{upstream}' for {path} at its pinned commit)",
    )


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
    package = upstream_path(p)
    if package is not None:
        top = package.path.split("/", 1)[0]
        if lock.upstream(top) is not None:
            return top, ""
    return None, "no source states its upstream repository (add it to the provenance table)"


def upstream_path(p: Patch) -> UpstreamPath | None:
    """The upstream path a patch replaces: the one its origin states, else its target inside the Python tree."""
    if p.origin is not None and p.origin.path is not None:
        return p.origin.path
    parts = _PYTHON_TREE.split(str(p.target), 1)
    return UpstreamPath(parts[1]) if len(parts) == 2 else None


def source_fetch(repo: Repo, ctx: Context) -> Fetch:
    """A ``Fetch`` that reads from each upstream's own source (a git clone in ``ctx``'s cache, a wheel, …)."""
    from patchkit.sources.factory import open_source, pinned_snapshot

    def fetch(up: Upstream, path: UpstreamPath, commit: str) -> bytes | None:
        source = open_source(up, ctx, repo.root)
        return pinned_snapshot(source, up, commit).read([str(path)]).get(str(path))

    return fetch
