"""Whether a patcher script checks, fail-closed, that the text it replaces is there.

A patcher is anchored when each text it edits is checked before the edit and
a failed check stops the script with an error, so that a changed upstream
refuses to build or start instead of running unpatched. The checks read:

- ``assert OLD in src`` (or any assert on the old text);
- ``if OLD not in src:`` / ``if src.count(OLD) != 1:`` / ``if n != 1:`` after
  ``src, n = re.subn(PAT, NEW, src)`` / ``if not re.search(PAT, src):``, whose
  branch raises, calls ``sys.exit``/``exit``/``os._exit`` with anything but 0
  or None, or returns a failure the caller turns into one: a nonzero number
  from a function the script passes to ``sys.exit``, or None/False that each
  caller checks (``if x is None:``/``if not x:``) with a branch that fails, or
  exits with a code it chooses by it (``sys.exit(0 if x else 1)``);
- ``if OLD in src: … elif OLDER in src: … else: <fails>``: each text of the
  chain is checked by its last ``else``.

The edits are ``str.replace(OLD, NEW[, n])``, ``re.sub``/``re.subn`` and a
compiled pattern's ``.sub``/``.subn``. A check covers an edit when it reads
the edit's old text, directly (a loop variable over a table of edits counts
as the old text) or through a name every assignment of which reads it (the
count ``re.subn`` returns, the replaced copy, the places it was found). A
name also assigned from elsewhere does not: ``src`` read from the file and
then replaced is the file, and a check on it checks the file. A script that
splices (``s[:i] + NEW + s[j:]``, ``lines.insert``, ``lines[i] = NEW``
around what it searched for) is anchored by its search when a miss raises
(``s.index(OLD)``, ``next(<generator>)`` with no default, ``[i for … if …][0]``) and no ``try``
swallows it; a ``find``'s -1 must be checked like an old text; a search
loop is checked by its ``else`` (no ``break``: nothing found) when that
fails; otherwise it is anchored when a check that fails closed reads a
string or bytes literal bound to a module-level name no file path is built
from (the text it looks for). A check that only warns, or returns without a
failure anyone sees, does not count: that is the silent skip the
``patcher-not-anchored`` finding is about.
"""

from __future__ import annotations

import ast

_EXITS = frozenset({"exit", "_exit", "quit", "abort", "SystemExit"})
_NOT_TEXT = frozenset({"os", "shutil"})  # os.replace(a, b) renames a file, it edits no text
_DEPTH = 6
_FILE_METHODS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "open"})
_PATH_MODULES = frozenset({"os", "os.path", "path", "posixpath", "pathlib", "io", "tempfile"})
_PATH_FUNCTIONS = frozenset({"open", "Path", "exists", "isfile", "join", "dirname", "fdopen", "mkstemp"})
_FINDS = frozenset({"find", "rfind"})
_SEARCHES = frozenset({"find", "rfind", "index", "rindex", "startswith", "endswith"})
_CAUGHT = frozenset({"ValueError", "StopIteration", "Exception", "BaseException", "LookupError"})


def anchored(tree: ast.Module, calls: list[ast.Call]) -> bool:
    """Whether every text edit of the script is checked fail-closed (see the module's docstring)."""
    r = _Anchors(tree)
    olds = [o for c in calls if (o := old_text(c)) is not None]
    olds += [c.args[0] for c in calls if _method(c) in _FINDS and c.args]  # -1 when absent: checked or not
    checked = [r.reads(t) for t, body in r.checks() if r.fails_any(body)]
    if not olds:
        searches: list[ast.Call | ast.Subscript] = [
            *calls,
            *(n for n in ast.walk(tree) if isinstance(n, ast.Subscript)),
        ]
        if any(_raises_when_absent(c) and id(c) not in r.swallowed for c in searches):
            return True
        texts = r.derived(r.text_constants(calls))
        return any(texts & c for c in checked)
    return all(any(r.derived(r.reads(o)) & c for c in checked) for o in olds)


def splices(tree: ast.Module, calls: list[ast.Call]) -> bool:
    """Whether a script edits text by splicing around what it searches for, not by ``replace``: a search
    (``find``/``index``, ``startswith``, ``X in line``, ``next(…)`` over lines) and a splice (``s[:i] + NEW +
    s[j:]``, ``lines.insert(i, NEW)``, ``lines[i] = NEW`` or ``lines[i:i] = […]``)."""
    searched = any(_method(c) in _SEARCHES and c.args for c in calls) or any(
        isinstance(n, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in n.ops) for n in ast.walk(tree)
    )
    return searched and any(_splice(n) for n in ast.walk(tree))


