"""A model pin's file manifest: each file's size and hash, inline or in ``model/manifest.json``.

The format of the manifest file is in docs/model.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from patchkit.core.hashing import require_pin
from patchkit.core.values import LOCKFILE_NAME, Revision, Sha256, UpstreamPath
from patchkit.errors import BadInput, ExternalFailure, Refused
from patchkit.lockfile.model import HF_REPO, Model, ModelFile
from patchkit.net.hub import RemoteFile
from patchkit.store.repo import Escape, Repo

# Past this many files the manifest goes to its own file: a model of 163
# shards would otherwise add some 800 lines to the lockfile.
INLINE_MAX = 32
MANIFEST_FILE = "model/manifest.json"
MANIFEST_FORMAT = "patchkit-model-manifest/1"
DEFAULT_REF = "main"
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")

Locate = Callable[[tuple[str | int, ...]], int | None]


# check and edit (findings, lockfile writes) are imported where used, so that
# `model verify` starts without them.

# --------------------------------------------------------------------------- the manifest


def check_repo_id(repo: str) -> str:
    """A Hugging Face model id, ``org/name``; BadInput otherwise."""
    if not HF_REPO.fullmatch(repo):
        raise BadInput(f"REPO: '{repo}' is not a Hugging Face repo id", "write it as org/name")
    return repo


def manifest_from_listing(listing: Iterable[RemoteFile], where: str) -> tuple[ModelFile, ...]:
    """The manifest of a Hub listing: every file's size and hash, sorted by path.

    LFS files are pinned by the sha256 of their content, small files by their
    git blob id: the names the Hugging Face cache gives their blobs. A
    listing the Hub should never produce (an unsafe path, a malformed hash,
    a path twice) is refused rather than pinned.
    """
    files: dict[str, ModelFile] = {}
    for f in listing:
        try:
            path = UpstreamPath(f.path)
        except ValueError as e:
            raise ExternalFailure(f"{where}: the Hub listed an unsafe path: {e}") from e
        if f.path in files:
            raise ExternalFailure(f"{where}: the Hub listed {f.path} twice")
        if f.size < 0:
            raise ExternalFailure(f"{where}: the Hub listed {f.path} with size {f.size}")
        if f.lfs_sha256 is not None:
            if not _HEX64.fullmatch(f.lfs_sha256):
                raise ExternalFailure(f"{where}: {f.path}: LFS sha256 {f.lfs_sha256!r} is not 64 lowercase hex")
            files[f.path] = ModelFile(path, f.size, sha256=Sha256(f.lfs_sha256))
        else:
            if not _HEX40.fullmatch(f.blob_id):
                raise ExternalFailure(f"{where}: {f.path}: blob id {f.blob_id!r} is not 40 lowercase hex")
            files[f.path] = ModelFile(path, f.size, blob=f.blob_id)
    return tuple(files[p] for p in sorted(files))


def manifest_bytes(repo: str, revision: Revision, files: Iterable[ModelFile]) -> bytes:
    """The canonical manifest file: same content, same bytes (fixed key order, sorted files)."""
    entries: list[dict[str, object]] = []
    for f in sorted(files, key=lambda f: f.path.path):
        entry: dict[str, object] = {"path": f.path.path, "size": f.size}
        if f.sha256 is not None:
            entry["sha256"] = f.sha256.hex
        if f.blob is not None:
            entry["blob"] = f.blob
        entries.append(entry)
    doc = {"format": MANIFEST_FORMAT, "repo": repo, "revision": revision.sha, "files": entries}
    return (json.dumps(doc, indent=1) + "\n").encode()


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest file."""

    repo: str
    revision: str
    files: tuple[ModelFile, ...]


