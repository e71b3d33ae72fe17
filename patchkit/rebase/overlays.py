"""Rebasing patches onto a new upstream: plan, merge, and a transactional bump.

``plan`` reads every overlay's base (from the cache, from the committed
overlay and its diff, or from the upstream source at the base's own pin),
the patch itself, and the file at the new upstream pin (renames followed
where the source can see them), and merges each three-way. Nothing in the
repository changes while planning.

A plan with no conflict and no deleted file is committed at once: patches,
diffs, lockfile, SHA256SUMS in one journaled transaction (``repo.write_all``).
Otherwise the plan goes to a work area (``.patchkit/rebase/``): conflicted
files with markers for the user to resolve, the clean merges, and a state
file. ``resume`` (``--continue``) picks up the resolved files and commits;
``abort`` deletes the work area (the repository was never changed).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.core.diffs import canonical_diff
from patchkit.core.fanout import map_items
from patchkit.core.hashing import require_pin, sha256_bytes
from patchkit.core.outcome import Outcome as WriteOutcome
from patchkit.core.values import ContainerPath, Digest, Sha256, UpstreamPath
from patchkit.errors import BadInput, PatchkitError, PinMismatch
from patchkit.importing import handdiffs
from patchkit.lockfile.accepted import Accepted
from patchkit.lockfile.model import Base, DiffPin, Image, Lockfile, Patch, PatchKind, Upstream
from patchkit.lockfile.verification import record_verified
from patchkit.lockfile.writer import dumps
from patchkit.rebase import driver, explain, resolutions
from patchkit.rebase.driver import RebaseBlocked, RebaseInProgress
from patchkit.rebase.merge import MergeResult, Outcome, conflict_markers_remain, rebase_files
from patchkit.rebase.state import OVERLAYS, OverlayState, overlay_work_file, read_overlays
from patchkit.sources.context import Context
from patchkit.sources.factory import KINDS, repinned
from patchkit.sources.interface import Pin, Snapshot, UpstreamSource
from patchkit.sources.materialize import apply_diff_only, read_pinned, recover_base
from patchkit.store.cache import BlobStore
from patchkit.store.persist import finish, sums_dropped
from patchkit.store.repo import Escape, Repo
from patchkit.trust import interdiff, semantic
from patchkit.trust.imports import Tree
from patchkit.trust.pycheck import Problem

BLOCKING = (Outcome.CONFLICT, Outcome.DELETED, Outcome.BROKEN)
# The outcomes a saved state may name (``check_rebase``).
OUTCOMES = {o.value for o in Outcome}
# The overlays' rebase as the one driver sees it (``rebase.driver``): its work area and its state.
KIND = driver.Kind(OVERLAYS, lambda root: read_overlays(root, OUTCOMES), "rebase")
__all__ = ["RebaseBlocked", "RebaseInProgress"]  # raised here, defined by the driver


@dataclass(frozen=True)
class PatchResult:
    """One patch's outcome: what the merge found and what it would write."""

    name: str
    outcome: Outcome
    old_path: str
    new_path: str
    old_target: str
    new_target: str
    merge: MergeResult | None  # None for a deleted file
    theirs_sha256: str | None  # the new base
    # What the semantic checks found in the merged file (``broken`` when any blocks).
    problems: tuple[Problem, ...] = ()
    # The merge's own outcome, when the checks made it ``broken``.
    text_outcome: Outcome | None = None

    def as_dict(self) -> dict[str, Any]:
        m = self.merge
        return {
            "name": self.name,
            "outcome": self.outcome.value,
            "path": self.old_path,
            "new_path": self.new_path if self.new_path != self.old_path else None,
            "target": self.new_target if self.new_target != self.old_target else None,
            "conflicts": [dataclasses.asdict(c) for c in m.conflicts] if m else [],
            "hunks_upstreamed": [h.header for h in m.hunks_upstreamed] if m else [],
            "review": review_lines(m.review_flags) if m else [],
            "problems": [p.as_dict() for p in self.problems],
        }


@dataclass(frozen=True)
class Skipped:
    """A patch whose target lies in the tree being rebased but that the rebase does not move, and why."""

    name: str
    target: str
    reason: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "reason": self.reason, "fix": self.fix}


def _flag_text(flag: Any) -> str:
    return str(getattr(flag, "message", None) or flag)


def review_lines(flags: Iterable[Any]) -> list[str]:
    """The review flags of one patch, one line per function or class both sides changed.

    Each line names the definition first, then the patch hunk and every upstream hunk that
    changed it, so a reviewer reads one line for ``GpuWorker.restore`` however many upstream
    hunks touched it.
    """
    grouped: dict[tuple[str, str], list[str]] = {}
    for flag in flags:
        if not hasattr(flag, "definition"):
            grouped.setdefault((_flag_text(flag), ""), [])
            continue
        grouped.setdefault((flag.definition, flag.hunk.header), []).append(flag.upstream.header)
    out = []
    for (definition, hunk), theirs in grouped.items():
        if not hunk:
            out.append(definition)
            continue
        which = "upstream hunk" + ("s " if len(theirs) > 1 else " ") + ", ".join(dict.fromkeys(theirs))
        out.append(
            f"{definition}: changed on both sides ({which}; patch hunk {hunk}): check that the two still fit together"
        )
    return out


