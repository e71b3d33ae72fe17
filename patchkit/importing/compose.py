"""Reading hand-kept compose files: images, bind mounts with their lines and comments, the model path.

Compose files written by hand use everything YAML and Compose allow: anchors
and merge keys (``<<: *common``), short and long volume syntax, variables
with defaults (``${HF_CACHE:-/root/.cache/huggingface}``). This reader
resolves all of it and keeps, for every mount, the file and line it came from
and the comment lines written above it (where people cite upstream issues).
It works on the text of the files; nothing here writes. Imported only by
the commands that read compose files, so PyYAML loads only for them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

from patchkit.core.values import ContainerPath
from patchkit.errors import BadInput

_PYTHON_TREE = re.compile(r"/(?:site|dist)-packages(?:/|$)")
COMPOSE_NAMES = re.compile(r"(docker-)?compose([.-][A-Za-z0-9_.-]+)?\.ya?ml")
_VAR = re.compile(
    r"\$(?:\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<dollar>\$))"
)
_MODEL_PATH = re.compile(
    r"models--(?P<org>[A-Za-z0-9][A-Za-z0-9._-]*?)--(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)/snapshots/(?P<rev>[^/\s\"']+)"
)


@dataclass(frozen=True)
class Mount:
    """One bind mount of a service, where it was written and what was said above it."""

    compose: str
    line: int
    service: str
    source: str  # after variable defaults are applied
    target: str
    read_only: bool
    comment: str

    @property
    def where(self) -> str:
        return f"{self.compose}:{self.line}"

    def places(self, rel: str) -> str | None:
        """Where this mount puts the repository file ``rel`` in the container (itself, or a file below a mounted
        directory), if it does."""
        src = self.repo_source
        if src is None or src.startswith(".."):
            return None
        if rel == src:
            return self.target
        if src == "." or rel.startswith(src.rstrip("/") + "/"):
            return self.target.rstrip("/") + "/" + (rel if src == "." else rel[len(src.rstrip("/")) + 1 :])
        return None

    @property
    def repo_source(self) -> str | None:
        """The source as a normalised path relative to the repository (it may start with '..').

        None for a host path: absolute, in a home directory, or a variable
        with no default (the model cache, /dev/shm) — not the repository's.
        """
        if self.source.startswith(("/", "~", "$")):
            return None
        # Relative to the compose file's directory, as Compose resolves it (docker/compose.yaml: ./x is docker/x).
        return os.path.normpath(os.path.join(os.path.dirname(self.compose), self.source))

    @property
    def outside(self) -> bool:
        rel = self.repo_source
        return rel is not None and (rel == ".." or rel.startswith("../"))


@dataclass(frozen=True)
class ImageUse:
    compose: str
    line: int
    service: str
    repository: str
    tag: str | None
    digest: str | None
    built: bool = False  # the service has a build: the image is the name its build is tagged with


@dataclass(frozen=True)
class ModelUse:
    compose: str
    line: int
    repo: str
    revision: str


@dataclass(frozen=True)
class BuildUse:
    """A service's ``build:``: the context and Dockerfile as repository paths, its target and arguments."""

    compose: str
    line: int
    service: str
    context: str
    dockerfile: str
    target: str | None = None
    args: tuple[tuple[str, str], ...] = ()
    comment: str = ""  # the comment lines written above ``build:``
    arg_lines: tuple[tuple[str, int], ...] = ()  # the line of the compose file stating each argument
    dockerfile_stated: bool = True  # False: ``dockerfile:`` is not written, the context's default is built

    def stated_at(self) -> dict[str, tuple[str, int]]:
        """Where each build argument is stated: ``{name: (compose file, line)}``."""
        return {name: (self.compose, line) for name, line in self.arg_lines}


def built_file(use: BuildUse, is_file: Callable[[str], bool]) -> str:
    """The file a compose ``build:`` builds: its ``dockerfile:``; else the context's ``Dockerfile``, else its
    ``Containerfile`` (the name podman and podman-compose build when there is no ``Dockerfile``)."""
    if use.dockerfile_stated or is_file(use.dockerfile):
        return use.dockerfile
    other = os.path.normpath(os.path.join(use.context, "Containerfile"))
    return other if is_file(other) else use.dockerfile


