"""The saved state of a rebase in progress, read as untrusted input: every field checked before it is used.

A state file lies in the work tree (``.patchkit/rebase/state.json``,
``.patchkit/series-rebase/state.json``), where a hand edit, a truncation or a
clone can put anything. It is read like the lockfile: not through a link, a
size cap, JSON nested no deeper than patchkit writes it, and every field the
rebase uses checked for its type and form (a name, a repository or upstream
path, an absolute container target, a sha256), so that a bad one is one line
naming the file and the field (exit 2), never a crash, and never a path that
leads out of the repository, into ``.git`` or out of the cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput
from patchkit.repo import contained
from patchkit.values import ContainerPath, UpstreamPath, check_name

MAX_STATE_BYTES = 256 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# A JSON document nested deeper than this is not one patchkit wrote (its states are four levels deep).
_MAX_DEPTH = 32


class StateError(BadInput):
    """A rebase state file that is not what patchkit wrote: names the file and the field (exit 2)."""


def present(root: Path, work_dir: str, state_file: str) -> bool:
    """Whether a rebase waits in ``work_dir``: its state file exists, or the work area is a link or not a directory.

    A work area patchkit never makes still counts, so that ``--continue`` and
    ``status`` refuse it by name (exit 2) instead of saying nothing waits.
    """
    if os.path.lexists(root / state_file):
        return True
    area = root / work_dir
    return os.path.islink(area) or (os.path.lexists(area) and not os.path.isdir(area))


def read(root: Path, rel: str, hint: str) -> dict[str, Any] | None:
    """The JSON object in the state file ``rel`` of ``root``; None when there is none.

    Every directory on the way must be a real directory and the file a
    regular file (a link, a directory or a FIFO in its place is refused).
    """
    path = root / rel
    _refuse_links(root, rel, hint)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StateError(f"{rel}: cannot read ({e.strerror}); it is not a state patchkit wrote", hint) from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StateError(f"{rel}: not a regular file; it is not a state patchkit wrote", hint)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_STATE_BYTES + 1)
    if len(raw) > MAX_STATE_BYTES:
        raise StateError(f"{rel}: larger than {MAX_STATE_BYTES >> 20} MiB; it is not a state patchkit wrote", hint)
    if _too_deep(raw):
        raise StateError(f"{rel}: nested deeper than {_MAX_DEPTH} levels; it is not a state patchkit wrote", hint)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise StateError(f"{rel}: not JSON ({str(e)[:120]}); it is not a state patchkit wrote", hint) from e
    if not isinstance(doc, dict):
        raise StateError(f"{rel}: the top level is not an object; it is not a state patchkit wrote", hint)
    return doc


def _refuse_links(root: Path, rel: str, hint: str) -> None:
    """Refuse a state file reached through a symlinked directory: it would be read from anywhere."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        where = "/".join(parts[:i])
        try:
            st = os.lstat(root / where)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StateError(f"{where}: cannot inspect ({e.strerror})", hint) from e
        if not stat.S_ISDIR(st.st_mode):
            raise StateError(f"{where}: is a symlink or not a directory; refusing to read {rel} through it", hint)


def _too_deep(raw: bytes) -> bool:
    """Whether the JSON text nests brackets deeper than ``_MAX_DEPTH`` (strings skipped), before parsing it."""
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > _MAX_DEPTH:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


def remove_work_area(root: Path, rel: str) -> bool:
    """Remove the directory ``rel`` of patchkit's work area under ``root``; a link in its place goes, not its target."""
    contained(root, f"{rel.rpartition('/')[0]}/x")  # every directory above it a real directory
    work = root / rel
    try:
        st = os.lstat(work)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(work)  # does not follow the links inside
    else:
        work.unlink()
    return True


class Checker:
    """Checks the fields of one state document, raising ``StateError`` naming the file and the field."""

    def __init__(self, shown: str, hint: str) -> None:
        self.shown = shown
        self.hint = hint

    def fail(self, field: str, what: str) -> StateError:
        return StateError(f"{self.shown}: {field}: {what}; it is not what patchkit wrote", self.hint)

    def get(
        self, doc: dict[str, Any], key: str, kind: type | tuple[type, ...], field: str, *, optional: bool = False
    ) -> Any:
        """``doc[key]``, which must be of ``kind`` (or absent/null when ``optional``)."""
        value = doc.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.fail(f"{field}.{key}" if field else key, "missing or of the wrong type")
        return value

    def form(self, value: Any, field: str, check: Callable[[str], object]) -> str:
        """``value`` as a string that ``check`` accepts (it raises ``ValueError`` otherwise)."""
        if not isinstance(value, str):
            raise self.fail(field, "not a string")
        try:
            check(value)
        except ValueError as e:
            raise self.fail(field, str(e)) from e
        return value

    def strings(self, value: Any, field: str) -> None:
        """A list of strings, or an object of strings to strings."""
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
        if items is None or any(not isinstance(v, str) for _, v in items):
            raise self.fail(field, "not a list or object of strings")


