"""``patchkit model lock``: pin a Hugging Face revision with its file manifest.

``lock`` resolves a branch or tag to its full commit through a ``Hub``, lists
every file recursively and records each file's size and hash (the LFS
sha256, or the git blob id of a small file) in the lockfile, or, past
``INLINE_MAX`` files, in ``model/manifest.json`` pinned by sha256.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import RepoPath, Revision, Sha256
from patchkit.errors import BadInput, ExternalFailure
from patchkit.lockfile.model import FilePin, Lockfile, Model, ModelFile
from patchkit.model.manifest import (
    DEFAULT_REF,
    INLINE_MAX,
    MANIFEST_FILE,
    check_repo_id,
    manifest_bytes,
    manifest_from_listing,
)
from patchkit.net.hub import Hub
from patchkit.store.repo import Repo

if TYPE_CHECKING:
    from patchkit.core.outcome import Change, Outcome

# --------------------------------------------------------------------------- lock


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _what_to_lock(old: Model | None, repo_id: str | None, revision: str | None) -> tuple[str, str]:
    """The repository and revision to pin: the given ones, else the pinned repository and its branch, else main."""
    if repo_id is None:
        if old is None:
            raise BadInput("no model is pinned yet; name one", "patchkit model lock ORG/NAME [--revision REV]")
        repo_id = old.repo
    check_repo_id(repo_id)
    same_repo = old is not None and old.repo == repo_id
    if revision is None:
        revision = (old.ref if same_repo and old is not None and old.ref else None) or DEFAULT_REF
    if not revision or revision.startswith("-") or any(c in revision for c in " \t\n"):
        raise BadInput(f"--revision: {revision!r} is not a branch, tag or commit")
    return repo_id, revision


def _resolve(hub: Hub, repo_id: str, revision: str) -> Revision:
    """The full commit the Hub resolves ``revision`` to; anything else from the Hub is its failure."""
    commit_text = hub.resolve(repo_id, revision)
    try:
        return Revision(commit_text)
    except ValueError as e:
        raise ExternalFailure(f"{repo_id}@{revision}: the Hub resolved it to {commit_text!r}: {e}") from e


def _new_model(
    repo_id: str, commit: Revision, ref: str | None, files: tuple[ModelFile, ...]
) -> tuple[Model, dict[str, bytes]]:
    """The new pin with its files inline, or past ``INLINE_MAX`` in the manifest file it pins (and writes)."""
    if len(files) <= INLINE_MAX:
        return Model(repo_id, commit, files=files, ref=ref), {}
    data = manifest_bytes(repo_id, commit, files)
    manifest = FilePin(RepoPath(MANIFEST_FILE), Sha256(sha256_bytes(data)))
    return Model(repo_id, commit, ref=ref, manifest=manifest), {MANIFEST_FILE: data}


def _stale_manifest(old: Model | None, new: Model) -> list[str]:
    """The old manifest file, when the new pin no longer uses it (its files inline, or another file)."""
    if old is None or old.manifest is None:
        return []
    if new.manifest is not None and new.manifest.file == old.manifest.file:
        return []
    return [str(old.manifest.file)]


def _changes(old: Model | None, new: Model, revision: str, unchanged: bool, count: int) -> list[Change]:
    """What re-pinning changed, field by field, for the command's report."""
    from patchkit.core.outcome import Change

    changes = []
    if old is None or old.repo != new.repo:
        changes.append(Change("model.repo", old.repo if old else "(none)", new.repo))
    if old is None or old.revision != new.revision:
        changes.append(
            Change("model.revision", old.revision.sha if old else "(none)", f"{new.revision.sha} ({revision})")
        )
    if old is not None and old.ref != new.ref:
        changes.append(Change("model.ref", old.ref or "(none)", new.ref or "(none)"))
    if not unchanged:
        where = MANIFEST_FILE if new.manifest is not None else "lockfile.toml"
        changes.append(Change("model files", _count(old), f"{count} files in {where}"))
    return changes


def lock(
    repo: Repo,
    lockf: Lockfile,
    hub: Hub,
    repo_id: str | None = None,
    revision: str | None = None,
    now: str | None = None,
) -> Outcome:
    """Pin a model: resolve ``revision`` to its commit, list its files, write lockfile, manifest and sums.

    ``repo_id`` defaults to the pinned model; ``revision`` to the branch it was
    resolved from, else ``main``. A full commit id is pinned as given (the Hub
    still confirms it exists). Re-locking an unchanged revision changes nothing.
    """
    from patchkit.core.outcome import Outcome
    from patchkit.store.persist import finish

    old = lockf.model
    repo_id, revision = _what_to_lock(old, repo_id, revision)
    commit = _resolve(hub, repo_id, revision)
    ref = None if revision == commit.sha else revision
    files = manifest_from_listing(hub.list_files(repo_id, commit.sha), f"{repo_id}@{commit.short}")
    if not files:
        raise ExternalFailure(f"{repo_id}@{commit.short}: the Hub lists no files in this revision")
    new, extra = _new_model(repo_id, commit, ref, files)
    deletes = _stale_manifest(old, new)
    unchanged = old is not None and dataclasses.replace(old, resolved_at=None) == new
    new = dataclasses.replace(new, resolved_at=old.resolved_at if unchanged and old else (now or _now()))
    outcome = Outcome(changes=_changes(old, new, revision, unchanged, len(files)))
    outcome.written = finish(repo, dataclasses.replace(lockf, model=new), extra, deletes)
    return outcome


def _count(old: Model | None) -> str:
    if old is None:
        return "(none)"
    return f"{len(old.files)} files inline" if old.manifest is None else f"manifest {old.manifest.file}"
