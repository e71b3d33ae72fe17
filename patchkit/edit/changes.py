"""Changing a deployment: init, add, remove, lock, sums and diff regeneration.

Every operation computes the complete new state first (lockfile text, diffs,
SHA256SUMS) and then writes it with ``write_all`` as one journaled transaction,
so a failure leaves the repository as it was.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from patchkit.core import diffs, sums
from patchkit.core.diffs import canonical_diff
from patchkit.core.hashing import sha256_bytes
from patchkit.core.outcome import Change, Outcome
from patchkit.core.safe import printable
from patchkit.core.values import (
    LOCKFILE_NAME,
    ContainerPath,
    Reference,
    RepoPath,
    Revision,
    Sha256,
    UpstreamPath,
    check_name,
)
from patchkit.emit.config import CONFIG_NAME
from patchkit.errors import BadInput, Refused
from patchkit.lockfile.model import Artifact, Base, DiffPin, HandDiff, Lockfile, Patch, PatchKind, Upstream
from patchkit.lockfile.series import repin as repin_series
from patchkit.lockfile.verification import record_new_bases, record_verified, recordable
from patchkit.lockfile.writer import expected_sums
from patchkit.sources.context import Context
from patchkit.sources.materialize import apply_diff_only, base_of_committed, read_pinned, recover_base
from patchkit.store.cache import BlobStore
from patchkit.store.persist import finish, ignore_work_area, sums_dropped
from patchkit.store.repo import MANAGED_DIRS, Escape, Repo, write_all
from patchkit.vcs import gitmerge

_Pinned = TypeVar("_Pinned", Artifact, HandDiff)

# --------------------------------------------------------------------------- init


def init(directory: Path, name: str | None = None) -> Outcome:
    """Create an empty deployment in ``directory`` that ``patchkit check`` passes on."""
    root = directory.resolve()
    if (root / LOCKFILE_NAME).exists():
        raise BadInput(
            f"{root / LOCKFILE_NAME}: already exists; init does not overwrite a deployment",
            "run patchkit check there instead",
        )
    if name is None:
        name = re.sub(r"[^a-z0-9._-]+", "-", root.name.lower()).strip("-._") or "deployment"
    try:
        check_name(name, "deployment name")
    except ValueError as e:
        raise BadInput(f"--name: {e}") from e
    lock = Lockfile(name=name)
    for d in MANAGED_DIRS:
        try:
            (root / d).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"{root / d}: cannot create ({e.strerror})") from e
    extra = ignore_work_area(root)
    if not os.path.lexists(root / CONFIG_NAME):
        extra[CONFIG_NAME] = starter_config(name).encode()
    written = finish(Repo(root), lock, extra)
    return Outcome(written=[*[f"{d}/" for d in MANAGED_DIRS], *written])


def starter_config(name: str) -> str:
    """The ``deploy.toml`` ``init`` writes: what ``image build`` needs, the rest commented out until emit needs it.

    Valid as written (``image build`` reads ``inference.image``; without
    ``[profiles]`` there is no compose file for ``emit`` or ``check`` to
    compare), and each commented field says what it is, as docs/deploy.md does.
    """
    return f"""\
# deploy.toml: the service around the pins (lockfile.toml holds every pin).
# Every field: docs/deploy.md. After an edit: patchkit emit, then patchkit check.
schema = 1
name = "{name}"                  # the compose project name

[inference]                      # the vLLM service
image = "vllm"                   # an [images.NAME] of lockfile.toml: patchkit image pin vllm REPO:TAG
# The artifact run as entrypoint (pin it: patchkit add entrypoint.sh --target /opt/patchkit/entrypoint.sh).
# entrypoint = "entrypoint"
# port = 8000                    # the port vLLM listens on in the container (emit appends --port)
# args = ["--served-model-name=model"]  # vllm serve arguments after the model path
# devices = ["/dev/kfd"]         # devices of every replica (each replica adds its GPU)
# group_add = ["video", "render"]
# shm_size = "64gb"

