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

from patchkit.errors import BadInput, ExternalFailure
from patchkit.hashing import sha256_bytes
from patchkit.lockfile.model import FilePin, Lockfile, Model
from patchkit.model.hub import Hub
from patchkit.model.manifest import (
    DEFAULT_REF,
    INLINE_MAX,
    MANIFEST_FILE,
    check_repo_id,
    manifest_bytes,
    manifest_from_listing,
)
from patchkit.repo import Repo
from patchkit.values import RepoPath, Revision, Sha256

if TYPE_CHECKING:
    from patchkit.outcome import Outcome

# --------------------------------------------------------------------------- lock


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


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
    from patchkit.outcome import Change, Outcome
    from patchkit.persist import finish

    old = lockf.model
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
    commit_text = hub.resolve(repo_id, revision)
    try:
        commit = Revision(commit_text)
    except ValueError as e:
        raise ExternalFailure(f"{repo_id}@{revision}: the Hub resolved it to {commit_text!r}: {e}") from e
    ref = None if revision == commit.sha else revision
    files = manifest_from_listing(hub.list_files(repo_id, commit.sha), f"{repo_id}@{commit.short}")
    if not files:
        raise ExternalFailure(f"{repo_id}@{commit.short}: the Hub lists no files in this revision")

    extra: dict[str, bytes] = {}
    deletes: list[str] = []
    if len(files) > INLINE_MAX:
        data = manifest_bytes(repo_id, commit, files)
        extra[MANIFEST_FILE] = data
        new = Model(repo_id, commit, ref=ref, manifest=FilePin(RepoPath(MANIFEST_FILE), Sha256(sha256_bytes(data))))
    else:
        new = Model(repo_id, commit, files=files, ref=ref)
    if (
        old is not None
        and old.manifest is not None
        and (new.manifest is None or new.manifest.file != old.manifest.file)
    ):
        deletes.append(str(old.manifest.file))
    unchanged = old is not None and dataclasses.replace(old, resolved_at=None) == new
    new = dataclasses.replace(new, resolved_at=old.resolved_at if unchanged and old else (now or _now()))

    outcome = Outcome()
    if old is None or old.repo != new.repo:
        outcome.changes.append(Change("model.repo", old.repo if old else "(none)", new.repo))
    if old is None or old.revision != new.revision:
        outcome.changes.append(
            Change("model.revision", old.revision.sha if old else "(none)", f"{new.revision.sha} ({revision})")
        )
    if old is not None and old.ref != new.ref:
        outcome.changes.append(Change("model.ref", old.ref or "(none)", new.ref or "(none)"))
    if not unchanged:
        where = MANIFEST_FILE if new.manifest is not None else "lockfile.toml"
        outcome.changes.append(Change("model files", _count(old), f"{len(files)} files in {where}"))
    outcome.written = finish(repo, dataclasses.replace(lockf, model=new), extra, deletes)
    return outcome


def _count(old: Model | None) -> str:
    if old is None:
        return "(none)"
    return f"{len(old.files)} files inline" if old.manifest is None else f"manifest {old.manifest.file}"