@dataclass
class Plan:
    """Every patch of one upstream moved onto one new pin."""

    upstream: str
    old_pin: str
    new_pin: Pin
    results: list[PatchResult] = field(default_factory=list)
    # Patches in the upstream's tree that this rebase does not move, each with its reason.
    skipped: list[Skipped] = field(default_factory=list)
    # Images to move with the bump (bump --image): name -> new digest, in the same transaction.
    image_pins: dict[str, str] = field(default_factory=dict)
    # bump --image: the image upstream the overlays in its tree move onto (saved, as a derived one is not
    # in the lockfile until the bump commits it).
    image_upstream: dict[str, Any] | None = None
    # Broken patches committed all the same (--accept-broken): name -> the reason given.
    accepted: dict[str, str] = field(default_factory=dict)
    # Each patch's own file before the rebase (ours), kept for the checks at --continue.
    ours: dict[str, bytes] = field(default_factory=dict, repr=False)
    # Each patch's new upstream file, as this run read it (by its sha256); at --continue, read from the cache.
    theirs: dict[str, bytes] = field(default_factory=dict, repr=False)
    # How each patch itself changed (old diff against new), for the patches whose changes may differ.
    interdiffs: dict[str, interdiff.Interdiff] = field(default_factory=dict)
    # What upstream did to the lines of each patch that did not move as it was (``patchkit.rebase.explain``).
    causes: dict[str, explain.Cause] = field(default_factory=dict)
    # The recorded resolutions replayed into each patch's merge, by id (``patchkit.rebase.resolutions``).
    remembered: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def blocked(self) -> list[PatchResult]:
        return [r for r in self.results if r.outcome in BLOCKING and r.name not in self.accepted]


# --------------------------------------------------------------------------- planning


def _ours(repo: Repo, p: Patch, base: bytes) -> bytes:
    if p.file is not None:
        return read_pinned(repo, str(p.file), p.name)
    return apply_diff_only(repo, p, base)


def _bases(
    repo: Repo,
    lock: Lockfile,
    patches: list[tuple[Patch, Base]],
    old_source: UpstreamSource | None,
    store: BlobStore,
) -> dict[str, bytes]:
    """Each patch's base bytes, verified against its pinned sha256; the network only when needed.

    Offline first (the cache, the committed overlay with its diff reversed);
    otherwise the old upstream source at the base's own pin, one snapshot
    and one batched read per pin.
    """
    from patchkit.sources.factory import pinned_snapshot

    out: dict[str, bytes] = {}
    missing: dict[str, list[tuple[Patch, Base]]] = {}
    for p, base in patches:
        data = recover_base(repo, p, store)
        if data is not None:
            out[p.name] = data
            continue
        up = lock.upstream(base.upstream)
        ref = (up.base_ref(base) or up.pinned_ref) if up is not None else None
        if ref is None or old_source is None or up is None:
            raise PatchkitError(
                f"'{p.name}': its base {base.path} (sha256 {base.sha256.short}…) is not available offline "
                "and no upstream source and pin are recorded to fetch it",
                "restore the committed diff, or re-add the patch with --base FILE",
            )
        missing.setdefault(ref, []).append((p, base))
    for ref, group in missing.items():
        up = lock.upstream(group[0][1].upstream)
        if up is None or old_source is None:
            continue
        got = pinned_snapshot(old_source, up, ref).read([str(b.path) for _, b in group])
        for p, base in group:
            data = got.get(str(base.path))
            hint = "check the upstream's source and pin (patchkit upstream list)"
            if data is None:
                raise PinMismatch(
                    f"'{p.name}': base {base.path} at {ref} is missing, not the pinned "
                    f"{base.sha256.short}…: the upstream source does not match the lockfile",
                    hint,
                )
            require_pin(
                data,
                base.sha256.hex,
                lambda found: (  # called at once, in this iteration
                    f"'{p.name}': base {base.path} at {ref} is sha256 {found[:12]}…, "  # noqa: B023
                    f"not the pinned {base.sha256.short}…: the upstream source does not match the lockfile"  # noqa: B023
                ),
                hint,
            )
            store.put(data)
            out[p.name] = data
    return out


def read_bases(
    repo: Repo,
    lock: Lockfile,
    patches: list[tuple[Patch, Base]],
    old_source: UpstreamSource | None,
    store: BlobStore,
) -> dict[str, bytes]:
    """Each patch's base bytes, verified and kept in ``store``: offline first, else ``old_source`` at its pin."""
    with store.batch():
        return _bases(repo, lock, patches, old_source, store)


def _moved_target(target: str, old_path: str, new_path: str) -> str:
    """The container path after an upstream rename: the same suffix swap, when the target ends with it."""
    if old_path != new_path and target.endswith("/" + old_path):
        return target[: -len(old_path)] + new_path
    return target


_Sides = dict[str, tuple[bytes, bytes, bytes, str]]  # patch -> (base, ours, theirs, new path)


def plan(
    repo: Repo,
    lock: Lockfile,
    upstream: str,
    new: Snapshot,
    old_source: UpstreamSource | None,
    store: BlobStore,
    *,
    replay: bool = True,
) -> Plan:
    """Merge every overlay of ``upstream`` onto the snapshot ``new``; writes nothing to the repository.

    Conflicts already resolved once are resolved as recorded (``replay``), and
    every patch that does not move as it was is explained in upstream's terms.
    """
    up = lock.upstream(upstream)
    if up is None:
        raise BadInput(f"upstream '{upstream}' is not in the lockfile")
    patches = [
        (p, p.base)
        for p in lock.patches
        if p.kind is PatchKind.OVERLAY and p.base is not None and p.base.upstream == upstream
    ]
    result = Plan(upstream=upstream, old_pin=up.pin_text, new_pin=new.pin)
    result.skipped = skipped(repo, lock, upstream)
    if not patches:
        return result
    paths = [str(b.path) for _, b in patches]
    # git reads the new files on another core while the bases are read and verified here. The bases
    # recovered and the new files go into the cache in one pack, not a thousand files (BlobStore.batch).
    with store.batch(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="theirs") as pool:
        reading = pool.submit(new.read, paths)
        bases = _bases(repo, lock, patches, old_source, store)
        ours = _read_ours(repo, patches, bases)
        theirs, renames = _theirs(up, paths, reading, new, old_source)
        inputs, their_sha256 = _sides(patches, bases, ours, theirs, renames, store)
    merges = _merges(inputs)
    if replay:
        result.remembered = resolutions.replay_all(repo, inputs, merges)
    result.results += [_patch_result(p, pbase, renames, inputs, merges, their_sha256) for p, pbase in patches]
    result.ours.update({name: sides[1] for name, sides in inputs.items()})
    result.theirs.update({their_sha256[name]: sides[2] for name, sides in inputs.items()})
    _check_merges(repo, lock, up, result, bases, theirs, new, old_source)
    result.causes = explain.causes(up, new, {p.name: b for p, b in patches}, result.results, inputs)
    return result


