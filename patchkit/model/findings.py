"""What ``patchkit check`` says about the model pin: its manifest offline, its revision online."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import BadInput
from patchkit.lockfile.model import Lockfile
from patchkit.model.manifest import NO_MANIFEST_FIX, Locate, has_manifest, pinned_files
from patchkit.net.hub import Hub
from patchkit.store.repo import Repo

if TYPE_CHECKING:
    from patchkit.core.findings import Finding

# --------------------------------------------------------------------------- check


def format_findings(repo: Repo, lockf: Lockfile, locate: Locate) -> list[Finding]:
    """Offline findings about the model pin's manifest (for ``patchkit check``).

    The manifest file exists inside the repository, matches its sha256,
    parses, and describes the pinned repo and revision; no path is listed
    twice and no entry carries both kinds of hash.
    """
    from patchkit.core.findings import Finding

    model = lockf.model
    if model is None:
        return []
    out: list[Finding] = []
    if not has_manifest(model):
        return [
            Finding(
                "model-no-manifest",
                LOCKFILE_NAME,
                locate(("model",)),
                f"{model.repo}@{model.revision.short} is pinned by revision only; without a file manifest "
                "`patchkit model verify` cannot prove the cache holds the model's files",
                NO_MANIFEST_FIX,
                field="model",
                severity="note",
            )
        ]
    if model.manifest is not None:
        try:
            pinned_files(repo, model)
        except BadInput as e:
            out.append(
                Finding(
                    "model-manifest",
                    str(model.manifest.file),
                    None,
                    e.message,
                    e.hint,
                    field="model.manifest",
                )
            )
        return out
    seen: set[str] = set()
    for i, f in enumerate(model.files):
        if f.path.path in seen:
            out.append(
                Finding(
                    "model-manifest",
                    LOCKFILE_NAME,
                    locate(("model", "files", i, "path")),
                    f"model.files: {f.path} is listed twice",
                    "regenerate the manifest: patchkit model lock",
                    field=f"model.files[{i}].path",
                )
            )
        seen.add(f.path.path)
        if f.sha256 is not None and f.blob is not None:
            out.append(
                Finding(
                    "model-manifest",
                    LOCKFILE_NAME,
                    locate(("model", "files", i)),
                    f"model.files: {f.path} has both sha256 and blob; a file is pinned by one "
                    "(sha256 for LFS files, blob for small files)",
                    "regenerate the manifest: patchkit model lock",
                    field=f"model.files[{i}]",
                )
            )
    return out


def revision_findings(lockf: Lockfile, locate: Locate, hub: Hub) -> list[Finding]:
    """With ``check --online``: the pinned revision still exists on the Hub."""
    from patchkit.core.findings import Finding

    model = lockf.model
    if model is None or hub.revision_exists(model.repo, model.revision.sha):
        return []
    return [
        Finding(
            "model-revision-gone",
            LOCKFILE_NAME,
            locate(("model", "revision")),
            f"model: {model.repo}@{model.revision.short} no longer exists on the Hub (deleted or history rewritten)",
            f"pin a revision that exists: patchkit model lock {model.repo} --revision <branch>",
            field="model.revision",
        )
    ]
