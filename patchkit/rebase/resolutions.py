"""Remembered conflict resolutions: git's ``rerere`` for patches.

A conflict resolved by hand at ``patchkit rebase --continue`` is recorded,
and when the same conflict comes back in a later rebase (the next nightly
changes the same lines the same way), the recorded resolution is applied and
said: "resolved as recorded (<id>)", in the table, the JSON and the summary.
The merged file still goes through the semantic checks; ``--no-remembered``
turns the replay off.

Identity, as git's rerere.c computes it: a conflict is its two sides, the
patch's lines and upstream's, sorted so that it does not matter which side
is which, each followed by a NUL, hashed (sha256 here, where git uses SHA-1).
The base section does not count, again as in git. Unlike git, each conflict
hunk is its own record rather than the file's conflicts together, so a file
whose other conflict is new still has its known one resolved.

Where: ``resolutions/<id>.json`` at the top of the repository, one file per
record, committed and reviewed with the lockfile. Not under ``.patchkit/``,
the work area that is ignored by git and local to one clone: a resolution
is a decision the next maintainer (and CI's nightly bump) must see and
reuse. One file per record merges without conflicts when two branches each
record one. A record carries the sha256 of its own content; one that was
edited by hand or damaged is refused (exit 2), never trusted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from patchkit.core.diffs import line_matcher, split_lines
from patchkit.errors import BadInput
from patchkit.rebase.merge import Conflict, LineRange, MergeResult, Outcome
from patchkit.store.repo import Repo, write_all

DIR = "resolutions"
FORMAT = "patchkit-resolution/1"
MAX_RECORD_BYTES = 16 << 20
_ID = re.compile(r"[0-9a-f]{64}")


class BadRecord(BadInput):
    """A recorded resolution that is not what patchkit wrote (hand-edited or damaged): refused, exit 2."""


@dataclass(frozen=True)
class Record:
    """One recorded resolution: the conflict's two sides (sorted) and the lines that replaced it."""

    id: str
    sides: tuple[bytes, bytes]
    resolution: bytes
    patch: str = ""
    path: str = ""

    @property
    def short(self) -> str:
        return self.id[:12]


def conflict_id(ours: bytes, theirs: bytes) -> str:
    """The conflict's identity: its two sides sorted, each NUL-terminated, hashed (git rerere's normalisation)."""
    one, two = sorted((ours, theirs))
    return hashlib.sha256(one + b"\0" + two + b"\0").hexdigest()


def _lines(data: bytes, r: LineRange) -> bytes:
    return b"".join(split_lines(data)[r.start - 1 : r.end])


def sides(c: Conflict, ours: bytes, theirs: bytes) -> tuple[bytes, bytes]:
    """The conflict's two sides: the patch's lines and upstream's, as the conflict's ranges name them."""
    return _lines(ours, c.ours), _lines(theirs, c.theirs)


def record_path(conflict: str) -> str:
    return f"{DIR}/{conflict}.json"


# --------------------------------------------------------------------------- the record files


def _text(data: bytes) -> list[str]:
    """Bytes as JSON keeps them readable in review: one string per line (non-UTF-8 bytes as \\udcXX escapes)."""
    return [line.decode("utf-8", "surrogateescape") for line in split_lines(data)]


def _bytes(lines: Any, where: str, field: str) -> bytes:
    if not isinstance(lines, list) or any(not isinstance(s, str) for s in lines):
        raise _bad(where, f"{field} is not a list of lines")
    try:
        return b"".join(s.encode("utf-8", "surrogateescape") for s in lines)
    except UnicodeEncodeError as e:
        raise _bad(where, f"{field} holds a character patchkit never writes") from e


def _content(doc: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in doc.items() if k != "sha256"}, sort_keys=True, separators=(",", ":")).encode()


