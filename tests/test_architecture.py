"""The shape of the package, as import rules: the core never imports the CLI, and no import cycles.

The import graph is read with ``ast`` from the sources, module-level and
function-level imports both (a deferred import still ties two modules
together), so a rule broken anywhere in a module fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "patchkit"

# The command line and the entry point that runs it: the only modules that may import click.
CLI = ("patchkit.cli", "patchkit.__main__")

# Every package of patchkit sits in one layer, lowest first (docs/architecture.md draws them). A package
# imports packages of its own layer and of the layers below, never one above, and packages never form a cycle.
LAYERS = {
    "core": ("patchkit", "patchkit.errors", "patchkit.core", "patchkit.lockfile", "patchkit.oci"),
    "adapters": ("patchkit.vcs", "patchkit.store", "patchkit.net", "patchkit.images", "patchkit.sources"),
    "use cases": (
        "patchkit.trust",
        "patchkit.series",
        "patchkit.importing",
        "patchkit.guard",
        "patchkit.emit",
        "patchkit.model",
        "patchkit.bundle",
        "patchkit.signing",
        "patchkit.ship",
        "patchkit.check",
        "patchkit.edit",
        "patchkit.rebase",
        "patchkit.tracking",
        "patchkit.audit",
    ),
    "presentation": ("patchkit.formats",),
    "command line": CLI,
}
LAYER_OF = {package: rank for rank, packages in enumerate(LAYERS.values()) for package in packages}
# The modules at the top of patchkit/: the package itself, its entry point and the errors every layer raises.
TOP_MODULES = {"patchkit", "patchkit.__main__", "patchkit.errors"}
ADAPTER_PACKAGES = set(LAYERS["adapters"])


def _modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The modules an import statement loads: ``from a import b`` is ``a.b`` when that is a module, else ``a``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def import_graph(package: Path) -> dict[str, set[str]]:
    """Which of the package's modules each module imports, anywhere in its body."""
    modules = _modules(package)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, name, path.name == "__init__.py", modules):
                    found = owner(target)
                    if found is not None and found != name:
                        graph[name].add(found)
    return graph


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    """Tarjan's step at a component's root: the modules on the stack down to ``root``, taken off it."""
    component = []
    while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == root:
            return component


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = _pop_component(stack, on_stack, v)
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _is_cli(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CLI)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Module-level, function-level, ``from x import module`` and relative imports are all edges."""
    pkg = tmp_path / "patchkit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from patchkit import b\n")
    (pkg / "b.py").write_text("def f():\n    from patchkit.sub.c import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import thing\n")
    (pkg / "sub" / "c.py").write_text("import patchkit.a\nthing = 1\n")
    graph = import_graph(pkg)
    assert graph == {
        "patchkit": set(),
        "patchkit.a": {"patchkit.b"},
        "patchkit.b": {"patchkit.sub.c"},
        "patchkit.sub": {"patchkit.sub.c"},
        "patchkit.sub.c": {"patchkit.a"},
    }
    assert cycles(graph) == [["patchkit.a", "patchkit.b", "patchkit.sub.c"]]
    (pkg / "b.py").write_text("import json\n")
    assert cycles(import_graph(pkg)) == []


def test_no_import_cycles_between_patchkit_modules() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def package_of(module: str) -> str:
    """The package a module belongs to: ``patchkit.X`` for anything under ``patchkit/X/``, else the module."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which packages each package imports (a package's own modules importing each other is no edge)."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(package_of(module), set())
        edges |= {package_of(t) for t in targets} - {package_of(module)}
    return packages


def test_every_module_is_in_a_package_of_one_layer() -> None:
    """A new module goes into a package of a layer: the top of patchkit/ holds only the package, __main__ and errors."""
    graph = import_graph(PACKAGE)
    assert len(graph) > 100
    assert sorted(m for m in graph if package_of(m) not in LAYER_OF) == []
    assert sorted(m for m in graph if m.count(".") < 2 and m not in TOP_MODULES and m not in LAYER_OF) == []


