"""Reading the Dockerfiles and Containerfiles of a hand-kept repository: base images and copied files.

Some deployments deliver their overlays with the image build rather than with
bind mounts: ``COPY overlay/vllm/ /usr/local/lib/python3.12/site-packages/vllm/``.
This reader follows a build the way ``docker build`` would, statically:

- instructions joined over ``\\`` continuations, comment lines dropped;
- ``ARG`` (global before the first ``FROM``, re-declared in a stage) and
  ``ENV`` values, with ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and
  ``${VAR-default}``; build arguments given by compose override the defaults;
- stages (``FROM … AS name``), ``WORKDIR`` (relative ones join the previous);
- ``COPY``/``ADD`` in shell and JSON form, with ``--chown``, ``--chmod``,
  ``--link``; ``--from=<stage>`` carries what that stage copied from the
  context, ``--from=<image>`` copies nothing of the repository and is skipped;
- the last stage (or compose's ``build.target``) is the image.

It reports what it cannot resolve (a variable with no value, a source
missing from the context) rather than guessing. Nothing here writes.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# File names of Dockerfiles as repositories write them.
NAMES = re.compile(
    r"(?:Dockerfile|Containerfile)(?:[.-][A-Za-z0-9_.-]+)?|[A-Za-z0-9_.-]+\.(?:Dockerfile|Containerfile)"
)
# Where repositories keep their build and compose files, besides the top level.
PLACES = ("docker", "deploy", "build", "container", "containers", ".devcontainer")
_VAR = re.compile(
    r"\$(?:\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-+])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SKIP = ("__pycache__/", ".pyc")
# Files named after a Dockerfile that are not one: its ignore file, notes about it.
_NOT_BUILDS = (".dockerignore", ".md", ".txt", ".rst", ".orig", ".bak", ".swp")


@dataclass(frozen=True)
class BaseImage:
    """An image a stage is built ``FROM`` (not a stage of the same file), as written and as resolved."""

    file: str
    line: int
    written: str
    ref: str | None  # None: a variable in it has no value
    stage: str | None  # the stage's ``AS`` name
    final: bool  # the stage that is the image

    @property
    def digest(self) -> str | None:
        if self.ref is None or "@" not in self.ref:
            return None
        digest = self.ref.rsplit("@", 1)[1]
        return digest if _DIGEST.fullmatch(digest) else None

    @property
    def repository(self) -> str:
        ref = (self.ref or self.written).split("@", 1)[0]
        return ref.rsplit(":", 1)[0] if ref.rfind(":") > ref.rfind("/") else ref

    @property
    def tag(self) -> str | None:
        ref = (self.ref or self.written).split("@", 1)[0]
        return ref.rsplit(":", 1)[1] if ref.rfind(":") > ref.rfind("/") else None


@dataclass(frozen=True)
class Copied:
    """A repository file the image holds at ``target``, and the ``COPY`` line that put it there."""

    rel: str
    target: str
    file: str
    line: int
    comment: str  # the comment lines written above the instruction


@dataclass
class Build:
    """What one Dockerfile builds: its base images, the repository files in the image, its arguments."""

    file: str
    context: str
    bases: list[BaseImage] = field(default_factory=list)
    copied: list[Copied] = field(default_factory=list)
    args: dict[str, tuple[str, int]] = field(default_factory=dict)  # every ARG/ENV default, with its line
    problems: list[tuple[str, int, str, str]] = field(default_factory=list)  # (kind, line, message, fix)


@dataclass
class _Stage:
    name: str | None
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, Copied] = field(default_factory=dict)  # container path -> what put it there


def instructions(text: str) -> list[tuple[int, str, str, str]]:
    """``(line, INSTRUCTION, arguments, comment above)`` for each instruction, continuations joined."""
    out: list[tuple[int, str, str, str]] = []
    comment: list[str] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            if not buf:
                comment.append(stripped[1:].strip())
            continue  # a comment line inside a continuation is dropped, as docker does
        if not stripped and not buf:
            comment = []
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        joined = " ".join(b.strip() for b in buf if b.strip())
        buf = []
        word, _, rest = joined.partition(" ")
        out.append((start, word.upper(), rest.strip(), " ".join(comment)))
        comment = []
    return out


def substitute(value: str, env: dict[str, str]) -> str | None:
    """``value`` with its variables replaced; None when one has no value and no default."""
    missing = False

    def one(m: re.Match[str]) -> str:
        nonlocal missing
        name = m["name"] or m["bare"]
        have = env.get(name)
        op = m["op"]
        if op in (":-", "-"):
            return have if have or (op == "-" and have is not None) else (m["arg"] or "")
        if op in (":+", "+"):
            return (m["arg"] or "") if have else ""
        if have is None:
            missing = True
            return m.group(0)
        return have

    out = _VAR.sub(one, value)
    return None if missing else out


def _words(args: str) -> tuple[dict[str, str], list[str]]:
    """A COPY/ADD's ``--flag=value`` options and its paths (shell or JSON form)."""
    flags: dict[str, str] = {}
    parts = args.split()
    while parts and parts[0].startswith("--"):
        name, _, value = parts.pop(0)[2:].partition("=")
        flags[name] = value
    rest = " ".join(parts)
    if rest.startswith("["):
        try:
            items = json.loads(rest)
        except (ValueError, RecursionError):
            items = None
        if isinstance(items, list) and all(isinstance(i, str) for i in items):
            return flags, items
    return flags, parts


