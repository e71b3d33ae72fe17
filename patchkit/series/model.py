"""The lockfile's patch series: ``[series.NAME]`` and its ``[[series.NAME.patches]]``.

A series is one upstream's ordered list of patch files under
``patches/<name>/``, each pinned by sha256, with the upstream commit (or
version) the series applies to. A profile selects patches by name; a patch
with no ``profiles`` belongs to every profile. This module is part of the
lockfile's vocabulary: it imports only values, and reads the TOML through
the small :class:`Reader` protocol the lockfile loader implements, so the
loader can call it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from patchkit.values import ContainerPath, Reference, RepoPath, Revision, Sha256, check_name

T = TypeVar("T")
FieldPath = tuple[str | int, ...]

#: The fields of ``[series.NAME]`` and of each ``[[series.NAME.patches]]``, in canonical order.
SERIES_FIELDS = ("upstream", "commit", "version", "target", "strip", "series_file", "series_sha256", "patches")
PATCH_FIELDS = ("name", "file", "sha256", "profiles", "refs", "reason", "drop_when")


@dataclass(frozen=True)
class SeriesPatch:
    """One patch file of a series, pinned by sha256."""

    name: str
    file: RepoPath
    sha256: Sha256
    profiles: tuple[str, ...] = ()
    refs: tuple[Reference, ...] = ()
    reason: str | None = None
    drop_when: str | None = None

    def in_profile(self, profile: str | None) -> bool:
        """Whether ``profile`` selects this patch (``None``: every patch; no ``profiles``: every profile)."""
        return profile is None or not self.profiles or profile in self.profiles


@dataclass(frozen=True)
class Series:
    """One upstream's patch queue, in the order it applies.

    ``commit`` (a git upstream) or ``version`` (a wheel) is what the series
    applies to; ``target`` is where that tree is inside the image (what a
    Containerfile copies the produced files under); ``strip`` is the
    ``-p`` level of the patch paths (1 for ``a/``/``b/`` prefixes).
    ``series_file`` is a quilt-style ``series`` file listing the order,
    pinned like every file.
    """

    name: str
    upstream: str
    patches: tuple[SeriesPatch, ...] = ()
    commit: Revision | None = None
    version: str | None = None
    target: ContainerPath | None = None
    strip: int = 1
    series_file: RepoPath | None = None
    series_sha256: Sha256 | None = None

    def selected(self, profile: str | None) -> tuple[SeriesPatch, ...]:
        """The patches ``profile`` applies, in series order."""
        return tuple(p for p in self.patches if p.in_profile(profile))

    @property
    def profiles(self) -> tuple[str, ...]:
        """Every profile a patch of the series names, sorted."""
        return tuple(sorted({name for p in self.patches for name in p.profiles}))

    def patch(self, name: str) -> SeriesPatch | None:
        return next((p for p in self.patches if p.name == name), None)


def series_pins(series: Iterable[Series]) -> list[tuple[FieldPath, RepoPath, Sha256, str]]:
    """Every repository file the series pin: (field path of its sha256, path, sha256, owner)."""
    out: list[tuple[FieldPath, RepoPath, Sha256, str]] = []
    for s in series:
        if s.series_file is not None and s.series_sha256 is not None:
            out.append(
                (("series", s.name, "series_sha256"), s.series_file, s.series_sha256, f"series file of '{s.name}'")
            )
        for i, p in enumerate(s.patches):
            out.append(
                (("series", s.name, "patches", i, "sha256"), p.file, p.sha256, f"patch '{p.name}' of series '{s.name}'")
            )
    return out


def parse_series_file(data: bytes) -> list[str]:
    """The patch file names a quilt ``series`` file lists, in order.

    quilt's format: one patch per line, ``#`` starts a comment, blank lines
    are skipped, and anything after the name (``-p1``) is an option.
    """
    names = []
    for raw in data.decode("utf-8", "surrogateescape").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            names.append(line.split()[0])
    return names


class Reader(Protocol):
    """What :func:`read` needs of the lockfile loader (``patchkit.lockfile.tomlpos.FieldReader``)."""

    def problem(self, path: FieldPath, message: str, hint: str | None = None) -> None: ...

    def string(self, data: dict[str, Any], path: FieldPath, key: str, *, required: bool = False) -> str | None: ...

    def typed(
        self,
        data: dict[str, Any],
        path: FieldPath,
        key: str,
        ctor: Callable[[str], T],
        *,
        required: bool = False,
        hint: str | None = None,
    ) -> T | None: ...

    def known(self, data: dict[str, Any], path: FieldPath, allowed: Iterable[str]) -> None: ...


def read(raw: object, r: Reader, upstreams: set[str]) -> tuple[Series, ...]:
    """The ``[series]`` table, every problem reported through ``r`` with its field path."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        r.problem(("series",), "must be a table of series ([series.NAME])")
        return ()
    out = []
    for key, value in raw.items():
        path: FieldPath = ("series", key)
        if not isinstance(value, dict):
            r.problem(path, "must be a table ([series.NAME])")
            continue
        found = _read_one(key, value, path, r, upstreams)
        if found is not None:
            out.append(found)
    return tuple(out)