def hex64(value: str) -> None:
    if not _HEX64.fullmatch(value):
        raise ValueError(f"{value[:80]!r} is not a sha256 (64 lowercase hex digits)")


def commit_id(value: str) -> None:
    if not _COMMIT.fullmatch(value):
        raise ValueError(f"{value[:80]!r} is not a full commit id")


def plain_path(value: str) -> None:
    """An upstream path whose every part is plain and none is ``.git`` (in any case)."""
    UpstreamPath(value)
    if any(part.rstrip(". ").casefold() == ".git" for part in value.split("/")):
        raise ValueError(f"{value[:80]!r} is inside .git")


def name(value: str) -> None:
    check_name(value, "patch name")


def target(value: str) -> None:
    ContainerPath(value)


def check_rebase(doc: dict[str, Any], shown: str, hint: str, outcomes: set[str]) -> None:
    """Check every field ``patchkit rebase --continue`` reads from an upstream rebase's state."""
    c = Checker(shown, hint)
    c.form(c.get(doc, "upstream", str, ""), "upstream", lambda v: check_name(v, "upstream name"))
    c.get(doc, "old_pin", str, "")
    pin = c.get(doc, "new_pin", dict, "")
    for key in ("kind", "commit", "version", "sha256", "filename", "path"):
        c.get(pin, key, str, "new_pin", optional=key != "kind")
    if set(pin) - {"kind", "commit", "version", "sha256", "filename", "path"}:
        raise c.fail("new_pin", "has a field patchkit does not write")
    c.form(doc.get("lockfile_sha256"), "lockfile_sha256", hex64)
    if doc.get("committed_lockfile_sha256") is not None:
        c.form(doc["committed_lockfile_sha256"], "committed_lockfile_sha256", hex64)
    c.strings(doc.get("image_pins", {}), "image_pins")
    for i, sk in enumerate(c.get(doc, "skipped", list, "", optional=True) or []):
        if not isinstance(sk, dict) or any(not isinstance(sk.get(k), str) for k in ("name", "target", "reason")):
            raise c.fail(f"skipped[{i}]", "not a skipped patch (name, target, reason)")
    for i, entry in enumerate(c.get(doc, "patches", list, "")):
        _check_patch(c, entry, f"patches[{i}]", outcomes)


def _check_patch(c: Checker, entry: Any, field: str, outcomes: set[str]) -> None:
    """One patch of an upstream rebase's state: its name, outcome, paths, targets and the cache keys of its bytes."""
    if not isinstance(entry, dict):
        raise c.fail(field, "not an object")
    c.form(entry.get("name"), f"{field}.name", name)
    for key in ("outcome", "text_outcome"):
        value = entry.get(key)
        if (value is not None or key == "outcome") and value not in outcomes:
            raise c.fail(f"{field}.{key}", f"{str(value)[:80]!r} is not an outcome patchkit writes")
    for key in ("old_path", "new_path"):
        c.form(entry.get(key), f"{field}.{key}", plain_path)
    for key in ("old_target", "new_target"):
        c.form(entry.get(key), f"{field}.{key}", target)
    for key in ("theirs_sha256", "merged_sha256", "ours_sha256"):
        if entry.get(key) is not None:
            c.form(entry[key], f"{field}.{key}", hex64)
    problems = entry.get("problems", [])
    if not isinstance(problems, list) or any(not isinstance(p, dict) for p in problems):
        raise c.fail(f"{field}.problems", "not a list of objects")


def check_series(doc: dict[str, Any], shown: str, hint: str) -> None:
    """Check every field ``patchkit rebase --continue`` reads from a series rebase's state."""
    c = Checker(shown, hint)
    c.form(doc.get("series"), "series", lambda v: check_name(v, "series name"))
    c.form(doc.get("onto"), "onto", commit_id)
    c.form(doc.get("lockfile_sha256"), "lockfile_sha256", hex64)
    c.form(doc.get("stopped"), "stopped", name)
    for key in ("conflicts", "broken"):
        for i, path in enumerate(c.get(doc, key, list, "")):
            c.form(path, f"{key}[{i}]", plain_path)
    c.strings(doc.get("accepted", {}), "accepted")
    resolved = c.get(doc, "resolved", dict, "", optional=True) or {}
    for patch, files in resolved.items():
        c.form(patch, f"resolved.{str(patch)[:80]}", name)
        if not isinstance(files, dict):
            raise c.fail(f"resolved.{patch}", "not an object of paths to contents")
        for path, data in files.items():
            c.form(path, f"resolved.{patch}", plain_path)
            if not isinstance(data, str):
                raise c.fail(f"resolved.{patch}.{path}", "not base64 text")
