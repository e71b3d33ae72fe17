"""``check --deep``: do the imports of every overlay and module resolve in the pinned upstream, its names?

The offline check proves the files are what the lockfile pins; it cannot see that an overlay
imports a name the pinned upstream no longer has. This reads the pinned upstream tree (git,
wheel, directory or image, through its source adapter) with every deployment file laid over it,
and resolves each import of the upstream's own package that the upstream's own file at the same
path does not make itself (a new module vouches for nothing), and notes each name the file leaves
undefined that the upstream's file defines (``patchkit.trust.names``). A file is checked only
against the upstream that ships it: the upstream of its pinned base, or, for a module, the upstream
whose package directory holds it. It is off the default ``check`` because it needs the upstream tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.core.findings import Finding
from patchkit.core.hashing import sha256_bytes
from patchkit.errors import PatchkitError
from patchkit.lockfile.model import Lockfile, Patch, PatchKind, Upstream
from patchkit.sources.context import Context
from patchkit.store.cache import BlobStore
from patchkit.store.repo import Repo
from patchkit.trust.imports import Tree, Verdict, resolve
from patchkit.trust.names import new_undefined
from patchkit.trust.pycheck import Import, imports, is_python, package_of, parse

CODE = "import-unresolved"


@dataclass(frozen=True)
class Member:
    """A deployment file inside an upstream's tree: the patch, its upstream path, where it is in the repository."""

    patch: Patch
    path: str
    shown: str  # the repository file a finding names (the diff of a diff-only patch)


def findings(repo: Repo, lock: Lockfile, cache: Context, store: BlobStore) -> list[Finding]:
    """Every import of an overlay or module that the pinned upstream (with the deployment laid over it) lacks."""
    out: list[Finding] = []
    for up in lock.upstreams:
        members = _members(lock, up)
        if members:
            out += _check_upstream(repo, lock, up, members, cache, store)
    return out


def _members(lock: Lockfile, up: Upstream) -> list[Member]:
    """The deployment's Python files that ``up`` ships, each at its path in ``up``'s tree."""
    roots = _roots(lock)
    mine = roots.get(up.name, {})
    out = []
    for p in lock.patches:
        if p.kind not in (PatchKind.OVERLAY, PatchKind.MODULE) or not is_python(str(p.target)):
            continue
        target = str(p.target)
        root = next((r for r in sorted(mine) if target.startswith(r)), None)
        if root is None or not _ships(p, up.name, target[len(root) :], roots):
            continue
        shown = str(p.file) if p.file is not None else str(p.diff.file) if p.diff is not None else p.name
        out.append(Member(p, target[len(root) :], shown))
    return out


def _roots(lock: Lockfile) -> dict[str, dict[str, set[str]]]:
    """For each upstream, where its tree is installed: install root -> the top-level packages found there."""
    out: dict[str, dict[str, set[str]]] = {}
    for p in lock.patches:
        if p.base is not None and str(p.target).endswith("/" + str(p.base.path)):
            root = str(p.target)[: -len(str(p.base.path))]
            out.setdefault(p.base.upstream, {}).setdefault(root, set()).add(str(p.base.path).split("/", 1)[0])
    return out


def _ships(p: Patch, name: str, path: str, roots: dict[str, dict[str, set[str]]]) -> bool:
    """Whether upstream ``name`` ships the file at ``path``: its base is that upstream's, or it sits in its package.

    A module in a package directory no upstream is known to ship (or a top-level
    module) is checked against each upstream installed where it is.
    """
    if p.base is not None:
        return p.base.upstream == name
    top = path.split("/", 1)[0] if "/" in path else None
    owners = {u for u, at in roots.items() for tops in at.values() if top in tops}
    return not owners or name in owners