@dataclass(frozen=True)
class ComposeFile:
    path: str
    mounts: tuple[Mount, ...]
    images: tuple[ImageUse, ...]
    models: tuple[ModelUse, ...]
    texts: tuple[str, ...]  # every command/entrypoint/environment string, for "what runs this script"
    builds: tuple[BuildUse, ...] = ()


def find(root_names: list[str]) -> list[str]:
    """The compose files among a directory's entries, main file first."""
    found = sorted(n for n in root_names if COMPOSE_NAMES.fullmatch(n))
    return sorted(found, key=lambda n: (n not in ("compose.yaml", "compose.yml", "docker-compose.yml"), n))


def interpolate(value: str) -> str:
    """Apply Compose variable syntax with defaults, as if no variable were set.

    ``${VAR:-default}`` and ``${VAR-default}`` give the default; a variable
    without a default stays as written, so an unresolvable source is visible.
    """

    def one(m: re.Match[str]) -> str:
        if m.group("dollar"):
            return "$"
        if m.group("op") in (":-", "-"):
            return interpolate(m.group("arg") or "")
        return m.group(0)

    return _VAR.sub(one, value)


# A compose file is a few hundred lines; these bounds are far above any real one.
MAX_COMPOSE_BYTES = 4 << 20
MAX_EXPANDED_NODES = 200_000


def also_placed(mounts: Sequence[Mount], m: Mount, rel: str, target: str) -> bool:
    """Whether ``m``'s service (same compose file) also mounts ``rel`` at ``target``, both outside a Python tree.

    One container then has the file at both paths (a script mounted alone
    and in its directory): no conflict, and the lockfile's one target for it
    is one the compose file gives it. A package file at two paths is not
    this: each path is an upstream file of its own.
    """
    if _PYTHON_TREE.search(target) or _PYTHON_TREE.search(m.places(rel) or ""):
        return False
    return any(o.compose == m.compose and o.service == m.service and o.places(rel) == target for o in mounts)


def _check_expansion(path: str, root: Any) -> None:
    """Refuse recursive aliases and alias bombs before anything walks the document.

    PyYAML shares one node for every use of an anchor, so nine nested anchors
    of ten aliases are a small graph that expands to a billion nodes when
    walked ("billion laughs"), and an anchor used inside itself (``&a [*a]``,
    or ``<<: *a`` inside ``&a``) is a cycle. Each node's expanded size is
    counted once (memoised), so the check is linear in the graph.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise BadInput(
                f"{path}:{node.start_mark.line + 1}: a recursive alias (an anchor used inside itself, "
                "directly or by a merge key); refused",
                "replace the alias with the values it should stand for",
            )
        if isinstance(node, yaml.ScalarNode):
            total = 1
        else:
            active.add(key)
            children = node.value if isinstance(node, yaml.SequenceNode) else [c for kv in node.value for c in kv]
            total = 1
            for child in children:
                total += size(child)
                if total > MAX_EXPANDED_NODES:
                    raise BadInput(
                        f"{path}:{node.start_mark.line + 1}: aliases expand to more than {MAX_EXPANDED_NODES} "
                        "nodes (an alias bomb); refused",
                        "write the values out, or use fewer nested aliases",
                    )
            active.discard(key)
        sizes[key] = total
        return total

    size(root)


def _compose_root(path: str, text: str) -> Any:
    """The YAML node tree of a compose file (``None`` when empty), bounded in size, nesting and alias expansion."""
    if len(text) > MAX_COMPOSE_BYTES:
        raise BadInput(
            f"{path}: {len(text)} characters, over the {MAX_COMPOSE_BYTES >> 20} MiB limit for a compose file; refused"
        )
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when built with it
        if root is not None:
            _check_expansion(path, root)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise BadInput(
            f"{path}{line}: not valid YAML: {problem}", "fix the YAML, then run patchkit import again"
        ) from e
    except RecursionError as e:
        raise BadInput(f"{path}: nested too deeply to be a compose file; refused") from e
    return root


@dataclass
class _Uses:
    """What the services of one compose file mount, run and name, gathered in file order."""

    mounts: list[Mount] = field(default_factory=list)
    images: list[ImageUse] = field(default_factory=list)
    models: list[ModelUse] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    builds: list[BuildUse] = field(default_factory=list)

    def service(self, path: str, service: str, svc: Any, lines: list[str]) -> None:
        """One service's image, mounts, run-time text (command, entrypoint, environment) and model paths."""
        image = _get(svc, "image")
        key = next((k for k, _ in _pairs(svc) if str(k.value) == "build"), None)
        if isinstance(image, yaml.ScalarNode):
            self.images.append(dataclasses.replace(_image(path, service, image), built=key is not None))
        if key is not None and (use := _build(path, service, _get(svc, "build"))) is not None:
            line = key.start_mark.line + 1
            self.builds.append(dataclasses.replace(use, line=line, comment=_comment_above(lines, line)))
        volumes = _get(svc, "volumes")
        if isinstance(volumes, yaml.SequenceNode):
            for k, item in enumerate(volumes.value):
                mount = _mount(path, service, k, item, lines)
                if mount is not None:
                    self.mounts.append(mount)
        for key, value_node in _pairs(svc):
            # What the service runs (command, entrypoint, environment), not what it mounts.
            if str(key.value) not in ("volumes", "image"):
                self.texts.extend(interpolate(str(s.value)) for s in _scalars(value_node))
        for scalar in _scalars(svc):
            value = interpolate(str(scalar.value))
            for m in _MODEL_PATH.finditer(value):
                self.models.append(ModelUse(path, scalar.start_mark.line + 1, f"{m['org']}/{m['name']}", m["rev"]))