def _manifest_entry(entry: object, field: str, hint: str) -> ModelFile:
    """One entry of a manifest's ``files``: a path, a size and exactly one of sha256 (LFS) or blob id."""
    if not isinstance(entry, dict) or set(entry) - {"path", "size", "sha256", "blob"}:
        raise BadInput(f"{field}: must be an object with path, size and sha256 or blob", hint)
    try:
        path = UpstreamPath(entry.get("path"))  # type: ignore[arg-type]  # checked by the constructor
    except (ValueError, TypeError) as e:
        raise BadInput(f"{field}.path: {e}", hint) from e
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadInput(f"{field}.size: must be a non-negative integer", hint)
    sha, blob = entry.get("sha256"), entry.get("blob")
    if (sha is None) == (blob is None):
        raise BadInput(f"{field}: needs exactly one of sha256 (LFS files) or blob (small files)", hint)
    if sha is not None and not (isinstance(sha, str) and _HEX64.fullmatch(sha)):
        raise BadInput(f"{field}.sha256: {sha!r} is not 64 lowercase hex", hint)
    if blob is not None and not (isinstance(blob, str) and _HEX40.fullmatch(blob)):
        raise BadInput(f"{field}.blob: {blob!r} is not a git blob id (40 lowercase hex)", hint)
    return ModelFile(path, size, sha256=Sha256(sha) if sha else None, blob=blob)


def parse_manifest(data: bytes, name: str) -> Manifest:
    """Read a manifest file strictly; BadInput naming the file and the field that is wrong."""
    hint = "regenerate it: patchkit model lock"
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise BadInput(f"{name}: not valid JSON ({e})", hint) from e
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise BadInput(f'{name}: format: not a patchkit model manifest (need "format": "{MANIFEST_FORMAT}")', hint)
    repo, revision, raw = doc.get("repo"), doc.get("revision"), doc.get("files")
    if not isinstance(repo, str) or not isinstance(revision, str):
        raise BadInput(f"{name}: repo and revision must be strings", hint)
    if not isinstance(raw, list):
        raise BadInput(f"{name}: files: must be a list", hint)
    files: list[ModelFile] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        file = _manifest_entry(entry, f"{name}: files[{i}]", hint)
        if file.path.path in seen:
            raise BadInput(f"{name}: files[{i}].path: {file.path.path} is listed twice", hint)
        seen.add(file.path.path)
        files.append(file)
    return Manifest(repo, revision, tuple(files))


NO_MANIFEST_FIX = "pin its files (size and hash of each, listed by the Hub at the pinned commit): patchkit model lock"


def has_manifest(model: Model) -> bool:
    """Whether the pin lists the revision's files (inline or in its manifest file)."""
    return model.manifest is not None or bool(model.files)


def pinned_files(repo: Repo, model: Model) -> tuple[ModelFile, ...]:
    """The model's file manifest: inline, or read from its manifest file and checked against its pin.

    Refused when the pin lists no files at all: a cache cannot be verified
    against a revision alone (every file would be "not in the manifest").
    """
    if not has_manifest(model):
        raise Refused(
            f"{LOCKFILE_NAME}: model {model.repo}@{model.revision.short} is pinned without a file manifest, "
            "so there is nothing to verify its files against",
            NO_MANIFEST_FIX,
        )
    if model.manifest is None:
        return model.files
    rel = str(model.manifest.file)
    hint = f"restore it (git checkout -- {rel}) or regenerate it: patchkit model lock"
    try:
        data = repo.read(model.manifest.file)
    except FileNotFoundError as e:
        raise BadInput(f"{rel} (model manifest) is pinned but does not exist", hint) from e
    except Escape as e:
        raise BadInput(f"{rel} (model manifest) {e}", hint) from e
    pinned = model.manifest.sha256
    require_pin(
        data,
        pinned.hex,
        lambda got: f"{rel} (model manifest) does not match its pin: pinned {pinned.short}…, file has {got[:12]}…",
        hint,
    )
    manifest = parse_manifest(data, rel)
    if manifest.repo != model.repo or manifest.revision != model.revision.sha:
        raise BadInput(
            f"{rel}: describes {manifest.repo}@{manifest.revision[:12]}, but the lockfile pins "
            f"{model.repo}@{model.revision.short}",
            "regenerate it: patchkit model lock",
        )
    return manifest.files
