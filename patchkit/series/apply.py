"""A series applied in order to a tree, in memory: exact, all or nothing.

Pure: the tree is a ``read(paths) -> {path: bytes | None}`` function (a
directory, a git commit, a wheel), the result is every touched path's new
bytes. Each hunk applies as ``git apply`` applies it
(:func:`patchkit.core.diffs.apply_placed`): every line exact, never fuzz; a hunk
whose lines all match some lines away from its header applies there, and
that offset, or any other way a hunk header is wrong, is reported.

A file a patch touches that the tree does not carry is reported, not
silently dropped: when no path under the file's top-level directory exists
in the tree (``tests/``, ``requirements/`` or ``setup.py`` beside the
package in an installed wheel), the change is skipped and listed in
``absent``; when the tree does carry that part of the upstream and the file
is missing, the patch does not apply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from patchkit.core import diffs
from patchkit.errors import Refused
from patchkit.series.parse import FileChange, ParsedPatch

Reader = Callable[[Iterable[str]], dict[str, bytes | None]]


class SeriesApplyError(Refused):
    """A patch of the series does not apply exactly; names the patch file, its line and the tree's file."""

    def __init__(self, patch: str, file: str, line: int | None, path: str, message: str) -> None:
        where = f"{file}:{line}" if line else file
        super().__init__(
            f"{where}: patch '{patch}' does not apply to {path}: {message}",
            "rebase the series onto this tree (patchkit rebase --series NAME --onto REV), or fix the patch",
        )
        self.patch = patch
        self.file = file
        self.line = line
        self.path = path
        self.detail = message


@dataclass(frozen=True)
class Offset:
    """A file of a patch whose hunks matched exactly, ``lines`` away from where their headers say.

    ``detail`` says what is wrong with the first hunk header that does not
    describe where its hunk went (an offset, or a wrong new-side start when
    ``lines`` is 0), with that header's line in the patch.
    """

    patch: str
    path: str
    lines: int
    line: int
    detail: str = ""


@dataclass(frozen=True)
class Absent:
    """A change the tree cannot take because it does not carry that part of the upstream."""

    patch: str
    path: str
    kind: str
    line: int


@dataclass(frozen=True)
class Step:
    """One patch as applied: the paths it changed in the tree."""

    name: str
    paths: tuple[str, ...]


@dataclass
class Applied:
    """The result of a series: ``files`` maps each touched path to its new bytes (``None``: deleted).

    ``before`` holds the same paths as the tree had them; ``modes`` the file
    modes the patches set (``100755``).
    """

    files: dict[str, bytes | None] = field(default_factory=dict)
    before: dict[str, bytes | None] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    offsets: list[Offset] = field(default_factory=list)
    absent: list[Absent] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, bytes | None]:
        """The paths whose bytes differ from the tree's."""
        return {p: b for p, b in self.files.items() if self.before.get(p) != b}


@dataclass(frozen=True)
class Item:
    """A patch to apply: its name, the repository file it came from, and what it parsed to.

    ``data`` is the file's bytes when the reader kept them (a rebase compares
    a regenerated patch with them), else None.
    """

    name: str
    file: str
    patch: ParsedPatch
    data: bytes | None = None


def apply_series(items: Sequence[Item], read: Reader, *, carried: Callable[[str], bool] | None = None) -> Applied:
    """Apply ``items`` in order to the tree ``read`` gives; raise :class:`SeriesApplyError` at the first failure.

    ``carried(top)`` says whether the tree has the top-level entry ``top``;
    by default a top-level entry is carried when any path the series
    touches under it exists in the tree.
    """
    wanted = list(dict.fromkeys(p for it in items for p in it.patch.paths))
    before = read(wanted)
    present = {_top(p) for p, data in before.items() if data is not None}
    has = carried or (lambda top: top in present)
    # A part of the upstream is missing when a change needs a file there (modify, delete, rename)
    # and the tree has nothing under it; a new file in a new directory is not evidence of that.
    missing = {_top(c.old_path) for it in items for c in it.patch.files if c.old_path and not has(_top(c.old_path))}
    out = Applied(before=dict(before))
    state: dict[str, bytes | None] = dict(before)
    for it in items:
        touched: list[str] = []
        mail, found = 0, dict[str, bytes | None]()
        for change in it.patch.files:
            if change.mail != mail:
                mail, found = change.mail, {}
            if any(_top(p) in missing for p in change.paths) and not _exists(change, state):
                out.absent.append(Absent(it.name, change.paths[-1], change.kind, change.line))
                continue
            touched.extend(_apply_change(it, change, state, found, out))
        refuse_nested(it, state, touched)
        out.steps.append(Step(it.name, tuple(dict.fromkeys(touched))))
    out.files = {p: state[p] for p in wanted}
    return out


