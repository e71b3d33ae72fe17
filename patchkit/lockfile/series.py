"""The lockfile's patch series: ``[series.NAME]`` and its ``[[series.NAME.patches]]``.

A series is one upstream's ordered list of patch files under
``patches/<name>/``, each pinned by sha256, with the upstream commit (or
version) the series applies to. A profile selects patches by name; a patch
with no ``profiles`` belongs to every profile. This module is part of the
lockfile's vocabulary: each record is followed by its field table
(``patchkit.lockfile.fields``), which the lockfile reader and writer follow
as they do the other records' tables in ``lockfile/model.py``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from patchkit.core.values import ContainerPath, Reference, RepoPath, Revision, Sha256, check_name
from patchkit.lockfile.accepted import ACCEPTED, Accepted
from patchkit.lockfile.fields import Entry, Key, Record, by_name, integer, strings, table, tables, text
from patchkit.lockfile.verified import VERIFIED, Verified, check_pin

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True)
class SeriesPatch:
    """One patch file of a series, pinned by sha256.

    ``accepted`` is what ``rebase --series --accept-broken`` committed broken
    (the reason and each blocking problem), noted by ``check`` while it holds.
    """

    name: str
    file: RepoPath
    sha256: Sha256
    profiles: tuple[str, ...] = ()
    refs: tuple[Reference, ...] = ()
    reason: str | None = None
    drop_when: str | None = None
    accepted: Accepted | None = None

    def in_profile(self, profile: str | None) -> bool:
        """Whether ``profile`` selects this patch (``None``: every patch; no ``profiles``: every profile)."""
        return profile is None or not self.profiles or profile in self.profiles


def _unique_in_series(e: Entry) -> None:
    """Two patches of one series never share a name."""
    name, seen = e.values["name"], e.ctx.seen.setdefault(f"series.{e.path[1]}", {})
    if name is not None and name in seen:
        e.problem(("name",), f"duplicate patch name '{name}' (also patches[{seen[name]}])")
    if e.complete:
        seen[name] = e.path[-1]


SERIES_PATCH = Record(
    SeriesPatch,
    (
        text("name", lambda s: check_name(s, "patch name"), required=True),
        text("file", RepoPath, required=True),
        text("sha256", Sha256, required=True),
        strings("profiles", lambda s: check_name(s, "profile name"), "must be an array of strings"),
        strings("refs", Reference, "must be an array of strings"),
        text("reason"),
        text("drop_when"),
        table("accepted", ACCEPTED),
    ),
    rules=(_unique_in_series,),
)


@dataclass(frozen=True)
class Series:
    """One upstream's patch queue, in the order it applies.

    ``commit`` (a git upstream) or ``version`` (a wheel) is what the series
    applies to; ``target`` is where that tree is inside the image (what a
    Containerfile copies the produced files under); ``strip`` is the
    ``-p`` level of the patch paths (1 for ``a/``/``b/`` prefixes).
    ``series_file`` is a quilt-style ``series`` file listing the order,
    pinned like every file. ``verified`` says for which image, and how, the
    series' base was last established (``lockfile.verified``).
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
    verified: Verified | None = None

    def selected(self, profile: str | None) -> tuple[SeriesPatch, ...]:
        """The patches ``profile`` applies, in series order."""
        return tuple(p for p in self.patches if p.in_profile(profile))

    @property
    def profiles(self) -> tuple[str, ...]:
        """Every profile a patch of the series names, sorted."""
        return tuple(sorted({name for p in self.patches for name in p.profiles}))

    def patch(self, name: str) -> SeriesPatch | None:
        """The patch named ``name`` (the first, were there two), found in a table built at the first call."""
        return self._patches_by_name.get(name)

    @functools.cached_property
    def _patches_by_name(self) -> dict[str, SeriesPatch]:
        return by_name(self.patches)


def _upstream(e: Entry) -> None:
    """A series applies to the upstream of its own name unless ``upstream`` names another; it must be declared."""
    upstream = e.values["upstream"] = e.values["upstream"] or e.path[-1]
    if upstream not in e.ctx.names("upstreams"):
        e.problem(
            ("upstream",),
            f"no upstream named '{upstream}'",
            f"declare [upstreams.{upstream}] (patchkit upstream add {upstream} …) or set 'upstream'",
        )
    check_pin(e, str(upstream))


def _pinned_series_file(e: Entry) -> None:
    if (e.values["series_file"] is None) != (e.values["series_sha256"] is None):
        e.problem((), "'series_file' and 'series_sha256' go together", "patchkit lock pins the series file")


SERIES = Record(
    Series,
    (
        # Written only when it is not the series' own name.
        dataclasses.replace(text("upstream"), get=lambda s: None if s.upstream == s.name else s.upstream),
        text("commit", Revision),
        text("version"),
        text("target", ContainerPath),
        integer("strip", lambda n: 0 <= n <= 8, "must be an integer from 0 to 8 (the -p level), got {value!r}", 1),
        text("series_file", RepoPath),
        text("series_sha256", Sha256),
        table("verified", VERIFIED),
        tables("patches", SERIES_PATCH, "must be an array of tables ([[series.NAME.patches]])"),
    ),
    key=Key("name", lambda s: check_name(s, "series name")),
    rules=(_upstream, _pinned_series_file),
)


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