def _splice(n: ast.AST) -> bool:
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
        return any(isinstance(side, ast.Subscript) and isinstance(side.slice, ast.Slice) for side in (n.left, n.right))
    if isinstance(n, ast.Call):
        return _method(n) == "insert" and len(n.args) == 2
    return isinstance(n, ast.Assign) and any(isinstance(t, ast.Subscript) for t in n.targets)


def _method(c: ast.Call) -> str | None:
    return c.func.attr if isinstance(c.func, ast.Attribute) else None


def _raises_when_absent(c: ast.Call | ast.Subscript) -> bool:
    """``s.index(OLD)`` (ValueError), ``next(<generator>)`` with no default (StopIteration) and ``[i for … if
    …][0]`` (IndexError) fail on a miss."""
    if isinstance(c, ast.Subscript):
        found = isinstance(c.value, ast.ListComp) and any(g.ifs for g in c.value.generators)
        return found and isinstance(c.slice, ast.Constant) and c.slice.value in (0, -1)
    if _method(c) in ("index", "rindex") and c.args:
        return True
    return _callee(c) == "next" and len(c.args) == 1 and isinstance(c.args[0], ast.GeneratorExp)


def old_text(c: ast.Call) -> ast.expr | None:
    """The old text (or pattern) of an edit call, or None when the call edits no text."""
    f = c.func
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if f.attr == "replace" and len(c.args) >= 2 and owner not in _NOT_TEXT:
        return c.args[0]
    if f.attr in ("sub", "subn"):
        if owner == "re":
            return c.args[0] if c.args else None
        return f.value if c.args else None
    return None