def nested(state: dict[str, bytes | None], touched: Iterable[str]) -> tuple[str, str] | None:
    """A file of ``state`` below another of its files, one of them in ``touched``: (inner, outer), or None.

    ``a/b`` and ``a`` cannot both be files: writing one would fail halfway or
    replace the other's directory.
    """
    live = {p for p, data in state.items() if data is not None}
    # Every live path after a NUL, searched at C speed: a file below ``path`` shows as "\0path/" in it.
    # Only a sieve (a name may hold a NUL when quoted): a hit is confirmed path by path.
    names: str | None = None
    for path in dict.fromkeys(touched):
        if path not in live:
            continue
        parts = path.split("/")
        outer = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in live), None)
        if outer is not None:
            return path, outer
        names = "\0" + "\0".join(live) if names is None else names
        if f"\0{path}/" not in names:
            continue
        inner = next((p for p in live if p.startswith(f"{path}/")), None)
        if inner is not None:
            return inner, path
    return None


def refuse_nested(it: Item, state: dict[str, bytes | None], touched: Iterable[str]) -> None:
    """Raise :class:`SeriesApplyError` when patch ``it`` leaves a file below another file (see :func:`nested`)."""
    found = nested(state, touched)
    if found is not None:
        inner, outer = found
        raise SeriesApplyError(it.name, it.file, None, inner, f"it would be a file inside {outer}, which is a file too")


def _exists(change: FileChange, state: dict[str, bytes | None]) -> bool:
    return change.old_path is not None and state.get(change.old_path) is not None


def _top(path: str) -> str:
    return path.split("/", 1)[0]


def _current(
    change: FileChange,
    state: Mapping[str, bytes | None],
    fail: Callable[..., SeriesApplyError],
    found: Mapping[str, bytes | None] | None = None,
) -> bytes:
    """The bytes a change applies to: none for a new file, which must not exist yet, else the tree's file.

    ``found`` holds the files the current mail has changed so far, as the mail
    found them. ``git apply`` (and so ``git am``, a mail at a time) reads the
    source of a rename or a copy from the tree the mail applies to, not from
    what an earlier section of the same mail made of it: a mail that empties
    a file and copies it elsewhere with an edit copies the original. Every
    other change reads what the earlier sections left. A rename or copy must
    not land on a file the tree already has.
    """
    old, new = change.old_path, change.new_path
    if old is None:
        if state.get(new or "") is not None:
            raise fail(new or "", "the patch creates it, but the tree already has it")
        return b""
    current = found[old] if found and old in found and change.kind in ("rename", "copy") else state.get(old)
    if current is None:
        raise fail(old, "the tree does not have it")
    if new is not None and new != old and state.get(new) is not None:
        raise fail(new, f"the patch {change.kind}s {old} to it, but the tree already has it")
    return current


def _apply_change(
    it: Item, change: FileChange, state: dict[str, bytes | None], found: dict[str, bytes | None], out: Applied
) -> list[str]:
    """Apply one file change to ``state``, noting in ``found`` what a file was before the mail changed it.

    Returns the paths it touched.
    """

    def write(path: str, data: bytes | None) -> None:
        found.setdefault(path, state.get(path))
        state[path] = data

    old, new = change.old_path, change.new_path
    if old is None:
        new = new or ""

    def fail(path: str, message: str, line: int | None = None) -> SeriesApplyError:
        return SeriesApplyError(it.name, it.file, line or change.line, path, message)

    current = _current(change, state, fail, found)
    result = current
    if change.diff is not None:
        result = _apply_hunks(it, change, current, fail, out)
    if new is None:
        if result != b"":
            raise fail(old or "", "the patch deletes it, but the tree's file has lines the patch does not remove")
        write(old or "", None)
        return [old or ""]
    if old is not None and old != new and change.kind == "rename":
        write(old, None)
    write(new, result)
    if change.new_mode is not None:
        out.modes[new] = change.new_mode
    return [p for p in (old, new) if p is not None]


def _apply_hunks(
    it: Item, change: FileChange, current: bytes, fail: Callable[..., SeriesApplyError], out: Applied
) -> bytes:
    if change.diff is None:
        return current
    path = change.old_path or change.new_path or ""
    # A NUL byte in the file does not stop a text hunk: git apply applies it, and so does patchkit.
    try:
        result, placed = diffs.apply_placed(change.diff, current)
    except diffs.ApplyError as e:
        raise fail(path, e.message, e.line) from e
    wrong = [p for p in placed if p.problem is not None]
    if wrong:
        shift = max(abs(p.offset) for p in placed)
        out.offsets.append(Offset(it.name, path, shift, change.line, f"{it.file}:{wrong[0].line}: {wrong[0].problem}"))
    return result
