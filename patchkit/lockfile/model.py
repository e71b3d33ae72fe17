"""The lockfile model: every pin of a deployment as frozen dataclasses.

``lockfile.reader.loads`` builds it from TOML text, strictly; ``lockfile.writer.dumps``
writes it back canonically. See docs/lockfile.md for every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from patchkit.series.model import Series, series_files
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
class Derived:
    """A derived image: the base ``images.<base>`` plus one layer of every file that runs, pushed by digest.

    Keyed by the deploy.toml profile it was built for. ``digest`` is the
    top-level one (an index when the base is multi-platform), what the
    Kubernetes manifests run; ``layer_digest``/``diff_id`` are the one added
    layer (compressed and uncompressed), the same on every platform.
    """

    name: str
    base: str
    repository: str
    digest: Digest
    base_digest: Digest
    layer_digest: Digest
    diff_id: Digest
    created: str
    tag: str | None = None


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

    A tagged union: each kind of source is a subclass (``GitUpstream``,
    ``WheelUpstream``, ``DirUpstream``, ``ImageUpstream``) whose ``source`` names
    it and whose methods say what its pin means; ``UPSTREAM_KINDS`` registers
    them by that name. Every field is kept as written, also another kind's (the
    loader does not reject them), so a table reloads as it was.
    """

    source: ClassVar[str]
    # The fields this kind cannot do without, and what the loader says when one is missing.
    required: ClassVar[tuple[str, ...]] = ()
    lacking: ClassVar[str] = ""
    name: str
    git: str | None = None
    commit: Revision | None = None
    version: str | None = None
    note: str | None = None
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

    def __post_init__(self) -> None:
        if type(self) is Upstream:
            raise TypeError("an Upstream is one of its kinds: GitUpstream, WheelUpstream, DirUpstream, ImageUpstream")

    @property
    def wheel_project(self) -> str | None:
        return self.wheel.split("==", 1)[0] if self.wheel else None

    @property
    def wheel_version(self) -> str | None:
        return self.wheel.split("==", 1)[1] if self.wheel else None

    @property
    def location(self) -> str | None:
        """Where the source is: the git URL, the wheel, the directory or the image repository."""
        return self.git

    @property
    def pin_text(self) -> str:
        """The pin in one phrase: a commit, a wheel, a directory digest or an image."""
        return self.commit.short if self.commit else "unpinned"

    @property
    def pinned_ref(self) -> str | None:
        """The reference its source resolves to the pinned files (a commit, a version, a digest), if pinned."""
        return str(self.commit) if self.commit else None

    @property
    def fetch_ref(self) -> str | None:
        """``pinned_ref`` as a fetch takes it: ``""`` for a source whose files are pinned by themselves."""
        return self.pinned_ref

    @property
    def pin_noun(self) -> str:
        """What its pin is called in a message: ``commit`` or ``version``."""
        return "version"

    def show_ref(self, ref: str) -> str:
        """A reference of this source as a message shows it."""
        return ref or "its pinned files"

    def base_ref(self, base: Base) -> str | None:
        """The reference a base of this upstream was taken at."""
        return str(base.commit) if base.commit else base.version

    def new_base(self) -> tuple[Revision | None, str | None]:
        """The ``commit`` and ``version`` a base taken from this upstream's pin records."""
        return None, None

    def compared(self, base: Base) -> tuple[str, str, str] | None:
        """The base field that says which pin a base was taken at, its value and the pinned one; None: unknown."""
        if base.commit is not None and self.commit is not None:
            return "commit", base.commit.short, self.commit.short
        return None

    def resource(self) -> dict[str, Any]:
        """The pin as an in-toto ResourceDescriptor's ``uri``, ``digest`` and ``annotations`` (for provenance)."""
        d: dict[str, Any] = {}
        if self.git:
            d["uri"] = f"git+{self.git}" + (f"@{self.commit}" if self.commit else "")
        if self.commit is not None:
            d["digest"] = {"gitCommit": str(self.commit)}
        return d

    def rebase_fix(self, want: str) -> str:
        """The command that moves a base of this upstream onto its pin ``want``."""
        return f"move the patch onto {want}: patchkit rebase --onto {want} --upstream {self.name}"


