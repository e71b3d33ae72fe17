"""Upstream pins stated in a repository's own lock and build files, read by what the keys mean.

Hand-kept repositories pin their upstreams in files of their own, each with
its own key names:

- KEY=VALUE files (``upstream.lock``, ``versions.env``, ``.env``, ``*.lock``
  that is not JSON): ``VLLM_COMMIT=<sha>``, ``VLLM_TAG=v0.11.0``,
  ``AITER_REPO=https://github.com/ROCm/aiter``, ``export X="…"`` too;
- JSON locks (``*lock*.json``): any object whose keys name a commit
  (``commit``, ``sha``, ``rev``, ``base_commit``, ``*_commit``), a repository
  (``repository``, ``repo``, ``url``, ``git``, ``*_repo``) or a version
  (``version``, ``tag``, ``package_base = "vllm==0.11.0"``), at any depth;
  the upstream is the repository's name, else the key prefix
  (``vllm_commit``), else the enclosing key (``{"vllm": {"commit": …}}``);
  an object in a list counts only when it names its repository (per-patch
  entries state patches, not upstream pins);
- Dockerfile ``ARG``/``ENV`` defaults, by the same key names.

A commit key with ``release``/``head``/``target`` in it (``release_commit``)
is recorded but is not the base. Every pin keeps the file and line it came
from; two sources that disagree are reported, and neither is taken.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.importing import dockerfile, read_inside

_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_VERSION = re.compile(r"v?\d+(?:\.\d+)*(?:[.+-]?[A-Za-z0-9.+-]*)?")
_OWNER_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_URL = re.compile(r"(?:git\+)?(?:https?|ssh|git|file)://\S+|git@[\w.-]+:\S+")
# A package installed from a git repository at a ref: git+URL@REF (the last @ of the URL; ssh's user is before).
_PIP_GIT = re.compile(r"git\+(?P<url>(?:https?|ssh|git)://[^\s\"'#]+)@(?P<ref>[\w.\-/]+)(?=[\s\"'#;&|]|$)")
_GITHUB = re.compile(r"github\.com[/:](?P<repo>[\w.-]+/[\w.-]+?)(?:\.git)?/?$")
_ROLES = (
    ("git", re.compile(r"(?:^|_)(?:repo|repository|url|git|git_url|remote|source_repo)$")),
    ("release", re.compile(r"(?:^|_)(?:release|head|target|tip)_(?:commit|sha|rev)$")),
    ("commit", re.compile(r"(?:^|_)(?:commit|sha|rev|revision|hash|base|ref)$")),
    ("version", re.compile(r"(?:^|_)(?:version|tag|release|package|base|ref|pin)$")),
)
_LIST_KEYS = ("upstreams", "dependencies", "components", "repos", "repositories", "sources", "projects")
_PREFIXES = re.compile(r"_(?:base|package|release|source|upstream|git|pinned)$")
# Words of a key naming what is not a code repository: an image's, a registry's, a model's or a dataset's.
_NOT_CODE = frozenset(
    {"image", "img", "docker", "container", "registry", "model", "models", "hf", "hub", "huggingface"}
    | {"dataset", "datasets", "tokenizer", "weights", "weight", "checkpoint", "ckpt"}
)
_NOT_NAMES = frozenset({"base", "package", "release", "source", "upstream", "git", "pinned", "build", "image"})


@dataclass(frozen=True)
class Pin:
    """One statement: upstream ``name``'s ``what`` (commit, release, git, version) is ``value``, at file:line."""

    name: str
    what: str
    value: str
    file: str
    line: int
    key: str = ""  # the key it is written under (``base_commit``)
    under: str | None = None  # the key of the object holding it (``{"vllm-extra": {"commit": …}}``)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Stated:
    """What the pins of one upstream agree on (None where nothing, or two disagreeing sources, state it)."""

    name: str
    git: str | None = None
    commit: str | None = None
    version: str | None = None
    release: str | None = None
    where: dict[str, str] = field(default_factory=dict)  # what -> file:line


def _not_code(key: str | None) -> bool:
    """Whether a key's words name an image, a registry, a model or a dataset: what it holds is no code upstream."""
    words = set(re.split(r"[_\-.\s]+", key.lower())) if key else set()
    return bool(words & _NOT_CODE or {w.removesuffix("s") for w in words} & _NOT_CODE)