class _Reader:
    def __init__(self, root: Path, build: Build, given: dict[str, str], target: str | None) -> None:
        self.root = root
        self.b = build
        self.given = given  # build arguments compose passes
        self.target = target
        self.globals: dict[str, str] = {}
        self.stages: list[_Stage] = []

    def problem(self, kind: str, line: int, message: str, fix: str) -> None:
        self.b.problems.append((kind, line, message, fix))

    def run(self, text: str) -> None:
        for line, word, args, comment in instructions(text):
            if word == "ARG":
                self.arg(line, args)
            elif word == "FROM":
                self.from_(line, args)
            elif not self.stages:
                continue
            elif word == "ENV":
                self.env(line, args)
            elif word == "WORKDIR":
                self.workdir(line, args)
            elif word in ("COPY", "ADD"):
                self.copy(line, word, args, comment)
        final = next((s for s in self.stages if self.target and s.name == self.target), None)
        final = final or (self.stages[-1] if self.stages else None)
        if final is not None:
            self.b.copied = sorted(final.files.values(), key=lambda c: (c.line, c.target))
        for k, base in enumerate(self.b.bases):
            self.b.bases[k] = BaseImage(
                base.file, base.line, base.written, base.ref, base.stage, base.stage == (final and final.name)
            )

    def scope(self) -> dict[str, str]:
        return self.stages[-1].env if self.stages else self.globals

    def arg(self, line: int, args: str) -> None:
        for item in args.split():
            name, eq, default = item.partition("=")
            env = self.scope()
            value = self.given.get(name)
            if value is None and eq:
                value = substitute(default.strip("\"'"), env) or default.strip("\"'")
            if value is None and self.stages:
                value = self.globals.get(name)  # a global ARG re-declared in a stage
            if value is not None:
                env[name] = value
                self.b.args.setdefault(name, (value, line))

    def env(self, line: int, args: str) -> None:
        env = self.scope()
        items = args.split()
        pairs = [i.partition("=") for i in items] if all("=" in i for i in items) else []
        if not pairs and len(items) >= 2:
            pairs = [(items[0], "=", " ".join(items[1:]))]
        for name, _, value in pairs:
            resolved = substitute(value.strip("\"'"), env)
            if resolved is not None:
                env[name] = resolved
                self.b.args.setdefault(name, (resolved, line))

    def from_(self, line: int, args: str) -> None:
        words = [w for w in args.split() if not w.startswith("--")]
        if not words:
            return
        written = words[0]
        name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
        ref = substitute(written, self.globals)
        parent = next((s for s in self.stages if s.name is not None and s.name == ref), None)
        stage = _Stage(name)
        if parent is not None:
            stage.workdir, stage.env, stage.files = parent.workdir, dict(parent.env), dict(parent.files)
        self.stages.append(stage)
        if parent is not None or ref == "scratch":
            return
        if ref is None:
            self.problem(
                "image-unresolved",
                line,
                f"FROM {written}: a variable in it has no value (no ARG default, no build argument)",
                "give the ARG a default, pinned by digest (ARG BASE=repo@sha256:…)",
            )
        self.b.bases.append(BaseImage(self.b.file, line, written, ref, name, False))

    def workdir(self, line: int, args: str) -> None:
        stage = self.stages[-1]
        value = substitute(args.strip().strip("\"'"), stage.env)
        if value is None:
            self.problem("copy-unresolved", line, f"WORKDIR {args}: a variable in it has no value", "give it a default")
            return
        stage.workdir = str(PurePosixPath(stage.workdir) / value)

    def copy(self, line: int, word: str, args: str, comment: str) -> None:
        stage = self.stages[-1]
        flags, paths = _words(args)
        if len(paths) < 2:
            return
        resolved = [substitute(p, stage.env) for p in paths]
        if any(r is None for r in resolved):
            self.problem(
                "copy-unresolved",
                line,
                f"{word} {' '.join(paths)}: a variable in it has no value; what it copies is unknown",
                "give the ARG or ENV a default",
            )
            return
        sources, dest = [str(r) for r in resolved[:-1]], str(resolved[-1])
        into_dir = dest.endswith("/") or len(sources) > 1
        dest_path = PurePosixPath(stage.workdir) / dest
        source_stage = flags.get("from")
        if source_stage is not None:
            self.copy_from(stage, source_stage, sources, dest_path, into_dir)
            return
        for src in sources:
            if re.match(r"[a-z]+://", src) or src.startswith("git@"):
                continue  # ADD of a URL: nothing of the repository
            self.copy_context(stage, line, src, dest_path, into_dir, comment)

    def copy_from(self, stage: _Stage, name: str, sources: list[str], dest: PurePosixPath, into_dir: bool) -> None:
        """``COPY --from=<stage>``: what that stage holds from the context follows; an image holds none of it."""
        other = next((s for s in self.stages[:-1] if s.name == name), None)
        if other is None and name.isdigit() and int(name) < len(self.stages) - 1:
            other = self.stages[int(name)]
        if other is None:
            return  # another image: none of the repository's files
        for src in sources:
            src_path = PurePosixPath(other.workdir) / src
            for path, c in other.files.items():
                pure = PurePosixPath(path)
                if pure == src_path:
                    target = dest / pure.name if into_dir else dest
                elif src_path in pure.parents:
                    target = dest / pure.relative_to(src_path)
                else:
                    continue
                stage.files[str(target)] = Copied(c.rel, str(target), c.file, c.line, c.comment)

    def copy_context(
        self, stage: _Stage, line: int, src: str, dest: PurePosixPath, into_dir: bool, comment: str
    ) -> None:
        base = self.root / self.b.context if self.b.context != "." else self.root
        src = src.lstrip("/")  # a COPY source is in the context even when written absolute
        matches = sorted(glob.glob(str(base / src))) if glob.has_magic(src) else [str(base / src)]
        matches = [m for m in matches if os.path.lexists(m)]
        if not matches:
            self.problem(
                "copy-missing",
                line,
                f"copies {src}, which is not in the build context ({self.b.context})",
                "restore the file, or fix the path (it is relative to the build context)",
            )
            return
        several = len(matches) > 1 or glob.has_magic(src)
        for m in matches:
            path = Path(m)
            if path.is_dir() and not path.is_symlink():
                self.copy_tree(stage, line, path, dest, comment)
            elif path.is_file() and not path.is_symlink():
                target = dest / path.name if into_dir or several else dest
                self.add(stage, line, path, str(target), comment)

    def copy_tree(self, stage: _Stage, line: int, top: Path, dest: PurePosixPath, comment: str) -> None:
        """A directory's contents (not the directory itself, as docker copies it), symlinks not followed."""
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not (Path(dirpath) / d).is_symlink())
            for name in sorted(filenames):
                full = Path(dirpath) / name
                if not full.is_symlink():
                    self.add(stage, line, full, str(dest / full.relative_to(top).as_posix()), comment)

    def add(self, stage: _Stage, line: int, path: Path, target: str, comment: str) -> None:
        """One file into the stage; one outside the repository (``../``, an absolute source) is none of its files."""
        plain = Path(os.path.normpath(path))
        if not plain.is_relative_to(self.root) or not plain.resolve().is_relative_to(self.root.resolve()):
            return
        rel = plain.relative_to(self.root).as_posix()
        if any(s in rel for s in _SKIP):
            return
        stage.files[target] = Copied(rel, target, self.b.file, line, comment)