# One compose file per profile; emit needs at least one (with entrypoint and port above).
# [profiles.single]
# [[profiles.single.replicas]]
# service = "vllm"
# devices = ["/dev/dri/renderD128"]  # this replica's GPU
# publish = "127.0.0.1:8000"     # host address:port, loopback only
"""


# --------------------------------------------------------------------------- sums


def write_sums(repo: Repo, lock: Lockfile, lock_bytes: bytes) -> Outcome:
    """Regenerate SHA256SUMS from the pins, after checking every file matches its pin."""
    from patchkit.check.run import check_pinned_files  # the whole checker: loaded only by the commands that verify

    problems = check_pinned_files(repo, lock, lock_bytes).findings
    if problems:
        raise Refused(f"{problems[0].message}; SHA256SUMS would not verify", problems[0].fix)
    data = expected_sums(lock, lock_bytes)
    outcome = Outcome(changes=sums_dropped(repo, lock))
    outcome.written = write_all(repo.root, {sums.FILENAME: data})
    return outcome


# --------------------------------------------------------------------------- base recovery


# --------------------------------------------------------------------------- lock


def _diff_is_consistent(p: Patch, pinned: Base, data: bytes, diff_bytes: bytes) -> bool:
    """Whether an overlay's committed diff still describes it.

    Consistent: it names the base (a/PATH, b/PATH, like check's diff-header) and,
    reversed onto the overlay, gives exactly the pinned base.
    """
    try:
        heads = diffs.parse(diff_bytes)[0]
        named = {diffs.strip_prefix(heads.old_path), diffs.strip_prefix(heads.new_path)}
        return named == {str(pinned.path)} and sha256_bytes(base_of_committed(p, data, diff_bytes)) == pinned.sha256.hex
    except (diffs.DiffError, diffs.ApplyError):
        return False


@dataclass
class _Relock:
    """One ``lock`` run: reads the pinned files and collects the changed pins and regenerated diffs."""

    repo: Repo
    store: BlobStore
    outcome: Outcome = dataclasses.field(default_factory=Outcome)
    extra: dict[str, bytes] = dataclasses.field(default_factory=dict)

    def current(self, rel: RepoPath, owner: str) -> bytes:
        """The file's bytes now; a missing or escaping pinned file is bad input naming its owner."""
        try:
            return self.repo.read(rel)
        except FileNotFoundError as e:
            raise BadInput(
                f"{rel} ({owner}) is pinned but missing",
                f"restore it (git checkout -- {rel}) or drop the entry (patchkit remove)",
            ) from e
        except Escape as e:
            raise BadInput(f"{rel} ({owner}) {e}") from e

    def change(self, field: str, old: str, new: str) -> None:
        self.outcome.changes.append(Change(field, old, new))

    def patch(self, p: Patch) -> Patch:
        """``p`` with its pins refreshed: a patch with a file, or a diff-only one."""
        if p.file is not None:
            return self.patch_file(p, p.file)
        if p.diff is not None:
            return self.diff_only(p, p.diff)
        return p

    def patch_file(self, p: Patch, file: RepoPath) -> Patch:
        """Re-pin the patch file and, for an overlay, its diff (regenerated when it went stale)."""
        new = p
        data = self.current(file, f"patch '{p.name}'")
        digest = sha256_bytes(data)
        if digest != p.sha256.hex:
            self.change(f"patches[{p.name}].sha256 ({file})", p.sha256.hex, digest)
            new = dataclasses.replace(new, sha256=Sha256(digest))
        if p.kind is not PatchKind.OVERLAY or p.base is None or p.diff is None:
            return new
        diff_bytes = self.current(p.diff.file, f"diff of '{p.name}'")
        if not _diff_is_consistent(p, p.base, data, diff_bytes):
            diff_bytes = self.regenerate(p, file, p.base, p.diff, data)
        dsha = sha256_bytes(diff_bytes)
        if dsha != p.diff.sha256.hex:
            self.change(f"patches[{p.name}].diff.sha256", p.diff.sha256.hex, dsha)
            new = dataclasses.replace(new, diff=DiffPin(p.diff.file, Sha256(dsha)))
        return new

    def regenerate(self, p: Patch, file: RepoPath, pinned: Base, diff: DiffPin, data: bytes) -> bytes:
        """The canonical diff of the overlay from its recovered base; refused when the base is gone."""
        base = recover_base(self.repo, p, self.store)
        if base is None:
            raise Refused(
                f"{diff.file}: cannot refresh the diff of '{p.name}': its pinned base "
                f"({pinned.path}, sha256 {pinned.sha256.short}…) is not in the cache and "
                "cannot be rebuilt from the overlay's committed history",
                f"re-add it with the upstream file: patchkit add {file} --base FILE …",
            )
        diff_bytes = canonical_diff(base, data, pinned.path)
        self.extra[str(diff.file)] = diff_bytes
        self.change(f"{diff.file}", "stale diff", "regenerated from the base")
        return diff_bytes

    def diff_only(self, p: Patch, diff: DiffPin) -> Patch:
        """Re-pin a diff-only patch's diff and the file it materializes to (needs the base in the cache)."""
        diff_bytes = self.current(diff.file, f"diff of '{p.name}'")
        dsha = sha256_bytes(diff_bytes)
        if dsha == diff.sha256.hex:
            return p
        base = self.store.get(p.base.sha256.hex) if p.base else None
        if base is None:
            raise Refused(
                f"{diff.file}: the diff of diff-only patch '{p.name}' changed, and its base is not "
                "in the cache to recompute the file that runs",
                "fetch the base into the cache first (upstream sources), then patchkit lock",
            )
        try:
            materialized = diffs.apply(diffs.parse(diff_bytes)[0], base)
        except (diffs.DiffError, diffs.ApplyError) as e:
            raise BadInput(f"{diff.file}:{e.line}: {e.message}") from e
        msha = sha256_bytes(materialized)
        self.change(f"patches[{p.name}].diff.sha256", diff.sha256.hex, dsha)
        if msha != p.sha256.hex:
            self.change(f"patches[{p.name}].sha256 (materialized)", p.sha256.hex, msha)
        return dataclasses.replace(p, sha256=Sha256(msha), diff=DiffPin(diff.file, Sha256(dsha)))

    def artifacts(self, items: tuple[Artifact, ...], key: str) -> tuple[Artifact, ...]:
        """The tuning tables or artifacts with their sha256 refreshed."""
        return tuple(self._repin(a, f"{key}[{a.name}]", f"{key} '{a.name}'") for a in items)

    def hand_diffs(self, items: tuple[HandDiff, ...]) -> tuple[HandDiff, ...]:
        """The hand-kept ``[[diffs]]`` with their sha256 refreshed, as ``check``'s ``hash-mismatch`` fix says."""
        return tuple(self._repin(d, f"diffs[{i}]", f"diffs[{i}]") for i, d in enumerate(items))

    def _repin(self, pin: _Pinned, field: str, owner: str) -> _Pinned:
        """``pin`` with the sha256 of its file as it is now, the change recorded under ``field``."""
        digest = sha256_bytes(self.current(pin.file, owner))
        if digest == pin.sha256.hex:
            return pin
        self.change(f"{field}.sha256 ({pin.file})", pin.sha256.hex, digest)
        return dataclasses.replace(pin, sha256=Sha256(digest))


def relock(repo: Repo, lock: Lockfile, store: BlobStore, record: bool = False) -> Outcome:
    """Refresh the file pins after intended edits; never touches image, model or upstream pins.

    ``record`` (``lock --record-verified``): each overlay and series base that
    records nothing it was verified against, and is at its upstream's pin,
    records the upstream's pin and the image it is mounted over as pinned
    now. A base that records one keeps it: a stale record moves only with a
    rebase, so this can never hide a re-pinned image.
    """
    recorded: list[Change] = []
    if record:
        lock, recorded = _record_unrecorded(repo, lock)
    run = _Relock(repo, store)
    run.outcome.changes.extend(recorded)
    patches = tuple(run.patch(p) for p in lock.patches)
    series, repinned = repin_series(lock.series, lambda rel, what: sha256_bytes(run.current(rel, what)))
    run.outcome.changes.extend(Change(field, old, new) for field, old, new in repinned)
    tuning = run.artifacts(lock.tuning, "tuning")
    artifacts = run.artifacts(lock.artifacts, "artifacts")
    diffs = run.hand_diffs(lock.diffs)
    new_lock = dataclasses.replace(
        lock, patches=patches, tuning=tuning, artifacts=artifacts, series=series, diffs=diffs
    )
    run.outcome.written = finish(repo, new_lock, run.extra)
    return run.outcome


def _record_unrecorded(repo: Repo, lock: Lockfile) -> tuple[Lockfile, list[Change]]:
    patches, series, left = recordable(lock)
    if left:
        raise Refused(
            f"{', '.join(left)}: not at the upstream's pin, so not verified against it",
            "move them first (patchkit rebase --upstream NAME --onto PIN), then record",
        )
    new = record_verified(lock, patches, series, root=repo.root)
    missing = [p.name for p in new.patches if p.name in patches and p.base and p.base.verified is None]
    missing += [s.name for s in new.series if s.name in series and s.verified is None]
    if missing:
        raise Refused(
            f"{', '.join(missing)}: no image to record them for: the lockfile pins several and deploy.toml names none",
            "set deploy.toml's inference.image",
        )
    records = [
        (f"patches[{p.name}].base.verified", p.base.verified) for p in new.patches if p.name in patches and p.base
    ]
    records += [(f"series.{s.name}.verified", s.verified) for s in new.series if s.name in series]
    return new, [Change(what, "unrecorded", v.text) for what, v in records if v is not None]


# --------------------------------------------------------------------------- add / remove

_KINDS = ("overlay", "module", "transformer", "tuning", "artifact")


@dataclass(frozen=True)
class AddRequest:
    path: Path
    target: str | None
    name: str | None = None
    kind: str | None = None
    upstream: str | None = None
    commit: str | None = None
    upstream_path: str | None = None
    base_file: Path | None = None
    refs: tuple[str, ...] = ()
    reason: str | None = None
    drop_when: str | None = None
    diff_only: bool = False


def _default_name(path: Path) -> str:
    stem = path.name.split(".")[0] if not path.name.startswith(".") else path.name
    return re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._") or "patch"


def _infer_kind(req: AddRequest, rel: str | None) -> str:
    if req.kind is not None:
        return req.kind
    if req.base_file is not None or req.upstream is not None or req.upstream_path is not None:
        return "overlay"
    if rel is not None and rel.startswith("tuning/"):
        return "tuning"
    if rel is not None and rel.startswith("patches/"):
        return "module"
    return "artifact"


def _source_path(repo: Repo, req: AddRequest) -> tuple[Path, str | None]:
    """The absolute path of the file to add and its repository path (``None`` when it is outside).

    Both the repository path and the one it would be copied to must be valid repository paths.
    """
    src = req.path if req.path.is_absolute() else (Path.cwd() / req.path)
    src = Path(os.path.abspath(src))
    rel: str | None = repo.rel(src) if src.is_relative_to(repo.root) else None
    for candidate in (rel, f"patches/{src.name}"):
        if candidate is not None:
            try:
                RepoPath(candidate)
            except ValueError as e:
                raise BadInput(printable(str(e))) from e
    return src, rel


def _read_source(repo: Repo, req: AddRequest, src: Path, rel: str | None) -> bytes:
    """The bytes of the file to add (a file inside the repository is read only when it stays inside)."""
    try:
        return repo.read(rel) if rel is not None else src.read_bytes()
    except FileNotFoundError as e:
        raise BadInput(f"{req.path}: no such file") from e
    except Escape as e:
        raise BadInput(f"{req.path} {e}") from e
    except IsADirectoryError as e:
        raise BadInput(f"{req.path}: is a directory; add files one by one") from e


def _new_name(lock: Lockfile, req: AddRequest, src: Path) -> str:
    """The entry's name (``--name`` or one derived from the file name), valid and not yet pinned."""
    name = req.name or _default_name(src)
    try:
        check_name(name, "name")
    except ValueError as e:
        raise BadInput(f"--name: {e}", "pass --name with a valid name") from e
    taken = {p.name for p in lock.patches} | {a.name for a in (*lock.tuning, *lock.artifacts)}
    if name in taken:
        raise BadInput(f"name '{name}' is already pinned", "pass --name, or patchkit remove it first")
    return name


def _new_target(lock: Lockfile, req: AddRequest, kind: str) -> ContainerPath | None:
    """The container path to mount the file at: required but for artifacts, claimed by no other file.

    A target may neither equal another entry's nor nest with it (a file cannot also be a directory).
    """
    if req.target is None:
        if kind != "artifact":
            raise BadInput(f"--target is required for a {kind}", "pass the absolute path it is mounted at")
        return None
    try:
        target = ContainerPath(req.target)
    except ValueError as e:
        raise BadInput(f"--target: {e}") from e
    claimed = {str(p.target): p.name for p in lock.patches}
    claimed.update({str(a.target): a.name for a in (*lock.tuning, *lock.artifacts) if a.target})
    if str(target) in claimed:
        raise BadInput(
            f"--target {target} is already claimed by '{claimed[str(target)]}'",
            "each container path can be mounted from one file only",
        )
    prefix = f"{target}/"
    for other, owner in sorted(claimed.items()):
        if prefix.startswith(f"{other}/") or other.startswith(prefix):
            raise BadInput(
                f"--target {target} and the target {other} of '{owner}' nest: a file cannot also be a directory",
                "give each file a target that is not below another file's target",
            )
    return target


def _references(req: AddRequest) -> tuple[Reference, ...]:
    """The ``--ref`` values as references, the first invalid one bad input."""
    refs = []
    for r in req.refs:
        try:
            refs.append(Reference(r))
        except ValueError as e:
            raise BadInput(f"--ref: {e}") from e
    return tuple(refs)


def _placement(
    repo: Repo, req: AddRequest, kind: str, src: Path, rel: str | None, data: bytes
) -> tuple[str | None, dict[str, bytes]]:
    """Where the file is kept, and the files to copy in: a file from outside goes under patches/ or tuning/.

    ``--diff-only`` keeps no file at all, so it needs an overlay from outside the repository.
    """
    if req.diff_only and kind != "overlay":
        raise BadInput("--diff-only applies to overlays only (a patch with --base)")
    if req.diff_only and rel is not None:
        raise BadInput(
            f"{rel}: --diff-only keeps only the diff; the file itself must not be in the repository",
            "move the edited file out of the repository (e.g. to /tmp) and add it from there",
        )
    if rel is not None or req.diff_only:
        return rel, {}
    folder = "tuning" if kind == "tuning" else "patches"
    copied = f"{folder}/{src.name}"
    if repo.path(copied).exists():
        raise BadInput(f"{copied} already exists", "pass the file inside the repository, or rename it")
    return copied, {copied: data}


def _add_artifact(repo: Repo, lock: Lockfile, req: AddRequest, new: _NewEntry, extra: dict[str, bytes]) -> Outcome:
    """Pin a tuning table or an artifact."""
    if new.rel is None:  # unreachable: only overlays can be diff-only
        raise BadInput("--diff-only applies to overlays only")
    art = Artifact(name=new.name, file=RepoPath(new.rel), sha256=new.digest, target=new.target, note=req.reason)
    if new.kind == "tuning":
        new_lock = dataclasses.replace(lock, tuning=(*lock.tuning, art))
    else:
        new_lock = dataclasses.replace(lock, artifacts=(*lock.artifacts, art))
    return Outcome(
        written=finish(repo, new_lock, extra), changes=[Change(f"{new.kind} {new.name}", "unpinned", new.rel)]
    )


def _add_patch(
    repo: Repo,
    lock: Lockfile,
    req: AddRequest,
    new: _NewEntry,
    extra: dict[str, bytes],
    store: BlobStore,
    context: Context,
) -> Outcome:
    """Pin a patch; an overlay also gets its base pinned (and cached) and its diff written under upstream/."""
    kind, name, rel = new.kind, new.name, new.rel
    if new.target is None:
        raise BadInput(f"--target is required for a {kind}")
    base = diff = None
    if kind == "overlay":
        base, base_bytes, diff_bytes = _overlay_base(repo, lock, req, name, new.data, context)
        store.put(base_bytes)
        diff_rel = f"upstream/{name}.diff"
        if repo.path(diff_rel).exists():
            raise BadInput(f"{diff_rel} already exists", "remove it or pass another --name")
        extra[diff_rel] = diff_bytes
        diff = DiffPin(RepoPath(diff_rel), Sha256(sha256_bytes(diff_bytes)))
    elif req.base_file is not None or req.upstream is not None:
        raise BadInput(f"--base/--upstream apply to overlays; a {kind} has no upstream base")
    patch = Patch(
        name=name,
        kind=PatchKind(kind),
        sha256=new.digest,
        target=new.target,
        file=None if req.diff_only else RepoPath(rel) if rel else None,
        base=base,
        diff=diff,
        reason=req.reason,
        refs=new.refs,
        drop_when=req.drop_when,
    )
    # A base at the upstream's pin is recorded as verified against it, for the image it is mounted over.
    new_lock = record_new_bases(dataclasses.replace(lock, patches=(*lock.patches, patch)), lock, repo.root)
    where = "diff-only" if req.diff_only else str(rel)
    return Outcome(written=finish(repo, new_lock, extra), changes=[Change(f"{kind} {name}", "unpinned", where)])


@dataclass(frozen=True)
class _NewEntry:
    """What ``add`` settled about the new entry before pinning it."""

    kind: str
    name: str
    rel: str | None
    data: bytes
    target: ContainerPath | None
    refs: tuple[Reference, ...]

    @property
    def digest(self) -> Sha256:
        return Sha256(sha256_bytes(self.data))


def add(repo: Repo, lock: Lockfile, req: AddRequest, store: BlobStore, context: Context) -> Outcome:
    """Pin a new file: a patch (overlay, module, transformer), a tuning table or an artifact.

    ``context`` opens the upstream's source when an overlay's base is read from it (no ``--base``).
    """
    src, rel = _source_path(repo, req)
    kind = _infer_kind(req, rel)
    if kind not in _KINDS:
        raise BadInput(f"--kind: unknown kind '{kind}' ({', '.join(_KINDS)})")
    data = _read_source(repo, req, src, rel)
    name = _new_name(lock, req, src)
    target = _new_target(lock, req, kind)
    refs = _references(req)
    rel, extra = _placement(repo, req, kind, src, rel, data)
    new = _NewEntry(kind, name, rel, data, target, refs)
    if kind in ("tuning", "artifact"):
        return _add_artifact(repo, lock, req, new, extra)
    return _add_patch(repo, lock, req, new, extra, store, context)


def _overlay_base(
    repo: Repo, lock: Lockfile, req: AddRequest, name: str, data: bytes, ctx: Context
) -> tuple[Base, bytes, bytes]:
    if req.upstream is None or req.upstream_path is None:
        raise BadInput(
            "an overlay needs --upstream NAME and --upstream-path P (and --base FILE, unless the upstream "
            "has a source to read the base from)",
            "pass them; --commit defaults to the upstream's pinned commit",
        )
    up = lock.upstream(req.upstream)
    if up is None:
        known = ", ".join(u.name for u in lock.upstreams) or "none declared"
        raise BadInput(f"--upstream: '{req.upstream}' is not in the lockfile (known: {known})")
    commit = up.commit
    if req.commit is not None:
        try:
            commit = Revision(req.commit)
        except ValueError as e:
            raise BadInput(f"--commit: {e}") from e
    try:
        upath = UpstreamPath(req.upstream_path)
    except ValueError as e:
        raise BadInput(f"--upstream-path: {e}") from e
    if req.base_file is not None:
        try:
            base_bytes = req.base_file.read_bytes()
        except OSError as e:
            raise BadInput(f"--base {req.base_file}: cannot read ({e.strerror})") from e
    else:
        base_bytes = _base_from_source(repo, up, upath, req.commit, ctx)
    if gitmerge.is_binary(base_bytes) or gitmerge.is_binary(data):  # git's own test, as its diff and merge decide
        raise BadInput(f"{name}: binary file; patchkit diffs text files only")
    diff_bytes = canonical_diff(base_bytes, data, upath)
    if not diff_bytes:
        raise BadInput(f"{req.path} is identical to its base; there is nothing to patch")
    base = Base(
        upstream=up.name,
        path=upath,
        sha256=Sha256(sha256_bytes(base_bytes)),
        commit=commit,
        version=up.new_base()[1],
    )
    return base, base_bytes, diff_bytes


def _base_from_source(repo: Repo, up: Upstream, path: UpstreamPath, ref: str | None, ctx: Context) -> bytes:
    """The base file read from the upstream's source at its pin (or at ``ref``)."""
    from patchkit.sources.factory import open_source, pinned_snapshot

    source = open_source(up, ctx, repo.root)
    data = pinned_snapshot(source, up, ref).read([str(path)]).get(str(path))
    if data is None:
        raise BadInput(
            f"--upstream-path {path}: no such file in {up.name} at {ref or up.pin_text}",
            "check the path (it is relative to the upstream's tree, e.g. vllm/v1/...)",
        )
    return data


def remove(repo: Repo, lock: Lockfile, name: str, keep_files: bool = False) -> Outcome:
    """Drop a pinned entry and, unless asked not to, the files only it named."""
    files: list[str] = []
    patch = lock.patch(name)
    if patch is not None:
        # A hand-kept diff names the patches it covers: the name goes, and a diff covering nothing else with it.
        kept = tuple(
            dataclasses.replace(d, patches=tuple(n for n in d.patches if n != name))
            for d in lock.diffs
            if d.patches != (name,)
        )
        new_lock = dataclasses.replace(lock, patches=tuple(p for p in lock.patches if p.name != name), diffs=kept)
        files = [str(f) for f in (patch.file, patch.diff.file if patch.diff else None) if f is not None]
        files += [str(d.file) for d in lock.diffs if d.patches == (name,)]
    else:
        tuning_hit = next((a for a in lock.tuning if a.name == name), None)
        artifact_hit = next((a for a in lock.artifacts if a.name == name), None)
        if tuning_hit is not None:
            new_lock = dataclasses.replace(lock, tuning=tuple(a for a in lock.tuning if a.name != name))
            files = [str(tuning_hit.file)]
        elif artifact_hit is not None:
            new_lock = dataclasses.replace(lock, artifacts=tuple(a for a in lock.artifacts if a.name != name))
            files = [str(artifact_hit.file)]
        else:
            known = [p.name for p in lock.patches] + [a.name for a in (*lock.tuning, *lock.artifacts)]
            raise BadInput(f"'{name}' is not pinned", f"known: {', '.join(known) or 'nothing yet'}")
    deletes = [] if keep_files else [rel for rel in files if repo.path(rel).exists()]
    written = finish(repo, new_lock, deletes=deletes)
    outcome = Outcome(written=[w for w in written if w not in deletes], removed=deletes)
    outcome.changes.append(Change(name, "pinned", "removed"))
    return outcome


# --------------------------------------------------------------------------- diff


@dataclass
class PatchDiff:
    name: str
    diff: bytes
    added: int
    removed: int
    path: str


def regenerate_diffs(repo: Repo, lock: Lockfile, names: tuple[str, ...], store: BlobStore) -> list[PatchDiff]:
    """The canonical diff of each named overlay (all overlays when ``names`` is empty)."""
    unknown = [n for n in names if lock.patch(n) is None]
    if unknown:
        raise BadInput(f"not a pinned patch: {', '.join(unknown)}")
    out = []
    for p in lock.patches:
        if names and p.name not in names:
            continue
        if p.kind is not PatchKind.OVERLAY or p.base is None:
            if names:
                raise BadInput(f"'{p.name}' is a {p.kind.value}; it has no upstream base to diff against")
            continue
        base = recover_base(repo, p, store)
        if base is None:
            fetchable = lock.upstream(p.base.upstream) is not None
            raise Refused(
                f"'{p.name}': its base ({p.base.path}, sha256 {p.base.sha256.short}…) is not in the cache yet",
                f"fetch the pinned bases from upstream '{p.base.upstream}': patchkit materialize"
                if fetchable
                else "restore the committed diff (git checkout), or re-add the patch with --base FILE",
            )
        current = read_pinned(repo, str(p.file), p.name) if p.file is not None else apply_diff_only(repo, p, base)
        d = canonical_diff(base, current, p.base.path)
        parsed = diffs.parse(d)[0] if d else None
        out.append(
            PatchDiff(p.name, d, parsed.added if parsed else 0, parsed.removed if parsed else 0, str(p.base.path))
        )
    return out


def write_diffs(repo: Repo, lock: Lockfile, regenerated: list[PatchDiff]) -> Outcome:
    """Write regenerated diffs under upstream/ and refresh their pins."""
    outcome = Outcome()
    extra: dict[str, bytes] = {}
    by_name = {d.name: d for d in regenerated}
    patches = []
    for p in lock.patches:
        d = by_name.get(p.name)
        if d is not None and p.diff is not None:
            extra[str(p.diff.file)] = d.diff
            dsha = sha256_bytes(d.diff)
            if dsha != p.diff.sha256.hex:
                outcome.changes.append(Change(f"patches[{p.name}].diff.sha256", p.diff.sha256.hex, dsha))
                p = dataclasses.replace(p, diff=DiffPin(p.diff.file, Sha256(dsha)))
        patches.append(p)
    outcome.written = finish(repo, dataclasses.replace(lock, patches=tuple(patches)), extra)
    return outcome