def roles(key: str) -> list[tuple[str, str]]:
    """``(upstream prefix, what)`` each a key may name, in order: ``VLLM_COMMIT`` is ``[("vllm", "commit")]``.

    A key may name several (``VLLM_REF`` a commit or a tag, ``package_base`` a
    commit or ``vllm==0.11.0``): the value decides which.
    """
    low = key.lower().replace("-", "_")
    out = []
    for what, pattern in _ROLES:
        m = pattern.search(low)
        if what == "git" and _not_code(low):
            continue  # IMAGE_REPO=vllm/vllm-openai, MODEL_REPO=Qwen/Qwen3-8B: no code upstream
        if m is not None:
            prefix = _PREFIXES.sub("", low[: m.start()].strip("_"))
            out.append(("" if prefix in _NOT_NAMES else prefix, what))
    return out


def _pin(key: str, value: str, file: str, line: int, context: str | None) -> Pin | None:
    """The first reading of ``key = value`` whose value fits what the key names."""
    for prefix, what in roles(key):
        if (pin := _one(prefix, what, value, file, line, context)) is not None:
            return pin
    return None


def _valid(what: str, value: str) -> bool:
    if what in ("commit", "release"):
        return _COMMIT.fullmatch(value) is not None
    if what == "git":
        if _OWNER_REPO.fullmatch(value):
            return True
        return _URL.fullmatch(value) is not None and _repository_url(value)
    return _VERSION.fullmatch(value) is not None or "==" in value


def _repository_url(value: str) -> bool:
    """Whether a URL is written as a repository's, not as where a service listens (``VLLM_URL=http://127.0.0.1:8001``,
    ``…/v1/models``): a git form (``git+``, ``ssh``, ``git``, ``git@``, a ``.git`` path), or http(s) to a named
    host without a port or a query, with at least an owner and a name in its path."""
    from urllib.parse import urlsplit

    if not value.startswith(("http://", "https://")) or value.rstrip("/").endswith(".git"):
        return True
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return False
    host = parts.hostname or ""
    if port is not None or parts.query or host == "localhost" or re.fullmatch(r"[\d.]+|\[?[0-9a-f:]+\]?", host):
        return False
    return len([s for s in parts.path.split("/") if s]) >= 2


def git_url(value: str) -> str:
    """A repository as patchkit declares it: ``https://github.com/o/r`` for GitHub (and ``o/r``), else as written."""
    value = value.removeprefix("git+")
    if _OWNER_REPO.fullmatch(value):
        return f"https://github.com/{value.removesuffix('.git')}"
    m = _GITHUB.search(value)
    return f"https://github.com/{m['repo']}" if m else value


def repo_name(url: str) -> str:
    return url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1].rsplit(":", 1)[-1].lower()


def _one(prefix: str, what: str, value: str, file: str, line: int, context: str | None) -> Pin | None:
    value = value.strip().strip("\"'")
    if not value or "$" in value or not _valid(what, value):
        return None
    if what == "version" and "==" in value:
        project, _, value = value.partition("==")
        prefix = prefix or project.strip().lower()
    name = (prefix or context or "").lower().replace("_", "-")
    if what == "git" and not name:
        name = repo_name(git_url(value))
    return Pin(name, what, value, file, line) if name else None