def _theirs(
    up: Upstream,
    paths: list[str],
    reading: Future[dict[str, bytes | None]],
    new: Snapshot,
    old_source: UpstreamSource | None,
) -> tuple[dict[str, bytes | None], dict[str, str]]:
    """The base files as the new pin has them (``reading`` them at ``paths``), and the renames (old path -> new).

    Waits for the read. A file gone from its path is read again where the
    upstream moved it, so its patch follows the rename instead of being
    reported deleted.
    """
    theirs = reading.result()
    gone = [path for path in paths if theirs.get(path) is None]
    renames = _renames(up, gone, new, old_source) if gone else {}
    if renames:
        theirs.update(new.read(renames.values()))
    return theirs, renames


def _renames(up: Upstream, gone: list[str], new: Snapshot, old_source: UpstreamSource | None) -> dict[str, str]:
    """Where the upstream moved the files ``gone`` (old path -> new), as far as the old source can tell.

    None when there is no old source or pin to compare with, or the source
    cannot follow renames: the files are then reported deleted.
    """
    if old_source is None:
        return {}
    ref = up.pinned_ref
    if ref is None:
        return {}
    try:
        return dict(old_source.snapshot(ref).renames(new, gone))
    except PatchkitError:
        return {}


def _read_ours(
    repo: Repo, patches: list[tuple[Patch, Base]], bases: dict[str, bytes]
) -> dict[str, bytes | PatchkitError]:
    """Each patch's own file (ours), or why it cannot be read: raised only if its merge needs it (``_sides``)."""
    ours: dict[str, bytes | PatchkitError] = {}
    for p, _ in patches:
        try:
            ours[p.name] = _ours(repo, p, bases[p.name])
        except PatchkitError as e:
            ours[p.name] = e
    return ours


def _sides(
    patches: list[tuple[Patch, Base]],
    bases: dict[str, bytes],
    ours: dict[str, bytes | PatchkitError],
    theirs: dict[str, bytes | None],
    renames: dict[str, str],
    store: BlobStore,
) -> tuple[_Sides, dict[str, str]]:
    """The three sides of each patch's merge and its path at the new pin; no entry when upstream deleted the file.

    The new base goes into the cache, so ``--continue`` and the next
    rebase read it offline; its sha256, computed there, comes along (by patch).
    """
    inputs: _Sides = {}
    their_sha256: dict[str, str] = {}
    for p, pbase in patches:
        old_path = str(pbase.path)
        new_path = renames.get(old_path, old_path)
        their_bytes = theirs.get(new_path)
        if their_bytes is not None:
            mine = ours[p.name]
            if isinstance(mine, PatchkitError):
                raise mine
            their_sha256[p.name] = store.put(their_bytes)
            inputs[p.name] = (bases[p.name], mine, their_bytes, new_path)
    return inputs, their_sha256


def _patch_result(
    p: Patch,
    pbase: Base,
    renames: dict[str, str],
    inputs: _Sides,
    merges: dict[str, MergeResult],
    their_sha256: dict[str, str],
) -> PatchResult:
    """One patch's outcome: deleted when its file is gone, moved when it was renamed and merged, else the merge's."""
    old_path = str(pbase.path)
    new_path = renames.get(old_path, old_path)
    target = str(p.target)
    if p.name not in inputs:
        return PatchResult(p.name, Outcome.DELETED, old_path, old_path, target, target, None, None)
    merged = merges[p.name]
    outcome = merged.outcome
    if new_path != old_path and outcome is not Outcome.CONFLICT:
        outcome = Outcome.MOVED
    return PatchResult(
        p.name,
        outcome,
        old_path,
        new_path,
        target,
        _moved_target(target, old_path, new_path),
        merged,
        their_sha256[p.name],
    )


def _check_merges(
    repo: Repo,
    lock: Lockfile,
    up: Upstream,
    result: Plan,
    bases: dict[str, bytes],
    theirs: dict[str, bytes | None],
    new: Snapshot,
    old_source: UpstreamSource | None,
) -> None:
    """Run the semantic checks on every merged file (conflicts aside), marking the ones that break ``broken``."""
    from patchkit.sources.factory import pinned_snapshot

    produced = [
        semantic.Produced(
            r.name,
            r.new_path,
            r.merge.merged,
            result.ours[r.name],
            theirs.get(r.new_path) or b"",
            # A resolution replayed is not a text merge: no base, so that the screens let every check run.
            None if r.name in result.remembered else bases[r.name],
        )
        for r in result.results
        if r.merge is not None and r.outcome is not Outcome.CONFLICT
    ]

    def old() -> Snapshot | None:  # read only when an import needs the old tree
        return pinned_snapshot(old_source, up) if old_source else None

    mark_broken(repo, lock, result, produced, new, old)


def _merges(inputs: dict[str, tuple[bytes, bytes, bytes, str]]) -> dict[str, MergeResult]:
    """Every patch's merge: git merges them all in one batch, the analysis runs on every core."""
    return dict(zip(inputs, rebase_files(list(inputs.values())), strict=True))


def _diffs(files: dict[str, tuple[bytes, bytes, str]]) -> dict[str, bytes]:
    """Each patch's new diff from (new upstream file, new patched file, path), on every core."""
    return dict(zip(files, map_items(_diff, list(files.values())), strict=True))


def _diff(item: tuple[bytes, bytes, str]) -> bytes:
    theirs, new, path = item
    return canonical_diff(theirs, new, UpstreamPath(path))


