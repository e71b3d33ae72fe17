"""Reading the Dockerfiles and Containerfiles of a hand-kept repository: base images and copied files.

Some deployments deliver their overlays with the image build rather than with
bind mounts: ``COPY overlay/vllm/ /usr/local/lib/python3.12/site-packages/vllm/``.
This reader follows a build the way ``docker build`` would, statically. It
is the one reader of Dockerfile syntax (:func:`parse`, :func:`expand`):
``importing.shell`` reads ``RUN`` steps and ``importing.pins`` ``ARG`` pins
through it.

- parser directives (``# escape=``); instructions in any case, joined over
  continuations as docker joins them, comment lines dropped; here-documents
  of ``RUN``, ``COPY`` and ``ADD`` taken as their bodies;
- ``ARG`` (global before the first ``FROM``, re-declared in a stage) and
  ``ENV`` values, with quotes, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
  ``${VAR-default}`` and ``${VAR:+x}``; build arguments given by compose
  override the defaults;
- stages (``FROM … AS name``), ``WORKDIR`` (relative ones join the previous);
- ``COPY``/``ADD`` in shell and JSON form, with ``--chown``, ``--chmod``,
  ``--link``; ``--from=<stage>`` carries what that stage copied from the
  context, ``--from=<image>`` copies nothing of the repository and is skipped;
- ``RUN cp``/``install``/``mv`` (after ``cd``, with ``-t DIR``) of a file a
  ``COPY`` of this stage put in the image: the file is then there as well;
- the last stage (or compose's ``build.target``) is the image.

It reports what it cannot resolve (a variable with no value, a source
missing from the context) rather than guessing, and what docker refuses (an
unclosed here-document or quote) as ``build-unreadable``. Nothing here writes.
"""

from __future__ import annotations

import glob
import json
import os
import posixpath
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
    r"\$(?:\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-+?])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_NESTED = 64  # defaults in defaults (${A:-${B:-…}}) read; deeper is refused, not read slowly
MAX_VALUE = 1 << 20  # characters of variables one word expands to: ARG B=$A$A doubles at each line
# A build file is read (a character at a time, in places) up to a size far above any real one.
MAX_BUILD_FILE = 128 << 10
_SKIP = ("__pycache__/", ".pyc")
# Files named after a Dockerfile that are not one: its ignore file, notes about it.
_PLACE_VALUES = frozenset(
    {"-m", "--mode", "-o", "--owner", "-g", "--group", "-S", "--suffix", "--exclude", "--include", "-e", "--rsh"}
)
_PLACERS = frozenset({"cp", "install", "mv", "rsync"})
_IN_PYTHON_TREE = re.compile(r"/(?:site|dist)-packages(?:/|$)")
# Directories every Linux base image has: a file copied to one goes into it, as docker copies it.
_TOP_DIRS = ("bin", "etc", "home", "mnt", "opt", "root", "srv", "tmp", "usr", "var")
IMAGE_DIRS = frozenset(
    {"/", *("/" + d for d in _TOP_DIRS), "/var/" + "tmp"}
    | {f"/usr/{d}" for d in ("bin", "lib", "local", "local/bin", "local/lib", "share", "src")}
)
_SEPARATORS = frozenset({"&&", "||", ";", "|"})
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
        """The repository, as patchkit records it (``docker.io/library/python`` is ``python``)."""
        from patchkit.oci.ref import familiar_repository

        ref = (self.ref or self.written).split("@", 1)[0]
        return familiar_repository(ref.rsplit(":", 1)[0] if ref.rfind(":") > ref.rfind("/") else ref)

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
    runs: list[tuple[str, int]] = field(default_factory=list)  # every RUN line's text (variables expanded), line
    problems: list[tuple[str, int, str, str]] = field(default_factory=list)  # (kind, line, message, fix)


@dataclass
class _Stage:
    name: str | None
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, Copied] = field(default_factory=dict)  # container path -> what put it there
    dirs: set[str] = field(default_factory=set)  # the directories WORKDIR made


# -- the file: directives, instructions, continuations, comments, here-documents


class Unreadable(ValueError):
    """A Dockerfile line ``docker build`` itself would refuse (an unclosed quote or here-document)."""


class TooLarge(Unreadable):
    """A word whose variables expand to more than ``MAX_VALUE`` characters: not read."""