def dumps(rec: Record) -> bytes:
    """The record file's bytes: readable lines, and the sha256 of the rest so that an edit is seen."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "id": rec.id,
        "recorded_for": {"patch": rec.patch, "path": rec.path},
        "sides": [_text(rec.sides[0]), _text(rec.sides[1])],
        "resolution": _text(rec.resolution),
    }
    doc["sha256"] = hashlib.sha256(_content(doc)).hexdigest()
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def _bad(where: str, what: str) -> BadRecord:
    return BadRecord(
        f"{where}: {what}; a recorded resolution is not trusted once edited or damaged",
        f"restore it from git (git checkout -- {where}), or delete it and resolve the conflict again "
        "(or pass --no-remembered)",
    )


def load(repo: Repo, conflict: str) -> Record | None:
    """The recorded resolution of the conflict ``conflict`` (its id); None when none is recorded.

    Refused (``BadRecord``, exit 2) when the file is not a regular file,
    not JSON, lacks a field, or its content does not match its own sha256
    or its id.
    """
    rel = record_path(conflict)
    raw = _read(repo, rel)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise _bad(rel, f"not JSON ({str(e)[:80]})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(rel, f"not a {FORMAT} record")
    if doc.get("sha256") != hashlib.sha256(_content(doc)).hexdigest():
        raise _bad(rel, "its content does not match its sha256 (hand-edited or corrupt)")
    pair = doc.get("sides")
    if not isinstance(pair, list) or len(pair) != 2:
        raise _bad(rel, "sides is not a pair")
    one, two = _bytes(pair[0], rel, "sides[0]"), _bytes(pair[1], rel, "sides[1]")
    if doc.get("id") != conflict or conflict_id(one, two) != conflict:
        raise _bad(rel, "its sides are not the conflict its name says")
    found = doc.get("recorded_for")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    return Record(
        conflict,
        (one, two),
        _bytes(doc.get("resolution"), rel, "resolution"),
        str(meta.get("patch", "")),
        str(meta.get("path", "")),
    )


def _read(repo: Repo, rel: str) -> bytes | None:
    """The file ``rel`` of the repository, not through a link, capped; None when absent."""
    for where in (DIR, rel):
        try:
            st = os.lstat(repo.root / where)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _bad(where, f"cannot be read ({e.strerror})") from e
        if not (stat.S_ISDIR(st.st_mode) if where == DIR else stat.S_ISREG(st.st_mode)):
            raise _bad(where, "is a link or not a " + ("directory" if where == DIR else "regular file"))
    with open(repo.root / rel, "rb") as f:
        raw = f.read(MAX_RECORD_BYTES + 1)
    if len(raw) > MAX_RECORD_BYTES:
        raise _bad(rel, f"larger than {MAX_RECORD_BYTES >> 20} MiB")
    return raw


# --------------------------------------------------------------------------- replaying


def replay(repo: Repo, merge: MergeResult, ours: bytes, theirs: bytes) -> tuple[MergeResult, tuple[str, ...]]:
    """``merge`` with every conflict that has a recorded resolution resolved as recorded, and their ids.

    A file whose conflicts are all known comes out ``clean`` (the semantic
    checks run on it as on any merge); one with a new conflict left stays a
    conflict, with the known ones already resolved in the work file.
    """
    if merge.outcome is not Outcome.CONFLICT or not merge.conflicts:
        return merge, ()
    lines = split_lines(merge.merged)
    kept: list[Conflict] = []
    used: list[str] = []
    shift = 0
    out: list[bytes] = []
    at = 0
    for c in merge.conflicts:
        pair = sides(c, ours, theirs)
        rec = load(repo, conflict_id(*pair))
        if rec is None or rec.sides != tuple(sorted(pair)):
            kept.append(dataclasses.replace(c, start=c.start + shift, end=c.end + shift))
            continue
        out += lines[at : c.start - 1]
        replacement = split_lines(rec.resolution)
        out += replacement
        at = c.end
        shift += len(replacement) - (c.end - c.start + 1)
        used.append(rec.id)
    if not used:
        return merge, ()
    out += lines[at:]
    merged = b"".join(out)
    outcome = Outcome.CONFLICT if kept else Outcome.CLEAN
    return dataclasses.replace(merge, outcome=outcome, merged=merged, conflicts=tuple(kept)), tuple(used)


# --------------------------------------------------------------------------- recording


def resolution_of(merged: bytes, resolved: bytes, c: Conflict) -> bytes | None:
    """The lines of ``resolved`` that took the place of conflict ``c`` of ``merged`` (with its markers).

    Found from the lines just outside the conflict, which the resolution
    kept; None when it changed them too, so the region cannot be told.
    """
    a, b = split_lines(merged), split_lines(resolved)
    blocks = [blk for blk in line_matcher(a, b).get_matching_blocks() if blk[2]]
    before, after = c.start - 1, c.end  # 0-based: the conflict is a[before:after]

    def matched(i: int) -> int | None:  # where a's line i is in b, when it is matched
        return next((bj + i - ai for ai, bj, n in blocks if ai <= i < ai + n), None)

    start = 0 if before == 0 else matched(before - 1)
    stop = len(b) if after >= len(a) else matched(after)
    if start is None or stop is None:
        return None
    start = start + 1 if before else 0
    if stop < start:
        return None
    return b"".join(b[start:stop])


def records(
    patch: str, path: str, conflicts: Iterable[Conflict], merged: bytes, resolved: bytes, ours: bytes, theirs: bytes
) -> list[Record]:
    """The records of one file's resolved conflicts (those whose resolution can be told apart)."""
    out = []
    for c in conflicts:
        res = resolution_of(merged, resolved, c)
        if res is None:
            continue
        pair = sides(c, ours, theirs)
        out.append(Record(conflict_id(*pair), tuple(sorted(pair)), res, patch, path))  # type: ignore[arg-type]
    return out