def mark_broken(
    repo: Repo,
    lock: Lockfile,
    result: Plan,
    produced: list[semantic.Produced],
    new: Snapshot | None,
    old: Callable[[], Snapshot | None],
) -> dict[str, tuple[Problem, ...]]:
    """Run the semantic checks on the files produced; a file with a blocking problem becomes ``broken``."""
    targets = {r.name: r for r in result.results}
    placed = {f.name: (targets[f.name].new_target, f.path, f.merged) for f in produced}

    def old_tree() -> Tree | None:
        try:
            snap = old()
        except PatchkitError:
            return None
        if snap is None:
            return None
        before = {f.name: (targets[f.name].old_target, targets[f.name].old_path, f.ours) for f in produced}
        return semantic.tree(snap.read, lock, before, lambda rel: _read_or_none(repo, rel))

    tree = semantic.tree(new.read, lock, placed, lambda rel: _read_or_none(repo, rel)) if new is not None else None
    found = semantic.check(produced, tree, old_tree)
    for i, r in enumerate(result.results):
        if r.name in found:
            broken = semantic.blocking(found[r.name])
            outcome = Outcome.BROKEN if broken else r.outcome
            text = (r.text_outcome or r.outcome) if broken else None
            result.results[i] = dataclasses.replace(r, outcome=outcome, problems=found[r.name], text_outcome=text)
    return found


def _trees(lock: Lockfile, upstream: str) -> list[str]:
    """The container directories holding ``upstream``'s package: ``…/dist-packages/vllm/``.

    Read from the targets of the patches based on it or whose origin names
    it (target = tree + upstream path), and from the package named after it.
    """
    out: set[str] = set()
    for p in lock.patches:
        path = str(p.base.path) if p.base is not None else (str(p.origin.path) if p.origin and p.origin.path else None)
        mine = _upstream_of(lock, p) == upstream
        target = str(p.target)
        if mine and path and target.endswith("/" + path):
            out.add(target[: -len(path)] + path.split("/", 1)[0] + "/")
    for p in lock.patches:
        m = _PACKAGES.search(str(p.target))
        if m is not None and str(p.target)[m.end() :].split("/", 1)[0] == upstream:
            out.add(str(p.target)[: m.end()] + upstream + "/")
    return sorted(out)


_PACKAGES = re.compile(r"/(?:site|dist)-packages/")


def skipped(repo: Repo, lock: Lockfile, upstream: str) -> list[Skipped]:
    """Every patch inside ``upstream``'s tree that a rebase of it does not move, with why and what to run.

    Nothing in the tree is left out in silence: an overlay without a pinned
    base (adopted by ``patchkit import``), an overlay of another upstream the
    package vendors (``vllm/third_party/…``), a new module.
    """
    trees = _trees(lock, upstream)
    chains: handdiffs.Chains | None = None
    out: list[Skipped] = []
    for p in lock.patches:
        target = str(p.target)
        if p.base is not None and p.base.upstream == upstream and p.kind is PatchKind.OVERLAY:
            continue
        tree = next((t for t in trees if target.startswith(t)), None)
        if tree is None:
            continue
        from patchkit.importing.normalize import maybe_upstream, upstream_of  # only for what a rebase leaves

        other = p.base.upstream if p.base is not None else upstream_of(lock, p)[0]
        if chains is None and p.kind is PatchKind.MODULE:
            chains = handdiffs.chains(lock, lambda d: _read_or_none(repo, str(d.file)))
        if chains is not None and (asks := maybe_upstream(repo, lock, p, chains)) is not None:
            out.append(
                Skipped(
                    p.name,
                    target,
                    f"a module only because its hand-kept diff adds it whole (--- /dev/null): upstream "
                    f"'{asks[0].name}' may have {asks[1]}, which would make it an overlay to rebase",
                    "patchkit import --normalize --fetch",
                )
            )
        elif p.kind is not PatchKind.OVERLAY:
            out.append(Skipped(p.name, target, f"a {p.kind.value}: no upstream file to merge it with"))
        elif other is not None and other != upstream:
            first = "patchkit import --normalize, then " if p.base is None else ""
            out.append(
                Skipped(
                    p.name,
                    target,
                    f"based on upstream '{other}', which {upstream} ships inside its tree ({tree}): "
                    f"move it onto the {other} version the new {upstream} ships",
                    f"{first}patchkit rebase --upstream {other} --onto REV",
                )
            )
        else:
            if chains is None:
                chains = handdiffs.chains(lock, lambda d: _read_or_none(repo, str(d.file)))
            out.append(_no_base(repo, p, chains))
    return out


def _read_or_none(repo: Repo, rel: str) -> bytes | None:
    try:
        return repo.read(rel)
    except (OSError, Escape):
        return None


def _no_base(repo: Repo, p: Patch, chains: handdiffs.Chains) -> Skipped:
    """Why an overlay without a pinned base is not rebased, and the command that gives it one."""
    target = str(p.target)
    full = p.origin is not None and p.origin.commit is not None and len(p.origin.commit) == 40
    fetch = "patchkit import --normalize --fetch"
    state = "state its upstream and full base commit in [patches.origin], then " + fetch
    stated = " (--fetch reads it from upstream at the stated commit)" if full else ""
    if p.name in chains.parts and p.file is not None:
        data = _read_or_none(repo, str(p.file))
        undone = handdiffs.undo(data, chains.parts[p.name]) if data is not None else None
        if undone is not None and undone.base is not None:
            return Skipped(
                p.name,
                target,
                "no base pinned yet; its hand-kept diffs rebuild it: normalize, then run this rebase again",
                "patchkit import --normalize",
            )
        where = ", ".join(f"{rel}:{line}" for rel, line, _ in (undone.stale if undone else []))
        return Skipped(
            p.name,
            target,
            f"no base pinned, and its hand-kept diffs are stale ({where}){stated}",
            fetch if full else state,
        )
    return Skipped(p.name, target, f"no base pinned and no diff that rebuilds it{stated}", fetch if full else state)


# --------------------------------------------------------------------------- committing