@dataclass(frozen=True)
class GitUpstream(Upstream):
    """A git repository (``git``) at a commit (``commit``)."""

    source: ClassVar[str] = "git"

    @property
    def pin_noun(self) -> str:
        return "commit"

    def show_ref(self, ref: str) -> str:
        return ref[:12]

    def new_base(self) -> tuple[Revision | None, str | None]:
        return self.commit, None


@dataclass(frozen=True)
class WheelUpstream(Upstream):
    """The wheel of ``wheel`` (``project==version``), pinned by the file's ``wheel_sha256``."""

    source: ClassVar[str] = "wheel"
    required = ("wheel",)
    lacking = "a wheel upstream needs 'wheel = \"project==version\"'"

    @property
    def location(self) -> str | None:
        return self.wheel

    @property
    def pin_text(self) -> str:
        return f"{self.wheel} ({self.wheel_sha256.short if self.wheel_sha256 else 'unpinned'})"

    @property
    def pinned_ref(self) -> str | None:
        return self.wheel_version

    def new_base(self) -> tuple[Revision | None, str | None]:
        return None, self.wheel_version

    def resource(self) -> dict[str, Any]:
        if not self.wheel:
            return super().resource()
        d: dict[str, Any] = {"uri": f"pkg:pypi/{self.wheel_project}@{self.wheel_version}"}
        if self.wheel_sha256 is not None:
            d["digest"] = {"sha256": self.wheel_sha256.hex}
        return d

    def compared(self, base: Base) -> tuple[str, str, str] | None:
        if base.version is not None and self.wheel_version is not None:
            return "version", base.version, self.wheel_version
        return super().compared(base)


@dataclass(frozen=True)
class DirUpstream(Upstream):
    """A local directory tree (``dir``), pinned by ``dir_sha256`` over its files."""

    source: ClassVar[str] = "dir"
    required = ("dir",)
    lacking = "a dir upstream needs 'dir' (the directory's path)"

    @property
    def location(self) -> str | None:
        return self.dir

    @property
    def pin_text(self) -> str:
        return f"dir {self.dir} ({self.dir_sha256.short if self.dir_sha256 else 'unpinned'})"

    @property
    def pinned_ref(self) -> str | None:
        return self.dir

    @property
    def fetch_ref(self) -> str | None:
        return ""  # a directory tree is pinned by its own files

    def resource(self) -> dict[str, Any]:
        d: dict[str, Any] = {"annotations": {"dir": self.dir or ""}}
        if self.dir_sha256 is not None:
            d["digest"] = {"sha256": self.dir_sha256.hex}
        return d


@dataclass(frozen=True)
class ImageUpstream(Upstream):
    """The files installed below ``prefix`` in a container image (``image`` at ``image_digest``)."""

    source: ClassVar[str] = "image"
    required = ("image", "image_digest", "prefix")
    lacking = "an image upstream needs 'image' (the repository), 'image_digest' and 'prefix'"

    @property
    def location(self) -> str | None:
        return self.image

    @property
    def pin_text(self) -> str:
        digest = self.image_digest.hex[:12] if self.image_digest else "unpinned"
        return f"{self.image}@sha256:{digest}" + (f" ({self.version})" if self.version else "")

    @property
    def pinned_ref(self) -> str | None:
        return str(self.image_digest) if self.image_digest else None

    def base_ref(self, base: Base) -> str | None:
        return self.pinned_ref  # an image base records the runtime version, not a reference

    def resource(self) -> dict[str, Any]:
        if not self.image:
            return super().resource()
        d: dict[str, Any] = {"uri": f"docker://{self.image}" + (f"@{self.image_digest}" if self.image_digest else "")}
        if self.image_digest is not None:
            d["digest"] = {"sha256": self.image_digest.hex}
        return d

    def compared(self, base: Base) -> tuple[str, str, str] | None:
        if base.version is not None and self.version is not None:
            return "version", base.version, self.version
        return super().compared(base)

    def rebase_fix(self, want: str) -> str:
        return (
            f"move the patch onto the pinned image: patchkit rebase --upstream {self.name} --onto {self.image_digest}"
        )


# Every kind of upstream source, by the name ``source`` gives it in the lockfile.
UPSTREAM_KINDS: dict[str, type[Upstream]] = {
    k.source: k for k in (GitUpstream, WheelUpstream, DirUpstream, ImageUpstream)
}


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
    series: tuple[Series, ...] = ()
    derived: tuple[Derived, ...] = ()
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
        out.extend(series_files(self.series))
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
