"""The lockfile model: every pin of a deployment as frozen dataclasses.

``lockfile.reader.loads`` builds it from TOML text, strictly; ``lockfile.writer.dumps``
writes it back canonically. See docs/lockfile.md for every field.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import ClassVar

from patchkit.core.values import ContainerPath, Digest, Reference, RepoPath, Revision, Sha256, UpstreamPath, check_name
from patchkit.lockfile.accepted import ACCEPTED, Accepted
from patchkit.lockfile.fields import (
    Context,
    Entry,
    Invalid,
    Key,
    Raw,
    Record,
    Rule,
    by_name,
    computed,
    integer,
    keyed,
    section,
    strings,
    table,
    tables,
    text,
)
from patchkit.lockfile.series import SERIES, Series, series_files
from patchkit.lockfile.tomlpos import FieldPath, toml_type
from patchkit.lockfile.verified import VERIFIED, Verified, check_pin

SCHEMA_VERSION = 1
# Files patchkit itself generates; pinning them would be circular.
GENERATED = ("lockfile.toml", "SHA256SUMS")
HEADER = (
    "# patchkit lockfile: every pin of this deployment.\n"
    "# Written by patchkit (init, add, remove, lock); hand edits are fine, then run\n"
    "# `patchkit lock` and `patchkit check`. Fields: docs/lockfile.md.\n"
)
# A Hugging Face repo id, ``org/name`` (also the ``owner/repo`` an imported patch's origin states).
HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")
_SHORT_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_BLOB = re.compile(r"[0-9a-f]{40}")

# Each record is followed by its field table (patchkit.lockfile.fields): the fields' TOML keys
# in written order, how each is read and checked, and the rules across them. The reader, the
# unknown-field check and the writer follow the tables; a new field is one line in its table.


def _named(what: str) -> Callable[[str], str]:
    """The check of an entry name (``check_name``), saying what kind of name it is."""
    return lambda s: check_name(s, what)


def _one_of(allowed: tuple[str, ...], what: str, listed: str) -> Callable[[str], str]:
    """The check of a string that must be one of ``allowed`` (listed in the message as ``listed``)."""

    def check(s: str) -> str:
        if s not in allowed:
            raise ValueError(f"unknown {what} '{s}' ({listed})")
        return s

    return check


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


def _image_repository(repository: str) -> str:
    if not repository.strip():
        raise Invalid("is empty", "write the image repository, e.g. 'vllm/vllm-openai-rocm'")
    if "@" in repository or repository.rsplit("/", 1)[-1].count(":"):
        raise Invalid(
            f"'{repository}' must be the repository alone, without a tag or digest",
            "put the tag in 'tag' and the digest in 'digest'",
        )
    return repository


IMAGE = Record(
    Image,
    (
        text("repository", _image_repository, required=True),
        text("digest", Digest, required=True, hint="pin images by digest"),
        text("tag"),
        text("resolved_at"),
        text("platform"),
        text("platform_digest", Digest),
        text("version"),
        text("note"),
    ),
    key=Key("name", _named("image name")),
)


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


def _base_pinned(e: Entry) -> None:
    base = e.values["base"]
    if base is not None and base not in e.ctx.names("images"):
        e.problem(("base",), f"names image '{base}', which [images] does not pin", "patchkit image pin")


_REBUILD = "rebuild it: patchkit image build --push …"
DERIVED = Record(
    Derived,
    (
        text("base", required=True),
        text("repository", required=True),
        text("tag"),
        text("digest", Digest, required=True, hint=_REBUILD),
        text("base_digest", Digest, required=True, hint=_REBUILD),
        text("layer_digest", Digest, required=True, hint=_REBUILD),
        text("diff_id", Digest, required=True, hint=_REBUILD),
        text("created", required=True),
    ),
    key=Key("name", _named("profile name")),
    rules=(_base_pinned,),
)


@dataclass(frozen=True)
class ModelFile:
    """One file of a model revision: its size and its hash (LFS sha256 or git blob id)."""

    path: UpstreamPath
    size: int
    sha256: Sha256 | None = None
    blob: str | None = None


def _blob(blob: str) -> str:
    if not _BLOB.fullmatch(blob):
        raise ValueError(f"'{blob}' is not a git blob id (40 lowercase hex)")
    return blob


def _hashed(e: Entry) -> None:
    if e.values["sha256"] is None and e.values["blob"] is None:
        e.problem((), "needs 'sha256' (LFS files) or 'blob' (small files)")


MODEL_FILE = Record(
    ModelFile,
    (
        text("path", UpstreamPath, required=True),
        integer("size", lambda n: n >= 0, "must be a non-negative integer"),
        text("sha256", Sha256),
        text("blob", _blob, keep=True),
    ),
    rules=(_hashed,),
)


@dataclass(frozen=True)
class FilePin:
    """A repository file pinned by its sha256 (e.g. a model manifest too large to inline)."""

    file: RepoPath
    sha256: Sha256


FILE_PIN = Record(FilePin, (text("file", RepoPath, required=True), text("sha256", Sha256, required=True)))


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


def _hf_repo(repo: str) -> str:
    if not HF_REPO.fullmatch(repo):
        raise ValueError(f"'{repo}' is not a Hugging Face repo id (write 'org/name')")
    return repo


def _git_ref(ref: str) -> str:
    if not ref or ref.startswith(("/", "-")) or ".." in ref or any(c in ref for c in " \t\n\\"):
        raise ValueError(f"'{ref}' is not a branch or tag name")
    return ref


def _one_manifest(e: Entry) -> None:
    if e.values["files"] and isinstance(e.t.get("manifest"), dict):
        e.problem(("manifest",), "a model has its file list inline (files) or in a manifest file, not both")


MODEL = Record(
    Model,
    (
        text("repo", _hf_repo, required=True),
        text(
            "revision",
            Revision,
            required=True,
            hint="resolve the branch to its commit (the model page shows it) and pin that",
        ),
        text("ref", _git_ref, keep=True),
        text("resolved_at"),
        # Written sorted by path. (A valid model has files or manifest, never both.)
        tables("files", MODEL_FILE, "must be an array of tables ([[model.files]])", order=lambda f: f.path.path),
        table("manifest", FILE_PIN),
    ),
    rules=(_one_manifest,),
)


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
    def exact_pin(self) -> str | None:
        """The exact pin a base is verified against (``verified.pin``): a commit, a file sha256, a digest."""
        return str(self.commit) if self.commit else None

    def pin_form(self, pin: str) -> None:
        """Raise ``ValueError`` unless ``pin`` has the form of this kind's ``exact_pin``."""
        Revision(pin)

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

    def resource(self) -> dict[str, object]:
        """The pin as an in-toto ResourceDescriptor's ``uri``, ``digest`` and ``annotations`` (for provenance)."""
        d: dict[str, object] = {}
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

    @property
    def exact_pin(self) -> str | None:
        return self.wheel_sha256.hex if self.wheel_sha256 else None

    def pin_form(self, pin: str) -> None:
        Sha256(pin)

    def new_base(self) -> tuple[Revision | None, str | None]:
        return None, self.wheel_version

    def resource(self) -> dict[str, object]:
        if not self.wheel:
            return super().resource()
        d: dict[str, object] = {"uri": f"pkg:pypi/{self.wheel_project}@{self.wheel_version}"}
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

    @property
    def exact_pin(self) -> str | None:
        return self.dir_sha256.hex if self.dir_sha256 else None

    def pin_form(self, pin: str) -> None:
        Sha256(pin)

    def resource(self) -> dict[str, object]:
        d: dict[str, object] = {"annotations": {"dir": self.dir or ""}}
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

    @property
    def exact_pin(self) -> str | None:
        return self.pinned_ref

    def pin_form(self, pin: str) -> None:
        Digest(pin)

    def resource(self) -> dict[str, object]:
        if not self.image:
            return super().resource()
        d: dict[str, object] = {
            "uri": f"docker://{self.image}" + (f"@{self.image_digest}" if self.image_digest else "")
        }
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