@dataclass(frozen=True)
class Heredoc:
    """A here-document of a ``RUN``, ``COPY`` or ``ADD`` (``<<EOF`` … ``EOF``): its body, from its first line."""

    name: str
    body: str
    line: int  # the line its body starts on
    quoted: bool  # ``<<"EOF"``: no variables are replaced in the body


@dataclass(frozen=True)
class Instruction:
    """One instruction, as the builder reads it: continuation lines joined, comment lines inside dropped."""

    line: int
    word: str  # upper case (instructions are not case-sensitive)
    args: str
    comment: str = ""  # the comment lines written above it
    heredocs: tuple[Heredoc, ...] = ()

    def options(self) -> tuple[list[tuple[str, str]], str]:
        """Leading ``--name=value`` options (``--from``, ``--chown``, ``--mount`` …), in order, and what follows."""
        options: list[tuple[str, str]] = []
        rest = self.args
        while m := _FLAG.match(rest):
            options.append((m["name"], m["value"] or ""))
            rest = rest[m.end() :]
        return options, rest.strip()

    def flags(self) -> tuple[dict[str, str], str]:
        """The options by name (the first of each), and what follows them."""
        options, rest = self.options()
        return dict(reversed(options)), rest

    def exec_form(self) -> list[str] | None:
        """The JSON form's words (``RUN ["bash", "-c", "…"]``), or None for the shell form."""
        rest = self.flags()[1]
        if not rest.startswith("["):
            return None
        try:
            items = json.loads(rest)
        except (ValueError, RecursionError):
            return None  # not JSON: docker runs it in the shell form
        return items if isinstance(items, list) and all(isinstance(i, str) for i in items) else None


@dataclass
class Parsed:
    """A Dockerfile's instructions, its escape character, and what stops ``docker build`` reading it."""

    instructions: list[Instruction] = field(default_factory=list)
    escape: str = "\\"
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, what)


_FLAG = re.compile(r"\s*--(?P<name>[a-z][a-z-]*)(?:=(?P<value>\S*))?(?=\s|$)")
_DIRECTIVE = re.compile(r"#\s*(?P<key>[A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?P<value>.*?)\s*$")
_DIRECTIVES = ("escape", "syntax", "check")
HEREDOC_AT = re.compile(r"(?:^|\s)\d*<<(?P<chomp>-?)(?P<q>[\"']?)(?P<name>[A-Za-z0-9_.-]+)(?P=q)(?=\s|$)")
_HEREDOC_WORDS = ("RUN", "COPY", "ADD")


def parse(text: str) -> Parsed:
    """The instructions of a Dockerfile with their lines, read as the builder reads them.

    Parser directives at the top (``# escape=`` picks the continuation and
    escape character, ``\\`` or a backtick); comment lines, also inside a
    continued instruction, are dropped; a line ending in the escape
    character continues on the next, joined without a space, as docker joins
    it; a ``RUN``, ``COPY`` or ``ADD`` with ``<<EOF`` takes the lines up to
    ``EOF`` as its here-document. What docker would refuse is a problem.
    """
    lines = text.removeprefix("\ufeff").splitlines()
    out = Parsed()
    n = _directives(lines, out)
    comment: list[str] = []
    while n < len(lines):
        stripped = lines[n].strip()
        if stripped.startswith("#") or not stripped:
            comment = [*comment, stripped[1:].strip()] if stripped else []
            n += 1
            continue
        start = n + 1
        logical, n = _logical(lines, n, out.escape)
        word, rest = [*re.split(r"\s+", logical.strip(), maxsplit=1), ""][:2]
        heredocs: tuple[Heredoc, ...] | None = ()
        if word.upper() in _HEREDOC_WORDS and "<<" in rest:
            heredocs, n = _heredocs(lines, n, rest, out, start)
        if heredocs is None:
            break  # not closed: the rest of the file is its body, and docker refuses the file
        out.instructions.append(Instruction(start, word.upper(), rest.strip(), " ".join(comment), heredocs))
        comment = []
    return out


def instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile (see :func:`parse`), without what could not be read."""
    return parse(text).instructions


def _directives(lines: list[str], out: Parsed) -> int:
    """Read the parser directives at the top; the index of the first line that is not one."""
    n, seen = 0, set()
    while n < len(lines) and (m := _DIRECTIVE.fullmatch(lines[n].strip())) and m["key"].lower() in _DIRECTIVES:
        key = m["key"].lower()
        if key in seen:
            out.problems.append((n + 1, f"the directive {key} is given twice"))
        seen.add(key)
        if key == "escape" and m["value"] in ("\\", "`"):
            out.escape = m["value"]
        elif key == "escape":
            out.problems.append((n + 1, f"escape={m['value']}: the escape character is a backslash or a backtick"))
        n += 1
    return n


def _logical(lines: list[str], n: int, escape: str) -> tuple[str, int]:
    """The instruction starting at line ``n`` with its continuation lines joined; and the line after it."""
    ends = re.compile(re.escape(escape) + r"[ \t]*$")
    parts = [lines[n].lstrip()]
    n += 1
    # Only the last line read can end in the escape: looking at it alone keeps a long instruction linear.
    while ends.search(parts[-1]):
        parts[-1] = ends.sub("", parts[-1], count=1)
        while n < len(lines) and (not lines[n].strip() or lines[n].lstrip().startswith("#")):
            n += 1  # comment and empty lines inside an instruction are dropped
        if n >= len(lines):
            break
        parts.append(lines[n])
        n += 1
    return "".join(parts), n


def _heredocs(lines: list[str], n: int, rest: str, out: Parsed, start: int) -> tuple[tuple[Heredoc, ...] | None, int]:
    """The here-documents an instruction opens, read from line ``n`` on, in order (None: one is not closed)."""
    docs: list[Heredoc] = []
    for m in HEREDOC_AT.finditer(rest):
        name, chomp = m["name"], bool(m["chomp"])
        body: list[str] = []
        first = n + 1
        while n < len(lines) and (lines[n].lstrip("\t") if chomp else lines[n]) != name:
            body.append(lines[n].lstrip("\t") if chomp else lines[n])
            n += 1
        if n >= len(lines):
            out.problems.append((start, f"the here-document <<{name} is not closed: no line reads {name}"))
            return None, n
        n += 1
        docs.append(Heredoc(name, "".join(f"{b}\n" for b in body), first, bool(m["q"])))
    return tuple(docs), n


# -- words: quotes, escapes and variables, as the builder replaces them


def split_words(text: str, escape: str = "\\") -> list[str]:
    """``text`` split at blanks outside quotes, the quotes kept (``A="x y" B=z`` is two words)."""
    words: list[str] = []
    word: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if c == escape and quote != "'" and i + 1 < len(text):
            word += [c, text[i + 1]]
            i += 2
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c.isspace():
            if word:
                words.append("".join(word))
            word, i = [], i + 1
            continue
        word.append(c)
        i += 1
    return [*words, "".join(word)] if word else words


class _Expander:
    """Docker's word processing: quotes removed, the escape character honoured, variables replaced."""

    def __init__(self, env: dict[str, str], escape: str) -> None:
        self.env = env
        self.escape = escape
        self.missing = False
        self.nested = 0
        self.size = 0  # characters the variables replaced so far, defaults included

    def word(self, word: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(word):
            c = word[i]
            if c == self.escape and i + 1 < len(word):
                out.append(word[i + 1])
                i += 2
            elif c == "'":
                end = word.find("'", i + 1)
                if end < 0:
                    raise Unreadable(f"{word}: a single quote is not closed")
                out.append(word[i + 1 : end])
                i = end + 1
            elif c == '"':
                i = self.double(word, i + 1, out)
            elif c == "$":
                i = self.variable(word, i, out)
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def double(self, word: str, i: int, out: list[str]) -> int:
        """A double-quoted part from ``i``: escapes and variables replaced; the index after its closing quote."""
        while i < len(word) and word[i] != '"':
            if word[i] == self.escape and i + 1 < len(word) and word[i + 1] in (self.escape, '"', "$"):
                out.append(word[i + 1])
                i += 2
            elif word[i] == "$":
                i = self.variable(word, i, out)
            else:
                out.append(word[i])
                i += 1
        if i >= len(word):
            raise Unreadable(f"{word}: a double quote is not closed")
        return i + 1

    def inner(self, word: str) -> str:
        """A default inside a variable (``${A:-$B}``), which may hold defaults of its own, up to a depth."""
        self.nested += 1
        if self.nested > _NESTED:
            raise RecursionError
        try:
            return self.word(word)
        finally:
            self.nested -= 1

    def variable(self, word: str, i: int, out: list[str]) -> int:
        m = _VAR.match(word, i)
        if m is None:
            out.append("$")
            return i + 1
        name, op, arg, end = m["name"] or m["bare"], m["op"] or "", m["arg"] or "", m.end()
        if op:  # the default runs to the brace that closes this one: ${A:-${B}}
            depth, k = 1, m.start("arg")
            while k < len(word) and depth:
                depth += {"{": 1, "}": -1}.get(word[k], 0) if word[k - 1 : k + 1] != "\\}" else 0
                k += 1
            arg, end = word[m.start("arg") : k - 1], k
        have = self.env.get(name)
        if op in (":-", "-"):
            out.append(have if have or (op == "-" and have is not None) else self.inner(arg))
        elif op in (":+", "+"):
            out.append(self.inner(arg) if have or (op == "+" and have is not None) else "")
        elif have is None or (op == ":?" and not have):
            self.missing = True
            out.append(m.group(0))
        else:
            out.append(have)
        self.size += len(out[-1])
        if self.size > MAX_VALUE:
            raise TooLarge(f"{word[:40]}…: its variables expand to more than {MAX_VALUE} characters")
        return end


def expand(word: str, env: dict[str, str], escape: str = "\\") -> str | None:
    """``word`` as the builder reads it: quotes removed, variables replaced; None when one has no value.

    Raises :class:`Unreadable` for a quote that is not closed (``docker
    build`` refuses it too).
    """
    expander = _Expander(env, escape)
    try:
        out = expander.word(word)
    except RecursionError:
        raise Unreadable(f"{word[:40]}…: defaults nested too deeply") from None
    return None if expander.missing else out


def assignments(ins: Instruction, env: dict[str, str], escape: str = "\\") -> list[tuple[str, str | None, str | None]]:
    """``(name, value, written)`` of an ``ARG`` or ``ENV``: ``ENV A=1 B="x y"``, ``ENV A x y``, ``ARG A``, ``ARG A=1``.

    ``value`` is None where a variable in it has no value, ``written`` (the
    value as written) None for an ``ARG`` with no default. Raises
    :class:`Unreadable` for an unclosed quote.
    """
    words = split_words(ins.args, escape)
    if ins.word == "ENV" and words and "=" not in words[0]:  # the old form: ENV NAME the rest of the line
        rest = ins.args.strip()[len(words[0]) :].strip()
        return [(words[0], expand(rest, env, escape), rest)] if rest else []
    out: list[tuple[str, str | None, str | None]] = []
    for w in words:
        name, eq, value = w.partition("=")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.append((name, expand(value, env, escape), value) if eq else (name, None, None))
    return out


def _words(args: str, escape: str = "\\") -> tuple[dict[str, str], list[str]]:
    """A COPY/ADD's ``--flag=value`` options and its paths (shell or JSON form), as written."""
    ins = Instruction(0, "COPY", args)
    flags, _ = ins.flags()
    exec_form = ins.exec_form()
    return flags, exec_form if exec_form is not None else ins.flags()[1].split()


class _Reader:
    def __init__(self, root: Path, build: Build, given: dict[str, str], target: str | None) -> None:
        self.root = root
        self.b = build
        self.given = given  # build arguments compose passes
        self.target = target
        self.globals: dict[str, str] = {}
        self.stages: list[_Stage] = []
        self.escape = "\\"

    def problem(self, kind: str, line: int, message: str, fix: str) -> None:
        self.b.problems.append((kind, line, message, fix))

    def run(self, text: str) -> None:
        parsed = parse(text)
        self.escape = parsed.escape
        for line, what in parsed.problems:
            self.problem("build-unreadable", line, what, "fix the Dockerfile: docker build refuses it too")
        for ins in parsed.instructions:
            try:
                self.instruction(ins)
            except Unreadable as e:
                fix = "close the quote: docker build refuses it too"
                fix = "write the value out" if isinstance(e, TooLarge) else fix
                self.problem("build-unreadable", ins.line, f"{ins.word} {e}", fix)
        final = next((s for s in self.stages if self.target and s.name == self.target), None)
        final = final or (self.stages[-1] if self.stages else None)
        if final is not None:
            self.b.copied = sorted(final.files.values(), key=lambda c: (c.line, c.target))
        for k, base in enumerate(self.b.bases):
            self.b.bases[k] = BaseImage(
                base.file, base.line, base.written, base.ref, base.stage, base.stage == (final and final.name)
            )

    def instruction(self, ins: Instruction) -> None:
        if ins.word == "ARG":
            self.arg(ins)
        elif ins.word == "FROM":
            self.from_(ins.line, ins.args)
        elif not self.stages:
            return
        elif ins.word == "ENV":
            self.env(ins)
        elif ins.word == "WORKDIR":
            self.workdir(ins.line, ins.args)
        elif ins.word in ("COPY", "ADD"):
            self.copy(ins)
        elif ins.word == "RUN":
            self.b.runs.append((" ".join(w if w is not None else "$" for w in self.expanded(ins)), ins.line))
            if not ins.heredocs:
                self.run_copies(ins)

    def expanded(self, ins: Instruction) -> list[str | None]:
        """A RUN line's words with the stage's ARG/ENV values in them (None: a variable with no value)."""
        try:
            return [expand(w, self.stages[-1].env, self.escape) for w in split_words(ins.options()[1], self.escape)]
        except Unreadable:
            return []

    def scope(self) -> dict[str, str]:
        return self.stages[-1].env if self.stages else self.globals

    def arg(self, ins: Instruction) -> None:
        env = self.scope()
        for name, default, written in assignments(ins, env, self.escape):
            value = self.given.get(name)
            if value is None and written is not None:
                value = default if default is not None else written.strip("\"'")
            if value is None and self.stages:
                value = self.globals.get(name)  # a global ARG re-declared in a stage
            if value is not None:
                env[name] = value
                self.b.args.setdefault(name, (value, ins.line))

    def env(self, ins: Instruction) -> None:
        env = self.scope()
        for name, value, _ in assignments(ins, env, self.escape):
            if value is not None:
                env[name] = value
                self.b.args.setdefault(name, (value, ins.line))

    def from_(self, line: int, args: str) -> None:
        words = [w for w in args.split() if not w.startswith("--")]
        if not words:
            return
        written = words[0]
        name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
        ref = expand(written, self.globals, self.escape)
        parent = next((s for s in self.stages if s.name is not None and s.name == ref), None)
        stage = _Stage(name)
        if parent is not None:
            stage.workdir, stage.env, stage.files = parent.workdir, dict(parent.env), dict(parent.files)
            stage.dirs = set(parent.dirs)
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
        value = expand(args.strip(), stage.env, self.escape)
        if value is None:
            self.problem("copy-unresolved", line, f"WORKDIR {args}: a variable in it has no value", "give it a default")
            return
        stage.workdir = str(PurePosixPath(stage.workdir) / value)
        stage.dirs.update(str(p) for p in (PurePosixPath(stage.workdir), *PurePosixPath(stage.workdir).parents))

    def copy(self, ins: Instruction) -> None:
        stage = self.stages[-1]
        flags, paths = _words(ins.args, self.escape)
        inline = {f"<<{h.name}" for h in ins.heredocs} | {f"<<-{h.name}" for h in ins.heredocs}
        paths = [p for p in paths if p.strip("\"'") not in inline and not HEREDOC_AT.fullmatch(p)]
        if len(paths) < 2:
            return
        resolved = [expand(p, stage.env, self.escape) for p in paths]
        if any(r is None for r in resolved):
            self.problem(
                "copy-unresolved",
                ins.line,
                f"{ins.word} {' '.join(paths)}: a variable in it has no value; what it copies is unknown",
                "give the ARG or ENV a default",
            )
            return
        sources, dest = [str(r) for r in resolved[:-1]], str(resolved[-1])
        dest_path = PurePosixPath(posixpath.normpath(str(PurePosixPath(stage.workdir) / dest)))
        into_dir = dest.endswith("/") or len(sources) > 1 or self.in_image(stage, dest, dest_path)
        source_stage = flags.get("from")
        if source_stage is not None:
            self.copy_from(stage, source_stage, sources, dest_path, into_dir)
            return
        for src in sources:
            if re.match(r"[a-z]+://", src) or src.startswith("git@"):
                continue  # ADD of a URL: nothing of the repository
            self.copy_context(stage, ins.line, src, dest_path, into_dir, ins.comment)

    def run_copies(self, ins: Instruction) -> None:
        """``RUN cp``/``install``/``mv`` of a file a ``COPY`` staged (``cp /tmp/p/x.py …/site-packages/vllm/``,
        ``install -m 644 SRC DIR/``, ``cp -t DIR a b``; ``cd DIR &&`` first): the file is in the image there.
        A ``.py`` copied to a name that is no module goes into that directory. Other commands are not read."""
        binds = self.bound(self.stages[-1], ins)
        stage = _Stage(self.stages[-1].name, self.stages[-1].workdir, self.stages[-1].env)
        stage.files = {**self.stages[-1].files, **binds}
        cwd = PurePosixPath(stage.workdir)
        for command in _commands(split_words(ins.options()[1], self.escape)):
            try:
                words = [expand(w, stage.env, self.escape) for w in command]
            except Unreadable:
                continue
            plain = [w for w in words if w is not None]
            if len(plain) != len(words) or not plain:
                self.unresolved_placing(ins, command)
                continue
            if plain[0] == "cd" and len(plain) == 2:
                cwd = cwd / plain[1]
            elif plain[0] in _PLACERS:
                self.placed(stage, ins, cwd, plain)
        # What the step put in the image stays; the bind mount's own files go with the step.
        self.stages[-1].files.update({k: c for k, c in stage.files.items() if binds.get(k) is not c})

    def bound(self, stage: _Stage, ins: Instruction) -> dict[str, Copied]:
        """The repository files a ``RUN --mount=type=bind`` binds in for that step, by their path in it."""
        out = _Stage(stage.name, stage.workdir, stage.env)
        for name, value in ins.options()[0]:
            opts = dict(kv.split("=", 1) for kv in value.split(",") if "=" in kv)
            target = opts.get("target", opts.get("dst", opts.get("destination")))
            if name != "mount" or opts.get("type") != "bind" or target is None or "from" in opts:
                continue  # a bind from another stage or image holds none of the repository's files
            src = opts.get("source", opts.get("src", "."))
            self.copy_context(out, ins.line, src, PurePosixPath(stage.workdir) / target, True, ins.comment)
        return out.files

    def unresolved_placing(self, ins: Instruction, command: list[str]) -> None:
        """A ``cp``/``rsync`` into a Python tree whose words name a variable with no value: what it puts in the
        package is unknown (the step may deliver overlays), and said so."""
        if command[:1] and command[0] in _PLACERS and any(_IN_PYTHON_TREE.search(w) for w in command):
            self.problem(
                "build-step-unknown",
                ins.line,
                f"{' '.join(command)}: a variable in it has no value; which files it puts in the package is unknown",
                "give the ARG or ENV a default",
            )

    def placed(self, stage: _Stage, ins: Instruction, cwd: PurePosixPath, words: list[str]) -> None:
        """One ``cp``/``install``/``mv``/``rsync``: each file a ``COPY`` staged under a source is in the image at
        the destination (a directory's files, for ``cp -r``/``-a``/``-R`` and ``rsync -a``)."""
        into, dest, sources = False, None, []
        it = iter(words[1:])
        for w in it:
            if w in ("-t", "--target-directory"):
                into, dest = True, next(it, None)
            elif w.startswith("--target-directory="):
                into, dest = True, w.split("=", 1)[1]
            elif w in _PLACE_VALUES:
                next(it, None)
            elif not w.startswith("-"):
                sources.append(w)
        if dest is None:
            if len(sources) < 2:
                return
            dest = sources.pop()
            into = len(sources) > 1 or dest.endswith("/")
        target = PurePosixPath(posixpath.normpath(str(cwd / dest)))
        into = into or self.in_image(stage, dest, target)
        for src in sources:
            c = stage.files.get(posixpath.normpath(str(cwd / src)))
            if c is None:
                self.placed_tree(stage, ins, words[0], cwd, src, (dest, target, into))
                continue
            inside = into or (c.rel.endswith(".py") and not dest.endswith(".py"))
            to = str(target / PurePosixPath(c.rel).name) if inside else str(target)
            stage.files[to] = Copied(c.rel, to, self.b.file, ins.line, ins.comment)

    def placed_tree(
        self,
        stage: _Stage,
        ins: Instruction,
        tool: str,
        cwd: PurePosixPath,
        src: str,
        to: tuple[str, PurePosixPath, bool],
    ) -> None:
        """A staged directory copied whole: ``SRC/.`` (or ``SRC/*``, rsync's ``SRC/``) puts its files in DEST;
        ``SRC`` puts them in ``DEST/<name>`` when DEST is a directory (rsync always; cp when DEST ends in
        ``site-packages`` or the build filled it, or with several sources or ``-t``); a cp whose DEST may or may
        not exist in the base image is unknown."""
        dest, target, into = to
        contents = src.endswith(("/.", "/*")) or (tool == "rsync" and src.endswith("/"))
        root = posixpath.normpath(str(cwd / (src[:-2] if src.endswith(("/.", "/*")) else src)))
        staged = sorted((path, c) for path, c in stage.files.items() if path.startswith(root.rstrip("/") + "/"))
        if not staged:
            return  # the image's own files (a virtualenv, a wheel unpacked), or none: no repository file
        if not contents and not (into or tool == "rsync" or self.is_directory(stage, target)):
            if _IN_PYTHON_TREE.search(str(target)):
                self.problem(
                    "build-step-unknown",
                    ins.line,
                    f"{tool} {src} {dest}: the files go to {target}/{posixpath.basename(root)}/ if {target} is a "
                    f"directory of the base image, else to {target}/; which one cannot be read",
                    f"write {tool} {src.rstrip('/')}/. {dest.rstrip('/')}/ (the directory's files into {target})",
                )
            return
        base = target if contents else target / posixpath.basename(root)
        for path, c in staged:
            if src.endswith("/*") and path[len(root) + 1 :].startswith("."):
                continue  # a glob does not match dot files
            at = str(base / path[len(root) + 1 :])
            stage.files[at] = Copied(c.rel, at, self.b.file, ins.line, ins.comment)

    @classmethod
    def in_image(cls, stage: _Stage, written: str, path: PurePosixPath) -> bool:
        """Whether a copy's destination written without a trailing ``/`` is a directory of the image, so that a
        file goes into it: ``.``, a directory every base image has (``/opt``, ``/tmp``), one ``WORKDIR`` made,
        or one the build filled. Docker copies so; taking ``/opt`` as the file's new name lost the file."""
        return (
            written in (".", "..")
            or str(path) in IMAGE_DIRS
            or str(path) in stage.dirs
            or cls.is_directory(stage, path)
        )

    @staticmethod
    def is_directory(stage: _Stage, path: PurePosixPath) -> bool:
        """A directory every image of a Python build has (``…/site-packages``), or one the build filled."""
        return str(path).endswith(("site-packages", "dist-packages")) or any(
            p.startswith(str(path).rstrip("/") + "/") for p in stage.files
        )

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
                # a module copied to a package's directory (no module name) goes into it, as RUN cp is read
                module = path.suffix == ".py" and not dest.suffix and _IN_PYTHON_TREE.search(str(dest)) is not None
                target = dest / path.name if into_dir or several or module else dest
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
    if len(text) > MAX_BUILD_FILE:
        fix = "keep the Dockerfile to its instructions (a long script can be a file it copies)"
        build.problems.append(("build-unreadable", 1, f"over {MAX_BUILD_FILE >> 10} KiB: not read", fix))
        return build
    _Reader(root, build, args or {}, target).run(text)
    return build


def _commands(words: list[str]) -> list[list[str]]:
    """A ``RUN`` line's words as its simple commands, split at ``&&``, ``||``, ``;`` and ``|`` outside quotes."""
    out: list[list[str]] = [[]]
    for w in words:
        if w in _SEPARATORS:
            out.append([])
        elif w.endswith(";") and not w.endswith(("\\;", "';", '";')):
            out[-1].append(w[:-1])
            out.append([])
        else:
            out[-1].append(w)
    return [c for c in out if c]


def _guess_context(root: Path, rel: str, text: str) -> str:
    here = str(PurePosixPath(rel).parent)
    if here == ".":
        return "."
    sources = [p for i in instructions(text) if i.word in ("COPY", "ADD") for p in _words(i.args)[1][:-1]]
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
