"""What a Python file says about itself: does it parse, which names it leaves undefined, what it imports.

Pure functions over bytes and ``ast`` trees, no I/O. Undefined names come from pyflakes (used as a
library, on the tree already parsed), so the rules about scopes, ``global``, conditional imports,
``__all__`` and builtins are a well-kept checker's, not ours. Imports are read as the interpreter
resolves them: ``from .x import y`` in ``pkg/a/b.py`` is ``pkg.a.x``.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field

#: The kinds of problem a check reports; ``unknown`` blocks nothing and says why it could not tell.
SYNTAX = "syntax"
UNDEFINED = "undefined-name"
UNRESOLVED = "unresolved-import"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Problem:
    """One reason a merged Python file would fail (or could not be checked), with its line and name."""

    kind: str
    line: int
    name: str
    message: str

    @property
    def blocking(self) -> bool:
        return self.kind != UNKNOWN

    def text(self, path: str) -> str:
        return f"{path}:{self.line}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "line": self.line, "name": self.name, "message": self.message}


def is_python(path: str) -> bool:
    return path.endswith(".py")


def parse(source: bytes) -> ast.Module | SyntaxError:
    """The module's tree, or the SyntaxError that says where it fails."""
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences and the like warn at compile time; they do not stop the import.
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except SyntaxError as e:
        return e
    except (ValueError, RecursionError, MemoryError) as e:
        return SyntaxError(str(e))


def syntax_problem(error: SyntaxError) -> Problem:
    line = error.lineno or 1
    return Problem(SYNTAX, line, "", f"does not parse: {error.msg or error}")


def undefined_names(tree: ast.Module, filename: str = "<merged>") -> dict[str, int]:
    """Each name the module uses but never defines (pyflakes' UndefinedName), with its first line."""
    import pyflakes.checker  # type: ignore[import-untyped]  # pyflakes ships no type information
    import pyflakes.messages  # type: ignore[import-untyped]

    checker = pyflakes.checker.Checker(tree, filename=filename)
    found: dict[str, int] = {}
    for message in checker.messages:
        if isinstance(message, pyflakes.messages.UndefinedName):
            name = str(message.message_args[0])
            found.setdefault(name, message.lineno)
    return found


# --------------------------------------------------------------------------- imports


@dataclass(frozen=True)
class Import:
    """One import of a module of the upstream's own package, made absolute.

    ``name`` is the imported name of a ``from`` import (None for ``import a.b``); ``text`` is the
    statement as the file wrote it, for messages.
    """

    line: int
    module: str
    name: str | None
    text: str

    @property
    def key(self) -> tuple[str, str | None]:
        return self.module, self.name


def module_name(path: str) -> tuple[str, bool] | None:
    """The dotted module a file is (``pkg/a/b.py`` -> ``pkg.a.b``) and whether it is a package's ``__init__``.

    A ``src/`` layout's leading ``src/`` is not part of the name. None when a part is no identifier.
    """
    parts = path.removeprefix("src/").split("/")
    if not parts[-1].endswith(".py"):
        return None
    parts[-1] = parts[-1][: -len(".py")]
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts), package


def package_of(path: str) -> str | None:
    """The top-level package a file belongs to: its first directory (after ``src/``)."""
    found = module_name(path)
    if found is None or ("." not in found[0] and not found[1]):
        return None
    return found[0].split(".", 1)[0]


_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def imports(tree: ast.Module, path: str, packages: set[str]) -> list[Import]:
    """Every import in the file of a module of ``packages``, absolute, except those guarded against failing.

    An import inside ``try: … except ImportError`` (or a broader handler) is the file's own way
    of coping with a missing module, so it is not expected to resolve.
    """
    me = module_name(path)
    if me is None:
        return []
    here, is_package = me
    anchor = here.split(".") if is_package else here.split(".")[:-1]
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)) and any(
            _catches_import(h) for h in node.handlers
        ):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out: list[Import] = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            out += [
                Import(node.lineno, a.name, None, f"import {a.name}")
                for a in node.names
                if a.name.split(".", 1)[0] in packages
            ]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, anchor)
            if module is not None and module.split(".", 1)[0] in packages:
                shown = "." * node.level + (node.module or "")
                out += [
                    Import(node.lineno, module, a.name, f"from {shown} import {a.name}")
                    for a in node.names
                    if a.name != "*"
                ]
    return sorted(out, key=lambda i: (i.line, i.module, i.name or ""))


