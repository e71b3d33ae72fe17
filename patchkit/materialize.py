"""The files that run: committed patches as they are, diff-only patches rebuilt and verified.

A diff-only patch commits only its diff; the file that runs is the pinned
base plus that diff. ``materialize`` gets each base (from the cache, else
from the upstream's source at the base's pin), applies the diff exactly,
and checks the result against the pinned sha256. With an output directory
it writes every file at its container path below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit import diffs
from patchkit.cache import BlobStore
from patchkit.context import Context
from patchkit.errors import BadInput
from patchkit.hashing import Blob, require_pin
from patchkit.lockfile.model import Lockfile, Patch
from patchkit.repo import Repo, atomic_write


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
