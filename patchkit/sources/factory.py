"""Choosing the adapter that serves an upstream, from the lockfile or a --source option."""

from __future__ import annotations

import re
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.lockfile.model import Upstream
from patchkit.sources.interface import Snapshot, UpstreamSource


def open_source(up: Upstream, cache: Path, repo_root: Path) -> UpstreamSource:
    """The adapter for an upstream as the lockfile records it."""
    if up.source == "wheel":
        from patchkit.sources.wheel import WheelSource

        if up.wheel_project is None:
            raise BadInput(f"upstream '{up.name}': a wheel upstream needs 'wheel = \"project==version\"'")
        return WheelSource(up.wheel_project, cache)
    if up.source == "dir":
        from patchkit.sources.directory import DirSource

        if up.dir is None:
            raise BadInput(f"upstream '{up.name}': a dir upstream needs 'dir'")
        return DirSource(_dir(up.dir, repo_root))
    if up.source == "image":
        from patchkit.sources.image import ImageSource

        if up.image is None or up.prefix is None:
            raise BadInput(f"upstream '{up.name}': an image upstream needs 'image' and 'prefix'")
        return ImageSource(up.image, str(up.prefix), platform=up.platform or "linux/amd64")
    from patchkit.sources.git import GitSource

    if up.git is None:
        raise BadInput(
            f"upstream '{up.name}' has no source: its table names no git URL, wheel or directory",
            "register one: patchkit upstream add NAME (--git URL --commit SHA | --wheel P==V | --dir PATH)",
        )
    return GitSource(up.git, cache)


def parse_source(text: str, up: Upstream, cache: Path, repo_root: Path) -> tuple[UpstreamSource, str | None]:
    """A --source option (``git``, ``git:URL[@REV]``, ``dir:PATH``, ``wheel:P==V``) and the ref it implies."""
    if text == "git":
        if up.git is None:
            raise BadInput(f"--source git: upstream '{up.name}' has no git URL", "set 'git' in its table")
        from patchkit.sources.git import GitSource

        return GitSource(up.git, cache), None
    if _GIT_URL.match(text):
        text = f"git:{text}"  # a URL alone is a git repository, as git clone reads it
    kind, _, arg = text.partition(":")
    if kind == "git" and arg:
        from patchkit.sources.git import GitSource

        url, rev = _url_and_ref(arg)
        return GitSource(url, cache), rev
    if kind == "image" and arg:
        from patchkit.images.registry import ImageRef
        from patchkit.sources.image import ImageSource

        if up.prefix is None:
            raise BadInput(f"--source image: upstream '{up.name}' has no 'prefix' (where its files are in the image)")
        ref = ImageRef.parse(arg)
        return ImageSource(ref.display_repository, str(up.prefix), platform=up.platform or "linux/amd64"), arg
    if kind == "dir" and arg:
        from patchkit.sources.directory import DirSource

        return DirSource(_dir(arg, repo_root)), arg
    if kind == "wheel" and "==" in arg:
        from patchkit.sources.wheel import WheelSource

        project, version = arg.split("==", 1)
        return WheelSource(project, cache), version
    raise BadInput(f"--source {text!r}: expected git, git:URL[@REV], dir:PATH, wheel:PROJECT==VERSION or image:REF")


def pinned_snapshot(source: UpstreamSource, up: Upstream, ref: str | None = None) -> Snapshot:
    """A snapshot at ``ref`` (default: the upstream's own pin), verified against the pin where known."""
    if up.source == "wheel":
        from patchkit.sources.wheel import WheelSource

        version = ref or up.wheel_version
        if version is None:
            raise BadInput(f"upstream '{up.name}': no wheel version pinned")
        pinned = str(up.wheel_sha256) if up.wheel_sha256 and version == up.wheel_version else None
        if isinstance(source, WheelSource):
            return source.snapshot(version, sha256=pinned)
        return source.snapshot(version)
    if up.source == "dir":
        return source.snapshot(ref or "")
    if up.source == "image":
        digest = ref or (str(up.image_digest) if up.image_digest else None)
        if digest is None:
            raise BadInput(f"upstream '{up.name}': no image digest pinned")
        return source.snapshot(digest)
    commit = ref or (str(up.commit) if up.commit else None)
    if commit is None:
        raise BadInput(f"upstream '{up.name}': no commit pinned", "pin one: patchkit upstream add")
    return source.snapshot(commit)


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