def _catches_import(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in _GUARDS for n in names)


def _absolute(node: ast.ImportFrom, anchor: list[str]) -> str | None:
    if not node.level:
        return node.module
    if node.level - 1 > len(anchor) or (node.level - 1 == len(anchor)):
        return None  # beyond the top of the package
    base = anchor[: len(anchor) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


# --------------------------------------------------------------------------- what a module defines


@dataclass(frozen=True)
class Defined:
    """The names a module binds at its top level, its star imports, and whether it makes names at run time.

    ``dynamic`` is set when the module defines ``__getattr__`` or writes ``globals()`` or
    ``sys.modules``: it can then provide any name, and a check must not call one missing.
    """

    names: frozenset[str]
    stars: tuple[str, ...]
    dynamic: bool


def _targets(node: ast.AST) -> list[ast.AST]:
    """The binding targets of a module-level statement that binds with ``=``, ``for``, ``with`` or ``except``."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        return [node.target]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [i.optional_vars for i in node.items if i.optional_vars is not None]
    if isinstance(node, ast.match_case):
        return [node.pattern]
    if type(node).__name__ == "TypeAlias":
        return [node.name]  # type: ignore[attr-defined]
    return []


def _bound(target: ast.AST) -> set[str]:
    """Every name a target (or a match pattern) binds."""
    found: set[str] = set()
    for sub in ast.walk(target):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        for attr in ("name", "rest"):  # MatchAs, MatchStar, MatchMapping
            value = getattr(sub, attr, None) if isinstance(sub, ast.pattern) else None
            if isinstance(value, str):
                found.add(value)
    return found


def _module_level(body: list[ast.stmt]) -> list[ast.AST]:
    """Every statement (and match case, except handler) at module level, inside if/try/with/for blocks too."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt | ast.excepthandler | ast.match_case)]
    return out


@dataclass
class _Bindings:
    """Names a module binds, the modules it star-imports, and whether it may bind names no statement shows."""

    anchor: list[str]
    names: set[str] = field(default_factory=set)
    stars: list[str] = field(default_factory=list)
    dynamic: bool = False

    def statement(self, node: ast.AST) -> None:
        """What one module-level statement (or handler, or match case) binds."""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.names.add(node.name)
            self.dynamic = self.dynamic or node.name == "__getattr__"
        elif isinstance(node, ast.Import):
            self.names.update(a.asname or a.name.split(".", 1)[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            self.import_from(node)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.names.add(node.name)
        for target in _targets(node):
            self.names |= _bound(target)

    def import_from(self, node: ast.ImportFrom) -> None:
        """``from M import a, b`` binds a and b; ``from M import *`` whatever M has (dynamic when M is unknown)."""
        self.names.update(a.asname or a.name for a in node.names if a.name != "*")
        if any(a.name == "*" for a in node.names):
            module = _absolute(node, self.anchor)
            self.stars += [module] if module is not None else []
            self.dynamic = self.dynamic or module is None

    def anywhere(self, node: ast.AST) -> None:
        """What any node binds in the module namespace: a walrus or ``global``; or ``globals()`` and the like."""
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            self.names.add(node.target.id)  # conservative: a walrus in a function binds a local, but may not
        elif isinstance(node, ast.Global):
            self.names.update(node.names)
        elif _writes_namespace(node):
            self.dynamic = True


def defined(tree: ast.Module, path: str) -> Defined:
    """What ``from <this module> import X`` can find: every name bound at module level, conditionally too."""
    me = module_name(path)
    anchor = (me[0].split(".") if me[1] else me[0].split(".")[:-1]) if me is not None else []
    found = _Bindings(anchor)
    for node in _module_level(tree.body):
        found.statement(node)
    for node in ast.walk(tree):
        found.anywhere(node)
    return Defined(frozenset(found.names), tuple(found.stars), found.dynamic)


def _writes_namespace(node: ast.AST) -> bool:
    """``globals()``, ``vars()`` or ``sys.modules``: the module may make names no statement shows."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("globals", "vars")
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "modules"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )
