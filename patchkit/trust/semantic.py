"""The semantic checks of every Python file a rebase produces: it parses, names nothing undefined, imports resolve.

A clean text merge can still break the program: the merge keeps a use of a name whose import
upstream's side dropped, or the patch's ``from pkg.mod import Name`` survives while upstream
renamed ``Name``. For each merged file (clean, moved, partly upstreamed, unchanged; a resolved
conflict at ``--continue``), against its two inputs, *ours* (the patch) and *theirs* (the new
upstream file):

- it parses (when both inputs do: a file this Python cannot parse at all is ``unknown``);
- it leaves no name undefined (pyflakes) that ours or theirs did not already leave undefined;
- every import of the upstream's own package that theirs does not make itself resolves in the
  new upstream tree, with the deployment's merged files laid over it. A module with no Python
  source in the new tree is a problem when the old tree had its source (upstream moved or deleted
  it), and ``unknown`` otherwise (a compiled extension, generated code).

Cost: files whose merge equals one input are not analysed for names, and only the imports theirs
does not vouch for are resolved, all in one batched read.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass

from patchkit.core.fanout import map_items
from patchkit.lockfile.model import Lockfile
from patchkit.trust import screen
from patchkit.trust.imports import Reader, Tree, Verdict, resolve
from patchkit.trust.pycheck import (
    SYNTAX,
    UNDEFINED,
    UNKNOWN,
    UNRESOLVED,
    Import,
    Problem,
    imports,
    is_python,
    package_of,
    parse,
    syntax_problem,
    undefined_names,
)


@dataclass(frozen=True)
class Produced:
    """One file a rebase produced: the patch's name, the new upstream path, the result and its two inputs."""

    name: str
    path: str
    merged: bytes
    ours: bytes
    theirs: bytes
    base: bytes | None = None  # the old upstream file; None: screen nothing out (a resolved conflict)


def check(
    files: list[Produced],
    new_tree: Tree | None,
    old_tree: Callable[[], Tree | None] | None = None,
) -> dict[str, tuple[Problem, ...]]:
    """The problems of each produced file, by patch name (files without any are left out).

    Without ``new_tree`` (the new upstream could not be read) imports are not checked.
    """
    problems: dict[str, list[Problem]] = {}
    pending: list[tuple[Produced, Import]] = []
    packages = {pkg for f in files if is_python(f.path) and (pkg := package_of(f.path)) is not None}
    todo = [f for f in files if is_python(f.path)]
    # Each file's checks are pure and independent: spread over every core when there are many.
    for f, (found, unvouched) in zip(
        todo, map_items(functools.partial(_check_one, packages=packages), todo), strict=True
    ):
        if found:
            problems[f.name] = found
        pending += [(f, imp) for imp in unvouched]
    if pending and new_tree is not None:
        for f, problem in _imports(pending, new_tree, old_tree):
            problems.setdefault(f.name, []).append(problem)
    return {name: tuple(sorted(found, key=lambda p: (p.line, p.kind, p.name))) for name, found in problems.items()}


def blocking(problems: tuple[Problem, ...]) -> bool:
    return any(p.blocking for p in problems)


def _check_one(f: Produced, packages: set[str]) -> tuple[list[Problem], list[Import]]:
    """Parse and undefined names of one file; the imports it makes that theirs does not.

    The screens (``patchkit.trust.screen``) first say which checks the file can fail at all;
    a file that can fail none is not parsed.
    """
    mixed = f.merged not in (f.ours, f.theirs)
    if f.merged == f.theirs:
        return [], []  # upstream's own file: parses as it does, vouches for its names and imports
    s = screen.Sides.of(f.base, f.ours, f.theirs, f.merged)
    syntax = False
    if mixed:
        blocks = screen.risky_blocks(s) if f.base is not None else None
        syntax = blocks is None or not all(screen.block_parses(b) for b in blocks)
    names = mixed and (f.base is None or screen.names_at_risk(s, f.base, f.ours, f.theirs))
    fresh = screen.new_imports(s, f.merged, f.theirs, packages)
    if not (syntax or names or fresh):
        return [], []
    merged = parse(f.merged)
    if isinstance(merged, SyntaxError):
        ours_ok = f.merged == f.ours or isinstance(parse(f.ours), ast.Module)
        theirs_ok = isinstance(parse(f.theirs), ast.Module)
        if ours_ok and theirs_ok:
            return [syntax_problem(merged)], []
        which = "the patch" if not ours_ok else "the new upstream file"
        return [
            Problem(UNKNOWN, merged.lineno or 1, "", f"not checked: {which} does not parse with this Python either")
        ], []
    theirs = parse(f.theirs) if f.theirs != f.merged else merged
    found: list[Problem] = _undefined(f, merged, theirs) if names else []
    if not fresh:
        return found, []  # upstream's own file vouches for every import it makes itself
    mine = imports(merged, f.path, packages)
    if not mine:
        return found, []
    vouched = {i.key for i in imports(theirs, f.path, packages)} if isinstance(theirs, ast.Module) else set()
    return found, [i for i in mine if i.key not in vouched]