def _wheel(wheel: str) -> str:
    if not _WHEEL.fullmatch(wheel):
        raise Invalid(f"'{wheel}' is not 'project==version'", 'e.g. wheel = "vllm==0.26.0"')
    return wheel


def _upstream_kind(e: Entry) -> type[Upstream]:
    """The kind ``source`` names, or the one the fields say when it is absent (see ``inferred_source``)."""
    v = e.values
    source = v["source"]
    if source is None:
        source = "wheel" if v["wheel"] is not None else "dir" if v["dir"] is not None else "git"
    if source == "git" and v["image"] is not None and v["wheel"] is None and v["dir"] is None:
        source = "image"
    kind = UPSTREAM_KINDS.get(source)
    if kind is None:
        *others, last = UPSTREAM_KINDS
        e.problem(("source",), f"unknown source '{source}' ({', '.join(others)} or {last})")
        return GitUpstream
    if any(not isinstance(e.t.get(f), str) for f in kind.required):
        e.problem((), kind.lacking)
    return kind


def _written_source(u: Upstream) -> str | None:
    """``source`` as written: left out for a plain git upstream, kept when the fields would infer another."""
    return None if u.source == inferred_source(u) == GitUpstream.source else u.source


UPSTREAM = Record(
    Upstream,
    (
        computed(text("source"), _written_source),
        text("git"),
        text("commit", Revision),
        text("wheel", _wheel, keep=True),
        text("wheel_sha256", Sha256),
        text("wheel_file"),
        text("dir"),
        text("dir_sha256", Sha256),
        text("image"),
        text("image_digest", Digest, hint="pin images by digest"),
        text("image_tag"),
        text("prefix", ContainerPath),
        text("platform"),
        text("version"),
        text("note"),
    ),
    key=Key("name", _named("upstream name")),
    choose=_upstream_kind,
)