class _Anchors:
    """The names, functions and checks of one script, read for the anchoring rule."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.sources: dict[str, list[ast.expr]] = {}  # name -> expressions it is assigned from
        self.owner: dict[int, str] = {}  # id(return statement) -> the function it is in
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.cache: dict[str, set[str]] = {}  # name -> its roots
        self.callables: set[str] = set()  # the script's imports and functions: no text of its own
        self.read_cache: dict[int, set[str]] = {}
        self.derived_cache: dict[frozenset[str], set[str]] = {}
        self.ifs: list[ast.If] = []
        self.asserts: list[ast.Assert] = []
        self.results: dict[str, list[str]] = {}  # function -> the names its results are stored in
        self.exit_with: set[str] = set()  # functions whose result the script exits with: sys.exit(main())
        self.exit_calls: list[ast.Call] = []  # sys.exit(…), exit(…), SystemExit(…)
        self.loops_else: list[ast.For] = []  # search loops whose else (nothing found) may fail
        self.swallowed: set[int] = set()  # ids of nodes in a try whose handler catches a miss and goes on
        tries: list[ast.Try] = []
        todo: list[tuple[ast.AST, str]] = [(tree, "")]
        while todo:  # one pass; each node with its innermost function
            node, fn = todo.pop()
            self._note(node, fn)
            inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else fn
            todo += [(child, inner) for child in ast.iter_child_nodes(node)]
            if isinstance(node, ast.Try):
                tries.append(node)
            elif isinstance(node, ast.For) and node.orelse:
                self.loops_else.append(node)
        for t in tries:  # after the pass: a handler's failure may be a return its callers check
            if any(_catches_miss(h) and not self.fails(h.body, 0) for h in t.handlers):
                self.swallowed |= {id(n) for stmt in t.body for n in ast.walk(stmt)}

    def _note(self, n: ast.AST, fn: str) -> None:
        if isinstance(n, ast.Return):
            self.owner[id(n)] = fn
        elif isinstance(n, ast.If):
            self.ifs.append(n)
        elif isinstance(n, ast.Assert):
            self.asserts.append(n)
        elif isinstance(n, ast.Call) and _callee(n) in _EXITS:
            self.exit_calls.append(n)
            if (exits_with := _exits_with(n)) is not None:
                self.exit_with.add(exits_with)
        self._bind_all(n)

    def _bind_all(self, n: ast.AST) -> None:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            self.functions[n.name] = n
            self.callables.add(n.name)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            self.callables |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and (fn := _callee(n.value)) is not None:
            self.results.setdefault(fn, []).extend(t.id for t in n.targets if isinstance(t, ast.Name))
        if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                self._bind(t, n.value)
        elif isinstance(n, ast.For | ast.comprehension):
            self._bind(n.target, n.iter)
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            self._bind(n.optional_vars, n.context_expr)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            pairs = list(zip(target.elts, value.elts, strict=False))
            if len(target.elts) == len(value.elts):
                for t, v in pairs:
                    self._bind(t, v)
                return
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                self.sources.setdefault(name.id, []).append(value)

    def text_constants(self, calls: list[ast.Call]) -> set[str]:
        """Module-level names bound to a string or bytes literal that no file path is built from: the texts a
        script that splices lines looks for."""
        named = {
            t.id
            for n in self.tree.body
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str | bytes)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        paths: set[str] = set()
        for c in calls:
            f = c.func
            if isinstance(f, ast.Attribute) and f.attr in _FILE_METHODS:
                paths |= self.roots(f.value)
            elif _callee(c) in _PATH_FUNCTIONS and c.args and _path_module(f):
                paths |= self.roots(c.args[0])
        return named - paths

    def reads(self, node: ast.expr) -> set[str]:
        """The names (not modules or functions) and literals an expression reads itself."""
        if id(node) not in self.read_cache:
            self.read_cache[id(node)] = {k for k in _read_by(node) if k not in self.callables}
        return self.read_cache[id(node)]

    def derived(self, seeds: set[str]) -> set[str]:
        """``seeds`` and each name every assignment of which reads one of them (``n`` of ``s, n =
        re.subn(PAT, …)``, ``at`` of ``at = find(lines, OLD)``), transitively. A name also assigned from
        elsewhere (``src`` read from the file, then replaced) is not: a check on it checks the file."""
        key = frozenset(seeds)
        if key in self.derived_cache:
            return self.derived_cache[key]
        out = set(seeds)
        for _ in range(_DEPTH):
            more = {
                name
                for name, exprs in self.sources.items()
                if name not in out and all(self.reads(e) & out for e in exprs)
            }
            if not more:
                break
            out |= more
        self.derived_cache[key] = out
        return out

    def roots(self, node: ast.expr) -> set[str]:
        """The names and literals ``node`` reads, and those they were assigned from, transitively."""
        out = _read_by(node)
        for name in [k for k in out if not k.startswith("#")]:
            out |= self.name_roots(name)
        return out

    def name_roots(self, name: str) -> set[str]:
        """What ``name`` was assigned from, transitively (to a depth, so a long chain ends), once per name."""
        if name not in self.cache:
            out: set[str] = set()
            todo = [(v, 1) for v in self.sources.get(name, [])]
            while todo:
                expr, depth = todo.pop()
                for k in _read_by(expr) - out:
                    out.add(k)
                    if depth < _DEPTH and not k.startswith("#"):
                        todo += [(v, depth + 1) for v in self.sources.get(k, [])]
            self.cache[name] = out
        return self.cache[name]

    def checks(self) -> list[tuple[ast.expr, list[list[ast.stmt]]]]:
        """Every test that guards a branch: an if's (either branch may be the failing one) or an assert's."""
        out: list[tuple[ast.expr, list[list[ast.stmt]]]] = [(n.test, [[ast.Raise()]]) for n in self.asserts]
        out += [(n.test, [n.body, n.orelse]) for n in self.ifs]
        # if OLD in s: … elif OLDER in s: … else: fail — each text is checked by the chain's failing else.
        for n in self.ifs:
            tests, last = _chain(n)
            out += [(t, [last]) for t in tests] if len(tests) > 1 else []
        # for … : if FOUND: …; break / else: fail — the else runs when the search found nothing.
        for loop in self.loops_else:
            found = [n for n in ast.walk(ast.Module(loop.body, [])) if isinstance(n, ast.If) and _breaks(n.body)]
            out += [(n.test, [loop.orelse]) for n in found]
        return out

    def fails_any(self, branches: list[list[ast.stmt]]) -> bool:
        return any(self.fails(b, 0) for b in branches)

    def fails(self, body: list[ast.stmt], depth: int) -> bool:
        """Whether a branch stops the script with an error (directly, or through its function's caller)."""
        for stmt in body:
            if isinstance(stmt, ast.Raise):
                return True
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _callee(stmt.value) in _EXITS:
                return _failure_code(stmt.value.args[0] if stmt.value.args else None)
            if isinstance(stmt, ast.Return):
                return depth < _DEPTH and self._returns_failure(stmt, depth)
            if (
                isinstance(stmt, ast.If)
                and stmt.orelse
                and self.fails(stmt.body, depth)
                and self.fails(stmt.orelse, depth)
            ):
                return True  # if …: <fails> else: <fails> (a diagnosis, then the same failure either way)
        return False

    def _returns_failure(self, stmt: ast.Return, depth: int) -> bool:
        fn = self.owner.get(id(stmt), "")
        if not fn:
            return False
        v = stmt.value
        if isinstance(v, ast.Constant) and isinstance(v.value, int) and not isinstance(v.value, bool):
            return v.value != 0 and fn in self.exit_with
        if v is None or (isinstance(v, ast.Constant) and v.value in (None, False)):
            return self._callers_fail(fn, depth)
        return False

    def _callers_fail(self, fn: str, depth: int) -> bool:
        """Whether each result of ``fn`` is stored and checked (``is None``/``not x``) by a branch that fails."""
        names = self.results.get(fn, [])
        if not names:
            return False
        return all(self._none_checked(name, depth) for name in names)

    def _none_checked(self, name: str, depth: int) -> bool:
        """Whether an empty result stops the script: ``if not x: sys.exit(1)``, or an exit code chosen by it
        (``sys.exit(0 if x else 1)``, ``sys.exit(1 if not x else 0)``, ``sys.exit(not x)``)."""
        return any(_tests_empty(n.test, name) and self.fails(n.body, depth + 1) for n in self.ifs) or any(
            _exits_when_empty(c.args[0], name) for c in self.exit_calls if c.args
        )


def _chain(n: ast.If) -> tuple[list[ast.expr], list[ast.stmt]]:
    """An ``if``/``elif`` chain's tests, and its last ``else`` (empty when there is none)."""
    tests = [n.test]
    while len(n.orelse) == 1 and isinstance(n.orelse[0], ast.If):
        n = n.orelse[0]
        tests.append(n.test)
    return tests, n.orelse


def _exits_when_empty(arg: ast.expr, name: str) -> bool:
    """Whether the exit code ``arg`` is a failure when ``name`` is empty (None, False, 0)."""
    if isinstance(arg, ast.IfExp):
        if isinstance(arg.test, ast.Name) and arg.test.id == name:
            return _failure_code(arg.orelse)
        return _tests_empty(arg.test, name) and _failure_code(arg.body)
    return _tests_empty(arg, name) and isinstance(arg, ast.UnaryOp)


def _breaks(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Break) for stmt in body for n in ast.walk(stmt))