def prepare(
    lock: Lockfile,
    result: Plan,
    store: BlobStore,
    resolved: dict[str, bytes] | None = None,
    drop: Iterable[str] = (),
    root: Path | None = None,
) -> tuple[Lockfile, dict[str, bytes], list[str], WriteOutcome]:
    """The complete new state of the bump: lockfile, files to write, files to delete.

    Each moved base records what it was verified against (the new pin, for
    the image as the new lockfile pins it: ``verification.record_verified``);
    ``root`` is where deploy.toml names that image.
    """
    resolved = dict(resolved or {})
    drop = set(drop)
    by_name = {r.name: r for r in result.results}
    pin = result.new_pin
    files: dict[str, bytes] = {}
    deletes: list[str] = []
    patches: list[Patch] = []
    outcome = WriteOutcome()
    new_files = _new_files(result, store, resolved, drop)
    new_diffs = _diffs(new_files)
    base_commit, base_version = KINDS[pin.kind].base_fields(pin)
    for p in lock.patches:
        r = by_name.get(p.name)
        if r is None:
            patches.append(p)
            continue
        if p.name in drop:
            deletes += [str(f) for f in (p.file, p.diff.file if p.diff else None) if f is not None]
            outcome.changes.append(_change(p.name, r, "dropped"))
            continue
        if r.outcome is Outcome.DELETED:
            raise BadInput(
                f"'{p.name}': {r.old_path} was deleted upstream; the patch needs a decision",
                f"drop it with --drop {p.name}, or abort (patchkit rebase --abort)",
            )
        if r.theirs_sha256 is None or p.base is None or p.name not in new_files:
            raise BadInput(f"'{p.name}': no merge result to commit")
        new_bytes = new_files[p.name][1]
        diff_bytes = new_diffs[p.name]
        diff_pin = p.diff
        if p.diff is not None:
            files[str(p.diff.file)] = diff_bytes
            diff_pin = DiffPin(p.diff.file, Sha256(sha256_bytes(diff_bytes)))
        if p.file is not None:
            files[str(p.file)] = new_bytes
        base = Base(
            upstream=p.base.upstream,
            path=UpstreamPath(r.new_path),
            sha256=Sha256(r.theirs_sha256),
            commit=base_commit,
            version=base_version,
            verified=p.base.verified,  # its image is kept; record_verified below re-records it
        )
        new_patch = dataclasses.replace(
            p,
            sha256=Sha256(sha256_bytes(new_bytes)),
            base=base,
            diff=diff_pin,
            target=ContainerPath(r.new_target),
            accepted=_accepted_record(result, r) or p.accepted,
        )
        outcome.changes.append(_change(p.name, r, "resolved" if p.name in resolved else r.outcome.value))
        patches.append(new_patch)
    upstreams = tuple(repinned(u, pin) if u.name == result.upstream else u for u in lock.upstreams)
    images = tuple(_moved_image(i, result, outcome) for i in lock.images)
    new_lock = dataclasses.replace(lock, patches=tuple(patches), upstreams=upstreams, images=images)
    moved = [r.name for r in result.results if r.name not in drop]
    image = next(iter(result.image_pins)) if len(result.image_pins) == 1 else None
    new_lock = record_verified(new_lock, moved, image=image, root=root)
    return new_lock, files, deletes, outcome


def _accepted_record(result: Plan, r: PatchResult) -> Accepted | None:
    """What ``--accept-broken`` committed of ``r``, for the lockfile: the reason, each blocking problem's kind and name.

    ``check`` notes each while the file still has it, so the decision stays visible until it is fixed.
    """
    if r.name not in result.accepted:
        return None
    problems = dict.fromkeys(f"{p.kind} {p.name}".strip() for p in r.problems if p.blocking)
    return Accepted(result.accepted[r.name], tuple(problems))


def _moved_image(image: Image, result: Plan, outcome: WriteOutcome) -> Image:
    """``image`` at the digest the bump moves it to (itself when it does not move), its change in ``outcome``.

    Its ``version`` becomes the runtime version read from the new image, the
    one the guard's VERSION check will find; when the image has none, the old
    ``version`` is kept, with a note to confirm it (dropping it would silently
    remove that check from guard.json). ``tag`` and ``note`` stay as they were.
    """
    digest = result.image_pins.get(image.name)
    if digest is None or str(image.digest) == digest:
        return image
    from patchkit.core.outcome import Change
    from patchkit.ship.operations import kept_version_note

    outcome.changes.append(Change(f"images[{image.name}]", str(image.digest), digest))
    if image.version and not result.new_pin.version:
        outcome.notes.append(kept_version_note(image.name, image.version))
    version = result.new_pin.version or image.version
    return dataclasses.replace(image, digest=Digest(digest), platform_digest=None, resolved_at=None, version=version)


def _new_files(
    result: Plan, store: BlobStore, resolved: dict[str, bytes], drop: set[str]
) -> dict[str, tuple[bytes, bytes, str]]:
    """For each patch the bump moves: the new upstream file, the new patched file and its path."""
    out: dict[str, tuple[bytes, bytes, str]] = {}
    for r in result.results:
        if r.name in drop or r.merge is None or r.theirs_sha256 is None:
            continue
        theirs = _their_file(result, store, r.theirs_sha256)
        if theirs is None:
            raise PatchkitError(
                f"'{r.name}': the new upstream file (sha256 {r.theirs_sha256[:12]}…) is no longer in the cache",
                "abort and run the rebase again: patchkit rebase --abort",
            )
        out[r.name] = (theirs, resolved.get(r.name, r.merge.merged), r.new_path)
    return out


def _their_file(result: Plan, store: BlobStore, sha256: str) -> bytes | None:
    """A new upstream file by its sha256: as this run read it, else from the cache (None when gone)."""
    found = result.theirs.get(sha256)
    return found if found is not None else store.get(sha256)


