"""The one place that knows the kinds of upstream source: each kind's adapter, registered by name.

A ``SourceKind`` owns what differs between kinds: opening the adapter that
serves an upstream as the lockfile records it (``open``), reading it at its pin
(``snapshot``), a ``--source KIND:ARG`` option (``parse``) and the lockfile
fields a new pin writes (``repin``). ``KINDS`` registers them by the name the
lockfile's ``source`` gives them; the lockfile's side of a kind (its fields and
what its pin means) is its ``Upstream`` subclass in ``lockfile.model``. A new
kind is an adapter module, a ``SourceKind`` here and an ``Upstream`` subclass.
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from patchkit.core.values import Digest, Revision, Sha256
from patchkit.errors import BadInput
from patchkit.lockfile.model import (
    DirUpstream,
    GitUpstream,
    ImageUpstream,
    Upstream,
    WheelUpstream,
)
from patchkit.sources.context import Context
from patchkit.sources.interface import Pin, Snapshot, UpstreamSource


class SourceKind(ABC):
    """What one kind of upstream source does differently: open, read at its pin, parse, repin."""

    upstream: ClassVar[type[Upstream]]
    # Whether a ref the --source option implies (git:URL@REV, wheel:P==V) must agree with --onto.
    onto_must_agree: ClassVar[bool] = False

    @abstractmethod
    def open(self, up: Upstream, ctx: Context, repo_root: Path) -> UpstreamSource:
        """The adapter for an upstream as the lockfile records it."""

    def snapshot(self, source: UpstreamSource, up: Upstream, ref: str | None) -> Snapshot:
        """The snapshot at ``ref`` (default: the upstream's own pin), verified against the pin where known."""
        pinned = ref or up.pinned_ref
        if pinned is None:
            raise BadInput(f"upstream '{up.name}': no {up.pin_noun} pinned")
        return source.snapshot(pinned)

    @abstractmethod
    def parse(self, arg: str, up: Upstream, ctx: Context, repo_root: Path) -> tuple[UpstreamSource, str | None] | None:
        """A ``--source KIND:ARG`` option's adapter and the ref it implies; None when ``arg`` is not one."""

    @abstractmethod
    def repin(self, up: Upstream, pin: Pin) -> Upstream:
        """``up`` as this kind of source pinned at ``pin`` records it (a rebase may switch kinds)."""

    def base_fields(self, pin: Pin) -> tuple[Revision | None, str | None]:
        """The ``commit`` and ``version`` a base read at ``pin`` records."""
        del pin
        return None, None


def as_kind(up: Upstream, kind: type[Upstream], **changes: object) -> Upstream:
    """``up`` as an upstream of ``kind``, every field kept unless ``changes`` sets it."""
    values = {f.name: getattr(up, f.name) for f in dataclasses.fields(up)}
    return kind(**{**values, **changes})


class GitKind(SourceKind):
    upstream = GitUpstream
    onto_must_agree = True

    def open(self, up: Upstream, ctx: Context, repo_root: Path) -> UpstreamSource:
        from patchkit.sources.git import GitSource

        if up.git is None:
            raise BadInput(
                f"upstream '{up.name}' has no source: its table names no git URL, wheel or directory",
                "register one: patchkit upstream add NAME (--git URL --commit SHA | --wheel P==V | --dir PATH)",
            )
        return GitSource(up.git, ctx.cache_dir, progress=ctx.progress)

    def snapshot(self, source: UpstreamSource, up: Upstream, ref: str | None) -> Snapshot:
        commit = ref or up.pinned_ref
        if commit is None:
            raise BadInput(f"upstream '{up.name}': no commit pinned", "pin one: patchkit upstream add")
        return source.snapshot(commit)

    def parse(self, arg: str, up: Upstream, ctx: Context, repo_root: Path) -> tuple[UpstreamSource, str | None] | None:
        from patchkit.sources.git import GitSource

        if not arg:
            return None
        url, rev = _url_and_ref(arg)
        return GitSource(url, ctx.cache_dir, progress=ctx.progress), rev

    def base_fields(self, pin: Pin) -> tuple[Revision | None, str | None]:
        return (Revision(pin.commit) if pin.commit else None), None

    def repin(self, up: Upstream, pin: Pin) -> Upstream:
        return as_kind(
            up, GitUpstream, git=pin.path or up.git, commit=Revision(pin.commit) if pin.commit else None, version=None
        )


class WheelKind(SourceKind):
    upstream = WheelUpstream
    onto_must_agree = True

    def open(self, up: Upstream, ctx: Context, repo_root: Path) -> UpstreamSource:
        from patchkit.sources.wheel import WheelSource

        if up.wheel_project is None:
            raise BadInput(f"upstream '{up.name}': a wheel upstream needs 'wheel = \"project==version\"'")
        return WheelSource(up.wheel_project, ctx.cache_dir, shows_progress=ctx.shows_progress)

    def snapshot(self, source: UpstreamSource, up: Upstream, ref: str | None) -> Snapshot:
        from patchkit.sources.wheel import WheelSource

        version = ref or up.wheel_version
        if version is None:
            raise BadInput(f"upstream '{up.name}': no wheel version pinned")
        pinned = str(up.wheel_sha256) if up.wheel_sha256 and version == up.wheel_version else None
        if isinstance(source, WheelSource):
            return source.snapshot(version, sha256=pinned)
        return source.snapshot(version)

    def parse(self, arg: str, up: Upstream, ctx: Context, repo_root: Path) -> tuple[UpstreamSource, str | None] | None:
        from patchkit.sources.wheel import WheelSource

        if "==" not in arg:
            return None
        project, version = arg.split("==", 1)
        return WheelSource(project, ctx.cache_dir, shows_progress=ctx.shows_progress), version

    def base_fields(self, pin: Pin) -> tuple[Revision | None, str | None]:
        return None, pin.version

    def repin(self, up: Upstream, pin: Pin) -> Upstream:
        # The project as the wheel names it, for an upstream switching to a wheel source.
        project = up.wheel_project or (pin.filename or "").split("-", 1)[0]
        return as_kind(
            up,
            WheelUpstream,
            wheel=f"{project}=={pin.version}",
            wheel_sha256=Sha256(pin.sha256) if pin.sha256 else None,
            wheel_file=pin.filename,
            version=pin.version,
        )


class DirKind(SourceKind):
    upstream = DirUpstream

    def open(self, up: Upstream, ctx: Context, repo_root: Path) -> UpstreamSource:
        from patchkit.sources.directory import DirSource

        if up.dir is None:
            raise BadInput(f"upstream '{up.name}': a dir upstream needs 'dir'")
        return DirSource(_dir(up.dir, repo_root))

    def snapshot(self, source: UpstreamSource, up: Upstream, ref: str | None) -> Snapshot:
        return source.snapshot(ref or "")

    def parse(self, arg: str, up: Upstream, ctx: Context, repo_root: Path) -> tuple[UpstreamSource, str | None] | None:
        from patchkit.sources.directory import DirSource

        return (DirSource(_dir(arg, repo_root)), arg) if arg else None

    def repin(self, up: Upstream, pin: Pin) -> Upstream:
        return as_kind(up, DirUpstream, dir=pin.path, dir_sha256=Sha256(pin.sha256) if pin.sha256 else None)


class ImageKind(SourceKind):
    upstream = ImageUpstream

    def open(self, up: Upstream, ctx: Context, repo_root: Path) -> UpstreamSource:
        from patchkit.sources.image import ImageSource

        if up.image is None or up.prefix is None:
            raise BadInput(f"upstream '{up.name}': an image upstream needs 'image' and 'prefix'")
        return ImageSource(up.image, str(up.prefix), platform=up.platform or "linux/amd64", context=ctx)

    def snapshot(self, source: UpstreamSource, up: Upstream, ref: str | None) -> Snapshot:
        digest = ref or up.pinned_ref
        if digest is None:
            raise BadInput(f"upstream '{up.name}': no image digest pinned")
        return source.snapshot(digest)

    def parse(self, arg: str, up: Upstream, ctx: Context, repo_root: Path) -> tuple[UpstreamSource, str | None] | None:
        from patchkit.oci.ref import ImageRef
        from patchkit.sources.image import ImageSource

        if not arg:
            return None
        if up.prefix is None:
            raise BadInput(f"--source image: upstream '{up.name}' has no 'prefix' (where its files are in the image)")
        ref = ImageRef.parse(arg)
        return ImageSource(
            ref.display_repository, str(up.prefix), platform=up.platform or "linux/amd64", context=ctx
        ), arg

    def base_fields(self, pin: Pin) -> tuple[Revision | None, str | None]:
        return None, pin.version

    def repin(self, up: Upstream, pin: Pin) -> Upstream:
        repository = (pin.path or "").split("@", 1)[0] or up.image
        return as_kind(
            up,
            ImageUpstream,
            image=repository,
            image_digest=Digest(f"sha256:{pin.sha256}") if pin.sha256 else up.image_digest,
            image_tag=None,
            version=pin.version,
        )


# Every kind of upstream source, by its name in the lockfile and in --source KIND:ARG.
KINDS: dict[str, SourceKind] = {"git": GitKind(), "wheel": WheelKind(), "dir": DirKind(), "image": ImageKind()}


def kind_of(up: Upstream) -> SourceKind:
    """The kind of source that serves ``up``."""
    return KINDS[up.source]


def open_source(up: Upstream, ctx: Context, repo_root: Path) -> UpstreamSource:
    """The adapter for an upstream as the lockfile records it."""
    return kind_of(up).open(up, ctx, repo_root)


def pinned_snapshot(source: UpstreamSource, up: Upstream, ref: str | None = None) -> Snapshot:
    """A snapshot at ``ref`` (default: the upstream's own pin), verified against the pin where known."""
    return kind_of(up).snapshot(source, up, ref)


def repinned(up: Upstream, pin: Pin) -> Upstream:
    """``up`` pinned at ``pin``, as the kind of source that made ``pin`` records it."""
    return KINDS[pin.kind].repin(up, pin)


def parse_source(text: str, up: Upstream, ctx: Context, repo_root: Path) -> tuple[UpstreamSource, str | None]:
    """A --source option (``git``, ``git:URL[@REV]``, ``dir:PATH``, ``wheel:P==V``) and the ref it implies."""
    if text == "git":
        if up.git is None:
            raise BadInput(f"--source git: upstream '{up.name}' has no git URL", "set 'git' in its table")
        from patchkit.sources.git import GitSource

        return GitSource(up.git, ctx.cache_dir, progress=ctx.progress), None
    if _GIT_URL.match(text):
        text = f"git:{text}"  # a URL alone is a git repository, as git clone reads it
    name, _, arg = text.partition(":")
    kind = KINDS.get(name)
    parsed = kind.parse(arg, up, ctx, repo_root) if kind is not None else None
    if parsed is None:
        raise BadInput(f"--source {text!r}: expected git, git:URL[@REV], dir:PATH, wheel:PROJECT==VERSION or image:REF")
    return parsed


_GIT_URL = re.compile(r"(?:https?|ssh|git|file)://|[\w.-]+@[\w.-]+:")


def _url_and_ref(text: str) -> tuple[str, str | None]:
    """``URL@REV`` split at its last ``@`` when what follows is a revision, not part of the URL.

    ``git@github.com:o/r`` is a URL (what follows its ``@`` has a ``:``);
    ``https://github.com/o/r@v0.28.0`` is a URL and a tag; a branch with a
    ``/`` is given with --onto instead.
    """
    url, at, ref = text.rpartition("@")
    if at and url and ref and "/" not in ref and ":" not in ref:
        return url, ref
    return text, None


def _dir(text: str, repo_root: Path) -> Path:
    path = Path(text)
    return path if path.is_absolute() else (repo_root / path)