def save(repo: Repo, found: list[Record]) -> list[str]:
    """Write the records (one file each, in one transaction); the files written."""
    files = {record_path(r.id): dumps(r) for r in found}
    if not files:
        return []
    return write_all(repo.root, files)


def saved_conflicts(entry: Any) -> list[Conflict]:
    """The conflicts a saved rebase state lists for one patch; an entry not of that form gives none."""
    out = []
    for c in entry.get("conflicts", []) if isinstance(entry, dict) else []:
        try:
            out.append(
                Conflict(
                    _int(c["start"]),
                    _int(c["end"]),
                    *(LineRange(_int(c[k]["start"]), _int(c[k]["end"])) for k in ("base", "ours", "theirs")),
                )
            )
        except (KeyError, TypeError, ValueError):
            return []
    return out


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(value)
    return value


def valid_id(value: str) -> bool:
    return bool(_ID.fullmatch(value))


def replay_all(
    repo: Repo, inputs: dict[str, tuple[bytes, bytes, bytes, str]], merges: dict[str, MergeResult]
) -> dict[str, tuple[str, ...]]:
    """Replay the recorded resolutions into every conflicted merge (``merges`` updated); the ids used, by patch."""
    used: dict[str, tuple[str, ...]] = {}
    for name, merge in list(merges.items()):
        _, ours, theirs, _ = inputs[name]
        merges[name], ids = replay(repo, merge, ours, theirs)
        if ids:
            used[name] = ids
    return used


def learned(
    repo: Repo,
    state: dict[str, Any] | None,
    results: Iterable[Any],
    resolved: dict[str, bytes],
    ours: dict[str, bytes],
    theirs: Any,
) -> list[Record]:
    """The records to keep from a ``--continue``: each conflict of the saved state, as the user resolved it.

    ``results`` are the saved plan's patches, ``theirs`` reads a new upstream
    file by its sha256 (None when gone: that patch's conflicts are not recorded).
    """
    entries = {e.get("name"): e for e in (state or {}).get("patches", []) if isinstance(e, dict)}
    out: list[Record] = []
    for r in results:
        if r.name not in resolved or r.merge is None or r.name not in ours or not r.theirs_sha256:
            continue
        conflicts = saved_conflicts(entries.get(r.name))
        their_bytes = theirs(r.theirs_sha256) if conflicts else None
        if their_bytes is None:
            continue
        out += records(r.name, r.new_path, conflicts, r.merge.merged, resolved[r.name], ours[r.name], their_bytes)
    return out


def saved_remembered(state: dict[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """The resolutions replayed before a rebase stopped, as its saved state lists them (malformed entries dropped)."""
    found = (state or {}).get("remembered")
    if not isinstance(found, dict):
        return {}
    return {
        str(name): tuple(i for i in ids if isinstance(i, str) and valid_id(i))
        for name, ids in found.items()
        if isinstance(ids, list)
    }


class Memory:
    """The recorded resolutions of one repository, as a series rebase uses them (``patchkit.rebase.series.Memory``).

    ``replay`` off (``--no-remembered``): no conflict is resolved as recorded;
    resolutions given are still learned.
    """

    def __init__(self, repo: Repo, *, replay: bool = True) -> None:
        self.repo = repo
        self.replaying = replay

    def replay(self, merge: MergeResult, ours: bytes, theirs: bytes) -> tuple[MergeResult, tuple[str, ...]]:
        """``merge`` with its known conflicts resolved as recorded, and their ids (see ``replay``)."""
        if not self.replaying:
            return merge, ()
        return replay(self.repo, merge, ours, theirs)

    def learn(self, patch: str, path: str, base: bytes, ours: bytes, theirs: bytes, resolved: bytes) -> list[Record]:
        """The records of the conflicts of merging ``base``/``ours``/``theirs``, as ``resolved`` resolves them."""
        from patchkit.rebase.merge import rebase_file

        m = rebase_file(base, ours, theirs, path=path)
        if m.outcome is not Outcome.CONFLICT:
            return []
        return records(patch, path, m.conflicts, m.merged, resolved, ours, theirs)
