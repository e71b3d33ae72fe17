"""Python scopes for the static readings of patcher scripts: each function's names kept apart.

The readings in :mod:`patchkit.importing.patchers` and
:mod:`patchkit.importing.patcher_anchors` key what they know by name. A
script with one function per file it patches binds ``path``, ``src`` and
``n`` in each; read by bare name, the last ``path`` would be every
function's. :func:`qualify` renames, in place, each name a function binds
(assignment, loop or ``with`` target, parameter; not one it declares
``global`` or ``nonlocal``) to ``name·function`` at every use Python would
resolve to that binding, so the readings keep scopes apart without knowing
of them. Module names, imports and functions keep their names. A default
value and a decorator belong to the scope around the function, as Python
evaluates them there. Comprehension variables count as their function's.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

MARK = "·"  # not in any Python identifier: a qualified name never meets a name of the script
_QUALIFIED = re.compile(re.escape(MARK) + r"[\w.]+")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def local(name: str, scope: str) -> str:
    """The name ``name`` bound in the function ``scope`` goes by ("" is the module, whose names are unchanged)."""
    return f"{name}{MARK}{scope}" if scope else name


def plain(text: str) -> str:
    """``text`` (an unparsed expression) with the names as the script writes them, for messages."""
    return _QUALIFIED.sub("", text)


@dataclass
class Scopes:
    """What :func:`qualify` found: each function's scope name, by the function node's id."""

    of: dict[int, str] = field(default_factory=dict)
    at_top: set[int] = field(default_factory=set)  # ids of the names read or bound at module level

    def scope(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        return self.of.get(id(fn), "")


def qualify(tree: ast.Module) -> Scopes:
    """Rename each function-local name of ``tree`` in place (see the module's docstring); the scopes found."""
    scopes = Scopes()
    _walk_scope(tree.body, [], "", scopes)
    return scopes


def _walk_scope(body: list[ast.stmt], stack: list[tuple[str, set[str]]], qual: str, scopes: Scopes) -> None:
    """Rename the names read or bound in ``body`` (one scope's statements) and descend into its functions."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, _FUNCTIONS):
            _function(node, stack, qual, scopes)
            continue
        if isinstance(node, ast.Lambda):
            todo += [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
            continue
        if isinstance(node, ast.ClassDef):
            todo += [*node.decorator_list, *node.bases, *node.keywords, *node.body]
            continue
        if isinstance(node, ast.Name):
            node.id = _resolve(node.id, stack)
            if not stack:
                scopes.at_top.add(id(node))
        todo += list(ast.iter_child_nodes(node))


def _function(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, stack: list[tuple[str, set[str]]], outer: str, scopes: Scopes
) -> None:
    # Evaluated where the function is defined: decorators, defaults, annotations.
    around: list[ast.stmt] = [ast.Expr(e) for e in (*fn.decorator_list, *fn.args.defaults)]
    around += [ast.Expr(e) for e in fn.args.kw_defaults if e is not None]
    _walk_scope(around, stack, outer, scopes)
    qual = f"{outer}.{fn.name}" if outer else fn.name
    scopes.of[id(fn)] = qual
    _walk_scope(fn.body, [*stack, (qual, _locals(fn))], qual, scopes)


def _resolve(name: str, stack: list[tuple[str, set[str]]]) -> str:
    for qual, names in reversed(stack):
        if name in names:
            return local(name, qual)
    return name


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names ``fn`` binds itself: its parameters and assigned names, less those it declares global."""
    args = fn.args
    bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    declared: set[str] = set()
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            continue  # its own scope
        if isinstance(node, ast.Global | ast.Nonlocal):
            declared |= set(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        todo += list(ast.iter_child_nodes(node))
    return bound - declared
