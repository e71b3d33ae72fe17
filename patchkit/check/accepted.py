"""An accepted broken merge stays visible: each problem ``rebase --accept-broken`` committed, while it holds.

The rebase records what it accepted next to the patch (``[patches.accepted]``:
the reason given, and each blocking problem's kind and name). Every check
reads the patch's file again, offline: a name still undefined (pyflakes), an
import still made, a file that still does not parse is noted with the
reason; a problem the file no longer has is left out, and once none holds
there is no note. Whether an import resolves needs the upstream tree
(``check --deep``): offline, an accepted unresolved import holds while the
file still makes it. A diff-only patch has no file to read offline: what
was accepted is noted as accepted.

A series patch's record (``[series.NAME.patches.accepted]``) is read against
the files the whole series produces where that patch changes them: the
series applied to its upstream at the pin when the upstream can be read
offline (as the series rules apply it), else noted as accepted.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from patchkit.check.state import State
from patchkit.core.findings import Finding
from patchkit.core.values import LOCKFILE_NAME
from patchkit.trust import pycheck

if TYPE_CHECKING:
    from patchkit.lockfile.series import Series


def accepted_broken(state: State) -> list[Finding]:
    """A note per patch committed broken whose accepted problems (some of them) still hold."""
    out = []
    for i, p in enumerate(state.lock.patches):
        if p.accepted is None:
            continue
        if p.file is None:
            held, how = list(p.accepted.problems), "accepted"
        else:
            data = state.readable(str(p.file))
            if data is None:
                continue  # missing or unsafe: the file rules report it
            held, how = holding(p.accepted.problems, data), "still"
        if not held:
            continue
        out.append(
            state.lock_finding(
                "accepted-broken",
                ("patches", i, "accepted"),
                f"'{p.name}' was committed broken (rebase --accept-broken: {p.accepted.reason}); {how}: "
                + ", ".join(held),
                "fix the file, then patchkit lock; the note goes once none of these holds",
                "note",
            )
        )
    return out + _series_accepted(state)


def _series_accepted(state: State) -> list[Finding]:
    """A note per series patch committed broken whose accepted problems (some of them) still hold."""
    out = []
    for s in state.lock.series:
        chosen = [(i, p) for i, p in enumerate(s.patches) if p.accepted is not None]
        produced = _produced(state, s) if chosen else None
        for i, p in chosen:
            assert p.accepted is not None  # noqa: S101 (chosen above)
            if produced is None:
                held, how = list(p.accepted.problems), "accepted"
            else:
                found = (x for data in produced.get(p.name, []) for x in holding(p.accepted.problems, data))
                held, how = list(dict.fromkeys(found)), "still"
            if not held:
                continue
            out.append(
                Finding(
                    "accepted-broken",
                    LOCKFILE_NAME,
                    state.index.line_of(("series", s.name, "patches", i, "accepted")),
                    f"'{p.name}' of series '{s.name}' was committed broken (rebase --accept-broken: "
                    f"{p.accepted.reason}); {how}: " + ", ".join(held),
                    "fix the patch, then patchkit lock; the note goes once none of these holds",
                    severity="note",
                    field=f"series.{s.name}.patches[{p.name}].accepted",
                )
            )
    return out


def _produced(state: State, s: Series) -> dict[str, list[bytes]] | None:
    """By patch name, the Python files the whole series produces where that patch changes them.

    None when that cannot be read offline: no upstream tree, or the series
    does not read or apply (the series rules report why).
    """
    from patchkit.series.apply import Item, SeriesApplyError, apply_series
    from patchkit.series.parse import PatchParseError, parse_patch

    tree = state.series_tree(s) if state.series_tree is not None else None
    if tree is None or isinstance(tree, str):
        return None
    items = []
    try:
        for p in s.patches:
            data = state.readable(str(p.file))
            if data is None:
                return None
            items.append(Item(p.name, str(p.file), parse_patch(data, str(p.file), strip=s.strip)))
        result = apply_series(items, tree)
    except (PatchParseError, SeriesApplyError):
        return None
    files = result.files
    return {
        step.name: [data for path in step.paths if pycheck.is_python(path) and (data := files.get(path)) is not None]
        for step in result.steps
    }


def holding(problems: tuple[str, ...], data: bytes) -> list[str]:
    """The recorded problems (``"<kind> <name>"``) the file ``data`` still has, as far as an offline reading tells."""
    tree = pycheck.parse(data)
    if isinstance(tree, SyntaxError):
        return list(problems)  # a file that does not parse keeps every problem it was accepted with
    undefined = pycheck.undefined_names(tree)
    imported = _imported(tree)
    out = []
    for problem in problems:
        kind, _, name = problem.partition(" ")
        if kind == pycheck.SYNTAX:
            continue  # it parses now
        if kind == pycheck.UNDEFINED and name not in undefined:
            continue
        if kind == pycheck.UNRESOLVED and not any(_names(name, i) for i in imported):
            continue
        out.append(problem)
    return out


def _imported(tree: ast.Module) -> list[tuple[str, int, tuple[str, ...]]]:
    """Each import as (module as written, relative level, names imported from it)."""
    out: list[tuple[str, int, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, 0, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level, tuple(a.name for a in node.names)))
    return out


def _names(name: str, imported: tuple[str, int, tuple[str, ...]]) -> bool:
    """Whether an import names ``name``: a name it imports, or its module (made absolute, a relative one's tail)."""
    module, level, names = imported
    if name in names:
        return True
    if level == 0:
        return name == module
    return bool(module) and (name == module or name.endswith("." + module))
