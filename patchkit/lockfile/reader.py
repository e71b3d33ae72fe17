"""Reading the lockfile: TOML text to the frozen model, every problem located.

``loads`` reports every problem with its file, line and field, and raises
``LockfileError`` listing all of them; a valid lockfile is parsed once and never
pays for line numbers. What each table holds and how each field is checked is
its record's field table in ``lockfile.model`` (``LOCKFILE`` for the document);
this module reads the document in that order and adds the rules across sections.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator

from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import LockfileError, Problem
from patchkit.lockfile.fields import Context
from patchkit.lockfile.model import GENERATED, LOCKFILE, Artifact, HandDiff, Lockfile, Patch
from patchkit.lockfile.tomlpos import FieldPath, FieldReader, parse, render_path

_GENERATED = frozenset(GENERATED)


def loads(text: str, filename: str = LOCKFILE_NAME) -> Lockfile:
    """Parse and validate lockfile text; raise ``LockfileError`` listing every problem.

    ``tomllib`` reads the TOML (``tomlpos.parse``): what it refuses, any way
    it fails, is one problem at its line.
    """
    with collection_paused():
        raw = parse(text, filename)
        if isinstance(raw, Problem):
            raise LockfileError([raw])
        reader = FieldReader(filename, text)
        lock = _read(raw, reader)
    if reader.problems or lock is None:
        raise LockfileError(reader.problems or [Problem(filename, None, None, "cannot be read")])
    return lock


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a block that builds many objects and drops few.

    Reading a lockfile of 5,000 patches makes about 100,000 dicts, strings and
    records, none of them garbage yet; the collector, started once per 700
    new objects, would walk them all again and again (a third of the parse).
    Nothing in such a block makes reference cycles worth collecting; the
    collector runs again after it.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read(raw: dict[str, object], r: FieldReader) -> Lockfile | None:
    """The lockfile of the parsed document, or None when a problem was reported."""
    ctx = Context(r)
    if not LOCKFILE.keyset.issuperset(raw):
        r.known(raw, (), LOCKFILE.keys)
    schema, *sections = LOCKFILE.fields
    if schema.read(raw, (), ctx) is None:
        return None  # another schema's fields mean other things: read none of them
    for f in sections:
        ctx.doc[f.attr or f.key] = f.read(raw, (), ctx)
    doc = ctx.doc
    _check_unique(r, doc["patches"], doc["tuning"], doc["artifacts"], doc["diffs"])
    if r.problems:
        return None
    return Lockfile(**doc)


def _check_unique(
    r: FieldReader,
    patches: tuple[Patch, ...],
    tuning: tuple[Artifact, ...],
    artifacts: tuple[Artifact, ...],
    hand_diffs: tuple[HandDiff, ...] = (),
) -> None:
    """Names are unique across all entries; each file is pinned once; generated files not at all."""
    if _all_unique(patches, tuning, artifacts, hand_diffs):
        return  # most lockfiles: nothing to locate
    # Where each name and file was first seen, rendered only for a problem.
    names: dict[str, FieldPath] = {}
    files: dict[str, FieldPath] = {}
    for path, name, pinned in _pinned_entries(patches, tuning, artifacts, hand_diffs):
        if name:
            _name_once(r, names, path, name)
        for field_name, rel in pinned:
            _file_once(r, files, (*path, *field_name.split(".")), rel)


def _all_unique(
    patches: tuple[Patch, ...],
    tuning: tuple[Artifact, ...],
    artifacts: tuple[Artifact, ...],
    hand_diffs: tuple[HandDiff, ...],
) -> bool:
    """Whether no name is in two sections and no file is pinned twice or generated: the rules, without locations.

    Sets of plain strings: a fifth of the cost of the walk that remembers
    where each name and file was first seen, which runs only when this fails.
    """
    names = [{e.name for e in section} for section in (patches, tuning, artifacts)]
    if any(a & b for a, b in itertools.combinations(names, 2)):
        return False
    files = [p.file.path for p in patches if p.file]
    files += [p.diff.file.path for p in patches if p.diff]
    for section in (tuning, artifacts, hand_diffs):
        files += [e.file.path for e in section]
    return len(set(files)) == len(files) and _GENERATED.isdisjoint(files)


def _pinned_entries(
    patches: tuple[Patch, ...],
    tuning: tuple[Artifact, ...],
    artifacts: tuple[Artifact, ...],
    hand_diffs: tuple[HandDiff, ...],
) -> list[tuple[FieldPath, str, list[tuple[str, str]]]]:
    """Every entry that names or pins files: its path, its name ("" for none) and its (field, file) pins."""
    entries: list[tuple[FieldPath, str, list[tuple[str, str]]]] = []
    for i, p in enumerate(patches):
        pf = [("file", str(p.file))] if p.file else []
        if p.diff:
            pf.append(("diff.file", str(p.diff.file)))
        entries.append((("patches", i), p.name, pf))
    for key, items in (("tuning", tuning), ("artifacts", artifacts)):
        for i, a in enumerate(items):
            entries.append(((key, i), a.name, [("file", str(a.file))]))
    for i, d in enumerate(hand_diffs):
        entries.append((("diffs", i), "", [("file", str(d.file))]))
    return entries


def _name_once(r: FieldReader, names: dict[str, FieldPath], path: FieldPath, name: str) -> None:
    """A name is used by one section only (duplicates within a section are the section's own rule)."""
    first = names.setdefault(name, path)
    if first[0] != path[0]:
        r.problem(
            (*path, "name"), f"name '{name}' is also used by {render_path(first)}", "give each entry its own name"
        )


def _file_once(r: FieldReader, files: dict[str, FieldPath], fpath: FieldPath, rel: str) -> None:
    """A file is pinned by one field only, and never a file patchkit generates."""
    if rel in GENERATED:
        r.problem(fpath, f"{rel} is generated by patchkit and cannot be pinned")
    elif rel in files:
        r.problem(fpath, f"{rel} is already pinned by {render_path(files[rel])}", "pin each file once")
    files.setdefault(rel, fpath)