@dataclass(frozen=True)
class Base:
    """The upstream file a patch is based on, pinned by its sha256.

    ``commit`` (git upstreams) or ``version`` (wheel upstreams) says at which
    upstream pin the base was taken; ``verified`` for which image, and how, it
    was last established (``lockfile.verified``).
    """

    upstream: str
    path: UpstreamPath
    sha256: Sha256
    commit: Revision | None = None
    version: str | None = None
    verified: Verified | None = None


def _declared(e: Entry) -> None:
    upstream = e.values["upstream"]
    if upstream is not None and upstream not in e.ctx.names("upstreams"):
        e.problem(("upstream",), f"upstream '{upstream}' is not declared", f"add an [upstreams.{upstream}] table")
    check_pin(e, upstream)


BASE = Record(
    Base,
    (
        text("upstream", required=True),
        text("commit", Revision),
        text("version"),
        text("path", UpstreamPath, required=True),
        text("sha256", Sha256, required=True),
        table("verified", VERIFIED),
    ),
    rules=(_declared,),
)


@dataclass(frozen=True)
class DiffPin:
    """The diff of a patch against its base, committed under ``upstream/``."""

    file: RepoPath
    sha256: Sha256


DIFF_PIN = Record(DiffPin, (text("file", RepoPath, required=True), text("sha256", Sha256, required=True)))


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


def _owner_repo(repository: str) -> str:
    if not HF_REPO.fullmatch(repository):
        raise ValueError(f"'{repository}' is not 'owner/repo'")
    return repository


def _short_commit(commit: str) -> str:
    if not _SHORT_COMMIT.fullmatch(commit):
        raise ValueError(f"'{commit}' is not a commit id (7 to 40 lowercase hex)")
    return commit


ORIGIN = Record(
    Origin,
    (
        text("repository", _owner_repo, keep=True),
        text("commit", _short_commit, keep=True),
        text("path", UpstreamPath),
        strings("stated_in", None, "must be an array of strings"),
    ),
)


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


def _against(against: str) -> str:
    against = against or "upstream"
    if against not in HAND_DIFF_AGAINST:
        raise ValueError(f"unknown value '{against}' (upstream, overlay or new)")
    return against


