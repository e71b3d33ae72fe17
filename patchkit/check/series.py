"""``patchkit check`` for patch series: the rules, as findings.

Offline, for each ``[series.NAME]``: every patch file parses (binary hunks
refused), the quilt ``series`` file lists exactly the lockfile's patches in
the lockfile's order, the series applies to the commit its upstream pins;
and, when the upstream's files can be read without the network (a local
git repository or one already in patchkit's cache, a directory), every
profile applies in order with exact context: a hunk at a line offset is a
note, a change to a file the tree does not carry is a note, anything else
that does not apply is an error at the patch's line. Pinned hashes and
orphans are the general file rules' (the series' files are in
``Lockfile.files``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from patchkit.check.state import SERIES_REBASE_STATE, State
from patchkit.core.findings import Finding
from patchkit.core.values import LOCKFILE_NAME
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.series import Series, parse_series_file

if TYPE_CHECKING:  # parsing and applying are imported by a lockfile with series only
    from patchkit.series.apply import Item, Reader

#: ``(series) -> reader of the upstream at the series' pin``, or a reason it cannot be read offline.
TreeFor = Callable[[Series], "Reader | str"]


Read = Callable[[str], "bytes | None"]


def series(state: State) -> list[Finding]:
    """The rule ``check.run`` runs: every series of the lockfile, over the gathered state."""
    out = []
    if state.series_rebase_pending:
        out.append(
            Finding(
                "series-rebase-in-progress",
                SERIES_REBASE_STATE,
                None,
                "a series rebase waits for its conflicts to be resolved; the repository is still at the old pin",
                "patchkit status; then patchkit rebase --continue or --abort",
                severity="note",
            )
        )
    if state.lock.series and state.series_tree is not None:
        out += series_findings(state.readable, state.lock, state.series_tree, state.index.line_of)
    return out


def own_locks(state: State) -> list[Finding]:
    """A JSON lock of the repository's own (a pinned ``*lock*.json``) that pins a series patch's sha256 agrees.

    The repository's build may verify each patch against it; after a series
    rebase rewrites a patch, such a pin is stale and the build would refuse
    the patch: reported at the lock's line, with the sha256 to write. A pin
    of a name no pinned file has (a patch deleted or renamed) is reported
    too, as import reports it.
    """
    import json

    from patchkit.core.hashing import sha256_bytes
    from patchkit.importing.queue import patch_pins

    files = {str(p.file): str(p.file) for s in state.lock.series for p in s.patches}
    by_name = {PurePosixPath(f).name: f for f in files}
    out = []
    for a in state.lock.artifacts:
        rel = str(a.file)
        if not rel.endswith(".json") or "lock" not in PurePosixPath(rel).name.lower():
            continue
        if (data := state.readable(rel)) is None:
            continue
        text = data.decode("utf-8", "replace")
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):  # not a lock patchkit can compare (import reported it)
            continue
        for name, digest in patch_pins(doc):
            line = text[: max(text.find(digest), 0)].count("\n") + 1
            hit = files.get(name) or by_name.get(PurePosixPath(name).name)
            if hit is None and files and _names_nothing(state, name):
                out.append(
                    Finding("series-lock-drift", rel, line, f"pins {name}, which is no patch file", "remove the pin")
                )
            now = state.readable(hit) if hit is not None else None
            if now is None or sha256_bytes(now) == digest.lower():
                continue
            out.append(
                Finding(
                    "series-lock-drift",
                    rel,
                    line,
                    f"pins {name} at sha256 {digest[:12]}…, but {hit} is {sha256_bytes(now)[:12]}… now",
                    f"update the pin to {sha256_bytes(now)} (the build checks it)",
                )
            )
    return out


def _names_nothing(state: State, name: str) -> bool:
    """Whether a lock's patch name is no file the lockfile pins, by path or by file name (as import matches it):
    a patch deleted or renamed since, whose pin the build would look for in vain."""
    base = PurePosixPath(name).name
    return not any(n.path.path == name or n.path.pure.name == base for n in state.named())


def series_findings(
    read: Read, lock: Lockfile, tree_for: TreeFor, line_of: Callable[[tuple[str | int, ...]], int | None]
) -> list[Finding]:
    """Every series rule over the lockfile's series.

    ``read`` gives a pinned file's bytes (None: missing or unsafe, which the
    file rules report); ``line_of`` finds a field's line in the lockfile.
    """
    out: list[Finding] = []
    for s in lock.series:
        out += _pin_findings(s, lock, line_of)
        out += _order_findings(read, s)
        items, parsed_ok = _parsed(read, s, out)
        if parsed_ok and items:
            out += _apply_findings(s, items, tree_for)
    return out


def _pin_findings(s: Series, lock: Lockfile, line_of: Callable[[tuple[str | int, ...]], int | None]) -> list[Finding]:
    up = lock.upstream(s.upstream)
    field = ("series", s.name, "commit")
    if s.commit is None and s.version is None:
        return [
            Finding(
                "series-unpinned",
                LOCKFILE_NAME,
                line_of(("series", s.name)),
                f"series '{s.name}' names no upstream commit or version it applies to",
                f"set series.{s.name}.commit to the commit the patches were made against",
                field=f"series.{s.name}",
            )
        ]
    if up is not None and up.commit is not None and s.commit is not None and s.commit != up.commit:
        return [
            Finding(
                "series-pin",
                LOCKFILE_NAME,
                line_of(field),
                f"series '{s.name}' applies to {str(s.commit)[:12]}, but upstream '{up.name}' is pinned at "
                f"{str(up.commit)[:12]}: the image would carry patches made for another commit",
                f"patchkit rebase --series {s.name} --onto {up.commit}",
                field=f"series.{s.name}.commit",
            )
        ]
    return []


def _order_findings(read: Read, s: Series) -> list[Finding]:
    if s.series_file is None:
        return []
    data = read(str(s.series_file))
    if data is None:  # missing or unsafe: the file rules report it
        return []
    here = PurePosixPath(str(s.series_file)).parent
    listed = [str(here / name) for name in parse_series_file(data)]
    pinned = [str(p.file) for p in s.patches]
    if listed == pinned:
        return []
    rel = str(s.series_file)
    for k, (a, b) in enumerate(zip(listed, pinned, strict=False)):
        if a != b:
            message = f"entry {k + 1} is {a}, the lockfile's patch {k + 1} of series '{s.name}' is {b}"
            break
    else:
        extra = listed[len(pinned) :] or pinned[len(listed) :]
        where = "the series file" if len(listed) > len(pinned) else "the lockfile"
        message = f"only {where} lists {', '.join(extra)}"
    return [
        Finding(
            "series-order",
            rel,
            None,
            f"the series file and the lockfile disagree on the order of series '{s.name}': {message}",
            f"list the patches in {rel} in the order of [[series.{s.name}.patches]] (or reorder those), "
            "then patchkit lock",
        )
    ]


def _parsed(read: Read, s: Series, out: list[Finding]) -> tuple[list[Item], bool]:
    from patchkit.series.apply import Item
    from patchkit.series.parse import PatchParseError, parse_patch

    items = []
    ok = True
    for p in s.patches:
        data = read(str(p.file))
        if data is None:  # missing, unsafe or edited: reported by the file rules
            ok = False
            continue
        try:
            items.append(Item(p.name, str(p.file), parse_patch(data, str(p.file), strip=s.strip)))
        except PatchParseError as e:
            ok = False
            out.append(Finding("series-parse", e.file, e.line, f"patch '{p.name}': {e.detail}", e.hint))
    return items, ok


def _apply_findings(s: Series, items: list[Item], tree_for: TreeFor) -> list[Finding]:
    from patchkit.series.apply import SeriesApplyError, apply_series

    tree = tree_for(s)
    if isinstance(tree, str):
        return [Finding("series-not-applied", LOCKFILE_NAME, None, f"series '{s.name}': {tree}", severity="note")]
    out: list[Finding] = []
    seen: set[tuple[str, str, str]] = set()
    for profile in s.profiles or (None,):
        chosen = [it for it in items if s.patch(it.name) is not None and s.patch(it.name).in_profile(profile)]  # type: ignore[union-attr]
        shown = f" (profile {profile})" if profile else ""
        try:
            result = apply_series(chosen, tree)
        except SeriesApplyError as e:
            key = ("apply", e.patch, e.path)
            if key not in seen:
                seen.add(key)
                out.append(
                    Finding(
                        "series-apply",
                        e.file,
                        e.line,
                        f"series '{s.name}'{shown}: patch '{e.patch}' does not apply to {e.path} at the pinned "
                        f"commit: {e.detail}",
                        f"rebase the series onto its pin: patchkit rebase --series {s.name} --onto {s.commit or 'REV'}",
                    )
                )
            continue
        for o in result.offsets:
            if ("offset", o.patch, o.path) not in seen:
                seen.add(("offset", o.patch, o.path))
                out.append(
                    Finding(
                        "series-offset",
                        _file(s, o.patch),
                        o.line,
                        f"patch '{o.patch}' applies to {o.path} {o.lines} lines away from its hunk headers"
                        if o.lines
                        else f"patch '{o.patch}' applies to {o.path} as git apply does, but {o.detail}",
                        f"regenerate it exactly: patchkit rebase --series {s.name} --onto {s.commit or 'REV'}",
                        severity="note",
                    )
                )
        for a in result.absent:
            if ("absent", a.patch, a.path) not in seen:
                seen.add(("absent", a.patch, a.path))
                out.append(
                    Finding(
                        "series-absent",
                        _file(s, a.patch),
                        a.line,
                        f"patch '{a.patch}' changes {a.path} ({a.kind}), which the upstream tree does not carry; "
                        "apply skips it",
                        severity="note",
                    )
                )
    return out


def _file(s: Series, name: str) -> str:
    p = s.patch(name)
    return str(p.file) if p is not None else LOCKFILE_NAME