def _read_one(key: str, t: dict[str, Any], path: FieldPath, r: Reader, upstreams: set[str]) -> Series | None:
    r.known(t, path, SERIES_FIELDS)
    try:
        check_name(key, "series name")
    except ValueError as e:
        r.problem(path, str(e))
        return None
    upstream = r.string(t, path, "upstream") or key
    if upstream not in upstreams:
        r.problem(
            (*path, "upstream"),
            f"no upstream named '{upstream}'",
            f"declare [upstreams.{upstream}] (patchkit upstream add {upstream} …) or set 'upstream'",
        )
    commit = r.typed(t, path, "commit", Revision)
    version = r.string(t, path, "version")
    target = r.typed(t, path, "target", ContainerPath)
    strip = t.get("strip", 1)
    if not isinstance(strip, int) or isinstance(strip, bool) or not 0 <= strip <= 8:
        r.problem((*path, "strip"), f"must be an integer from 0 to 8 (the -p level), got {strip!r}")
        strip = 1
    series_file = r.typed(t, path, "series_file", RepoPath)
    series_sha = r.typed(t, path, "series_sha256", Sha256)
    if (series_file is None) != (series_sha is None):
        r.problem(path, "'series_file' and 'series_sha256' go together", "patchkit lock pins the series file")
    patches = _read_patches(t.get("patches", []), path, r)
    return Series(
        name=key,
        upstream=upstream,
        patches=patches,
        commit=commit,
        version=version,
        target=target,
        strip=strip,
        series_file=series_file,
        series_sha256=series_sha,
    )


def _read_patches(raw: object, path: FieldPath, r: Reader) -> tuple[SeriesPatch, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, dict) for v in raw):
        r.problem((*path, "patches"), "must be an array of tables ([[series.NAME.patches]])")
        return ()
    out: list[SeriesPatch] = []
    seen: dict[str, int] = {}
    for i, t in enumerate(raw):
        p = (*path, "patches", i)
        r.known(t, p, PATCH_FIELDS)
        name = r.typed(t, p, "name", lambda s: check_name(s, "patch name"), required=True)
        file = r.typed(t, p, "file", RepoPath, required=True)
        sha = r.typed(t, p, "sha256", Sha256, required=True)
        profiles = _strings(t, p, "profiles", r, lambda s: check_name(s, "profile name"))
        refs = _strings(t, p, "refs", r, Reference)
        if name is not None and name in seen:
            r.problem((*p, "name"), f"duplicate patch name '{name}' (also patches[{seen[name]}])")
        if name is None or file is None or sha is None:
            continue
        seen[name] = i
        out.append(
            SeriesPatch(
                name=name,
                file=file,
                sha256=sha,
                profiles=tuple(profiles),
                refs=tuple(refs),
                reason=r.string(t, p, "reason"),
                drop_when=r.string(t, p, "drop_when"),
            )
        )
    return tuple(out)


def _strings(t: dict[str, Any], path: FieldPath, key: str, r: Reader, ctor: Callable[[str], T]) -> list[T]:
    raw = t.get(key, [])
    if not isinstance(raw, list):
        r.problem((*path, key), "must be an array of strings")
        return []
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(ctor(item if isinstance(item, str) else repr(item)))
        except ValueError as e:
            r.problem((*path, key, i), str(e))
    return out


def dump(series: Iterable[Series], table: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The ``[series]`` table in canonical form; ``table`` is the lockfile writer's field filter."""
    out = {}
    for s in sorted(series, key=lambda s: s.name):
        t = table(
            upstream=None if s.upstream == s.name else s.upstream,
            commit=s.commit,
            version=s.version,
            target=s.target,
            strip=None if s.strip == 1 else s.strip,
            series_file=s.series_file,
            series_sha256=s.series_sha256,
        )
        if s.patches:
            t["patches"] = [
                table(
                    name=p.name,
                    file=p.file,
                    sha256=p.sha256,
                    profiles=list(p.profiles) or None,
                    refs=[str(x) for x in p.refs] or None,
                    reason=p.reason,
                    drop_when=p.drop_when,
                )
                for p in s.patches
            ]
        out[s.name] = t
    return out


def repin(
    series: Iterable[Series], digest: Callable[[RepoPath, str], str]
) -> tuple[tuple[Series, ...], list[tuple[str, str, str]]]:
    """The series with every file re-pinned to ``digest(path, owner)``; and each change as (field, old, new)."""
    import dataclasses

    changes: list[tuple[str, str, str]] = []
    out = []
    for s in series:
        patches = []
        for p in s.patches:
            got = digest(p.file, f"patch '{p.name}' of series '{s.name}'")
            if got != p.sha256.hex:
                changes.append((f"series.{s.name}.patches[{p.name}].sha256 ({p.file})", p.sha256.hex, got))
                p = dataclasses.replace(p, sha256=Sha256(got))
            patches.append(p)
        s = dataclasses.replace(s, patches=tuple(patches))
        if s.series_file is not None and s.series_sha256 is not None:
            got = digest(s.series_file, f"series file of '{s.name}'")
            if got != s.series_sha256.hex:
                changes.append((f"series.{s.name}.series_sha256 ({s.series_file})", s.series_sha256.hex, got))
                s = dataclasses.replace(s, series_sha256=Sha256(got))
        out.append(s)
    return tuple(out), changes


def series_files(series: Iterable[Series]) -> list[tuple[str, RepoPath, Sha256]]:
    """The pins of :func:`series_pins` as ``Lockfile.files`` lists them: (field text, path, sha256)."""
    out = []
    for path, file, sha, _ in series_pins(series):
        text = ""
        for part in path:
            text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + part
        out.append((text, file, sha))
    return out