def _patches_named(e: Entry) -> None:
    for j, name in enumerate(e.values["patches"]):
        if name not in e.ctx.names("patches"):
            e.problem(("patches", j), f"no patch named '{name}'", "name a [[patches]] entry or remove it")


HAND_DIFF = Record(
    HandDiff,
    (
        text("file", RepoPath, required=True),
        text("sha256", Sha256, required=True),
        strings("patches", None, "must be an array of patch names", always=True),
        text("against", _against, default="upstream"),
    ),
    rules=(_patches_named,),
)


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
    build: RepoPath | None = None  # the Dockerfile whose image build copies it in (None: a mount delivers it)
    accepted: Accepted | None = None  # committed broken by a rebase (--accept-broken)

    @property
    def committed(self) -> bool:
        return self.file is not None


def _patch_kind(kind: str) -> PatchKind:
    try:
        return PatchKind(kind)
    except ValueError:
        raise ValueError(f"unknown kind '{kind}' (overlay, module or transformer)") from None


def _overlay_parts(e: Entry) -> None:
    """An overlay has a base and a diff (unless imported with an origin); a module has no base."""
    kind, t = e.values["kind"], e.t
    if kind is PatchKind.OVERLAY and not isinstance(t.get("origin"), dict):
        if "base" not in t:
            e.problem((), "an overlay needs [base]: the upstream file it replaces", "see docs/lockfile.md")
        if "diff" not in t:
            e.problem((), "an overlay needs [diff]: its diff against the base", "run `patchkit diff --write`")
    elif kind is PatchKind.MODULE and "base" in t:
        e.problem(("base",), "a module is a new file and has no upstream base", "use kind = 'overlay'")


def _committed(e: Entry) -> None:
    """A module or transformer is a committed file without a diff; an overlay is committed, diff-only or both."""
    kind, t = e.values["kind"], e.t
    if kind is not None and kind is not PatchKind.OVERLAY:
        if "file" not in t:
            e.problem((), f"a {kind.value} is committed: set 'file' to its path under patches/")
        if "diff" in t:
            e.problem(("diff",), f"a {kind.value} has no diff against upstream; remove [diff]")
    elif "file" not in t and "diff" not in t:
        e.problem((), "needs 'file' (committed) or [diff] (diff-only)")


def _unique_patch_name(e: Entry) -> None:
    """Two patches never share a name (a patch that does not load is compared once it does)."""
    if not e.complete:
        return
    name, seen = e.values["name"], e.ctx.seen.setdefault("patches", {})
    if name in seen:
        also = f"also patches[{seen[name]}]"
        e.problem(("name",), f"duplicate patch name '{name}' ({also})", "give each patch its own name")
    seen[name] = e.path[-1]


PATCH = Record(
    Patch,
    (
        text("name", _named("patch name"), required=True),
        text("kind", _patch_kind, required=True, write=attrgetter("value")),
        text("file", RepoPath),
        text("sha256", Sha256, required=True),
        text("target", ContainerPath, required=True),
        text("reason"),
        strings("refs", Reference, "must be an array of strings, got {got}"),
        text("drop_when"),
        text("build", RepoPath),
        table("base", BASE),
        table("diff", DIFF_PIN),
        table("origin", ORIGIN),
        table("accepted", ACCEPTED),
    ),
    rules=(_overlay_parts, _committed, _unique_patch_name),
)


@dataclass(frozen=True)
class Artifact:
    """A pinned file: a tuning table, the entrypoint, a proxy config, compose.yaml."""

    name: str
    file: RepoPath
    sha256: Sha256
    target: ContainerPath | None = None
    note: str | None = None


def _unique_in(section: str) -> Rule:
    """The rule that two entries of ``section`` never share a name."""

    def rule(e: Entry) -> None:
        name, seen = e.values["name"], e.ctx.seen.setdefault(section, {})
        if name is not None and name in seen:
            e.problem(("name",), f"duplicate {section} name '{name}'")
        if name is not None:
            seen[name] = e.path[-1]

    return rule


