"""Patcher scripts: Python that replaces exact, anchored text in upstream files at build or start.

Deployments that do not mount whole files often carry scripts such as::

    import vllm
    from pathlib import Path

    path = Path(vllm.__file__).parent / "v1" / "core" / "sched" / "scheduler.py"
    src = path.read_text()
    assert OLD in src, "anchor not found"
    path.write_text(src.replace(OLD, NEW))

run by a Containerfile ``RUN python3 patch_x.py`` or by the entrypoint.
The lockfile calls them transformers. This module tells such a script from
any other Python file (it reads a file, edits text with ``.replace``,
``re.sub``/``re.subn`` or by splicing around what it searched for, or
replaces a file, and writes one) and finds,
without running it, the upstream files it edits: paths built from
``<module>.__file__`` and ``<package>.__path__`` (``Path(…).parent``,
``.parents[N]``, ``os.path.dirname``, ``/`` and ``os.path.join``), a spec or
module from ``importlib.util.find_spec("a.b")`` / ``importlib.import_module
("a.b")`` (its ``.origin``, ``.__file__``, ``.submodule_search_locations``),
``inspect.getfile``, a search of ``sys.path`` or ``site.getsitepackages()``, literal
``…/site-packages/…`` paths, names assigned
once, the returns of the script's own functions, a parameter's default and
the arguments the script passes it, and loops over a literal table of edits.
A path an environment variable may override (``os.environ.get("X", P)``, or a
function returning ``os.environ["X"]`` or ``P``) is the known ``P``; a file
it opens through any other form (an environment variable or ``sys.argv``
alone, an f-string, a glob) is an unknown target, with the script's line that
builds it and, when it is read at run time, from what. Whether each edit is
checked fail-closed is read by ``patcher_anchors``.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from patchkit.core.values import ContainerPath
from patchkit.importing import patcher_anchors as anchors
from patchkit.importing import pyscope, read_inside, shell

_TREE = re.compile(r"(?:site|dist)-packages/(?P<rest>.+)")
_READS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes"})
_PATH_CALLS = frozenset({"Path", "PurePath", "PosixPath", "pathlib.Path", "abspath", "realpath", "normpath", "fspath"})
_SITE_ROOT = frozenset({"getsitepackages", "getusersitepackages", "get_python_lib"})
_DEPTH = 12

_ENV = frozenset({"getenv", "environ.get", "os.environ.get", "os.getenv"})
_SPECS = frozenset({"find_spec", "import_module", "__import__"})

# A value as far as the reading can tell: ("path", upstream path), ("str", text), ("module", dotted name of
# a module object or spec) or ("env", what is read at run time: an environment variable, an argument).
_Value = tuple[str, str]


@dataclass
class Patcher:
    """A patcher script: the upstream files it edits, and each file access whose target is unknown (line, why)."""

    targets: list[tuple[str, int]] = field(default_factory=list)  # (upstream path, line that opens it)
    unknown: list[tuple[int, str]] = field(default_factory=list)
    anchored: bool = False  # it checks the old text is there before replacing (assert/if … in …)


def read(source: bytes) -> Patcher | None:
    """The patcher a Python script is, or None when it is not one (or does not parse)."""
    try:
        return _read(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _read(tree: ast.Module) -> Patcher | None:
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    replaces = any((_method(c) == "replace" and len(c.args) >= 2) or anchors.old_text(c) is not None for c in calls)
    replaces = replaces or anchors.splices(tree, calls)
    in_place = any(_in_place(c) is not None for c in calls)  # fileinput.input(P, inplace=True): reads and writes P
    writes = in_place or any(_method(c) in ("write_text", "write_bytes", "write") for c in calls)
    reads = in_place or any(_method(c) in ("read_text", "read_bytes", "read", "readlines") for c in calls)
    if not (replaces and writes and reads):
        return None
    scopes = pyscope.qualify(tree)  # each function's names its own, for both readings
    out = Patcher(anchored=anchors.anchored(tree, calls))
    _opened_files(_Reader(tree, scopes), calls, out)
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Constant) and isinstance(n.value, str)):
            continue
        m = _TREE.search(n.value)
        if m and m["rest"].endswith(".py") and all(m["rest"] != t for t, _ in out.targets):
            out.targets.append((m["rest"], n.lineno))
    out.unknown = [(line, why) for line, why in out.unknown if not any(line == t_line for _, t_line in out.targets)]
    return out


def _opened_files(reader: _Reader, calls: list[ast.Call], out: Patcher) -> None:
    """Each file the script reads or writes: a target when its path can be told, else unknown at its line."""
    for c in calls:
        target = _opened(c)
        if target is None:
            continue
        got = reader.value(target, 0)
        paths = [v for k, v in got or [] if k == "path" and v.endswith(".py")]
        if got is None or not paths:
            why = f"the file it opens is built as {pyscope.plain(ast.unparse(target))[:80]!r}"
            env = sorted({v for k, v in got or [] if k == "env"})
            if env and all(k == "env" for k, _ in got or []):
                why += f", read at run time from {', '.join(env)}"
            if (c.lineno, why) not in out.unknown:
                out.unknown.append((c.lineno, why))
            continue
        for p in paths:
            if all(p != t for t, _ in out.targets):
                out.targets.append((p, c.lineno))


def _method(c: ast.Call) -> str | None:
    return c.func.attr if isinstance(c.func, ast.Attribute) else None


def _in_place(c: ast.Call) -> ast.expr | None:
    """The file ``fileinput.input(P, inplace=True)`` (or ``FileInput``) rewrites with what the loop prints."""
    if _callee(c) not in ("input", "FileInput") or not any(
        k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value for k in c.keywords
    ):
        return None
    files = [k.value for k in c.keywords if k.arg == "files"]
    return c.args[0] if c.args else (files[0] if files else None)


def _opened(c: ast.Call) -> ast.expr | None:
    """The path expression a call reads or writes: ``P.read_text()``, ``open(P)``, ``P.open()``."""
    if (rewritten := _in_place(c)) is not None:
        return rewritten
    if isinstance(c.func, ast.Attribute) and c.func.attr in (*_READS, "open"):
        return c.func.value
    if isinstance(c.func, ast.Name) and c.func.id in ("open", "io.open") and c.args:
        return c.args[0]
    return None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)) is not None:
        return f"{base}.{node.attr}"
    return None


class _Reader:
    """Evaluates the path expressions of one script, as far as literals and module files go."""

    def __init__(self, tree: ast.Module, scopes: pyscope.Scopes) -> None:
        self.scopes = scopes
        self.modules: dict[str, tuple[str, bool]] = {}  # local name -> (dotted module, is a package)
        self.names: dict[str, list[tuple[int, ast.expr]]] = {}  # name -> (last line, expression) assigned to it
        self.loops: dict[str, list[ast.expr]] = {}  # loop variable or parameter -> the values it takes
        self.functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for n in ast.walk(tree):
            self.note(n)
        calls: dict[str, list[ast.Call]] = {}
        for c in ast.walk(tree):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in self.functions:
                calls.setdefault(c.func.id, []).append(c)
        for fn in self.functions.values():
            self.parameters(fn, calls.get(fn.name, []))

    def note(self, n: ast.AST) -> None:
        if isinstance(n, ast.Import):
            for a in n.names:
                top = a.name.split(".")[0]
                self.modules[a.asname or top] = (a.name if a.asname else top, a.asname is None or "." not in a.name)
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            for a in n.names:
                self.modules[a.asname or a.name] = (f"{n.module}.{a.name}", False)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            self.names.setdefault(n.targets[0].id, []).append((n.end_lineno or n.lineno, n.value))
        elif isinstance(n, ast.For):
            self.loop(n.target, n.iter)

    def parameters(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, calls: list[ast.Call]) -> None:
        """A parameter takes its default and each argument the script passes it (``patch(path=P)``)."""
        args = [*fn.args.posonlyargs, *fn.args.args]
        defaults = dict(zip([a.arg for a in args][len(args) - len(fn.args.defaults) :], fn.args.defaults, strict=True))
        defaults |= {a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is not None}
        scope = self.scopes.scope(fn)
        for k, a in enumerate(args + fn.args.kwonlyargs):
            given = [c.args[k] for c in calls if k < len(c.args) and k < len(args)]
            given += [kw.value for c in calls for kw in c.keywords if kw.arg == a.arg]
            if a.arg in defaults:
                given.append(defaults[a.arg])
            if given:
                self.loops.setdefault(pyscope.local(a.arg, scope), []).extend(given)

    def loop(self, target: ast.expr, it: ast.expr) -> None:
        """``for rel, old, new in EDITS`` over a literal table: each name takes its column."""
        rows = self.names.get(it.id, [(0, it)])[-1][1] if isinstance(it, ast.Name) else it
        if isinstance(target, ast.Name) and _python_trees(rows):
            # for d in sys.path / site.getsitepackages(): each entry is a Python tree the package may be in
            self.loops.setdefault(target.id, []).append(ast.Call(ast.Name("getsitepackages"), [], []))
            return
        if not isinstance(rows, ast.List | ast.Tuple):
            return
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        for k, name in enumerate(names):
            if not isinstance(name, ast.Name):
                continue
            column = [
                row.elts[k] if isinstance(row, ast.Tuple | ast.List) and k < len(row.elts) else row for row in rows.elts
            ]
            if len(names) == 1 or all(isinstance(r, ast.Tuple | ast.List) for r in rows.elts):
                self.loops.setdefault(name.id, []).extend(column)

    def value(self, node: ast.expr, depth: int) -> list[_Value] | None:
        """Every value ``node`` may have, or None when one of them cannot be told."""
        if depth > _DEPTH:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = _TREE.search(node.value)
            return [("path", m["rest"])] if m else [("str", node.value)]
        if isinstance(node, ast.Name):
            return self.name(node, depth)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, depth)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self.join([node.left, node.right], depth)
        if isinstance(node, ast.Call):
            return self.call(node, depth)
        if isinstance(node, ast.IfExp | ast.BoolOp):
            return self.each(node.values if isinstance(node, ast.BoolOp) else [node.body, node.orelse], depth)
        return None

    def each(self, exprs: list[ast.expr], depth: int) -> list[_Value] | None:
        """The values of any of ``exprs`` (the branches of ``a if c else b``, ``a or b``, a function's returns)."""
        out: list[_Value] = []
        for e in exprs:
            got = self.value(e, depth + 1)
            if got is None:
                return None
            out += got
        return out

    def name(self, node: ast.Name, depth: int) -> list[_Value] | None:
        """A name's value: a loop's or a parameter's values, else the assignment before this use in its scope
        (the last one, for a module name a function reads: the function runs after the module is set up)."""
        name = node.id
        assigned = self.names.get(name, [])
        if pyscope.MARK in name or id(node) in self.scopes.at_top:
            assigned = [a for a in assigned if a[0] < node.lineno] or assigned
        exprs = self.loops.get(name) or [e for _, e in assigned[-1:]]
        if not exprs:
            if name in self.modules:
                return [("module", self.modules[name][0])]
            return None
        return self.each(exprs, depth)

    def attribute(self, node: ast.Attribute, depth: int) -> list[_Value] | None:
        if node.attr in ("__file__", "origin"):
            if isinstance(node.value, ast.Name) and node.value.id in self.names:
                return _module_files(self.value(node.value, depth + 1))
            return self.module_file(node.value)
        if node.attr in ("submodule_search_locations", "__path__"):
            return _module_dirs(self.value(node.value, depth + 1))
        if node.attr == "parent":
            return _dirname(self.value(node.value, depth + 1))
        return None

    def subscript(self, node: ast.Subscript, depth: int) -> list[_Value] | None:
        """``P.parents[N]``: N + 1 levels up."""
        if isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
            got = self.value(node.value.value, depth + 1)
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
                for _ in range(node.slice.value + 1):
                    got = _dirname(got)
                return got
        if isinstance(node.value, ast.Call) and _callee(node.value) in _SITE_ROOT:
            return [("path", "")]
        if isinstance(node.slice, ast.Constant) and node.slice.value == 0:
            return self.value(node.value, depth + 1)  # the first of a package's directories
        return _run_time(node)

    def call(self, node: ast.Call, depth: int) -> list[_Value] | None:
        callee = _callee(node)
        if callee in _PATH_CALLS and node.args:
            return self.value(node.args[0], depth + 1)
        if callee == "dirname" and node.args:
            return _dirname(self.value(node.args[0], depth + 1))
        if callee in ("join", "joinpath"):
            base = [node.func.value] if callee == "joinpath" and isinstance(node.func, ast.Attribute) else []
            return self.join(base + list(node.args), depth)
        if callee in ("resolve", "absolute", "expanduser") and isinstance(node.func, ast.Attribute):
            return self.value(node.func.value, depth + 1)
        if callee == "str" and len(node.args) == 1:
            return self.value(node.args[0], depth + 1)
        if callee == "with_name" and isinstance(node.func, ast.Attribute) and node.args:
            return self.join([ast.Call(ast.Name("dirname"), [node.func.value], []), node.args[0]], depth)
        if callee in ("getfile", "getsourcefile") and node.args:
            return self.module_file(node.args[0])
        if callee in _SITE_ROOT:
            return [("path", "")]
        return self.call_more(node, callee, depth)

    def call_more(self, node: ast.Call, callee: str | None, depth: int) -> list[_Value] | None:
        """Module specs, the first of an iterable, the environment, and the script's own functions."""
        if callee in _SPECS and node.args:
            names = self.value(node.args[0], depth + 1)
            if names is None or any(k != "str" for k, _ in names):
                return None
            return [("module", v) for _, v in names]
        if callee in ("next", "iter", "list", "tuple", "sorted") and node.args:
            return self.value(node.args[0], depth + 1)
        dotted = _dotted(node.func)
        if dotted in _ENV and node.args:
            what = [("env", pyscope.plain(ast.unparse(node.args[0])))]
            return what if len(node.args) < 2 else self.each_with(what, node.args[1], depth)
        if isinstance(node.func, ast.Name) and (fn := self.functions.get(node.func.id)) is not None:
            returns = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
            returns = [r for r in returns if not (isinstance(r, ast.Constant) and r.value is None)]
            return self.each(returns, depth) if returns else None
        return None

    def each_with(self, first: list[_Value], default: ast.expr, depth: int) -> list[_Value] | None:
        got = self.value(default, depth + 1)
        return None if got is None else first + got

    def join(self, parts: list[ast.expr], depth: int) -> list[_Value] | None:
        out: list[_Value] | None = [("path", "")]
        for part in parts:
            got = self.value(part, depth + 1)
            if got is None or out is None or any(k == "module" for k, _ in got):
                return None
            env = [v for v in out + got if v[0] == "env"]
            out = env + [
                ("path", posixpath.join(a, b).strip("/")) for k, a in out if k != "env" for j, b in got if j != "env"
            ]
        return out

    def module_file(self, node: ast.expr) -> list[_Value] | None:
        """The file of a module: ``vllm.__file__`` (a package's ``__init__.py``), ``find_spec("a.b").origin``."""
        if isinstance(node, ast.Call) and _callee(node) in _SPECS and node.args:
            return _module_files(self.call_more(node, _callee(node), 1))
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        module, package = self.modules.get(head, (head, True))
        full = f"{module}.{rest}" if rest else module
        if rest or not package:
            return [("path", full.replace(".", "/") + ".py")]
        return [("path", full.replace(".", "/") + "/__init__.py")]


def _python_trees(it: ast.expr) -> bool:
    """``sys.path`` or ``site.getsitepackages()``: what a search for an installed package walks."""
    if isinstance(it, ast.Attribute) and it.attr == "path" and isinstance(it.value, ast.Name):
        return it.value.id == "sys"
    return isinstance(it, ast.Call) and _callee(it) in _SITE_ROOT


def _callee(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return "pathlib.Path" if _dotted(f) == "pathlib.Path" else f.attr
    return None


def _module_files(values: list[_Value] | None) -> list[_Value] | None:
    """The files of module values: ``a.b`` is ``a/b.py``, a top-level ``a`` a package's ``a/__init__.py``
    (as for ``import a``: deployments import the project they patch)."""
    if values is None or any(k != "module" for k, _ in values):
        return None
    return [("path", f"{v}/__init__.py" if "." not in v else v.replace(".", "/") + ".py") for _, v in values]


def _module_dirs(values: list[_Value] | None) -> list[_Value] | None:
    """A package's directories (``spec.submodule_search_locations``, ``pkg.__path__``)."""
    if values is None or any(k != "module" for k, _ in values):
        return None
    return [("path", v.replace(".", "/")) for _, v in values]


def _run_time(node: ast.Subscript) -> list[_Value] | None:
    """``os.environ["X"]`` and ``sys.argv[N]``: a value the script reads when it runs."""
    owner = _dotted(node.value)
    if owner in ("os.environ", "environ", "sys.argv", "argv"):
        return [("env", pyscope.plain(ast.unparse(node)))]
    return None


def _dirname(values: list[_Value] | None) -> list[_Value] | None:
    if values is None:
        return None
    out = [("path", posixpath.dirname(v)) if k == "path" else (k, v) for k, v in values if k in ("path", "env")]
    return out or None


@dataclass(frozen=True)
class Run:
    """A patcher a build step runs: the script, where it is in the image, and the step that runs it."""

    rel: str
    target: str | None  # the script's path in the image; None when it runs from outside it
    data: bytes
    patcher: Patcher
    file: str
    line: int


def run_by_build(root: Path, reading: shell.Reading) -> list[Run]:
    """Every repository script a Containerfile or build script runs with Python that is a patcher, once each."""
    out: dict[str, Run] = {}
    for r in reading.runs:
        if r.repo is None or r.repo in out or not r.repo.endswith(".py"):
            continue
        data = read_inside(root, r.repo, f"run by {r.file}:{r.line}")
        patcher = read(data)
        if patcher is None:
            continue
        target = r.script if r.script and r.script.startswith("/") and not r.script.startswith(shell.REPO) else None
        try:
            target = str(ContainerPath(target)) if target is not None else None
        except ValueError:
            target = None
        out[r.repo] = Run(r.repo, target, data, patcher, r.file, r.line)
    return list(out.values())


def reason(p: Patcher, run: str | None) -> str:
    """One line for the lockfile: what the patcher edits (or that it is unknown) and what runs it."""
    edits = ", ".join(t for t, _ in p.targets) or "a file no static reading finds"
    what = "anchored text" if p.anchored else "text (unchecked)"
    return f"replaces {what} in {edits}" + (f"; run by {run}" if run else "")


def issues(p: Patcher, rel: str) -> list[tuple[str, str, int | None, str, str | None]]:
    """What is unknown or wrong about a patcher: a target built at run time, text replaced unchecked."""
    out: list[tuple[str, str, int | None, str, str | None]] = [
        (
            "patcher-target-unknown",
            rel,
            line,
            f"a patcher edits a file no static reading finds: {why}",
            "build the path from <module>.__file__, importlib or a literal, or pin the target by hand",
        )
        for line, why in p.unknown
    ]
    if not p.anchored:
        out.append(
            (
                "patcher-not-anchored",
                rel,
                None,
                "replaces text without checking it is there: when upstream moves it, the patch is silently not applied",
                "assert OLD in src (or raise) before replacing",
            )
        )
    return out
