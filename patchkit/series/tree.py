"""The edges of a series: patch files read from the repository, trees read from disk, applied atomically.

``load`` reads a profile's patch files, each checked against its sha256 pin
and parsed. ``apply_to_dir`` applies them to a directory (an upstream
checkout, or an installed package's ``site-packages``) as one transaction
(:func:`patchkit.store.repo.write_all`: every file staged beside its target, then
renamed in under a journal that the next apply finishes or undoes after a
crash), together with the record of what was applied,
``.patchkit/series/<name>.json`` in that directory. Nothing is written
unless every patch applies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from patchkit.core.hashing import require_pin, sha256_bytes
from patchkit.errors import BadInput, Refused
from patchkit.lockfile.series import Series
from patchkit.series.apply import Applied, Item, Reader, apply_series
from patchkit.series.parse import parse_patch
from patchkit.store.repo import Repo, contained, recover, write_all

RECORD_DIR = ".patchkit/series"


def record_path(name: str) -> str:
    """Where in a tree the record of series ``name`` is written."""
    return f"{RECORD_DIR}/{name}.json"


def find_series(series: Iterable[Series], name: str | None) -> Series:
    """The series called ``name``, or the only one when ``name`` is ``None``."""
    found = list(series)
    if name is None:
        if len(found) == 1:
            return found[0]
        names = ", ".join(s.name for s in found) or "none"
        raise BadInput(f"the lockfile has {len(found)} series ({names}); name one with --series")
    for s in found:
        if s.name == name:
            return s
    raise BadInput(f"no series named '{name}' in the lockfile", "list them in lockfile.toml under [series.NAME]")


def load(repo: Repo, series: Series, profile: str | None) -> list[Item]:
    """The patches ``profile`` selects, read, checked against their pins and parsed, in order."""
    if profile is not None and series.profiles and profile not in series.profiles:
        raise BadInput(
            f"series '{series.name}' has no profile '{profile}' (profiles: {', '.join(series.profiles)})",
            "name one of them, or leave --profile out to apply every patch",
        )
    items = []
    for p in series.selected(profile):
        path = repo.check_inside(p.file)
        data = path.read_bytes()
        require_pin(
            data,
            p.sha256.hex,
            lambda _: f"{p.file}: patch '{p.name}' does not match its pin in lockfile.toml",  # noqa: B023 - called at once
            f"if the change is intended: patchkit lock; if not: git checkout -- {p.file}",
        )
        items.append(Item(p.name, str(p.file), parse_patch(data, str(p.file), strip=series.strip), data))
    return items


def read_dir(root: Path) -> Reader:
    """A reader of the files under ``root``; a path through a symlink or to a non-file is refused."""

    def read(paths: Iterable[str]) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for rel in paths:
            path = contained(root, rel)
            try:
                out[rel] = path.read_bytes()
            except FileNotFoundError:
                out[rel] = None
            except NotADirectoryError:
                out[rel] = None
        return out

    return read


@dataclass(frozen=True)
class DirApplied:
    """What ``apply_to_dir`` did: the result, the files it wrote and deleted, and the record's path."""

    series: Series
    profile: str | None
    result: Applied
    written: tuple[str, ...]
    record: str
    already: bool = False
    # An apply a crash interrupted, before this one: "finished" or "undone" (None: there was none).
    recovered: str | None = None


def apply_to_dir(repo: Repo, series: Series, profile: str | None, dest: Path) -> DirApplied:
    """Apply the profile's patches to the tree ``dest``, all or nothing, and record what was applied.

    All or nothing across a crash too: an apply a crash interrupted is first
    finished (its files were being renamed in) or undone (they were still
    being staged), and ``recovered`` says which.
    """
    if not dest.is_dir():
        raise BadInput(f"{dest}: not a directory", "give the upstream checkout or the site-packages directory")
    root = dest.resolve()
    recovered = recover(root, tree=True)
    return dataclasses.replace(_apply(repo, series, profile, root), recovered=recovered)


def _apply(repo: Repo, series: Series, profile: str | None, root: Path) -> DirApplied:
    items = load(repo, series, profile)
    record_rel = record_path(series.name)
    previous = _read_record(root, record_rel)
    wanted = applied_pins(repo, items)
    if previous is not None:
        if previous.get("patches_applied") == wanted and previous.get("profile") == profile:
            return DirApplied(series, profile, Applied(), (), record_rel, already=True)
        raise Refused(
            f"{root}: series '{series.name}' was already applied here (record {record_rel})",
            "apply to a fresh tree (a new checkout, or the package reinstalled)",
        )
    result = apply_series(items, read_dir(root), carried=lambda top: os.path.lexists(root / top))
    files = {p: data for p, data in result.changed.items() if data is not None}
    deletes = [p for p, data in result.changed.items() if data is None]
    record = record_bytes(series, profile, wanted, result)
    files[record_rel] = record
    # The mode the patch gives a file (git's new mode 100755), as git apply sets it.
    modes = {p: m for p, m in _modes(root, items).items() if result.files.get(p) is not None}
    executable = [path for path, mode in modes.items() if path in files and mode.endswith("755")]
    written = write_all(root, files, deletes, tree=True, executable=executable)
    chmodded = _set_modes(root, modes)
    done = [w for w in written if w != record_rel] + [p for p in chmodded if p not in written]
    return DirApplied(series, profile, result, tuple(done), record_rel)