def key_values(rel: str, text: str) -> list[Pin]:
    """Pins of a KEY=VALUE file (``export`` and quotes allowed, ``#`` comments ignored)."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip().removeprefix("export ").strip()
        key, eq, value = line.partition("=")
        if not eq or line.startswith("#") or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key.strip()):
            continue
        if (pin := _pin(key.strip(), value, rel, n, None)) is not None:
            out.append(pin)
    return out


def _line_of(lines: list[str], key: str, value: str) -> int:
    for n, text in enumerate(lines, 1):
        if f'"{key}"' in text and value in text:
            return n
    return next((n for n, text in enumerate(lines, 1) if value in text), 1)


def _walk(node: Any, context: str | None, rel: str, lines: list[str], out: list[Pin], listed_under: str | None) -> None:
    """Pins of one JSON value; ``context`` is the key it sits under, ``listed_under`` the key of its list."""
    if isinstance(node, list):
        for item in node:
            _walk(item, None, rel, lines, out, context)
        return
    if not isinstance(node, dict) or _not_code(context) or _not_code(listed_under):
        return  # {"image": {"repository": "rocm/vllm"}}, {"models": [{"repo": "Qwen/Qwen3-8B"}]}: no code upstream
    scalars = {str(k): v for k, v in node.items() if isinstance(v, str)}
    repo = next((v for k, v in scalars.items() if any(w == "git" for _, w in roles(k)) and _valid("git", v)), None)
    own = repo_name(git_url(repo)) if repo else None
    if own is None and listed_under in _LIST_KEYS and isinstance(node.get("name"), str):
        own = str(node["name"]).lower()
    if listed_under is None or own is not None:  # a per-patch entry in a list states no upstream pin
        for key, value in scalars.items():
            named = context if context not in _LIST_KEYS else None
            pin = _pin(key, value, rel, _line_of(lines, key, value), own or named)
            if pin is not None:
                out.append(Pin(own or pin.name, pin.what, pin.value, pin.file, pin.line, key, context))
    for key, value in node.items():
        if isinstance(value, (dict, list)):
            _walk(value, str(key), rel, lines, out, None)


def json_lock(rel: str, text: str) -> list[Pin]:
    """Pins of a JSON lock, at any depth; ``ValueError`` when it is not JSON."""
    return document_pins(rel, text, json.loads(text))


def document(rel: str, data: bytes) -> Any:
    """A JSON or TOML lock (by its name) as data; ``ValueError`` when it does not parse, ``RecursionError`` too deep."""
    if rel.endswith(".toml"):
        return tomllib.loads(data.decode())
    return json.loads(data)


def document_pins(rel: str, text: str, doc: Any) -> list[Pin]:
    """Pins of a parsed JSON or TOML lock (``document``), at any depth; ``text`` gives their lines."""
    out: list[Pin] = []
    _walk(doc, None, rel, text.splitlines(), out, None)
    return out


def lock_files(root: Path) -> list[str]:
    """The repository's own lock files: top level and the usual build directories."""
    out = []
    for place in ("", *dockerfile.PLACES, "patches"):
        folder = root / place if place else root
        if not folder.is_dir() or folder.is_symlink():
            continue
        for p in sorted(folder.iterdir()):
            name = p.name.lower()
            if not p.is_file() or p.is_symlink() or name == "lockfile.toml":
                continue
            if name.endswith((".lock", ".env")) or name == ".env" or ("lock" in name and name.endswith(".json")):
                out.append(p.relative_to(root).as_posix())
    return out


def read(root: Path, files: list[str]) -> tuple[list[Pin], list[tuple[str, str]]]:
    """Every pin in the lock ``files`` (``lock_files``), and the files that could not be read as ``(file, why)``."""
    pins: list[Pin] = []
    bad: list[tuple[str, str]] = []
    for rel in files:
        text = read_inside(root, rel, "a lock file").decode("utf-8", "replace")
        if rel.endswith(".json") or text.lstrip().startswith("{"):
            try:
                pins += json_lock(rel, text)
            except ValueError as e:
                bad.append((rel, f"not JSON ({e})"))
            except RecursionError:
                bad.append((rel, "nested too deeply to be a lock file"))
        else:
            pins += key_values(rel, text)
    return pins, bad


def from_build(build: dockerfile.Build, given: dict[str, tuple[str, int]] | None = None) -> list[Pin]:
    """Pins stated by a Dockerfile's ``ARG``/``ENV`` defaults (after build arguments).

    ``given`` says where each build argument the build was read with is
    written (compose's ``build.args``: file and line); a pin it sets is
    stated there, not at the ``ARG`` that declares it.
    """
    out = []
    given = given or {}
    for key, (value, line) in build.args.items():
        file, line = given.get(key, (build.file, line))
        if (pin := _pin(key, value, file, line, None)) is not None:
            out.append(pin)
    return out + [p for text, line in build.runs for p in installed(text, build.file, line)]