def _check_upstream(
    repo: Repo, lock: Lockfile, up: Upstream, members: list[Member], cache: Context, store: BlobStore
) -> list[Finding]:
    from patchkit.sources.factory import open_source, pinned_snapshot

    try:
        snap = pinned_snapshot(open_source(up, cache, repo.root), up)
        upstream_files = snap.read([m.path for m in members])
    except PatchkitError as e:
        return [
            Finding(
                CODE, "lockfile.toml", None, f"upstream '{up.name}' could not be read ({e}): imports not checked",
                fix=e.hint, field=f"upstreams[{up.name}]", severity="unknown",
            )
        ]  # fmt: skip
    out: list[Finding] = []
    files: dict[str, bytes] = {}
    for m in members:
        data = _bytes(repo, m.patch, upstream_files.get(m.path), store)
        if data is None:
            out.append(_note(m, "its base is not available offline nor at the pinned upstream: imports not checked"))
        else:
            files[m.path] = data
    packages = {pkg for path in files if (pkg := package_of(path)) is not None}
    pending: list[tuple[Member, Import]] = []
    for m in members:
        if m.path not in files:
            continue
        tree = parse(files[m.path])
        if not isinstance(tree, ast.Module):
            continue  # the offline check and the rebase say what does not parse
        vouched = (
            _imports_of(upstream_files.get(m.path), m.path, packages) if m.patch.kind is PatchKind.OVERLAY else set()
        )
        pending += [(m, i) for i in imports(tree, m.path, packages) if i.key not in vouched]
    out += _undefined(members, files, upstream_files)
    verdicts = resolve(Tree(snap.read, dict(files)), (i for _, i in pending))
    for m, imp in pending:
        verdict, where = verdicts[imp.key]
        if verdict is Verdict.NO_NAME:
            out.append(
                _error(m, imp, f"the pinned upstream '{up.name}' ({up.pin_text}): {where} defines no '{imp.name}'")
            )
        elif verdict is Verdict.NO_MODULE:
            out.append(
                _note(
                    m,
                    f"{imp.text}: no Python source for {imp.module} in the pinned upstream '{up.name}' "
                    "(a compiled or generated module, or gone): not checked",
                    imp.line,
                )
            )
    return out


def _undefined(
    members: list[Member], files: dict[str, bytes], upstream_files: dict[str, bytes | None]
) -> list[Finding]:
    """The names each file leaves undefined that the upstream's own file at its path defines (modules: every one)."""
    out: list[Finding] = []
    for m in members:
        if m.path in files:
            theirs = upstream_files.get(m.path) if m.patch.kind is PatchKind.OVERLAY else None
            out += new_undefined(m.patch.name, m.shown, files[m.path], theirs)
    return out


def _bytes(repo: Repo, p: Patch, upstream_file: bytes | None, store: BlobStore) -> bytes | None:
    """The file that runs: committed, or a diff-only patch's diff on its base (cached, or the pinned upstream's)."""
    from patchkit.sources.materialize import apply_diff_only, read_pinned, recover_base

    if p.file is not None:
        return read_pinned(repo, str(p.file), p.name)
    base = recover_base(repo, p, store)
    if base is None and p.base is not None and upstream_file is not None:
        base = upstream_file if sha256_bytes(upstream_file) == p.base.sha256.hex else None
    if base is None:
        return None
    try:
        return apply_diff_only(repo, p, base)
    except PatchkitError:
        return None  # a stale diff is the offline check's finding


def _imports_of(data: bytes | None, path: str, packages: set[str]) -> set[tuple[str, str | None]]:
    tree = parse(data) if data is not None else None
    return {i.key for i in imports(tree, path, packages)} if isinstance(tree, ast.Module) else set()


def _where(m: Member, line: int | None) -> tuple[str, int | None, str]:
    if m.patch.file is not None or line is None:
        return m.shown, line, ""
    return m.shown, None, f" (line {line} of the file it builds)"


def _error(m: Member, imp: Import, why: str) -> Finding:
    file, line, suffix = _where(m, imp.line)
    return Finding(
        CODE,
        file,
        line,
        f"{imp.text}{suffix}: {why} (patch '{m.patch.name}')",
        fix="import the name as the pinned upstream now calls it, or pin the upstream the patch was made for",
        field=f"patches[{m.patch.name}]",
    )


def _note(m: Member, why: str, line: int | None = None) -> Finding:
    file, line, suffix = _where(m, line)
    return Finding(CODE, file, line, f"patch '{m.patch.name}'{suffix}: {why}", field=f"patches[{m.patch.name}]",
                   severity="note")  # fmt: skip