def read(
    root: Path,
    rel: str,
    text: str,
    context: str | None = None,
    args: dict[str, str] | None = None,
    target: str | None = None,
) -> Build:
    """What the Dockerfile ``rel`` builds with the build context ``context`` (a repository path).

    Without a stated context (no compose ``build:`` names one) it is the
    repository's top, as ``docker build -f docker/Dockerfile .`` is run,
    unless the Dockerfile's own directory holds what it copies.
    """
    if context is None:
        context = _guess_context(root, rel, text)
    build = Build(rel, context)
    _Reader(root, build, args or {}, target).run(text)
    return build


def _guess_context(root: Path, rel: str, text: str) -> str:
    here = str(PurePosixPath(rel).parent)
    if here == ".":
        return "."
    sources = [p for _, word, args, _ in instructions(text) if word in ("COPY", "ADD") for p in _words(args)[1][:-1]]
    sources = [s for s in sources if "$" not in s and not re.match(r"[a-z]+://", s)]
    at_top = sum(bool(glob.glob(str(root / s))) for s in sources)
    at_here = sum(bool(glob.glob(str(root / here / s))) for s in sources)
    return here if at_here > at_top else "."


def find(root: Path) -> list[str]:
    """Dockerfiles and Containerfiles at the top of the repository and in the usual build directories."""
    out = []
    for place in ("", *PLACES):
        folder = root / place if place else root
        if not folder.is_dir() or folder.is_symlink():
            continue
        for name in sorted(os.listdir(folder)):
            path = folder / name
            if NAMES.fullmatch(name) and not name.endswith(_NOT_BUILDS) and path.is_file() and not path.is_symlink():
                out.append(f"{place}/{name}" if place else name)
    return out