def interdiffs(repo: Repo, lock: Lockfile, result: Plan, store: BlobStore, resolved: dict[str, bytes]) -> None:
    """The interdiff (committed diff against the new one) of each patch whose changes may have changed.

    That is a patch upstream took part of, a resolved conflict, a broken file: a clean merge
    carries the patch's changes over as they are, so only its line numbers move.
    """
    for r in result.results:
        p = lock.patch(r.name)
        if r.merge is None or p is None or p.diff is None or r.theirs_sha256 is None:
            continue
        if not (
            r.name in resolved
            or r.outcome in (Outcome.UPSTREAMED, Outcome.PARTIALLY_UPSTREAMED, Outcome.BROKEN)
            or r.merge.hunks_partly_upstreamed
        ):
            continue
        old, theirs = _read_or_none(repo, str(p.diff.file)), _their_file(result, store, r.theirs_sha256)
        if old is not None and theirs is not None:
            new = canonical_diff(theirs, resolved.get(r.name, r.merge.merged), UpstreamPath(r.new_path))
            found = interdiff.compare(old, new)
            if found is not None and not found.empty:
                result.interdiffs[r.name] = found


def commit(
    repo: Repo,
    lock: Lockfile,
    result: Plan,
    store: BlobStore,
    resolved: dict[str, bytes] | None = None,
    drop: Iterable[str] = (),
) -> WriteOutcome:
    """Write the whole bump as one journaled transaction: patches, diffs, lockfile, SHA256SUMS."""
    interdiffs(repo, lock, result, store, resolved or {})
    new_lock, files, deletes, outcome = prepare(lock, result, store, resolved, drop, repo.root)
    # SHA256SUMS is rewritten from the new lockfile: every entry it loses is said, but those of dropped files.
    outcome.changes += [c for c in sums_dropped(repo, new_lock) if c.what.removeprefix("SHA256SUMS ") not in deletes]
    written = driver.commit(KIND, repo, lambda: finish(repo, new_lock, files, deletes), dumps(new_lock).encode())
    outcome.written = [w for w in written if w not in deletes]
    outcome.removed = [w for w in written if w in deletes]
    return outcome


def _change(name: str, r: PatchResult, what: str) -> Any:
    from patchkit.core.outcome import Change

    where = r.new_path if what != "dropped" else "-"
    return Change(f"patches[{name}] ({what})", r.old_path, where)


# --------------------------------------------------------------------------- the work area


def in_progress(repo: Repo) -> bool:
    """Whether a rebase waits: its state file exists, or its work area is something patchkit never makes."""
    return OVERLAYS.present(repo.root)


def conflict_file(r: PatchResult) -> str:
    """Where a conflicted (or broken) file waits for its resolution, relative to the repository."""
    return overlay_work_file(r.name, r.new_path, r.outcome.value, r.text_outcome.value if r.text_outcome else None)


def save(repo: Repo, lock_bytes: bytes, result: Plan, store: BlobStore) -> list[str]:
    """Write the work area for a blocked plan; the state file last, so a crash leaves no half state."""
    files: dict[str, bytes] = {}
    with store.batch():  # stored before the state file that names them is written
        for r in result.results:
            if r.merge is None:
                continue
            store.put(r.merge.merged)
            if r.name in result.ours:
                store.put(result.ours[r.name])
            if r.outcome in (Outcome.CONFLICT, Outcome.BROKEN):
                files[conflict_file(r)] = r.merge.merged
    state = OverlayState(
        upstream=result.upstream,
        old_pin=result.old_pin,
        new_pin=dataclasses.asdict(result.new_pin),
        lockfile_sha256=sha256_bytes(lock_bytes),
        image_pins=result.image_pins,
        remembered={name: list(ids) for name, ids in result.remembered.items()},
        causes={name: cause.as_dict() for name, cause in result.causes.items()},
        image_upstream=result.image_upstream,
        skipped=tuple(sk.as_dict() for sk in result.skipped),
        patches=tuple(
            {
                **r.as_dict(),
                "old_path": r.old_path,
                "new_path": r.new_path,
                "old_target": r.old_target,
                "new_target": r.new_target,
                "theirs_sha256": r.theirs_sha256,
                "merged_sha256": sha256_bytes(r.merge.merged) if r.merge else None,
                "ours_sha256": sha256_bytes(result.ours[r.name]) if r.name in result.ours else None,
                "text_outcome": r.text_outcome.value if r.text_outcome else None,
            }
            for r in result.results
        ),
    )
    return driver.stop(KIND, repo.root, files, state)


def load(state: OverlayState, store: BlobStore) -> Plan:
    """The saved plan of a rebase in progress, rebuilt from its checked state and the cache.

    A state file that is not what patchkit wrote (hand-edited, truncated, a
    wrong type anywhere) is bad input naming the file, never a crash.
    """
    try:
        return _load(state, store)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise BadInput(
            f"{OVERLAYS.state_file}: malformed ({type(e).__name__}: {str(e)[:120]}); it is not what patchkit wrote",
            "patchkit rebase --abort, then run the rebase again",
        ) from e


def _load(state: OverlayState, store: BlobStore) -> Plan:
    result = Plan(state.upstream, state.old_pin, Pin(**state.new_pin))
    result.image_pins = dict(state.image_pins)
    result.image_upstream = state.image_upstream
    if result.image_upstream is not None:
        from patchkit.ship.adopt import upstream_from_state

        upstream_from_state(result.image_upstream)  # a malformed one is refused here, not at commit
    result.skipped = [Skipped(**sk) for sk in state.skipped]
    result.remembered = resolutions.saved_remembered({"remembered": state.remembered})
    result.causes = explain.saved_causes(state.causes)
    for entry in state.patches:
        result.results.append(_saved_result(entry, result, store))
    return result


