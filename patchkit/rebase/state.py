"""The work area of a rebase in progress and its saved state, read as untrusted input: every field checked.

A rebase that stops waits in its work area (``OVERLAYS``, ``SERIES``): the
files to resolve and a state file, written as one journaled transaction and
read back as a typed record (``OverlayState``, ``SeriesState``). The state
file lies in the work tree, where a hand edit, a truncation or a clone can
put anything. It is read like the lockfile: not through a link, a
size cap, JSON nested no deeper than patchkit writes it, and every field the
rebase uses checked for its type and form (a name, a repository or upstream
path, an absolute container target, a sha256), so that a bad one is one line
naming the file and the field (exit 2), never a crash, and never a path that
leads out of the repository, into ``.git`` or out of the cache.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.core.values import ContainerPath, UpstreamPath, check_name
from patchkit.errors import BadInput
from patchkit.store.repo import WORK_DIR, atomic_write, contained, write_all

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
        import shutil  # here, not at the top: check reads this module for its paths, before sums --check hashes

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
    if doc.get("committed_lockfile_sha256") is not None:
        c.form(doc["committed_lockfile_sha256"], "committed_lockfile_sha256", hex64)
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


# --------------------------------------------------------------------------- the work areas and their records

# What a state file names when it was written by this patchkit (an overlays' rebase records it).
STATE_VERSION = 1
REBASE_HINT = "patchkit rebase --abort, then run the rebase again"


@dataclass(frozen=True)
class WorkArea:
    """Where one kind of rebase waits: a directory of patchkit's work area, its state file inside."""

    directory: str

    @property
    def state_file(self) -> str:
        """The state file, relative to the repository."""
        return f"{self.directory}/state.json"

    def present(self, root: Path) -> bool:
        """Whether a rebase waits here (``present``)."""
        return present(root, self.directory, self.state_file)

    def read(self, root: Path, hint: str = REBASE_HINT) -> dict[str, Any] | None:
        """The state file's JSON object, not yet checked field by field (``read``); None when there is none."""
        return read(root, self.state_file, hint)

    def save(self, root: Path, files: dict[str, bytes], doc: dict[str, Any]) -> None:
        """Write the files waiting to be resolved and the state as one journaled transaction."""
        write_all(root, {**files, self.state_file: _dumps(doc)})

    def rewrite(self, root: Path, doc: dict[str, Any]) -> None:
        """Replace the state alone (atomically), the files to resolve left as they are."""
        atomic_write(root / self.state_file, _dumps(doc))

    def clear(self, root: Path) -> bool:
        """Remove the work area (a link in its place, not its target); whether there was one."""
        return remove_work_area(root, self.directory)

    def work_file(self, *parts: str) -> str:
        """A file waiting to be resolved, relative to the repository: the work area's one spelling of its paths."""
        return "/".join((self.directory, *parts))


