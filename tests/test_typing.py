"""How much of the package mypy cannot check: ``typing.Any`` counted per package, each under its ceiling.

An ``Any`` switches mypy off for the value it types, and one ``Any`` spreads to
whatever is read from it. The counts below are what each package holds today:
JSON read from outside is ``Mapping[str, object]`` narrowed where it is read,
documents patchkit writes are ``TypedDict``s or ``dict[str, object]``, and a
lazily imported module's type comes from an ``if TYPE_CHECKING:`` import. What
is left is where ``Any`` is the honest type (a table of fields of mixed types,
a constructor that forwards to click's or urllib3's, the standalone guard
script that ships as bytes). Lower a ceiling when a package needs fewer; a new
``Any`` needs a reason good enough to raise one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "patchkit"

# Per package (the top-level modules under "patchkit"): the most ``Any`` it may name. A package not listed: none.
CEILINGS = {
    "check": 0,
    "cli": 7,
    "core": 16,
    "formats": 2,
    "guard": 10,
    "images": 2,
    "importing": 32,
    "lockfile": 9,
    "model": 1,
    "net": 4,
    "rebase": 71,
    "store": 3,
}


def _names_any(node: ast.AST) -> int:
    """How many times ``node`` names ``Any``: ``Any`` or ``typing.Any``."""
    return sum(
        1
        for n in ast.walk(node)
        if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
    )


def _in_string_annotation(text: str) -> int:
    """The ``Any`` of a quoted annotation (``"dict[str, Any]"``); 0 for a string that is no expression."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return 0
    return _names_any(tree)


def _annotations(tree: ast.Module) -> list[ast.AST]:
    """Every place of a module that types something: annotations, return types, aliases, casts, type arguments."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        elif isinstance(node, ast.Assign | ast.Call | ast.Subscript):
            # An alias (``Raw = dict[str, Any]``), a cast, a generic's argument: no annotation node of their own.
            found.extend(n for n in ast.iter_child_nodes(node) if not isinstance(n, ast.expr_context))
    return found


def count_any(path: Path) -> int:
    """The ``Any`` a module names anywhere but in its imports (an annotation's strings read as code)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_code = _names_any(tree)
    quoted = sum(
        _in_string_annotation(n.value)
        for a in _annotations(tree)
        for n in ast.walk(a)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "Any" in n.value
    )
    return in_code + quoted


def counts(package: Path = PACKAGE) -> dict[str, int]:
    """``Any`` per package of patchkit (a module at the top counts as its own package)."""
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).parts
        name = parts[0] if len(parts) > 1 else path.stem
        found[name] = found.get(name, 0) + count_any(path)
    return found


def test_each_package_keeps_any_under_its_ceiling() -> None:
    over = {name: f"{n} > {CEILINGS.get(name, 0)}" for name, n in counts().items() if n > CEILINGS.get(name, 0)}
    assert not over, f"more Any than the ceiling in tests/test_typing.py allows (type them instead): {over}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from typing import Any\n", 0),  # an import names nothing yet
        ("from typing import Any\ndef f(x: Any) -> dict[str, Any]: ...\n", 2),
        ("import typing\nx: typing.Any = 1\n", 1),
        ("Raw = dict[str, Any]\n", 1),
        ('def f(x: "dict[str, Any]") -> None: ...\n', 1),  # a quoted annotation is counted as code
        ('MESSAGE = "Any other archive is refused"\n', 0),  # prose is not
        ("def f(x: object) -> Mapping[str, object]: ...\n", 0),
    ],
)
def test_counts_every_any_a_module_names(tmp_path: Path, source: str, expected: int) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)
    assert count_any(module) == expected