def read(path: str, text: str) -> ComposeFile:
    """Parse one compose file; malformed YAML, an alias bomb or a relative container path is a ``BadInput``."""
    root = _compose_root(path, text)
    if root is None or not isinstance(root, yaml.MappingNode):
        raise BadInput(f"{path}: not a compose file (the top level must be a mapping with 'services')")
    services = _get(root, "services")
    if not isinstance(services, yaml.MappingNode):
        raise BadInput(f"{path}: no 'services' mapping", "a compose file lists its containers under services:")
    lines = text.splitlines()
    uses = _Uses()
    for name_node, svc in _pairs(services):
        service = str(name_node.value)
        if not isinstance(svc, yaml.MappingNode):
            raise BadInput(f"{path}:{svc.start_mark.line + 1}: services.{service}: must be a mapping")
        uses.service(path, service, svc, lines)
    return ComposeFile(
        path, tuple(uses.mounts), tuple(uses.images), tuple(uses.models), tuple(uses.texts), tuple(uses.builds)
    )


def _build(path: str, service: str, node: Any) -> BuildUse | None:
    """``build: ./dir`` or ``build: {context, dockerfile, target, args}``, paths made relative to the repository.

    A context that is a URL (a git repository) builds nothing of this repository: None.
    """
    here = os.path.dirname(path)
    fields: dict[str, Any] = {}
    if isinstance(node, yaml.ScalarNode):
        fields["context"] = node
    elif isinstance(node, yaml.MappingNode):
        fields = {str(k.value): v for k, v in _pairs(node)}
    context_node = fields.get("context")
    context = interpolate(str(context_node.value)) if isinstance(context_node, yaml.ScalarNode) else "."
    if "://" in context or context.startswith(("/", "~", "$", "git@")):
        return None
    context = os.path.normpath(os.path.join(here, context))
    df = fields.get("dockerfile")
    dockerfile = interpolate(str(df.value)) if isinstance(df, yaml.ScalarNode) else "Dockerfile"
    target = fields.get("target")
    args = _args(fields.get("args"))
    return BuildUse(
        path,
        node.start_mark.line + 1,
        service,
        context,
        os.path.normpath(os.path.join(context, dockerfile)),
        interpolate(str(target.value)) if isinstance(target, yaml.ScalarNode) else None,
        tuple((k, v) for k, v, _ in args),
        arg_lines=tuple((k, line) for k, _, line in args),
        dockerfile_stated=df is not None,
    )


def _args(raw: Any) -> list[tuple[str, str, int]]:
    """``build.args`` as (name, value, line), in mapping (``KEY: value``) or list (``- KEY=value``) form.

    An argument without a value (``KEY:`` or ``- KEY``) is passed from the
    environment when it is set there; as with every variable here, it is
    taken as not set: not passed, so the Dockerfile's default holds.
    """
    if isinstance(raw, yaml.MappingNode):
        return [
            (str(k.value), interpolate(str(v.value)), v.start_mark.line + 1)
            for k, v in _pairs(raw)
            if isinstance(v, yaml.ScalarNode) and v.tag != _NULL
        ]
    if isinstance(raw, yaml.SequenceNode):
        items = [(v.value, v.start_mark.line + 1) for v in raw.value if isinstance(v, yaml.ScalarNode)]
        parts = [(str(item).partition("="), line) for item, line in items]
        return [(k, interpolate(v), line) for (k, eq, v), line in parts if eq]
    return []