def test_no_import_cycles_between_packages() -> None:
    assert cycles(package_graph(import_graph(PACKAGE))) == []


def test_packages_import_only_their_layer_and_the_layers_below() -> None:
    """No arrow runs up the layers: the core imports only the core, an adapter never a use case, and so on."""
    packages = package_graph(import_graph(PACKAGE))
    names = list(LAYERS)
    up = sorted(
        f"{p} ({names[LAYER_OF[p]]}) imports {t} ({names[LAYER_OF[t]]})"
        for p, targets in packages.items()
        for t in targets
        if LAYER_OF[t] > LAYER_OF[p]
    )
    assert up == []


def test_the_layer_rules_see_an_arrow_up(tmp_path: Path) -> None:
    """The package graph folds modules into their packages, so one import up the layers shows, as a cycle too."""
    pkg = tmp_path / "patchkit"
    for sub in ("core", "check"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "values.py").write_text("def f():\n    from patchkit.check import run\n")
    (pkg / "check" / "run.py").write_text("from patchkit.core.values import f\n")
    packages = package_graph(import_graph(pkg))
    assert packages["patchkit.core"] == {"patchkit.check"}
    assert cycles(packages) == [["patchkit.check", "patchkit.core"]]
    assert LAYER_OF["patchkit.check"] > LAYER_OF["patchkit.core"]


def test_the_core_never_imports_the_command_line() -> None:
    """The library core is usable without click: only the CLI layer imports it, or the CLI itself."""
    graph = import_graph(PACKAGE)
    assert len(graph) > 50
    wrong = sorted(f"{m} imports {t}" for m, targets in graph.items() if not _is_cli(m) for t in targets if _is_cli(t))
    assert wrong == []
    clicky = []
    for module, path in _modules(PACKAGE).items():
        if _is_cli(module):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                clicky += [f"{module} imports {n}" for n in names if n == "click" or n.startswith("click.")]
    assert clicky == []