def _saved_result(entry: dict[str, Any], result: Plan, store: BlobStore) -> PatchResult:
    """One patch's saved outcome, its merged bytes (and its own file, into ``result.ours``) read from the cache."""
    outcome = Outcome(entry["outcome"])
    merged = None
    if entry["merged_sha256"] is not None:
        data = store.get(entry["merged_sha256"])
        if data is None:
            raise PatchkitError(
                f"the merge of '{entry['name']}' is no longer in the cache",
                "patchkit rebase --abort, then run the rebase again",
            )
        merged = _SavedMerge(outcome, data)
        ours = store.get(entry["ours_sha256"]) if entry.get("ours_sha256") else None
        if ours is not None:
            result.ours[entry["name"]] = ours
    return PatchResult(
        entry["name"],
        outcome,
        entry["old_path"],
        entry["new_path"],
        entry["old_target"],
        entry["new_target"],
        merged,  # type: ignore[arg-type]
        entry["theirs_sha256"],
        tuple(Problem(**pr) for pr in entry.get("problems", [])),
        Outcome(entry["text_outcome"]) if entry.get("text_outcome") else None,
    )


@dataclass(frozen=True)
class _SavedMerge:
    """The part of a MergeResult that --continue needs: the merged bytes."""

    outcome: Outcome
    merged: bytes
    conflicts: tuple[Any, ...] = ()
    hunks_upstreamed: tuple[Any, ...] = ()
    hunks_partly_upstreamed: tuple[Any, ...] = ()
    review_flags: tuple[Any, ...] = ()


def abort(repo: Repo) -> bool:
    """Forget the rebase in progress; the repository itself was never changed."""
    return driver.abort(KIND, repo.root)


# --------------------------------------------------------------------------- the commands


@dataclass
class Started:
    """What ``start`` did: committed the bump, or saved it for resolution."""

    plan: Plan
    outcome: WriteOutcome | None
    conflict_files: list[str]
    # Why nothing was written although nothing conflicts: no patch could be moved (exit 1).
    nothing_moved: str | None = None


def _upstream_of(lock: Lockfile, p: Patch) -> str:
    """The upstream an overlay is based on: its base's, else what its provenance names ("" when unknown)."""
    if p.base is not None:
        return p.base.upstream
    from patchkit.importing.normalize import upstream_of

    return upstream_of(lock, p)[0] or ""


def _pick_upstream(lock: Lockfile, name: str | None) -> Upstream:
    if name is not None:
        up = lock.upstream(name)
        if up is None:
            known = ", ".join(u.name for u in lock.upstreams) or "none"
            raise BadInput(f"--upstream: '{name}' is not in the lockfile (known: {known})")
        return up
    with_patches = sorted({_upstream_of(lock, p) for p in lock.patches if p.kind is PatchKind.OVERLAY} - {""})
    if len(with_patches) == 1:
        found = lock.upstream(with_patches[0])
        if found is not None:
            return found
    if not with_patches:
        raise BadInput(
            "no overlay is based on an upstream: nothing to rebase",
            "state each overlay's upstream and base ([patches.origin], or patchkit import --normalize)",
        )
    raise BadInput(
        f"several upstreams have overlays ({', '.join(with_patches)}); say which",
        "pass --upstream NAME",
    )


def start(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    *,
    onto: str | None,
    upstream: str | None,
    source: str | None,
    cache: Context,
    store: BlobStore,
    drop: Iterable[str] = (),
    image_pins: dict[str, str] | None = None,
    accept: dict[str, str] | None = None,
    remembered: bool = True,
    image_upstream: dict[str, Any] | None = None,
) -> Started:
    """Plan the bump; commit it when nothing blocks, else save the work area (exit 1 for the caller).

    ``remembered``: replay the recorded resolutions of conflicts seen before (``--no-remembered``: not).
    """
    from patchkit.sources.factory import open_source, parse_source

    driver.refuse_if_waiting(repo.root)
    up = _pick_upstream(lock, upstream)
    try:
        old_source: UpstreamSource | None = open_source(up, cache, repo.root)
    except BadInput:
        old_source = None
    if source is not None:
        new_source, implied = parse_source(source, up, cache, repo.root)
    elif old_source is not None:
        new_source, implied = old_source, None
    else:
        raise BadInput(f"upstream '{up.name}' has no source to read the new files from", "pass --source")
    ref = onto or implied
    if ref is None:
        raise BadInput("--onto REV is required (a commit, branch or tag; a version for a wheel)")
    if implied is not None and onto is not None and onto != implied and KINDS[new_source.kind].onto_must_agree:
        raise BadInput(f"--onto {onto} disagrees with --source {source}")
    new = new_source.snapshot(ref)
    result = plan(repo, lock, up.name, new, old_source, store, replay=remembered)
    result.image_pins = dict(image_pins or {})
    result.image_upstream = image_upstream
    dropped = set(drop)
    unknown = dropped - {r.name for r in result.results}
    if unknown:
        raise BadInput(f"--drop: not a patch of {up.name}: {', '.join(sorted(unknown))}")
    if not result.results and not result.image_pins:
        # Re-pinning the upstream with no patch moved would claim a rebase that did not happen.
        why = f"no patch is based on upstream '{up.name}'" + (
            f"; {len(result.skipped)} in its tree skipped (see above)" if result.skipped else ""
        )
        return Started(result, None, [], nothing_moved=why)
    result.accepted = _accepted(result, accept)
    blocked = [r for r in result.blocked if r.name not in dropped]
    if blocked:
        return Started(result, None, save(repo, lock_bytes, result, store))
    return Started(result, commit(repo, lock, result, store, drop=dropped), [])


def _accepted(result: Plan, accept: dict[str, str] | None) -> dict[str, str]:
    """The --accept-broken names, each a broken patch of this rebase; refused otherwise (nothing written)."""
    accept = dict(accept or {})
    outcomes = {r.name: r.outcome for r in result.results}
    wrong = [
        f"{n} ({outcomes[n].value})" if n in outcomes else f"{n} (not in this rebase)"
        for n in accept
        if outcomes.get(n) is not Outcome.BROKEN
    ]
    if wrong:
        raise BadInput(
            f"--accept-broken: not a broken patch: {', '.join(sorted(wrong))}",
            "name only patches this rebase reports as broken",
        )
    return accept


def recheck(
    repo: Repo, lock: Lockfile, result: Plan, resolved: dict[str, bytes], store: BlobStore, cache: Context | None
) -> None:
    """The semantic checks again, on the files resolved in the work area: parses, undefined names, imports.

    The new upstream tree is opened again from the saved pin (imports are not checked when it
    cannot be read); a file still broken makes the patch ``broken`` again.
    """
    produced = []
    for i, r in enumerate(result.results):
        if r.name not in resolved:
            continue
        theirs = store.get(r.theirs_sha256) if r.theirs_sha256 else None
        ours = result.ours.get(r.name, theirs or b"")
        produced.append(semantic.Produced(r.name, r.new_path, resolved[r.name], ours, theirs or b""))
        if r.outcome is Outcome.BROKEN:
            result.results[i] = dataclasses.replace(r, outcome=r.text_outcome or Outcome.CLEAN, problems=())
    if not produced:
        return
    new, old = _snapshots(repo, lock, result, cache)
    mark_broken(repo, lock, result, produced, new, old)


def _snapshots(
    repo: Repo, lock: Lockfile, result: Plan, cache: Context | None
) -> tuple[Snapshot | None, Callable[[], Snapshot | None]]:
    from patchkit.sources.factory import open_source, pinned_snapshot

    up = lock.upstream(result.upstream)
    if up is None or cache is None:
        return None, lambda: None
    new_up = repinned(up, result.new_pin)
    try:
        new = pinned_snapshot(open_source(new_up, cache, repo.root), new_up)
    except PatchkitError:
        new = None
    return new, lambda: pinned_snapshot(open_source(up, cache, repo.root), up)


class RebaseBroken(RebaseBlocked):
    """--continue refused: a resolved file still fails the semantic checks; exit 1."""

    def __init__(self, problems: list[str], names: list[str]) -> None:
        super().__init__(problems)
        self.hint = (
            "fix the file in the work area, then patchkit rebase --continue; or commit it as it is: "
            f"patchkit rebase --continue --accept-broken {names[0]} --reason TEXT"
        )


def resume(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    store: BlobStore,
    drop: Iterable[str] = (),
    *,
    accept: dict[str, str] | None = None,
    cache: Context | None = None,
) -> tuple[Plan, WriteOutcome]:
    """--continue: take the resolved files, check them again, and commit the saved bump (``driver.resume``).

    An empty plan when the rebase had already been committed (a crash came before the clean-up).
    """
    dropped = set(drop)

    def go_on(saved: tuple[OverlayState, Plan], resolved: dict[str, bytes]) -> tuple[Plan, WriteOutcome]:
        return _commit_saved(repo, lock, saved, resolved, store, dropped, accept, cache)

    def prepare(state: OverlayState) -> tuple[OverlayState, Plan]:
        return state, load(state, store)

    done = driver.resume(KIND, repo, lock_bytes, prepare, go_on, lambda saved: _undecided(saved[1], dropped))
    return done if done is not None else (Plan("", "", Pin("git")), WriteOutcome())


def _undecided(result: Plan, dropped: set[str]) -> list[str]:
    """Each patch whose file upstream deleted with no decision taken: --continue refuses it."""
    return [
        f"{r.old_path} was deleted upstream: keep nothing (--drop {r.name}) or abort"
        for r in result.results
        if r.outcome is Outcome.DELETED and r.name not in dropped
    ]


def _commit_saved(
    repo: Repo,
    lock: Lockfile,
    saved: tuple[OverlayState, Plan],
    resolved: dict[str, bytes],
    store: BlobStore,
    dropped: set[str],
    accept: dict[str, str] | None,
    cache: Context | None,
) -> tuple[Plan, WriteOutcome]:
    """--continue's own step: the resolved files checked again, then the saved bump committed with them."""
    state, result = saved
    if result.image_upstream is not None:
        from patchkit.ship.adopt import adopt, upstream_from_state

        lock = adopt(lock, upstream_from_state(result.image_upstream))
    recheck(repo, lock, result, resolved, store, cache)
    result.accepted = _accepted(result, accept)
    still = [r for r in result.blocked if r.outcome is Outcome.BROKEN and r.name not in dropped]
    if still:
        raise RebaseBroken(
            [p.text(conflict_file(r)) for r in still for p in r.problems if p.blocking], [r.name for r in still]
        )
    learned = resolutions.learned(
        repo, state.as_doc(), result.results, resolved, result.ours, lambda s: _their_file(result, store, s)
    )
    outcome = commit(repo, lock, result, store, resolved, dropped)
    outcome.written += driver.done(KIND, repo, learned)
    return result, outcome


def status(repo: Repo) -> dict[str, Any]:
    """Where the repository stands: an interrupted write, a rebase waiting, or nothing."""
    try:
        return _status(repo)
    except BadInput as e:
        return {"rebase": {"error": f"{e.message} (fix: {e.hint})" if e.hint else e.message}}


def _status(repo: Repo) -> dict[str, Any]:
    state: dict[str, Any] = {"rebase": None}
    saved = read_overlays(repo.root, OUTCOMES)
    if saved is None:
        return state
    files = []
    for entry in saved.patches:
        if entry["outcome"] not in (Outcome.CONFLICT.value, Outcome.BROKEN.value):
            continue
        rel = overlay_work_file(entry["name"], entry["new_path"], entry["outcome"], entry.get("text_outcome"))
        try:
            markers = conflict_markers_remain(repo.read(rel))
        except (FileNotFoundError, Escape):
            markers = []
        broken = entry["outcome"] == Outcome.BROKEN.value
        files.append(
            {"patch": entry["name"], "file": rel, "markers": markers, "resolved": not markers, "broken": broken}
        )
    state["rebase"] = {
        "upstream": saved.upstream,
        "from": saved.old_pin,
        "to": Pin(**saved.new_pin).describe(),
        "conflicts": files,
        "deleted": [e["name"] for e in saved.patches if e["outcome"] == Outcome.DELETED.value],
        "patches": {e["name"]: e["outcome"] for e in saved.patches},
    }
    return state