def _dumps(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


OVERLAYS = WorkArea(f"{WORK_DIR}/rebase")
SERIES = WorkArea(f"{WORK_DIR}/series-rebase")


@dataclass(frozen=True)
class OverlayState:
    """What a stopped rebase of an upstream's overlays saved; ``patches`` are checked entries (``check_rebase``)."""

    upstream: str
    old_pin: str
    new_pin: dict[str, Any]
    lockfile_sha256: str
    patches: tuple[dict[str, Any], ...]
    skipped: tuple[dict[str, Any], ...] = ()
    image_pins: dict[str, str] = field(default_factory=dict)
    image_upstream: dict[str, Any] | None = None
    # Read leniently where they are used (``resolutions.saved_remembered``, ``explain.saved_causes``).
    remembered: Any = None
    causes: Any = None
    # Where the lockfile is going once the commit began (a crash before the clean-up is a finished rebase).
    committed_lockfile_sha256: str | None = None

    def as_doc(self) -> dict[str, Any]:
        """The state file's object."""
        doc = {
            "version": STATE_VERSION,
            "upstream": self.upstream,
            "old_pin": self.old_pin,
            "new_pin": self.new_pin,
            "lockfile_sha256": self.lockfile_sha256,
            "image_pins": self.image_pins,
            "remembered": self.remembered,
            "causes": self.causes,
            "image_upstream": self.image_upstream,
            "skipped": list(self.skipped),
            "patches": list(self.patches),
        }
        if self.committed_lockfile_sha256 is not None:
            doc["committed_lockfile_sha256"] = self.committed_lockfile_sha256
        return doc

    def waiting(self) -> tuple[tuple[str, str], ...]:
        """The files to resolve or fix: (patch, work file) of each conflicted or broken patch."""
        return tuple(
            (
                entry["name"],
                overlay_work_file(entry["name"], entry["new_path"], entry["outcome"], entry.get("text_outcome")),
            )
            for entry in self.patches
            if entry["outcome"] in ("conflict", "broken")
        )


def overlay_work_file(patch: str, new_path: str, outcome: str, text_outcome: str | None) -> str:
    """Where an overlay's conflicted file (``conflicts/``) or broken one (``broken/``) waits to be resolved."""
    where = "broken" if outcome == "broken" and text_outcome != "conflict" else "conflicts"
    return OVERLAYS.work_file(where, patch, new_path.rpartition("/")[2])


def read_overlays(root: Path, outcomes: set[str]) -> OverlayState | None:
    """The overlays' saved rebase, every field checked; None when none waits."""
    shown = OVERLAYS.state_file
    doc = OVERLAYS.read(root)
    if doc is None:
        return None
    if doc.get("version") != STATE_VERSION:
        raise BadInput(f"{shown}: written by another patchkit version", "patchkit rebase --abort")
    check_rebase(doc, shown, REBASE_HINT, outcomes)
    return OverlayState(
        upstream=doc["upstream"],
        old_pin=doc["old_pin"],
        new_pin=doc["new_pin"],
        lockfile_sha256=doc["lockfile_sha256"],
        patches=tuple(doc["patches"]),
        committed_lockfile_sha256=doc.get("committed_lockfile_sha256"),
        image_pins=dict(doc.get("image_pins") or {}),
        image_upstream=doc.get("image_upstream"),
        skipped=tuple(doc.get("skipped") or ()),
        remembered=doc.get("remembered"),
        causes=doc.get("causes"),
    )


@dataclass(frozen=True)
class SeriesState:
    """What a stopped series rebase saved: where it stopped, the files waiting there, the resolutions so far."""

    series: str
    onto: str
    lockfile_sha256: str
    stopped: str
    conflicts: tuple[str, ...]
    broken: tuple[str, ...]
    # The resolutions of the patches before the one it stopped at: patch -> path -> bytes.
    resolved: dict[str, dict[str, bytes]]
    accepted: dict[str, str]
    # Where the lockfile is going once the commit began (a crash before the clean-up is a finished rebase).
    committed_lockfile_sha256: str | None = None

    def waiting(self) -> tuple[tuple[str, str], ...]:
        """The files to resolve or fix: (path, work file) of each file of the patch the rebase stopped at."""
        return tuple((path, series_work_file(self.stopped, path)) for path in self.conflicts)

    def as_doc(self) -> dict[str, Any]:
        """The state file's object (resolutions in base64)."""
        doc = {
            "series": self.series,
            "onto": self.onto,
            "lockfile_sha256": self.lockfile_sha256,
            "stopped": self.stopped,
            "conflicts": list(self.conflicts),
            "broken": list(self.broken),
            "resolved": {
                n: {p: base64.b64encode(d).decode() for p, d in files.items()} for n, files in self.resolved.items()
            },
            "accepted": self.accepted,
        }
        if self.committed_lockfile_sha256 is not None:
            doc["committed_lockfile_sha256"] = self.committed_lockfile_sha256
        return doc


def series_work_file(patch: str, path: str) -> str:
    """Where the file ``path`` of the series patch ``patch`` waits to be resolved or fixed."""
    return SERIES.work_file("work", patch, path)


def read_series(root: Path) -> SeriesState | None:
    """The series' saved rebase, every field checked; None when none waits."""
    doc = SERIES.read(root)
    if doc is None:
        return None
    check_series(doc, SERIES.state_file, REBASE_HINT)
    return SeriesState(
        series=doc["series"],
        onto=doc["onto"],
        lockfile_sha256=doc["lockfile_sha256"],
        stopped=doc["stopped"],
        conflicts=tuple(doc["conflicts"]),
        broken=tuple(doc["broken"]),
        resolved=_decoded(doc.get("resolved") or {}),
        accepted={str(k): str(v) for k, v in (doc.get("accepted") or {}).items()},
        committed_lockfile_sha256=doc.get("committed_lockfile_sha256"),
    )


def _decoded(resolved: dict[str, dict[str, str]]) -> dict[str, dict[str, bytes]]:
    """The saved resolutions' bytes; text that is not base64 is a state patchkit did not write."""
    try:
        return {n: {p: base64.b64decode(v, validate=True) for p, v in files.items()} for n, files in resolved.items()}
    except ValueError as e:
        raise Checker(SERIES.state_file, REBASE_HINT).fail("resolved", f"not base64 ({e})") from e
