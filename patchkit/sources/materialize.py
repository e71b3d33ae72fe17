"""The files that run: committed patches as they are, diff-only patches rebuilt and verified.

A diff-only patch commits only its diff; the file that runs is the pinned
base plus that diff. ``materialize`` gets each base (from the cache, else
from the upstream's source at the base's pin), applies the diff exactly,
and checks the result against the pinned sha256. With an output directory
it writes every file at its container path below it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from patchkit.core import diffs
from patchkit.core.hashing import Blob, require_pin
from patchkit.errors import BadInput
from patchkit.lockfile.model import Lockfile, Patch
from patchkit.sources.context import Context
from patchkit.store.cache import BlobStore
from patchkit.store.repo import Escape, Repo, atomic_write
from patchkit.vcs import gitclient


@dataclass(frozen=True)
class Materialized:
    name: str
    target: str
    sha256: str
    ok: bool
    how: str  # "committed", "base + diff", or what went wrong


def _base(repo: Repo, lock: Lockfile, p: Patch, store: BlobStore, cache: Context) -> bytes:
    from patchkit.sources.factory import open_source, pinned_snapshot

    if p.base is None:
        raise BadInput(f"'{p.name}' is diff-only but has no [base]")
    cached = store.get(p.base.sha256.hex)
    if cached is not None:
        return cached
    up = lock.upstream(p.base.upstream)
    if up is None:
        raise BadInput(f"'{p.name}': upstream '{p.base.upstream}' is not declared")
    ref = up.base_ref(p.base)
    data = pinned_snapshot(open_source(up, cache, repo.root), up, ref).read([str(p.base.path)]).get(str(p.base.path))
    if data is None:
        raise BadInput(f"'{p.name}': {p.base.path} does not exist in {up.name} at {ref or up.pin_text}")
    base = p.base
    blob = Blob(data)
    require_pin(
        blob,
        base.sha256.hex,
        lambda got: (
            f"'{p.name}': {base.path} from {up.name} has sha256 {got[:12]}…, not the pinned base {base.sha256.short}…"
        ),
        "the upstream source does not serve the pinned base; check the upstream's pin",
    )
    store.put(blob)  # the digest just checked, not computed again
    return data


def materialize(
    repo: Repo,
    lock: Lockfile,
    store: BlobStore,
    cache: Context,
    out: Path | None = None,
    *,
    diff_only: bool = False,
    keep: dict[str, Blob] | None = None,
) -> list[Materialized]:
    """Every patch's running file, verified against its pin; written under ``out`` if given.

    ``diff_only`` limits the work to the diff-only patches; ``keep`` receives
    each verified file's bytes, with the digest checked, by container target
    (for the bundle, which needs them in memory, not on disk).
    """
    results = []
    for p in lock.patches:
        if diff_only and p.file is not None:
            continue
        if p.file is not None:
            data = repo.read_pinned(str(p.file), f"patch '{p.name}'")
            how = "committed"
        else:
            if p.diff is None:
                raise BadInput(f"'{p.name}' has neither a file nor a diff")
            base = _base(repo, lock, p, store, cache)
            diff_bytes = repo.read_pinned(str(p.diff.file), f"the diff of patch '{p.name}'")
            try:
                data = diffs.apply(diffs.parse(diff_bytes)[0], base) if diff_bytes else base
            except (diffs.DiffError, diffs.ApplyError) as e:
                raise BadInput(f"{p.diff.file}:{e.line}: {e.message}") from e
            how = "base + diff"
        blob = Blob(data)
        digest = blob.sha256
        ok = digest == p.sha256.hex
        if not ok:
            how = f"sha256 {digest[:12]}… is not the pinned {p.sha256.short}…"
        elif out is not None:
            atomic_write(out / str(p.target).lstrip("/"), data)
        if ok and keep is not None:
            keep[str(p.target)] = blob
        results.append(Materialized(p.name, str(p.target), digest, ok, how))
    return results


# --------------------------------------------------------------------------- bases recovered offline


def base_of_committed(patch: Patch, patch_bytes: bytes, diff_bytes: bytes) -> bytes:
    """The base of a committed overlay: its diff applied in reverse to it, exactly."""
    files = diffs.parse(diff_bytes)
    if len(files) != 1:
        raise diffs.DiffError(1, f"holds {len(files)} file diffs; a patch's diff covers one file")
    return diffs.apply(files[0], patch_bytes, reverse=True)


def _overlay_candidates(repo: Repo, file: str, diff_file: str) -> Iterator[tuple[bytes, bytes]]:
    """The overlay and its diff as in the working tree, then as last committed to git.

    Lazy, so git is asked (two processes) only when the working tree does not give the base.
    """
    try:
        tree = repo.path(file).read_bytes(), repo.path(diff_file).read_bytes()
    except OSError:
        tree = None
    if tree is not None:
        yield tree
    patch_bytes, diff_bytes = gitclient.show(repo.root, "HEAD", file), gitclient.show(repo.root, "HEAD", diff_file)
    if patch_bytes is not None and diff_bytes is not None:
        yield patch_bytes, diff_bytes


def _reversed_base(p: Patch, patch_bytes: bytes, diff_bytes: bytes, want: str) -> Blob | None:
    """The base ``diff_bytes`` reversed onto ``patch_bytes`` gives, if its sha256 (which it carries) is ``want``."""
    try:
        base = Blob(base_of_committed(p, patch_bytes, diff_bytes))
    except (diffs.DiffError, diffs.ApplyError):
        return None
    return base if base.sha256 == want else None


def recover_base(repo: Repo, p: Patch, store: BlobStore) -> bytes | None:
    """The bytes of ``p``'s pinned base, from wherever they can be had offline.

    In order: the content-addressed cache; the committed overlay with its
    current diff reversed; the overlay and diff as last committed to git.
    Every candidate is checked against the pinned base sha256.
    """
    if p.base is None:
        return None
    want = p.base.sha256.hex
    cached = store.get(want)
    if cached is not None:
        return cached
    if p.file is None or p.diff is None:
        return None
    for patch_bytes, diff_bytes in _overlay_candidates(repo, str(p.file), str(p.diff.file)):
        base = _reversed_base(p, patch_bytes, diff_bytes, want)
        if base is not None:
            store.put(base)  # hashed once, by the check above
            return base.data
    return None


def read_pinned(repo: Repo, rel: str, name: str) -> bytes:
    """A pinned patch file, read only when it is a regular file inside the repository (never a FIFO or a link)."""
    try:
        return repo.read(rel)
    except FileNotFoundError as e:
        raise BadInput(f"{rel} (patch '{name}') is pinned but missing", f"restore it: git checkout -- {rel}") from e
    except Escape as e:
        raise BadInput(f"{rel} (patch '{name}') {e}") from e


def apply_diff_only(repo: Repo, p: Patch, base: bytes) -> bytes:
    """The file a diff-only patch runs: its committed diff applied to its base; a stale diff is bad input.

    ``check`` reports the same as ``diff-stale``; here the command cannot go
    on, so it stops with the diff's file and line.
    """
    if p.diff is None:
        raise BadInput(f"'{p.name}' has neither a file nor a diff")
    rel = str(p.diff.file)
    try:
        data = repo.read(rel)
    except FileNotFoundError as e:
        raise BadInput(f"{rel}: the diff of '{p.name}' is missing", f"restore it: git checkout -- {rel}") from e
    except Escape as e:
        raise BadInput(f"{rel} (diff of '{p.name}') {e}") from e
    if not data:
        return base
    try:
        return diffs.apply(diffs.parse(data)[0], base)
    except (diffs.DiffError, diffs.ApplyError) as e:
        raise BadInput(
            f"{rel}:{e.line}: the diff of '{p.name}' does not apply to its pinned base: {e.message}",
            f"restore the diff that matches the pin (git checkout -- {rel}), or re-add the patch with --base FILE",
        ) from e