# The runtime guard is a script of its own, run inside the container by its entrypoint: its environment is its edge.
OWN_ENTRY_POINTS = {"patchkit.guard.runtime"}
# The adapters a command builds and hands the core (through its Context, or as an argument).
CLIENTS = {"RegistryClient", "DockerEngine", "HfHub", "GitHubTracker"}
ENVIRONMENT = ("environ", "environb", "getenv")


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines reading the process environment: ``os.environ``, ``os.getenv``, ``os.environb``.

    ``{**os.environ, ...}``, the environment handed to a subprocess as it is
    and added to, is not a read: the child, not patchkit, reads it.
    """
    handed = {
        id(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if key is None
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "environb", "getenv")
            and id(node) not in handed
        ):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [node.lineno for a in node.names if a.name in ENVIRONMENT]
    return found


def test_only_the_command_line_reads_the_environment() -> None:
    """Below ``patchkit.cli`` nothing reads the environment: the command line reads it once and hands down values."""
    wrong = []
    for module, path in _modules(PACKAGE).items():
        if _is_cli(module) or module in OWN_ENTRY_POINTS:
            continue
        wrong += [f"{module}:{line}" for line in _environment_reads(ast.parse(path.read_text()))]
    assert wrong == []


def test_the_rule_sees_environment_reads() -> None:
    reads = "import os\nfrom os import getenv\na = os.environ['X']\nb = os.getenv('Y')\nc = os.environ.get('Z')\n"
    assert _environment_reads(ast.parse(reads)) == [2, 3, 4, 5]
    assert _environment_reads(ast.parse("import os\nenv = {**os.environ, 'HOME': '/h'}\n")) == []


def test_no_client_is_built_below_the_command_line() -> None:
    """Registry clients, engine connections, the Hub and GitHub are built by the command line and handed down."""
    wrong = []
    for module, path in _modules(PACKAGE).items():
        if _is_cli(module):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in CLIENTS:
                    wrong.append(f"{module}:{node.lineno} builds a {name}")
    assert wrong == []


# check's rules: functions of the gathered state, one module per concern (check/state.py does the I/O).
CHECK_RULES = {
    f"patchkit.check.{m}"
    for m in ("repository", "pins", "diffs", "hand_diffs", "sums", "compose", "accepted", "build_steps")
}
IO_MODULES = {"os", "subprocess", "shutil", "tempfile", "socket", "requests", "git", "docker"}


def test_check_rules_are_pure() -> None:
    """A rule reads the State and its View only: it imports no adapter and no I/O module of its own."""
    assert _impure(CHECK_RULES, IO_MODULES) == []


def _impure(pure: set[str], io: set[str]) -> list[str]:
    """What the modules ``pure`` import of the adapters, or of the modules ``io`` (stdlib or third party)."""
    graph = import_graph(PACKAGE)
    assert graph.keys() >= pure
    wrong = sorted(f"{m} imports {t}" for m in pure for t in graph[m] if package_of(t) in ADAPTER_PACKAGES)
    modules = _modules(PACKAGE)
    for m in sorted(pure):
        for node in ast.walk(ast.parse(modules[m].read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                wrong += [f"{m} imports {n}" for n in names if n.split(".")[0] in io]
    return wrong


# The pure parts of images/: references, OCI documents and the layer overlay take text and bytes, return values.
PURE_IMAGES = {"patchkit.oci.ref", "patchkit.oci.manifest", "patchkit.oci.layers"}
NETWORK_AND_FILES = IO_MODULES | {"urllib3", "http", "pathlib", "io", "tarfile", "zlib", "gzip", "threading", "time"}


def test_image_parsing_and_the_overlay_do_no_io() -> None:
    """OCI parsing and the layer overlay import no I/O module (stdlib or third party) and no adapter."""
    assert _impure(PURE_IMAGES, NETWORK_AND_FILES) == []


KIND_NAMES = {"git", "wheel", "dir", "image"}


def _kind_switches(tree: ast.AST) -> list[int]:
    """Lines comparing an upstream's ``source`` (or a pin's ``kind``) with the name of a source kind."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(isinstance(s, ast.Attribute) and s.attr in ("source", "kind") for s in sides) or any(
            isinstance(s, ast.Name) and s.id == "source" for s in sides
        )
        consts = {
            c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant) and isinstance(c.value, str)
        }
        if named and consts & KIND_NAMES:
            found.append(node.lineno)
    return found


def test_source_kinds_are_told_apart_in_one_place() -> None:
    """Only sources/ and the lockfile (which reads the ``source`` field) compare a source kind by name."""
    assert _kind_switches(ast.parse('if up.source == "git":\n    pass\nok = pin.kind in ("wheel", "image")\n')) == [
        1,
        3,
    ]
    wrong = []
    for module, path in _modules(PACKAGE).items():
        if module.startswith(("patchkit.sources", "patchkit.lockfile")):
            continue
        wrong += [f"{module}:{line}" for line in _kind_switches(ast.parse(path.read_text()))]
    assert wrong == []


def _runs_git(tree: ast.AST) -> list[int]:
    """Lines that import gitpython or start a process whose argument list begins with "git"."""
    found = []
    for node in ast.walk(tree):
        imports = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            imports.append(node.module or "")
        first = node.elts[0] if isinstance(node, ast.List) and node.elts else None
        spelled = isinstance(first, ast.Constant) and first.value == "git"
        if spelled or any(name.split(".")[0] == "git" for name in imports):
            found.append(getattr(node, "lineno", 0))
    return found


def test_git_runs_through_the_one_git_client() -> None:
    """Only ``patchkit.vcs.gitclient`` imports gitpython or spells a git command line; the rest call it."""
    wrong = [
        f"{name}:{line}"
        for name, path in sorted(_modules(PACKAGE).items())
        if name != "patchkit.vcs.gitclient"
        for line in _runs_git(ast.parse(path.read_text()))
    ]
    assert wrong == []