def _undefined(f: Produced, merged: ast.Module, theirs: ast.Module | SyntaxError) -> list[Problem]:
    names = undefined_names(merged, f.path)
    if not names:
        return []
    ours = parse(f.ours)
    if isinstance(ours, SyntaxError) or isinstance(theirs, SyntaxError):
        which = "the patch" if isinstance(ours, SyntaxError) else "the new upstream file"
        return [
            Problem(UNKNOWN, line, name, f"name '{name}' is undefined; not compared: {which} does not parse")
            for name, line in names.items()
        ]
    before = set(undefined_names(ours, f.path)) | set(undefined_names(theirs, f.path))
    return [
        Problem(
            UNDEFINED,
            line,
            name,
            f"name '{name}' is used but not defined (the merge lost its definition or import; "
            "neither the patch nor the new upstream file leaves it undefined)",
        )
        for name, line in names.items()
        if name not in before
    ]


def _imports(
    pending: list[tuple[Produced, Import]], new_tree: Tree, old_tree: Callable[[], Tree | None] | None
) -> list[tuple[Produced, Problem]]:
    verdicts = resolve(new_tree, (imp for _, imp in pending))
    gone = [imp for _, imp in pending if verdicts[imp.key][0] is Verdict.NO_MODULE]
    before: dict[tuple[str, str | None], str | None] = {}
    old = old_tree() if gone and old_tree is not None else None
    if old is not None:
        old.fetch(c for imp in gone for c in old.candidates(imp.module))
        before = {imp.key: old.source(imp.module) for imp in gone}
    out = []
    for f, imp in pending:
        verdict, where = verdicts[imp.key]
        if verdict is Verdict.NO_NAME:
            message = f"{imp.text}: the new upstream's {where} defines no '{imp.name}' (renamed or removed upstream?)"
            out.append((f, Problem(UNRESOLVED, imp.line, imp.name or imp.module, message)))
        elif verdict is Verdict.NO_MODULE:
            was = before.get(imp.key)
            if was is not None:
                message = f"{imp.text}: module {imp.module} is gone from the new upstream (the old one had {was})"
                out.append((f, Problem(UNRESOLVED, imp.line, imp.module, message)))
            else:
                why = "nor in the old one" if old is not None else "and the old tree could not be read"
                message = (
                    f"{imp.text}: no Python source for {imp.module} in the new upstream, {why} "
                    "(a compiled or generated module?): not checked"
                )
                out.append((f, Problem(UNKNOWN, imp.line, imp.module, message)))
    return out


def tree(
    read: Reader,
    lock: Lockfile,
    placed: dict[str, tuple[str, str, bytes]],
    read_file: Callable[[str], bytes | None],
) -> Tree:
    """The upstream tree as it runs: ``read`` for the snapshot, the deployment's files laid over it.

    ``placed`` maps a patch name to its container target, upstream path and bytes (the files this
    rebase produces). The container directory that a target minus its upstream path names is the
    upstream's tree in the image; every other pinned file mounted inside it (a new module, an
    overlay of no upstream) is laid over the snapshot too, read from the repository (``read_file``,
    a repository path) only if an import asks for it.
    """
    overlay: dict[str, bytes | Callable[[], bytes | None]] = {}
    roots: set[str] = set()
    for target, path, data in placed.values():
        overlay[path] = data
        if target.endswith("/" + path):
            roots.add(target[: -len(path)])
    for p in lock.patches:
        if p.name in placed or p.file is None:
            continue
        target = str(p.target)
        root = next((r for r in sorted(roots) if target.startswith(r)), None)
        if root is not None and target[len(root) :] not in overlay:
            rel = str(p.file)
            overlay[target[len(root) :]] = lambda rel=rel: read_file(rel)  # type: ignore[misc]
    return Tree(read, overlay)


__all__ = ["SYNTAX", "UNDEFINED", "UNKNOWN", "UNRESOLVED", "Problem", "Produced", "blocking", "check", "tree"]
