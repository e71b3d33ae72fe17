"""Do the imports of an upstream's own package resolve in an upstream tree?

A tree is an upstream snapshot (git commit, wheel, directory, image: any ``sources`` adapter)
read through one batched reader, with the deployment's own files laid over it (the merged
overlays and the new modules mount over the same package at run time). ``from pkg.a import X``
resolves when ``pkg/a.py`` (or ``pkg/a/__init__.py``) binds ``X`` at its top level, re-exports it
(a star import followed inside the package), or ``pkg/a/X.py`` is a submodule.

What cannot be told from the sources is never called missing: a module that defines
``__getattr__`` or writes ``globals()``, a star import from outside the package, a module with no
Python source (a compiled extension) — the caller decides what the last means.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from patchkit.trust.pycheck import Defined, Import, defined, parse

#: Reads many upstream paths at once: bytes, or None where the path does not exist.
Reader = Callable[[list[str]], Mapping[str, bytes | None]]

#: How deep star re-exports are followed (``__init__`` -> ``from .a import *`` -> ...).
STAR_DEPTH = 8


class Verdict(Enum):
    OK = "ok"
    NO_MODULE = "no-module"  # no Python source for the module in the tree
    NO_NAME = "no-name"  # the module is there and does not define the name


@dataclass
class Tree:
    """An upstream tree: ``read`` for the snapshot, ``overlay`` for the deployment's files laid over it.

    ``overlay`` maps an upstream path to the bytes that run there (or a function giving them, read
    only when asked). Every path read is kept, so resolving many imports costs one batched read per
    round.
    """

    read: Reader
    overlay: Mapping[str, bytes | Callable[[], bytes | None]] = field(default_factory=dict)
    root: str = ""
    _files: dict[str, bytes | None] = field(default_factory=dict)
    _defined: dict[str, Defined | None] = field(default_factory=dict)

    def fetch(self, paths: Iterable[str]) -> None:
        """Read every path not read yet, the overlay first, the rest in one batch."""
        wanted = [p for p in dict.fromkeys(paths) if p not in self._files]
        rest = []
        for p in wanted:
            if p in self.overlay:
                value = self.overlay[p]
                self._files[p] = value() if callable(value) else value
            else:
                rest.append(p)
        if rest:
            got = self.read(rest)
            for p in rest:
                self._files[p] = got.get(p)

    def candidates(self, module: str) -> tuple[str, str]:
        stem = self.root + module.replace(".", "/")
        return f"{stem}.py", f"{stem}/__init__.py"

    def source(self, module: str) -> str | None:
        """The path of the module's Python source in the tree (after ``fetch``), or None."""
        return next((p for p in self.candidates(module) if self._files.get(p) is not None), None)

    def defined(self, path: str) -> Defined | None:
        """What the module at ``path`` defines; None when it does not parse here."""
        if path not in self._defined:
            data = self._files.get(path)
            tree = parse(data) if data is not None else None
            self._defined[path] = defined(tree, path) if isinstance(tree, ast.Module) else None
        return self._defined[path]


def resolve(tree: Tree, wanted: Iterable[Import]) -> dict[tuple[str, str | None], tuple[Verdict, str | None]]:
    """Each import's verdict in ``tree``, with the module's path when it was found."""
    wanted = list({i.key: i for i in wanted}.values())
    paths: list[str] = []
    for imp in wanted:
        paths += tree.candidates(imp.module)
        if imp.name is not None:
            paths += tree.candidates(f"{imp.module}.{imp.name}")
    tree.fetch(paths)
    out: dict[tuple[str, str | None], tuple[Verdict, str | None]] = {}
    for imp in wanted:
        where = tree.source(imp.module)
        sub = tree.source(f"{imp.module}.{imp.name}") if imp.name is not None else None
        if imp.name is None or sub is not None:
            # ``import a.b``, or ``from a import b`` of a submodule (a namespace package's too).
            found = sub or where
            out[imp.key] = (Verdict.OK if found else Verdict.NO_MODULE, found)
            continue
        if where is None:
            out[imp.key] = (Verdict.NO_MODULE, None)
            continue
        out[imp.key] = (Verdict.OK if _provides(tree, where, imp.name) else Verdict.NO_NAME, where)
    return out


def _provides(tree: Tree, path: str, name: str) -> bool:
    """Whether the module at ``path`` can give ``name``: bound there, re-exported, or not knowable."""
    seen: set[str] = set()
    todo = [path]
    for _ in range(STAR_DEPTH):
        if not todo:
            return False
        stars: list[str] = []
        for p in todo:
            seen.add(p)
            d = tree.defined(p)
            if d is None or d.dynamic or name in d.names:
                return True  # unparsable here, or names made at run time: cannot call it missing
            stars += d.stars
        tree.fetch(c for m in stars for c in tree.candidates(m))
        todo = []
        for m in stars:
            found = tree.source(m)
            if found is None:
                return True  # re-exported from outside the package or from compiled code: cannot tell
            if found not in seen:
                todo.append(found)
    return True