def _artifacts(section: str) -> Record:
    """The table of a ``[[tuning]]`` or ``[[artifacts]]`` entry: only a tuning table must say its target."""
    return Record(
        Artifact,
        (
            text("name", _named(f"{section} name"), required=True),
            text("file", RepoPath, required=True),
            text("sha256", Sha256, required=True),
            text("target", ContainerPath, required=section == "tuning"),
            text("note"),
        ),
        rules=(_unique_in(section),),
    )


TUNING = _artifacts("tuning")
ARTIFACT = _artifacts("artifacts")

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


REF_STATE = Record(
    RefState,
    (
        text("state", _one_of(REF_STATES, "state", "open, closed, merged or unknown"), required=True, keep=True),
        text("kind", _one_of(REF_KINDS, "kind", "issue, pull or commit"), keep=True),
        text("title"),
        text("checked_at"),
        text("merged_at"),
        text("merge_commit", Revision),
        text("head_commit", Revision),
        text("etag"),
    ),
    key=Key("ref", Reference),
)


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


SIGNING = Record(
    Signing,
    (
        text("allowed_signers", RepoPath, required=True),
        text("identity"),
        strings(
            "files", RepoPath, "must be a non-empty array of repository paths", default=Signing.files, nonempty=True
        ),
    ),
)


@dataclass(frozen=True)
class Deployment:
    """The ``[deployment]`` table; its ``name`` is ``Lockfile.name``."""

    name: str | None = None


DEPLOYMENT = Record(Deployment, (text("name", _named("deployment name")),))


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
        """The patch named ``name`` (the first, were there two), found in a table built at the first call."""
        return self._patches_by_name.get(name)

    @functools.cached_property
    def _patches_by_name(self) -> dict[str, Patch]:
        return by_name(self.patches)

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


def _schema(t: Raw, path: FieldPath, ctx: Context) -> int | None:
    """The schema version, or None (after a problem): the loader reads nothing else without it."""
    schema = t.get("schema")
    if schema is None:
        ctx.r.problem(path, "missing 'schema'", f"add 'schema = {SCHEMA_VERSION}' at the top")
        return None
    if schema.__class__ is not int:
        ctx.r.problem((*path, "schema"), f"must be an integer, got {toml_type(schema)}")
        return None
    if schema != SCHEMA_VERSION:
        ctx.r.problem(
            (*path, "schema"),
            f"unknown schema version {schema}; this patchkit reads version {SCHEMA_VERSION}",
            "upgrade patchkit" if schema > SCHEMA_VERSION else "set schema = 1",
        )
        return None
    return int(schema)


_DEPLOYMENT = table("deployment", DEPLOYMENT)


def _deployment(t: Raw, path: FieldPath, ctx: Context) -> str | None:
    found = _DEPLOYMENT.read(t, path, ctx)
    return found.name if isinstance(found, Deployment) else None  # the table's record, or None


def _aot(key: str) -> str:
    return f"must be an array of tables ([[{key}]]), got {{got}}"


# The document, in written order; each section is read after those its rules refer to.
LOCKFILE = Record(
    Lockfile,
    (
        section("schema", _schema, int, default=SCHEMA_VERSION, always=True),
        section("deployment", _deployment, lambda name: DEPLOYMENT.write(Deployment(name)), attr="name", default=None),
        keyed("images", IMAGE),
        table("model", MODEL),
        keyed("upstreams", UPSTREAM),
        tables("patches", PATCH, _aot("patches")),
        keyed(
            "series",
            SERIES,
            message="must be a table of series ([series.NAME])",
            entry="must be a table ([series.NAME])",
        ),
        tables("tuning", TUNING, _aot("tuning")),
        tables("artifacts", ARTIFACT, _aot("artifacts")),
        tables("diffs", HAND_DIFF, _aot("diffs")),
        keyed("refs", REF_STATE),
        table("signing", SIGNING),
        keyed("derived", DERIVED),
    ),
)


def inferred_source(u: Upstream) -> str:
    """The source the loader infers when ``source`` is absent (so dumps can leave it out)."""
    if u.wheel is not None:
        return "wheel"
    if u.dir is not None:
        return "dir"
    return "image" if u.image is not None else "git"