def installed(text: str, file: str, line: int) -> list[Pin]:
    """``pip install git+URL@REF`` (``uv pip``, ``name @ git+URL@REF#egg=…`` too) in a build step: the repository,
    and the commit when the ref is one (a branch or tag states only the repository)."""
    out = []
    for m in _PIP_GIT.finditer(text):
        url, ref = m["url"], m["ref"]
        if "$" in url or not _repository_url(url):
            continue
        name = repo_name(url)
        out.append(Pin(name, "git", url, file, line, "pip install"))
        if _COMMIT.fullmatch(ref):
            out.append(Pin(name, "commit", ref, file, line, "pip install"))
    return out


def from_dockerfile(rel: str, text: str) -> list[Pin]:
    """Pins stated by a Containerfile's ``ARG``/``ENV`` defaults as written, without reading what it copies."""
    out = []
    env: dict[str, str] = {}
    parsed = dockerfile.parse(text)
    for ins in parsed.instructions:
        if ins.word not in ("ARG", "ENV"):
            continue
        try:
            pairs = dockerfile.assignments(ins, env, parsed.escape)
        except dockerfile.Unreadable:
            continue  # reported as build-unreadable where the build is read
        for key, value, _ in pairs:
            if value is not None:
                env[key] = value
                if (pin := _pin(key, value, rel, ins.line, None)) is not None:
                    out.append(Pin(pin.name, pin.what, pin.value, rel, ins.line, key))
    return out + [p for ins in parsed.instructions if ins.word == "RUN" for p in installed(ins.args, rel, ins.line)]


def _same(what: str, a: str, b: str) -> bool:
    if what in ("commit", "release"):
        return a.startswith(b) or b.startswith(a)
    if what == "git":
        return git_url(a).lower().removesuffix(".git") == git_url(b).lower().removesuffix(".git")
    return a.removeprefix("v") == b.removeprefix("v")


def agree(pins: list[Pin]) -> tuple[dict[str, Stated], list[tuple[Pin, Pin]]]:
    """What each upstream's pins agree on, and each pair of pins that disagree (neither is taken)."""
    out: dict[str, Stated] = {}
    conflicts: list[tuple[Pin, Pin]] = []
    first: dict[tuple[str, str], Pin] = {}
    broken: set[tuple[str, str]] = set()
    for pin in pins:
        stated = out.setdefault(pin.name, Stated(pin.name))
        key = (pin.name, pin.what)
        seen = first.get(key)
        if seen is None:
            first[key] = pin
            setattr(stated, pin.what, git_url(pin.value) if pin.what == "git" else pin.value)
            stated.where[pin.what] = pin.where
        elif not _same(pin.what, seen.value, pin.value):
            conflicts.append((seen, pin))
            broken.add(key)
        elif pin.what in ("commit", "release") and len(pin.value) > len(seen.value):
            first[key] = pin  # the full commit a short one abbreviates
            setattr(stated, pin.what, pin.value)
            stated.where[pin.what] = pin.where
    for name, what in broken:
        setattr(out[name], what, None)
    return out, conflicts


_FILE_KEYS = ("file", "path", "patch", "overlay", "module", "name", "source")


@dataclass(frozen=True)
class Entry:
    """A per-patch object of a JSON lock: the file it names and its words (where references are written)."""

    file: str
    line: int
    names: str  # the value naming the patch's file
    text: str  # every string value of the object, for references


def patch_entries(rel: str, text: str) -> list[Entry]:
    """The objects in a JSON lock's lists that name a file (``{"file": "x.py", "pr": "vllm-project/vllm#1"}``)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return []
    lines = text.splitlines()
    out: list[Entry] = []

    def walk(node: Any, listed: bool) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, True)
        elif isinstance(node, dict):
            named = next((v for k, v in node.items() if k in _FILE_KEYS and isinstance(v, str) and "." in v), None)
            if listed and named is not None:
                words = " ".join(str(v) for v in node.values() if isinstance(v, (str, int)) and not isinstance(v, bool))
                out.append(Entry(rel, _line_of(lines, next(k for k in node if node[k] == named), named), named, words))
            for value in node.values():
                walk(value, False)

    walk(doc, False)
    return out