def _modes(root: Path, items: list[Item]) -> dict[str, str]:
    """The mode each file ends with, as ``git apply`` leaves it: a patch's new mode, or a moved file's own."""
    modes: dict[str, str] = {}
    for it in items:
        for change in it.patch.files:
            new, old = change.new_path, change.old_path
            if new is None:
                continue
            if change.new_mode is not None:
                modes[new] = change.new_mode
            elif old is not None and old != new:
                modes[new] = modes.get(old) or _disk_mode(root, old)
    return modes


def _disk_mode(root: Path, rel: str) -> str:
    try:
        st = os.lstat(contained(root, rel))
    except (FileNotFoundError, NotADirectoryError):
        return "100644"
    return "100755" if st.st_mode & 0o100 else "100644"


def _set_modes(root: Path, modes: dict[str, str]) -> list[str]:
    """Give each file the execute bits its mode says (a mode change alone writes no bytes); the paths changed."""
    changed = []
    for rel, mode in modes.items():
        fd = os.open(contained(root, rel), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            now = stat.S_IMODE(os.fstat(fd).st_mode)
            wanted = now | 0o111 if mode.endswith("755") else now & ~0o111
            if wanted != now:
                os.fchmod(fd, wanted)
                changed.append(rel)
        finally:
            os.close(fd)
    return changed


def _read_record(root: Path, rel: str) -> Mapping[str, object] | None:
    path = root / rel
    if not path.exists():
        return None
    try:
        data = json.loads(contained(root, rel).read_bytes())
    except ValueError as e:
        raise BadInput(f"{path}: not a record patchkit wrote ({e})", f"delete {path} if the tree is fresh") from e
    return data if isinstance(data, dict) else {}


def applied_pins(repo: Repo, items: list[Item]) -> list[dict[str, str]]:
    return [{"name": it.name, "sha256": sha256_bytes(repo.read(it.file))} for it in items]


def record_bytes(series: Series, profile: str | None, wanted: list[dict[str, str]], r: Applied) -> bytes:
    """The record of an apply, as canonical JSON: what a runtime check or a reviewer compares against."""
    doc = {
        "series": series.name,
        "upstream": series.upstream,
        "commit": str(series.commit) if series.commit else None,
        "version": series.version,
        "profile": profile,
        "patches_applied": wanted,
        "steps": [{"name": s.name, "paths": list(s.paths)} for s in r.steps],
        "files": {p: (sha256_bytes(b) if b is not None else None) for p, b in sorted(r.changed.items())},
        "absent": [{"patch": a.patch, "path": a.path, "change": a.kind} for a in r.absent],
        "offsets": [{"patch": o.patch, "path": o.path, "lines": o.lines} for o in r.offsets],
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def report(done: DirApplied) -> tuple[list[str], dict[str, object]]:
    """What ``patchkit apply`` prints: one line per patch, the absent files and offsets; and the JSON form."""
    from patchkit.core.safe import json_safe, printable

    s, r = done.series, done.result
    head = f"apply {s.name}" + (f" (profile {done.profile})" if done.profile else "")
    before = {
        "finished": ["finished an apply to this tree that was interrupted (its files were being renamed in)"],
        "undone": ["undid an apply to this tree that was interrupted before it changed any file"],
    }.get(done.recovered or "", [])
    if done.already:
        return [*before, f"{head}: already applied (record {done.record}); nothing to do"], {
            "already": True,
            "recovered": done.recovered,
        }
    lines = [*before, f"{head}: {len(r.steps)} patches"]
    lines += [f"  {printable(step.name)}  {len(step.paths)} files" for step in r.steps]
    lines += [
        f"  absent: {printable(a.path)} ({a.kind} by {printable(a.patch)}): the tree does not carry it"
        for a in r.absent
    ]
    lines += [
        f"  offset: {printable(o.path)} ({printable(o.patch)}) applies {o.lines} lines from its header"
        if o.lines
        else f"  header: {printable(o.path)} ({printable(o.patch)}): {printable(o.detail)}"
        for o in r.offsets
    ]
    lines.append(f"wrote {len(done.written)} files and {done.record}")
    doc = {
        "series": s.name,
        "profile": done.profile,
        "patches": [{"name": st.name, "paths": list(st.paths)} for st in r.steps],
        "absent": [{"patch": a.patch, "path": a.path, "change": a.kind} for a in r.absent],
        "offsets": [{"patch": o.patch, "path": o.path, "lines": o.lines} for o in r.offsets],
        "written": list(done.written),
        "record": done.record,
        "recovered": done.recovered,
    }
    return lines, json_safe(doc)
