"""The lockfile model: every pin of a deployment as frozen dataclasses.

``lockfile.reader.loads`` builds it from TOML text, strictly; ``lockfile.writer.dumps``
writes it back canonically. See docs/lockfile.md for every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from patchkit.values import (
    ContainerPath,
    Digest,
    Reference,
    RepoPath,
    Revision,
    Sha256,
    UpstreamPath,
)

SCHEMA_VERSION = 1
# Files patchkit itself generates; pinning them would be circular.
GENERATED = ("lockfile.toml", "SHA256SUMS")
LOCKFILE_NAME = "lockfile.toml"
HEADER = (
    "# patchkit lockfile: every pin of this deployment.\n"
    "# Written by patchkit (init, add, remove, lock); hand edits are fine, then run\n"
    "# `patchkit lock` and `patchkit check`. Fields: docs/lockfile.md.\n"
)


class PatchKind(Enum):
    """What a patch is: a full-file overlay, a new module, or a source transformer."""

    OVERLAY = "overlay"
    MODULE = "module"
    TRANSFORMER = "transformer"


@dataclass(frozen=True)
class Image:
    """A container image pinned by digest."""

    name: str
    repository: str
    digest: Digest
    tag: str | None = None
    resolved_at: str | None = None
    platform: str | None = None
    platform_digest: Digest | None = None
    version: str | None = None
    note: str | None = None

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class ModelFile:
    """One file of a model revision: its size and its hash (LFS sha256 or git blob id)."""

    path: UpstreamPath
    size: int
    sha256: Sha256 | None = None
    blob: str | None = None


@dataclass(frozen=True)
class FilePin:
    """A repository file pinned by its sha256 (e.g. a model manifest too large to inline)."""

    file: RepoPath
    sha256: Sha256


@dataclass(frozen=True)
class Model:
    """A Hugging Face model pinned at a full commit.

    ``ref`` is the branch or tag the revision was resolved from (the cache's
    ``refs/<ref>`` must name the revision); the file manifest is either inline
    (``files``) or in a repository file pinned by ``manifest``.
    """

    repo: str
    revision: Revision
    files: tuple[ModelFile, ...] = ()
    ref: str | None = None
    resolved_at: str | None = None
    manifest: FilePin | None = None


@dataclass(frozen=True)
class Upstream:
    """An upstream project the patches are based on, and the source that serves its files.

    ``source`` is ``git`` (``git`` URL at ``commit``), ``wheel`` (the wheel of
    ``wheel`` = "project==version", pinned by ``wheel_sha256``) or ``dir`` (a
    local directory tree, pinned by ``dir_sha256`` over its files).
    """

    name: str
    git: str | None = None
    commit: Revision | None = None
    version: str | None = None
    note: str | None = None
    source: str = "git"
    wheel: str | None = None
    wheel_sha256: Sha256 | None = None
    wheel_file: str | None = None
    dir: str | None = None
    dir_sha256: Sha256 | None = None
    image: str | None = None
    image_digest: Digest | None = None
    image_tag: str | None = None
    prefix: ContainerPath | None = None
    platform: str | None = None

    @property
    def wheel_project(self) -> str | None:
        return self.wheel.split("==", 1)[0] if self.wheel else None

    @property
    def wheel_version(self) -> str | None:
        return self.wheel.split("==", 1)[1] if self.wheel else None

    @property
    def pin_text(self) -> str:
        """The pin in one phrase: a commit, a wheel or a directory digest."""
        if self.source == "wheel":
            return f"{self.wheel} ({self.wheel_sha256.short if self.wheel_sha256 else 'unpinned'})"
        if self.source == "dir":
            return f"dir {self.dir} ({self.dir_sha256.short if self.dir_sha256 else 'unpinned'})"
        if self.source == "image":
            digest = self.image_digest.hex[:12] if self.image_digest else "unpinned"
            return f"{self.image}@sha256:{digest}" + (f" ({self.version})" if self.version else "")
        return self.commit.short if self.commit else "unpinned"


@dataclass(frozen=True)
class Base:
    """The upstream file a patch is based on, pinned by its sha256.

    ``commit`` (git upstreams) or ``version`` (wheel upstreams) says at which
    upstream pin the base was taken.
    """

    upstream: str
    path: UpstreamPath
    sha256: Sha256
    commit: Revision | None = None
    version: str | None = None


@dataclass(frozen=True)
class DiffPin:
    """The diff of a patch against its base, committed under ``upstream/``."""

    file: RepoPath
    sha256: Sha256


@dataclass(frozen=True)
class Origin:
    """What a hand-kept repository stated about an imported patch's upstream, as stated.

    ``patchkit import`` records it for an overlay whose base patchkit has not
    established yet; nothing here is verified. ``commit`` is kept as written
    (a short id stays short); ``stated_in`` lists where each fact was found.
    ``patchkit import --normalize`` turns it into a verified [base].
    """

    repository: str | None = None
    commit: str | None = None
    path: UpstreamPath | None = None
    stated_in: tuple[str, ...] = ()


@dataclass(frozen=True)
class HandDiff:
    """A hand-kept diff adopted by ``patchkit import``, pinned as it is.

    ``patches`` names the patches whose files it covers; ``against`` says what
    its old side is: ``upstream``, ``overlay`` (incremental: against an
    earlier version of the overlay) or ``new`` (it adds whole files).
    """

    file: RepoPath
    sha256: Sha256
    patches: tuple[str, ...] = ()
    against: str = "upstream"


HAND_DIFF_AGAINST = ("upstream", "overlay", "new")


@dataclass(frozen=True)
class Patch:
    """A file the deployment runs instead of, or beside, upstream code.

    ``file`` is ``None`` for a diff-only patch: the file that runs is the base
    plus the diff, and ``sha256`` pins the result.
    """

    name: str
    kind: PatchKind
    sha256: Sha256
    target: ContainerPath
    file: RepoPath | None = None
    base: Base | None = None
    diff: DiffPin | None = None
    reason: str | None = None
    refs: tuple[Reference, ...] = ()
    drop_when: str | None = None
    origin: Origin | None = None

    @property
    def committed(self) -> bool:
        return self.file is not None


@dataclass(frozen=True)
class Artifact:
    """A pinned file: a tuning table, the entrypoint, a proxy config, compose.yaml."""

    name: str
    file: RepoPath
    sha256: Sha256
    target: ContainerPath | None = None
    note: str | None = None


REF_STATES = ("open", "closed", "merged", "unknown")
REF_KINDS = ("issue", "pull", "commit")


@dataclass(frozen=True)
class RefState:
    """The last known state of an upstream issue or pull request.

    ``etag`` is the validator of the last answer, sent back as ``If-None-Match``
    so an unchanged state costs no rate limit.
    """

    ref: Reference
    state: str
    checked_at: str | None = None
    merge_commit: Revision | None = None
    head_commit: Revision | None = None
    kind: str | None = None
    title: str | None = None
    merged_at: str | None = None
    etag: str | None = None


@dataclass(frozen=True)
class Signing:
    """How the repository's signatures are checked.

    ``allowed_signers`` is an OpenSSH allowed-signers file in the repository;
    ``identity`` the principal signatures must be made by; ``files`` the files
    that must carry a valid ``<file>.sig`` (SSHSIG, namespace ``patchkit``).
    """

    allowed_signers: RepoPath
    identity: str | None = None
    files: tuple[RepoPath, ...] = (RepoPath("SHA256SUMS"),)


@dataclass(frozen=True)
class Lockfile:
    """Every pin of a deployment."""

    name: str | None = None
    images: tuple[Image, ...] = ()
    model: Model | None = None
    upstreams: tuple[Upstream, ...] = ()
    patches: tuple[Patch, ...] = ()
    tuning: tuple[Artifact, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    refs: tuple[RefState, ...] = ()
    signing: Signing | None = None
    diffs: tuple[HandDiff, ...] = ()
    schema: int = SCHEMA_VERSION

    def upstream(self, name: str) -> Upstream | None:
        return next((u for u in self.upstreams if u.name == name), None)

    def patch(self, name: str) -> Patch | None:
        return next((p for p in self.patches if p.name == name), None)

    def files(self) -> list[tuple[str, RepoPath, Sha256]]:
        """Every repository file the lockfile pins, as (field, path, sha256)."""
        out: list[tuple[str, RepoPath, Sha256]] = []
        for i, p in enumerate(self.patches):
            if p.file is not None:
                out.append((f"patches[{i}].sha256", p.file, p.sha256))
            if p.diff is not None:
                out.append((f"patches[{i}].diff.sha256", p.diff.file, p.diff.sha256))
        for i, t in enumerate(self.tuning):
            out.append((f"tuning[{i}].sha256", t.file, t.sha256))
        for i, a in enumerate(self.artifacts):
            out.append((f"artifacts[{i}].sha256", a.file, a.sha256))
        for i, d in enumerate(self.diffs):
            out.append((f"diffs[{i}].sha256", d.file, d.sha256))
        if self.model is not None and self.model.manifest is not None:
            out.append(("model.manifest.sha256", self.model.manifest.file, self.model.manifest.sha256))
        return out

    def ref_state(self, ref: Reference) -> RefState | None:
        return next((s for s in self.refs if s.ref == ref), None)


def inferred_source(u: Upstream) -> str:
    """The source the loader infers when ``source`` is absent (so dumps can leave it out)."""
    if u.wheel is not None:
        return "wheel"
    if u.dir is not None:
        return "dir"
    return "image" if u.image is not None else "git"