def _catches_miss(h: ast.ExceptHandler) -> bool:
    """A handler that catches what a missed ``index``/``next`` raises (bare, ValueError, Exception, …)."""
    if h.type is None:
        return True
    names = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
    return any((n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")) in _CAUGHT for n in names)


def _read_by(node: ast.expr) -> set[str]:
    """The names and (as ``#repr``) the string and bytes literals an expression reads."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str | bytes) and n.value:
            out.add(f"#{n.value!r}")
        elif isinstance(n, ast.Name):
            out.add(n.id)
    return out


def _exits_with(c: ast.Call) -> str | None:
    """``main`` of ``sys.exit(main())`` (or ``raise SystemExit(main())``)."""
    arg = c.args[0] if c.args and _callee(c) in _EXITS else None
    return arg.func.id if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) else None


def _path_module(f: ast.expr) -> bool:
    """``open``/``Path``/``join`` called bare, or on a path module (``os.path.join``, not ``"".join``)."""
    if isinstance(f, ast.Name):
        return True
    owner = f.value if isinstance(f, ast.Attribute) else None
    dotted = ast.unparse(owner) if isinstance(owner, ast.Name | ast.Attribute) else ""
    return dotted in _PATH_MODULES


def _tests_empty(test: ast.expr, name: str) -> bool:
    """``name is None``, ``name == None`` or ``not name``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return isinstance(test.operand, ast.Name) and test.operand.id == name
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is | ast.Eq):
        left, right = test.left, test.comparators[0]
        return (
            isinstance(left, ast.Name) and left.id == name and isinstance(right, ast.Constant) and right.value is None
        )
    return False


def _failure_code(arg: ast.expr | None) -> bool:
    """Whether ``sys.exit(arg)`` ends in failure: anything but no argument, 0 or None."""
    return arg is not None and not (isinstance(arg, ast.Constant) and arg.value in (0, None))


def _callee(c: ast.Call) -> str | None:
    f = c.func
    if isinstance(f, ast.Name):
        return f.id
    return f.attr if isinstance(f, ast.Attribute) else None