_NULL = "tag:yaml.org,2002:null"


def _pairs(node: Any) -> Iterator[tuple[Any, Any]]:
    """The key/value pairs of a mapping node with merge keys (``<<``) applied, own keys winning."""
    own: list[tuple[Any, Any]] = []
    merged: list[tuple[Any, Any]] = []
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge":
            sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for src in sources:
                if isinstance(src, yaml.MappingNode):
                    merged.extend(_pairs(src))
        else:
            own.append((key, value))
    names = {str(k.value) for k, _ in own}
    yield from own
    yield from ((k, v) for k, v in merged if str(k.value) not in names)


def _get(node: Any, key: str) -> Any:
    return next((v for k, v in _pairs(node) if str(k.value) == key), None)


def _scalars(node: Any) -> Iterator[Any]:
    if isinstance(node, yaml.ScalarNode):
        yield node
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            yield from _scalars(v)
    elif isinstance(node, yaml.MappingNode):
        for _, v in _pairs(node):
            yield from _scalars(v)


def _image(path: str, service: str, node: Any) -> ImageUse:
    """The image a service runs; its digest is checked by the import (an invalid one is an issue, not an error)."""
    from patchkit.oci.ref import ImageRef

    text = interpolate(str(node.value)).strip()
    rest, _, digest = text.partition("@")
    try:
        ref = ImageRef.parse(rest)
    except BadInput as e:
        raise BadInput(f"{path}:{node.start_mark.line + 1}: services.{service}.image: {e.message}", e.hint) from e
    tag = ref.tag if rest.rfind(":") > rest.rfind("/") else None
    # Recorded as patchkit records any image (``docker.io/library/python`` is ``python``): one repository, one name.
    return ImageUse(path, node.start_mark.line + 1, service, ref.display_repository, tag, digest or None)


def _mount(path: str, service: str, k: int, item: Any, lines: list[str]) -> Mount | None:
    line = item.start_mark.line + 1
    where = f"{path}:{line}: services.{service}.volumes[{k}]"
    if isinstance(item, yaml.ScalarNode):
        parts = interpolate(str(item.value)).split(":")
        if len(parts) == 1:
            return None  # an anonymous volume: nothing of the repository
        source, target = parts[0], parts[1]
        options = parts[2].split(",") if len(parts) > 2 else []
        read_only = "ro" in options
    elif isinstance(item, yaml.MappingNode):
        fields = {str(k_.value): v for k_, v in _pairs(item)}
        kind = fields.get("type")
        if kind is not None and str(kind.value) != "bind":
            return None
        src, dst = fields.get("source"), fields.get("target")
        if not isinstance(src, yaml.ScalarNode) or not isinstance(dst, yaml.ScalarNode):
            raise BadInput(f"{where}: a bind mount needs 'source' and 'target'")
        source, target = interpolate(str(src.value)), interpolate(str(dst.value))
        ro = fields.get("read_only")
        read_only = isinstance(ro, yaml.ScalarNode) and str(ro.value).lower() == "true"
    else:
        raise BadInput(f"{where}: a volume is a string or a mapping")
    if not target.startswith("/"):
        raise BadInput(
            f"{where}: container path '{target}' is relative",
            "container paths are absolute: write the full path inside the image",
        )
    try:
        ContainerPath(str(PurePosixPath(target)))
    except ValueError as e:
        raise BadInput(f"{where}: {e}", "write the container path as a plain absolute path") from e
    if not source.startswith((".", "/", "~", "$")):
        return None  # a named volume
    return Mount(path, line, service, source, str(PurePosixPath(target)), read_only, _comment_above(lines, line))


def _comment_above(lines: list[str], line: int) -> str:
    """The contiguous comment lines right above ``line`` (1-based), and a trailing comment on it."""
    out: list[str] = []
    i = line - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        out.append(lines[i].lstrip()[1:].strip())
        i -= 1
    out.reverse()
    own = lines[line - 1] if line - 1 < len(lines) else ""
    if " #" in own:
        out.append(own.split(" #", 1)[1].strip())
    return " ".join(out)
