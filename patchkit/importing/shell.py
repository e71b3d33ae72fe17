"""A static reading of the shell that applies a patch queue: build scripts and Containerfile ``RUN`` lines.

Repositories that keep a patch queue rarely write its order down in a
``series`` file: a script holds it, one bash array per profile in a
``case`` branch, and a loop applies the array; or a Containerfile copies a
directory in and loops over its glob. This module reads those forms without
running anything, and says which patch files each build applies, in which
order, with which ``-p`` level, into which directory, for which profile.

Read: arrays (``A=(…)``, ``A+=(…)``, ``declare -a``), variables with
literal values, ``${V:-default}``, ``"${A[@]}"``, ``$@``/``$1``;
``case`` branches (the branches of a ``case`` on a value no file sets,
``$PROFILE`` or ``$1``, are the profiles: the script is read once per
branch); ``for`` loops over words, arrays and globs (glob order is sorted
order); functions; ``if`` on a string test of known values; ``cd``,
``pushd``; ``cmd || exit 1`` (the exit is taken only on failure);
``git apply``, ``git am``, ``git -C DIR``, ``patch -pN -d DIR``
with ``< FILE``, ``-i FILE`` or ``cat FILE |``; scripts a ``RUN`` line or a
script runs (``bash x.sh ARGS``, ``./x.sh``, ``. x.sh``); and in a
Containerfile (read by :mod:`patchkit.importing.dockerfile`) ``ARG``,
``ENV``, ``WORKDIR``, ``COPY``/``ADD``, ``RUN --mount=type=bind``, and
``RUN``, ``ENTRYPOINT`` and ``CMD`` (shell or exec form; ``RUN <<EOF`` is
its here-document's script; ``COPY --from=<stage>`` carries what that stage
copied). A script read on its own maps an image path to the file a
Containerfile copied there. Besides patch applications, the reading
records what else a step does to the installed packages: ``sed -i``/``perl
-pi`` on a file of a Python tree (:class:`Edit`; a ``grep -q`` of the file
checks it when the edit runs only after the grep found the text: ``&&``,
``if grep``, ``|| exit 1``, ``set -e``), Python run inline
(``python3 -c``, ``python3 - <<PY``), and a patch applied from a path no
repository file was copied to (an :class:`Unknown` naming the URL an ``ADD``
fetched it from). ``$(dirname "$0")`` and ``$(git rev-parse
--show-toplevel)`` are read as the script's directory and the repository.

Everything else that could apply a patch (a command substitution, a
``while read`` loop, ``xargs``, ``eval``, a test on a value no file sets)
is an :class:`Unknown` with the reason and the file and line that would
settle it: never a guess, and never a silent "not applied".
"""

from __future__ import annotations

import contextlib
import fnmatch
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from patchkit.importing import dockerfile as containerfile  # not "dockerfile": BuildReader.dockerfile reads one

REPO = "/@repo"  # the repository itself, as a path prefix
_OPERATORS = (";;&", ";;", ";&", "&&", "||", ">>", "<<", "<&", ">&", "<", ">", "|", "&", ";", "(", ")")
_SEPARATORS = frozenset({";", "\n", "&&", "||", "&", "|"})
_SCRIPT_DIR = re.compile(r"""\$\(\s*dirname\s+"?\$(?:0|\{0\}|\{?BASH_SOURCE(?:\[0\])?\}?)"?\s*\)""")
_CD_PWD = re.compile(r"""\$\(\s*cd\s+"?(@SD@(?:/\.\.)*)"?\s*(?:&&|;)\s*pwd(?:\s+-P)?\s*\)""")
_TOPLEVEL = re.compile(r"\$\(\s*git\s+rev-parse\s+--show-toplevel\s*\)")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
# The command a here-document is given to is a Python interpreter that runs it (no script argument): group 1 ends it.
_PY_HEREDOC = re.compile(
    r"(?:^|[;&|]|(?<!\$)\()\s*(?:\w+=\S*\s+)*((?:\S*/)?python(?:3(?:\.\d+)?)?)(?:\s+-[A-Za-z]+)*(?:\s+-)?"
    r"(?:\s*\d?>>?\s*\S+)*\s*$"
)
# The command a here-document is given to is cat or tee (redirections and VAR= before it allowed).
_CAT_HEREDOC = re.compile(r"(?:^|[;&|(]|\$\()\s*(?:\w+=\S*\s+)*(?:cat|tee)(?:\s+[^\s;&|()<]+)*\s*$")
_VAR = re.compile(
    r"\$(?:\{(?P<braced>[#!]?[\w@*]+(?:\[[^]]*\])?)(?P<op>:?[-=+?][^}]*)?\}|(?P<plain>[A-Za-z_]\w*|[0-9@#?*]))"
)
_ARRAY_WORD = re.compile(r"\$\{(?P<name>\w+)\[[@*]\]\}|\$[@*]")
_NAME_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?P<op>\+?=)(?P<value>.*)$", re.S)
_GLOB = re.compile(r"[*?[]")
_TEST = re.compile(r"^(?P<a>\S*)\s*(?:=|==)\s*(?P<b>\S*)$")
_DEPTH = 6
# Bounds that keep a hostile script's reading short: the commands, loop passes and calls one build's
# reading runs in all (loops and calls that multiply stop there), and the characters one value holds
# (``A="$A$A"`` doubles at each line).
MAX_STEPS = 10_000
MAX_VALUE = 1 << 20
# shlex builds a word a character at a time, in time that grows with the square of its length (64 KiB:
# about 0.1 s). A program given to ``python3 -c`` or ``python3 - <<PY`` is one word, and real patchers
# run to several KiB, so the bound sits far above them; a build file is read up to a size far above any
# real one (a larger one is said, and not read).
MAX_WORD = 64 << 10
MAX_BUILD_FILE = containerfile.MAX_BUILD_FILE


@dataclass(frozen=True)
class Apply:
    """One patch file a build step applies: where it is, how, and for which profile."""

    path: str  # as the step names it, variables expanded
    repo: str | None  # the repository file it is, when that could be told
    tool: str  # git apply, git am, patch
    strip: int | None  # the -p level; None: patch(1) without -p
    directory: str | None  # where it is applied (-d, git -C, cd), when known
    profile: str | None
    file: str
    line: int


@dataclass(frozen=True)
class Unknown:
    """A step that may apply patches but cannot be read statically: why, and where to look."""

    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class Run:
    """A command a build step runs that is not a patch application (``python3 patch_x.py``)."""

    words: tuple[str, ...]
    cwd: str | None
    profile: str | None
    file: str
    line: int
    script: str | None = None  # the Python script it runs, as a path in the build
    repo: str | None = None  # ... and the repository file that is, when it could be told


@dataclass(frozen=True)
class Edit:
    """A build step that edits an installed package's file in place (``sed -i``, ``perl -pi``): no patch pins it,
    and nothing fails when the text it looks for has moved."""

    file: str
    line: int
    tool: str
    path: str  # the file edited, in the image
    upstream: str  # its path in the package tree (``vllm/config/cache.py``)


@dataclass
class Reading:
    """What the build files apply, in order, per profile; and what could not be read."""

    applies: list[Apply] = field(default_factory=list)
    unknowns: list[Unknown] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    profiles: dict[str, tuple[str, int]] = field(default_factory=dict)  # profile -> (file, line) of its branch
    profile_variable: tuple[str, str, int] | None = None  # (name, file, line) of the case that picks the profile
    followed: set[str] = field(default_factory=set)  # scripts read because a build step runs them
    copies: list[tuple[str, str]] = field(default_factory=list)  # (repository path, container path)
    edits: list[Edit] = field(default_factory=list)  # in-place edits of installed packages' files
    inline: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, code) of python -c / <<PY
    fetched: dict[str, str] = field(default_factory=dict)  # container path -> the URL an ADD fetched it from
    computed: list[Unknown] = field(default_factory=list)  # in-place edits of a path the build computes

    def add_unknown(self, file: str, line: int, reason: str) -> None:
        if all((u.file, u.line, u.reason) != (file, line, reason) for u in self.unknowns):
            self.unknowns.append(Unknown(file, line, reason))


# -- tokens and syntax


@dataclass(frozen=True)
class _Tok:
    text: str
    line: int


@dataclass
class _Node:
    line: int
    joined: str = field(default=";", kw_only=True)  # how it follows the command before it: ``&&``, ``||``, ``;``


@dataclass
class _Simple(_Node):
    words: list[str]
    stdin: str | None = None
    piped_from: _Simple | None = None
    opaque: str | None = None  # why it cannot be read, when it cannot


@dataclass
class _Array(_Node):
    name: str
    append: bool
    items: list[str]


@dataclass
class _For(_Node):
    var: str
    items: list[str]
    body: list[_Node]


@dataclass
class _Case(_Node):
    subject: str
    branches: list[tuple[list[str], list[_Node], int]]


@dataclass
class _If(_Node):
    cond: list[_Node]
    then: list[_Node]
    orelse: list[_Node]


@dataclass
class _Loop(_Node):
    kind: str
    body: list[_Node]


@dataclass
class _Group(_Node):
    body: list[_Node]


@dataclass
class _Func(_Node):
    name: str
    body: list[_Node]


def _split_operator(text: str) -> list[str]:
    out = []
    while text:
        op = next((o for o in _OPERATORS if text.startswith(o)), text[0])
        out.append(op)
        text = text[len(op) :]
    return out


def _open_quote(line: str, quote: str | None) -> str | None:
    """The quote still open at the end of ``line`` (``'``, ``"`` or ``$'``), given the one open at its start; a
    comment (``#`` at a word's start, outside quotes) ends the line. A backslash escapes the next character
    outside single quotes (and inside ``$'…'``)."""
    escaped = False
    for k, c in enumerate(line):
        if escaped or (c == "\\" and quote != "'"):
            escaped = not escaped
        elif quote is not None:
            quote = None if c == quote[-1] else quote
        elif c in "'\"":
            quote = "$'" if c == "'" and line[k - 1 : k] == "$" else c
        elif c == "#" and (k == 0 or line[k - 1] in " \t;&|()"):
            return None
    return quote


def _writes_only(before: str, after: str) -> bool:
    """Whether a here-document goes to ``cat`` or ``tee`` (usage text, a file written) and from there to no other
    command: it applies nothing, so not reading its body leaves nothing unknown."""
    return bool(_CAT_HEREDOC.search(before)) and not re.search(r"[|;&]|\$\(", after)


def tokens(text: str) -> tuple[list[_Tok], list[tuple[int, str]]]:
    """The shell words and operators of ``text``, each with its line; and lines that do not tokenise."""
    text = _CD_PWD.sub(r"\1", _SCRIPT_DIR.sub("@SD@", text))
    text = _TOPLEVEL.sub(REPO, text)
    out: list[_Tok] = []
    bad: list[tuple[int, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        start, parts = i + 1, [lines[i]]
        while parts[-1].endswith("\\") and i + 1 < len(lines):  # joined once: a long continuation stays linear
            i += 1
            parts[-1] = parts[-1][:-1] + " "
            parts.append(lines[i])
        logical = "".join(parts)
        i += 1
        quote = _open_quote(logical, None)
        while quote is not None and i < len(lines):  # a quoted string goes on over the next line
            quote = _open_quote(lines[i], quote)
            logical, i = logical + "\n" + lines[i], i + 1
        if m := _HEREDOC.search(logical):
            end = next((k for k in range(i, len(lines)) if lines[k].strip() == m.group(1)), len(lines) - 1)
            tabs = m.group(0).startswith("<<-")  # <<- strips the leading tabs of each line
            before, body = logical[: m.start()], "\n".join(b.lstrip("\t") if tabs else b for b in lines[i:end])
            code = _PY_HEREDOC.search(before)
            if code is None and not _writes_only(before, logical[m.end() :]):
                bad.append((start, f"a here-document (<<{m.group(1)}) is not read"))
            i = end + 1
            # python3 - <<PY runs its body: read as python3 -c BODY (an inline patcher is judged as one)
            logical = (
                before if code is None else before[: code.end(1)] + " -c " + shlex.quote(body) + before[code.end(1) :]
            )
        if len(logical) > MAX_WORD and _longest_word(logical) > MAX_WORD:
            bad.append((start, f"a word of more than {MAX_WORD} characters is not read"))
            continue
        lexer = shlex.shlex(logical, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError as e:
            bad.append((start, f"does not tokenise ({e})"))
            continue
        for w in words:
            parts = _split_operator(w) if w and all(c in ";&|<>()" for c in w) else [w]
            out.extend(_Tok(p, start) for p in parts)
        out.append(_Tok("\n", start))
    return out, bad


def _longest_word(text: str) -> int:
    """About the longest word shlex makes of ``text`` (quoted blanks and escaped characters stay in a word)."""
    longest = run = 0
    quote = ""
    escaped = False
    for c in text:
        if escaped:
            escaped = False
        elif quote:
            quote = "" if c == quote else quote
            escaped = c == "\\" and quote == '"'
        elif c in "'\"":
            quote = c
        elif c == "\\":
            escaped = True
        elif c.isspace():
            run = 0
            continue
        run += 1
        longest = max(longest, run)
    return longest


class _Parser:
    """Recursive descent over the tokens into the few node kinds the reading evaluates."""

    def __init__(self, toks: list[_Tok]) -> None:
        self.toks = toks
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i].text if self.i < len(self.toks) else None

    def line(self) -> int:
        return self.toks[min(self.i, len(self.toks) - 1)].line if self.toks else 1

    def take(self) -> str:
        t = self.toks[self.i].text
        self.i += 1
        return t

    def skip_separators(self) -> str:
        """Step over separators; the and-or operator among them (``&&``, ``||``), else ``;``."""
        joined = ";"
        while (tok := self.peek()) in _SEPARATORS:
            if tok in ("&&", "||") and joined == ";":
                joined = tok
            self.i += 1
        return joined

    def block(self, stops: frozenset[str]) -> list[_Node]:
        nodes: list[_Node] = []
        while True:
            joined = self.skip_separators()
            tok = self.peek()
            if tok is None or tok in stops:
                return nodes
            before = self.i
            node = self.command(stops)
            if node is not None:
                node.joined = joined
                nodes.append(node)
            if self.i == before:  # a stray token: step over it
                self.i += 1

    def expect(self, word: str) -> None:
        self.skip_separators()
        if self.peek() == word:
            self.i += 1

    def command(self, stops: frozenset[str]) -> _Node | None:
        tok, line = self.peek(), self.line()
        keyword = {
            "for": self.for_loop,
            "case": self.case,
            "if": self.if_,
            "while": self.loop,
            "until": self.loop,
            "{": self.group,
            "(": self.group,
            "function": self.function,
        }.get(tok or "")
        if keyword is not None:
            return keyword(line)
        if self.i + 2 < len(self.toks) and self.toks[self.i + 1].text == "(" and self.toks[self.i + 2].text == ")":
            self.i += 3
            return self.function_body(tok or "", line)
        if tok is not None and (m := _NAME_ASSIGN.match(tok)) and not m["value"] and self.following() == "(":
            self.i += 2
            return _Array(line, m["name"], m["op"] == "+=", self.words_until(")"))
        return self.simple(stops, line)

    def following(self) -> str | None:
        return self.toks[self.i + 1].text if self.i + 1 < len(self.toks) else None

    def words_until(self, end: str) -> list[str]:
        out = []
        while (tok := self.peek()) is not None and tok != end:
            if tok != "\n":
                out.append(tok)
            self.i += 1
        self.i += 1
        return out

    def simple(self, stops: frozenset[str], line: int) -> _Simple | _Group | _Array:
        node = _Simple(line, [])
        while (tok := self.peek()) is not None and tok not in _SEPARATORS and tok not in stops:
            self.i += 1
            if tok == "(" and node.words and (m := _NAME_ASSIGN.match(node.words[-1])) and not m["value"]:
                return _Array(line, m["name"], m["op"] == "+=", self.words_until(")"))
            if tok in (";;", ";&", ";;&", "(", ")") and not (
                tok == "(" and node.words[-1:] and node.words[-1][-1:] == "$"
            ):
                self.i -= 1
                break
            self.word(node, tok)
        if self.peek() == "|":
            self.i += 1
            after = self.command(stops)
            if isinstance(after, _Simple):
                after.piped_from = node
                return after
            if after is not None:
                return _Group(line, [node, after])
        return node

    def word(self, node: _Simple, tok: str) -> None:
        """One token of a simple command: a word, a redirection, or a command substitution's opening."""
        if tok == "(":
            inner = self.words_until(")")
            node.opaque = "a command substitution $(…) is not read"
            if node.words and node.words[-1].endswith("$"):  # kept, so an edit of the path it makes is told
                node.words[-1] = node.words[-1][:-1] + "$(" + " ".join(inner) + ")"
                if (nxt := self.peek()) is not None and nxt.startswith("/"):  # $(…)/x.py: one word
                    node.words[-1] += self.take()
        elif tok in ("<", "<&"):
            node.stdin = self.take() if self.peek() not in (None, "\n") else None
        elif tok in (">", ">>", ">&", "<<"):
            if self.peek() not in (None, "\n", ";"):
                self.i += 1
        else:
            node.words.append(tok)

    def for_loop(self, line: int) -> _Node:
        self.i += 1
        var = self.take() if self.peek() is not None else ""
        items = ["$@"]
        if self.peek() == "in":
            self.i += 1
            items = []
            while (tok := self.peek()) is not None and tok not in (";", "\n"):
                items.append(self.take())
                if tok == "(" and len(items) > 1 and items[-2].endswith("$"):
                    inner = self.words_until(")")
                    items[-2:] = ["$(" + " ".join(inner) + ")"]
        self.expect("do")
        body = self.block(frozenset({"done"}))
        self.expect("done")
        return _For(line, var, items, body)

    def case(self, line: int) -> _Node:
        self.i += 1
        subject = self.take() if self.peek() is not None else ""
        self.expect("in")
        branches: list[tuple[list[str], list[_Node], int]] = []
        while True:
            self.skip_separators()
            tok = self.peek()
            if tok is None or tok == "esac":
                self.i += 1
                return _Case(line, subject, branches)
            bline = self.line()
            if tok == "(":
                self.i += 1
            patterns = [w for w in self.words_until(")") if w != "|"]
            body = self.block(frozenset({";;", ";&", ";;&", "esac"}))
            if self.peek() in (";;", ";&", ";;&"):
                self.i += 1
            branches.append((patterns, body, bline))

    def if_(self, line: int) -> _Node:
        self.i += 1
        cond = self.block(frozenset({"then"}))
        self.expect("then")
        then = self.block(frozenset({"elif", "else", "fi"}))
        orelse: list[_Node] = []
        if self.peek() == "elif":
            orelse = [self.if_(self.line())]
            return _If(line, cond, then, orelse)
        if self.peek() == "else":
            self.i += 1
            orelse = self.block(frozenset({"fi"}))
        self.expect("fi")
        return _If(line, cond, then, orelse)

    def loop(self, line: int) -> _Node:
        kind = self.take()
        self.block(frozenset({"do"}))
        self.expect("do")
        body = self.block(frozenset({"done"}))
        self.expect("done")
        return _Loop(line, kind, body)

    def group(self, line: int) -> _Node:
        end = "}" if self.take() == "{" else ")"
        body = self.block(frozenset({end}))
        self.expect(end)
        return _Group(line, body)

    def function(self, line: int) -> _Node:
        self.i += 1
        name = self.take() if self.peek() is not None else ""
        if self.peek() == "(" and self.following() == ")":
            self.i += 2
        return self.function_body(name, line)

    def function_body(self, name: str, line: int) -> _Node:
        self.skip_separators()
        body = self.command(frozenset())
        return _Func(line, name, [body] if body is not None else [])


def parse(text: str) -> tuple[list[_Node], list[tuple[int, str]]]:
    """The syntax of a shell text, and the lines that could not be read."""
    toks, bad = tokens(text)
    try:
        return _Parser(toks).block(frozenset()), bad
    except RecursionError:
        return [], [*bad, (1, "nested too deeply to read")]


# -- evaluation


class _Stop(Exception):
    """``exit`` (or an unreadable ``case``) ends one reading of a script."""


class _TooLong(Exception):
    """The build's reading has run ``MAX_STEPS`` steps: nothing more of it is read."""


@dataclass
class _Budget:
    """The steps left to one build's reading, shared by every script and step it reads."""

    left: int = MAX_STEPS

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _TooLong


Locate = Callable[[str], str | None]


@dataclass
class _Context:
    """What one reading of a script knows: variables, the directory, how paths map to the repository."""

    file: str
    profile: str | None
    variables: dict[str, list[str]]
    inputs: set[str]  # variables whose value a caller may set (ARG, ENV defaults, positional parameters)
    chosen: dict[str, str]  # input variable -> the case branch this reading takes
    cwd: str | None
    script_dir: str
    functions: dict[str, list[_Node]] = field(default_factory=dict)
    depth: int = 0
    aliases: dict[str, str] = field(default_factory=dict)  # a script's $1 … -> the caller's input it carries
    errexit: bool = False  # set -e: a command that fails ends the script


def _read_text(root: Path, rel: str) -> str:
    """A repository file as text, never through a symlink (see ``importing.read_inside``)."""
    from patchkit.importing import read_inside

    return read_inside(root, rel, "a build file").decode("utf-8", "replace")


class _Reader:
    def text(self, rel: str) -> str:
        return _read_text(self.root, rel)

    def __init__(
        self, root: Path, reading: Reading, locate: Locate, expand_glob: Callable[[str], list[str]], budget: _Budget
    ) -> None:
        self.root = root
        self.reading = reading
        self.budget = budget
        self.locate = locate
        self.expand_glob = expand_glob
        self.split: tuple[str, list[str]] | None = None  # the input a case picks the profile on, and its branches
        # An in-place edit is checked when a grep that misses its text fails the build: the grep ends the
        # script (``|| exit 1``, ``set -e``), or the edit follows it with ``&&`` in an and-or list whose
        # failure fails the step (the last of the RUN line or script, or one ending ``|| exit 1``), or in
        # ``if grep …; then`` whose ``else`` exits. ``grep … && sed -i …; more`` and ``if grep …; then
        # sed -i …; fi`` skip the edit and succeed; ``set -e`` stops at neither (``&&`` lists and compound
        # commands are exempt from it).
        self.guard: set[str] = set()  # files whose grep ends the script when it fails
        self.chain: set[str] = set()  # files grepped earlier in the and-or list (or if) running now
        self.checked: set[str] = set()  # files the command just read checked with a grep
        self.tail = True  # the node running now fails the step when it fails
        self.exempt = False  # set -e is ignored here (inside an and-or list before its last command)
        self.ends = True  # the script ending with a failure fails the step (not so for ``x.sh || true``)

    # values

    def value(self, ctx: _Context, word: str, line: int) -> list[str] | str:
        """The words ``word`` expands to, or why it cannot be told."""
        if "`" in word or "$(" in word:
            return "a command substitution is not read"
        word = word.replace("@SD@", ctx.script_dir)
        if m := _ARRAY_WORD.fullmatch(word):
            name = m["name"] or "@"
            if name in ctx.variables:
                return list(ctx.variables[name])
            return f"{word} is not set by anything read"
        problem: list[str] = []
        size = [len(word)]

        def one(m: re.Match[str]) -> str:
            name = m["plain"] or m["braced"] or ""
            op = m["op"] or ""
            name = name.removesuffix("[0]")
            got = ctx.variables.get(name)
            if got is not None and (got or not op.startswith(":")) and not op.lstrip(":").startswith("+"):
                text = " ".join(got)
                size[0] += len(text)
                if size[0] > MAX_VALUE:
                    problem.append(f"{word[:40]} expands to more than {MAX_VALUE} characters")
                    return ""
                return text
            if op.lstrip(":")[:1] in ("-", "="):
                return op.lstrip(":")[1:].strip("\"'")
            problem.append(f"${name} is not set by anything read")
            return ""

        out = _VAR.sub(one, word)
        if problem:
            return problem[0]
        return self.glob(ctx, out) if _GLOB.search(out) else [out]

    def glob(self, ctx: _Context, pattern: str) -> list[str] | str:
        """The files a glob matches (from the directory, else the script's or the repository's), sorted."""
        where = [self.absolute(ctx, pattern)] if ctx.cwd is not None or pattern.startswith("/") else []
        where = where or [posixpath.normpath(posixpath.join(d, pattern)) for d in (ctx.script_dir, REPO)]
        for candidate in where:
            if candidate is not None and (got := self.expand_glob(candidate)):
                return got
        return f"the glob {pattern} matches no file the build has"

    def words(self, ctx: _Context, words: list[str], line: int) -> list[str] | str:
        out: list[str] = []
        size = 0
        for w in words:
            got = self.value(ctx, w, line)
            if isinstance(got, str):
                return got
            out.extend(got)
            size += sum(len(g) + 1 for g in got)
            if size > MAX_VALUE:
                return f"{' '.join(words)[:40]} expands to more than {MAX_VALUE} characters"
        return out

    @staticmethod
    def absolute(ctx: _Context, path: str) -> str | None:
        if path.startswith("/"):
            return posixpath.normpath(path)
        if ctx.cwd is None:
            return None
        return posixpath.normpath(posixpath.join(ctx.cwd, path))

    # statements

    def run(self, ctx: _Context, nodes: list[_Node]) -> None:
        base = set(self.chain)
        tail, exempt = self.tail, self.exempt
        for i, node in enumerate(nodes):
            if i and node.joined != "&&":
                self.chain = set(base)
            if node.joined == "||" and _stops(node):
                continue  # ``… || exit 1`` runs only when the command before it fails
            self.checked = set()
            self.exempt = exempt or (i + 1 < len(nodes) and nodes[i + 1].joined != ";")
            # set -e stops at a simple command (a function, a script) only; a compound one's status is its last's
            self.tail = _fails(nodes, i, tail, isinstance(node, _Simple) and self.errexit(ctx))
            self.node(ctx, node)
            self.tail, self.exempt = tail, exempt
            self.hold(ctx, nodes, i, tail)
        self.chain = base

    def errexit(self, ctx: _Context) -> bool:
        """Whether a failing simple command here ends the script (``set -e``, not inside an and-or list)."""
        return ctx.errexit and not self.exempt

    def hold(self, ctx: _Context, nodes: list[_Node], i: int, tail: bool) -> None:
        """What the grep ``nodes[i]`` checks when its failure fails the step: the rest of its and-or list
        (``grep && sed``), or the rest of the script when its failure ends the script (``|| exit 1``,
        ``set -e``)."""
        files, self.checked = self.checked, set()
        if not files or not self.ends or not _fails(nodes, i, tail, self.errexit(ctx)):
            return
        if i + 1 < len(nodes) and nodes[i + 1].joined == "&&":
            self.chain |= files
        else:
            self.guard |= files

    def node(self, ctx: _Context, node: _Node) -> None:
        self.budget.spend()
        if isinstance(node, _Simple):
            self.simple(ctx, node)
        elif isinstance(node, _Array):
            got = self.words(ctx, node.items, node.line)
            if isinstance(got, str):
                self.unknown(ctx, node.line, f"the array {node.name}: {got}")
                got = []
            ctx.variables[node.name] = ((ctx.variables.get(node.name) or []) if node.append else []) + got
        elif isinstance(node, _For):
            self.for_loop(ctx, node)
        elif isinstance(node, _Case):
            self.case(ctx, node)
        elif isinstance(node, _If):
            self.if_(ctx, node)
        elif isinstance(node, _Loop):
            self.opaque_block(ctx, node.body, node.line, f"a {node.kind} loop is not read")
        elif isinstance(node, _Group):
            self.run(ctx, node.body)
        elif isinstance(node, _Func):
            ctx.functions[node.name] = node.body

    def unknown(self, ctx: _Context, line: int, reason: str) -> None:
        self.reading.add_unknown(ctx.file, line, reason)

    def opaque_block(self, ctx: _Context, body: list[_Node], line: int, reason: str) -> None:
        """A block that is not evaluated: a patch application inside it is unknown; an in-place edit in it
        may run, and is read as one."""
        if any(_applies_something(n) for n in _walk(body)):
            self.unknown(ctx, line, reason)
        self.edits_in(ctx, body, set())

    def edits_in(self, ctx: _Context, nodes: list[_Node], checked: set[str], tail: bool = False) -> None:
        """The in-place edits (and the greps that check them) of a block that is not evaluated; ``tail``: its
        last command's failure fails the step (not so in a loop's body)."""
        saved = self.chain
        self.chain = self.chain | checked
        base = set(self.chain)
        for i, n in enumerate(nodes):
            if i and n.joined != "&&":
                self.chain = set(base)
            inner = _fails(nodes, i, tail, False)
            if isinstance(n, _If):
                self.edits_in(
                    ctx, n.then, self.condition(ctx, n.cond) if self.else_fails(ctx, n, inner) else set(), inner
                )
                self.edits_in(ctx, n.orelse, set(), inner)
            elif isinstance(n, _Case):
                for _, body, _ in n.branches:
                    self.edits_in(ctx, body, set(), inner)
            elif isinstance(n, _Simple) and n.words[:1] and n.words[0] in _EDITORS:
                self.checked = set()
                self.in_place(ctx, n, n.words)
                self.hold(ctx, nodes, i, tail)
            elif not isinstance(n, _Func):  # a function's edits are read where it is called
                self.edits_in(ctx, getattr(n, "body", []), set(), inner and isinstance(n, _Group))
        self.chain = saved

    def else_fails(self, ctx: _Context, node: _If, tail: bool) -> bool:
        """Whether ``if grep …; then …; else …; fi`` fails the step when the grep misses: its ``else`` ends
        in ``exit 1`` (or ``false`` the step fails on); without an ``else`` the ``if`` succeeds."""
        body = node.orelse
        return bool(body) and self.ends and _fails(body, len(body) - 1, tail, self.errexit(ctx), failing=True)

    def condition(self, ctx: _Context, cond: list[_Node]) -> set[str]:
        """The files ``if grep -q OLD f; then`` checks (the then-branch runs only when the text is there)."""
        if len(cond) != 1 or not isinstance(cond[0], _Simple) or cond[0].words[:1] != ["grep"]:
            return set()
        self.checked = set()
        self.in_place(ctx, cond[0], cond[0].words)
        files, self.checked = self.checked, set()
        return files

    def for_loop(self, ctx: _Context, node: _For) -> None:
        items = self.words(ctx, node.items, node.line)
        if isinstance(items, str):
            if any(_applies_something(n) for n in _walk(node.body)):
                self.unknown(ctx, node.line, f"the loop's list: {items}")
            inner = _copy(ctx)  # an edit of "$f" edits one of the list's words, as written
            inner.variables[node.var] = [" ".join(node.items)]
            self.edits_in(inner, node.body, set())
            return
        tail = self.tail
        for k, item in enumerate(items):
            ctx.variables[node.var] = [item]
            self.tail = tail and k == len(items) - 1  # the loop's status is its last pass's
            self.run(ctx, node.body)
        self.tail = tail

    def case(self, ctx: _Context, node: _Case) -> None:
        name = _variable_name(node.subject)
        if name is not None and name not in ctx.chosen and (name in ctx.inputs or name not in ctx.variables):
            self.profile_case(ctx, node, name)
        got = self.value(ctx, node.subject, node.line)
        if isinstance(got, str):
            self.opaque_block(ctx, [b for _, body, _ in node.branches for b in body], node.line, f"case: {got}")
            return
        subject = " ".join(got)
        for patterns, body, _ in node.branches:
            if any(fnmatch.fnmatchcase(subject, p) for p in patterns):
                self.run(ctx, body)
                return

    def profile_case(self, ctx: _Context, node: _Case, name: str) -> None:
        """A case on a value the caller sets: each branch is a profile, and the script is read once per branch."""
        outer = ctx.aliases.get(name, name)
        if self.split is not None and self.split[0] != outer:
            self.unknown(ctx, node.line, f"a second profile variable ${name} (the first is ${self.split[0]})")
            return
        if self.reading.profile_variable is None:
            self.reading.profile_variable = (outer, ctx.file, node.line)
        labels = []
        for patterns, body, bline in node.branches:
            for p in patterns:
                if _GLOB.search(p):
                    self.opaque_block(ctx, body, bline, f"the branch {p}) of case ${name} is taken for any other value")
                    continue
                self.reading.profiles.setdefault(p, (ctx.file, bline))
                labels.append(p)
        self.split = (outer, list(dict.fromkeys(labels)))
        raise _Stop

    def if_(self, ctx: _Context, node: _If) -> None:
        verdict = self.test(ctx, node.cond)
        if verdict is None:
            if any(_applies_something(n) for n in _walk(node.then + node.orelse)):
                self.unknown(ctx, node.line, "runs only if a condition no file settles holds")
            self.edits_in(ctx, [node], set(), self.tail)
        else:
            self.run(ctx, node.then if verdict else node.orelse)

    def test(self, ctx: _Context, cond: list[_Node]) -> bool | None:
        if len(cond) != 1 or not isinstance(cond[0], _Simple):
            return None
        words = cond[0].words
        negate = bool(words) and words[0] == "!"
        words = words[1:] if negate else words
        if len(words) >= 4 and words[0] in ("[", "[[", "test") and words[2] in ("=", "==", "!="):
            a, b = self.value(ctx, words[1], cond[0].line), self.value(ctx, words[3], cond[0].line)
            if isinstance(a, str) or isinstance(b, str):
                return None
            same = fnmatch.fnmatchcase(" ".join(a), " ".join(b)) if words[0] == "[[" else a == b
            return (same != (words[2] == "!=")) != negate
        return None

    # commands

    def opaque(self, ctx: _Context, node: _Simple, why: str) -> None:
        """A command with a substitution: an in-place edit is still read (its path may be computed)."""
        if node.words[:1] and node.words[0] in _EDITORS:
            self.in_place(ctx, node, node.words)
        if _applies_something(node):
            self.unknown(ctx, node.line, why)

    def simple(self, ctx: _Context, node: _Simple) -> None:
        if node.opaque is not None:
            self.opaque(ctx, node, node.opaque)
            return
        words = list(node.words)
        while words and (m := _NAME_ASSIGN.match(words[0])) and len(words) >= 1:
            if len(words) == 1:
                self.assign(ctx, m["name"], m["op"], m["value"], node.line)
                return
            words.pop(0)  # an environment for one command
        if not words:
            return
        head = words[0]
        if head in ("export", "local", "declare", "typeset", "readonly"):
            for w in words[1:]:
                if m := _NAME_ASSIGN.match(w):
                    self.assign(ctx, m["name"], m["op"], m["value"], node.line)
            return
        handler = {
            "cd": self.cd,
            "pushd": self.cd,
            "popd": self.popd,
            "exit": self.exit,
            "set": self.set_,
            "sudo": self.sudo,
            **dict.fromkeys(_EDITORS, self.in_place),
        }.get(head)
        if handler is not None:
            handler(ctx, node, words)
            return
        self.command(ctx, node, words)

    def assign(self, ctx: _Context, name: str, op: str, value: str, line: int) -> None:
        got = self.value(ctx, value, line)
        if isinstance(got, str):
            ctx.variables.pop(name, None)  # unknown from here on; a use of it says so
            ctx.inputs.discard(name)
            return
        joined = " ".join(got)
        if op == "+=" and len(joined) + sum(len(v) + 1 for v in ctx.variables.get(name, [])) > MAX_VALUE:
            ctx.variables.pop(name, None)  # grown past what is read: unknown from here on
            return
        ctx.variables[name] = [(" ".join(ctx.variables.get(name, [])) + joined) if op == "+=" else joined]

    def cd(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        args = [w for w in words[1:] if not w.startswith("-")]
        got = self.value(ctx, args[0], node.line) if args else ["/root"]
        ctx.cwd = None if isinstance(got, str) or len(got) != 1 else self.absolute(ctx, got[0])

    def popd(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        ctx.cwd = None

    def exit(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        raise _Stop

    def set_(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        options = words[: words.index("--")] if "--" in words else words  # set -- -e: positional parameters
        for k, w in enumerate(options[1:], start=1):
            if re.fullmatch(r"[-+][a-zA-Z]+", w) and "e" in w:
                ctx.errexit = w[0] == "-"
            elif w in ("-o", "+o") and options[k + 1 : k + 2] == ["errexit"]:
                ctx.errexit = w == "-o"
        if "--" in words:
            got = self.words(ctx, words[words.index("--") + 1 :], node.line)
            if not isinstance(got, str):
                _positional(ctx, got)

    def sudo(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        self.command(ctx, node, [w for w in words[1:] if not w.startswith("-")])

    def command(self, ctx: _Context, node: _Simple, raw: list[str]) -> None:
        got = self.words(ctx, raw, node.line)
        if isinstance(got, str):
            body = ctx.functions.get(raw[0], [])
            if _applies_something(node) or any(_applies_something(n) for n in _walk(body)):
                self.unknown(ctx, node.line, f"{' '.join(raw[:3])}: {got}")
            return
        words = got
        if not words:
            return
        if words[0] in ctx.functions and ctx.depth < _DEPTH:
            self.call(ctx, ctx.functions[words[0]], words[1:])
            return
        if words[0] == "git":
            self.git(ctx, node, words)
        elif posixpath.basename(words[0]) == "patch":
            self.patch(ctx, node, words)
        elif words[0] in ("xargs", "find", "eval", "parallel") and _applies_something(node):
            self.unknown(ctx, node.line, f"patches applied through {words[0]} are not read")
        elif words[0] == "quilt" and words[1:2] == ["push"]:
            self.unknown(ctx, node.line, "quilt push applies the quilt series file")
        elif not self.script(ctx, node, words):
            self.record_run(ctx, node, words)

    def in_place(self, ctx: _Context, node: _Simple, raw: list[str]) -> None:
        """``sed -i``/``perl -pi`` on a file of an installed package is an edit no patch pins; a ``grep`` of the
        same file earlier in the step (``grep -q OLD f && sed -i …``) is taken as its check."""
        raw = _backticks(raw)
        tool = raw[0]
        files = _edited_files(tool, raw[1:])
        if tool == "grep":
            if not _inverted(raw[1:]):
                self.checked |= {p for f in files for p in self.paths(ctx, f)}
            return
        for f in files:
            got = self.value(ctx, f, node.line)
            if isinstance(got, str) or any("$(" in w or "`" in w for w in got):
                self.computed(ctx, node, tool, f, got if isinstance(got, str) else "")
                continue
            for w in got:
                path = self.absolute(ctx, w) or w
                m = _PACKAGE_FILE.search(path)
                if m is not None and path not in self.guard and path not in self.chain:
                    self.edit(Edit(ctx.file, node.line, f"{tool} -i", path, m["rest"]))

    def paths(self, ctx: _Context, word: str) -> list[str]:
        """The paths a grep reads: a computed one as written (its edit is written so too)."""
        got = self.value(ctx, word, 0)
        if isinstance(got, str) or any("$(" in w or "`" in w for w in got):
            return [_VAR.sub(lambda m: _known(ctx, m), word)]
        return [p for w in got if (p := self.absolute(ctx, w)) is not None]

    def edit(self, edit: Edit) -> None:
        if edit not in self.reading.edits:
            self.reading.edits.append(edit)

    def computed(self, ctx: _Context, node: _Simple, tool: str, word: str, why: str) -> None:
        """An in-place edit of a path the build computes (``$(python -c …)/x.py``, ``$SITE/vllm/x.py`` with
        ``SITE`` unset): an unanchored edit when the words tell the package file, else unknown; nothing when
        nothing written of the path points into a Python tree (``sed -i … $CONF``)."""
        shown = _VAR.sub(lambda m: _known(ctx, m), word)
        if "$(" in shown or "`" in shown:
            why = "a command substitution is not read"
        upstream = _computed_package_file(shown)
        if shown in self.guard or shown in self.chain:
            return  # a grep of the same words checked it
        if upstream is not None:
            self.edit(Edit(ctx.file, node.line, f"{tool} -i", shown, upstream))
            return
        if not _PYTHON_TREE.search(shown):
            return
        u = Unknown(
            ctx.file, node.line, f"{tool} -i edits a file whose path is computed at build time: {shown} ({why})"
        )
        if u not in self.reading.computed:
            self.reading.computed.append(u)

    def record_run(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        """A command that applies no patch; for ``python x.py`` (or ``./x.py``), the script it runs."""
        script = None
        if _PYTHON.fullmatch(posixpath.basename(words[0])):
            if "-c" in words[:-1]:
                self.reading.inline.append((ctx.file, node.line, words[words.index("-c") + 1]))
            script = next((w for w in words[1:] if not w.startswith("-")), None)
            script = None if "-m" in words[1:] or "-c" in words[1:] else script
        elif words[0].endswith(".py"):
            script = words[0]
        path = repo = None
        if script is not None and script.endswith(".py"):
            path = self.absolute(ctx, script)
            candidates = [path] if path is not None else [posixpath.join(d, script) for d in (ctx.script_dir, REPO)]
            repo = next((r for c in candidates if (r := self.locate(posixpath.normpath(c))) is not None), None)
            path = path or posixpath.normpath(candidates[0])
        self.reading.runs.append(Run(tuple(words), ctx.cwd, ctx.profile, ctx.file, node.line, path, repo))

    def call(self, ctx: _Context, body: list[_Node], args: list[str]) -> None:
        saved = {k: ctx.variables.get(k) for k in ("@", *map(str, range(1, 10)))}
        _positional(ctx, args)
        ctx.depth += 1
        try:
            self.run(ctx, body)
        finally:
            ctx.depth -= 1
            for k, v in saved.items():
                if v is None:
                    ctx.variables.pop(k, None)
                else:
                    ctx.variables[k] = v

    def git(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        i, directory = 1, ctx.cwd
        while i < len(words) and words[i].startswith("-"):
            if words[i] == "-C" and i + 1 < len(words):
                directory = self.absolute(ctx, words[i + 1])
            i += 2 if words[i] in ("-C", "-c") else 1
        if i >= len(words) or words[i] not in ("apply", "am"):
            return
        opts, files = _options(words[i + 1 :], _GIT_APPLY_VALUES)
        if any(k in opts for k in _GIT_NOT_APPLYING):
            return
        if "dir" in opts:
            directory = posixpath.join(directory or "", opts["dir"][-1])
        strip = _int(opts["strip"][-1]) if "strip" in opts else 1
        self.applied(ctx, node, f"git {words[i]}", files, strip, directory)

    def patch(self, ctx: _Context, node: _Simple, words: list[str]) -> None:
        opts, positional = _options(words[1:], _PATCH_VALUES)
        if any(k in opts for k in ("--dry-run", "-C", "--check")):
            return
        directory = self.absolute(ctx, opts["dir"][-1]) if "dir" in opts else ctx.cwd
        strip = _int(opts["strip"][-1]) if "strip" in opts else None
        files = opts.get("input", []) + positional[1:2]  # patch [ORIGFILE [PATCHFILE]]
        self.applied(ctx, node, "patch", files, strip, directory)

    def applied(
        self, ctx: _Context, node: _Simple, tool: str, files: list[str], strip: int | None, directory: str | None
    ) -> None:
        if not files:
            source = node.stdin
            if source is None and node.piped_from is not None and node.piped_from.words[:1] == ["cat"]:
                source = " ".join(node.piped_from.words[1:2])
            if source is None:
                self.unknown(ctx, node.line, f"{tool} reads a patch from a pipe or input that is not read")
                return
            got = self.value(ctx, source, node.line)
            if isinstance(got, str):
                self.unknown(ctx, node.line, f"{tool} < {source}: {got}")
                return
            files = got
        for f in files:
            path = self.absolute(ctx, f)
            repo = self.locate(path) if path is not None else None
            for base in (ctx.script_dir, REPO) if path is None else ():
                repo = repo or self.locate(posixpath.normpath(posixpath.join(base, f)))
            self.reading.applies.append(
                Apply(path or f, repo, tool, strip, directory, ctx.profile, ctx.file, node.line)
            )
            if repo is None:
                url = self.reading.fetched.get(path or f)
                how = f"ADD fetches it from {url} at build time" if url else "no COPY of a repository file put it there"
                self.unknown(ctx, node.line, f"{tool} applies {path or f}, which is no file of the repository: {how}")

    def script(self, ctx: _Context, node: _Simple, words: list[str]) -> bool:
        """Follow a script the step runs (``bash x.sh ARGS``, ``./x.sh``, ``. x.sh``); whether it was one."""
        head, args = words[0], words[1:]
        errexit = False
        if posixpath.basename(head) in ("bash", "sh", "dash", "zsh", ".", "source"):
            opts = [a for a in args if a.startswith("-")]
            errexit = any(re.fullmatch(r"-[a-z]*e[a-z]*", a) for a in opts)  # bash -e x.sh
            if "-c" in opts:
                return False
            args = [a for a in args if not a.startswith("-")]
            if not args:
                return False
            head, args = args[0], args[1:]
        path = self.absolute(ctx, head) or posixpath.join(ctx.script_dir, head)
        rel = self.locate(path)
        if rel is None or not (head.endswith(".sh") or "/" in head) or ctx.depth >= _DEPTH:
            return False
        self.reading.followed.add(rel)
        text = self.text(rel)
        nodes, bad = parse(text)
        for line, why in bad:
            self.reading.add_unknown(rel, line, why)
        inner = _Context(
            rel,
            ctx.profile,
            dict(ctx.variables),
            set(ctx.inputs),
            dict(ctx.chosen),
            ctx.cwd,
            posixpath.dirname(path),
            depth=ctx.depth + 1,
        )
        _positional(inner, args)
        inner.errexit = errexit or (head == words[0] and _shebang_errexit(text))  # bash x.sh skips the #! line
        inner.inputs -= {"@", *map(str, range(1, 10))}
        raw = node.words[len(node.words) - len(args) :] if len(node.words) >= len(args) else []
        for k, word in enumerate(raw, start=1):
            name = _variable_name(word)
            if name is not None and (name in ctx.inputs or name not in ctx.variables):
                outer = ctx.aliases.get(name, name)
                inner.inputs.add(str(k))
                inner.aliases[str(k)] = outer
                if name in ctx.chosen:
                    inner.chosen[str(k)] = ctx.chosen[name]
        saved = self.exempt, self.ends
        self.exempt, self.ends = False, self.tail  # a new shell: its own set -e, its status the step's or not
        try:
            with contextlib.suppress(_Stop):
                self.run(inner, nodes)
        finally:
            self.exempt, self.ends = saved
        return True


_EDITORS = frozenset({"sed", "perl", "grep"})
# What of a computed path says it is in a Python tree: a .py file, site-/dist-packages, a question to Python.
_PYTHON_TREE = re.compile(r"\.py\b|(?:site|dist)-packages|python|__file__|__path__|\bpip\b|sysconfig")
# A command substitution that prints a package's directory, and a literal tail after it.
_PACKAGE_DIR = re.compile(r"dirname\(\s*(?P<a>[A-Za-z_][\w.]*)\.__file__\s*\)|(?P<b>[A-Za-z_][\w.]*)\.__path__\[0\]")
_SITE_DIR = re.compile(r"getsitepackages\(\)\[0\]|get_paths\(\)\[.purelib.\]|get_python_lib\(\)")
_SUBSTITUTED = re.compile(r"^(?:\$\((?P<sub>.*)\)|`(?P<tick>.*)`)(?P<tail>/[^$`*?\[]+)$", re.S)


def _computed_package_file(path: str) -> str | None:
    """The package file a computed path names, when its words tell it: a literal ``…/site-packages/vllm/x.py``
    after the computed part, or ``$(python -c '…dirname(vllm.__file__)…')/x.py`` (``vllm/x.py``)."""
    tail = re.split(r"\$\{?\w+\}?|\$\(.*\)|`.*`", path)[-1]
    if m := _PACKAGE_FILE.search(tail):
        return m["rest"]
    m = _SUBSTITUTED.match(path)
    if m is None or not m["tail"].endswith(".py"):
        return None
    code = m["sub"] or m["tick"] or ""
    if d := _PACKAGE_DIR.search(code):
        return (d["a"] or d["b"]).replace(".", "/") + m["tail"]
    if _SITE_DIR.search(code) and m["tail"].count("/") >= 2:
        return m["tail"][1:]
    return None


def _shebang_errexit(text: str) -> bool:
    """``#!/bin/bash -e`` (or ``-eu``, ``-S bash -e``): the script runs under ``set -e``."""
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and re.search(r"\s-[a-zA-Z]*e[a-zA-Z]*\b", first) is not None


def _known(ctx: _Context, m: re.Match[str]) -> str:
    """A variable's value where it is known, else the variable as written."""
    got = ctx.variables.get(_variable_name(m[0]) or "")
    return m[0] if got is None else " ".join(got)


def _backticks(words: list[str]) -> list[str]:
    """Words with a backtick substitution the lexer split at its spaces joined again."""
    out: list[str] = []
    open_ = False
    for w in words:
        if open_:
            out[-1] += " " + w
        else:
            out.append(w)
        if w.count("`") % 2:
            open_ = not open_
    return out


def _inverted(args: list[str]) -> bool:
    """A grep that succeeds when the text is absent (``-v``, ``-L``) checks nothing."""
    return any(
        a in ("--invert-match", "--files-without-match") or (re.fullmatch(r"-[a-zA-Z]+", a) and ("v" in a or "L" in a))
        for a in args
    )


def _fails(nodes: list[_Node], i: int, tail: bool, errexit: bool, *, failing: bool = False) -> bool:
    """Whether ``nodes[i]`` failing fails the step: the and-or list skips to its next ``||`` branch, which
    exits (or is ``false`` that does so in turn); else the list fails, which fails the step when it is the
    last of the block whose status the step takes (``tail``), or ends the script under ``set -e`` when
    ``nodes[i]`` is the list's last command. ``failing``: whether ``nodes[i]`` itself always fails (an
    ``else`` branch ending in ``exit 1`` or ``false``)."""
    if failing:
        node = nodes[i]
        if _exits(node):
            return True
        if not _false(node):
            return False
    j = i + 1
    while j < len(nodes) and nodes[j].joined == "&&":
        j += 1
    if j < len(nodes) and nodes[j].joined == "||":
        return _fails(nodes, j, tail, errexit, failing=True)
    return (j == len(nodes) and tail) or (errexit and j == i + 1)


def _exits(node: _Node) -> bool:
    """``exit 1``/``return 1`` (not ``exit 0``), or a group ending in one."""
    if isinstance(node, _Group):
        return bool(node.body) and _exits(node.body[-1])
    return isinstance(node, _Simple) and node.words[:1] in (["exit"], ["return"]) and node.words[1:2] != ["0"]


def _false(node: _Node) -> bool:
    """``false`` (or a group ending in it): a failure that fails the step only where the step takes it."""
    if isinstance(node, _Group):
        return bool(node.body) and _false(node.body[-1])
    return isinstance(node, _Simple) and node.words[:1] == ["false"]


def _stops(node: _Node) -> bool:
    """``exit``/``return``/``false`` (or a group ending in one): what ``grep … || exit 1`` runs."""
    if isinstance(node, _Group):
        return bool(node.body) and _stops(node.body[-1])
    return isinstance(node, _Simple) and node.words[:1] in (["exit"], ["return"], ["false"])


_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")
_PACKAGE_FILE = re.compile(r"/(?:site|dist)-packages/(?P<rest>[^*?\[]+)$")
_SED_VALUES = frozenset({"-e", "--expression", "-f", "--file", "-l", "--line-length"})


def _edited_files(tool: str, args: list[str]) -> list[str]:
    """The files ``sed -i``/``perl -i`` edits in place (none without ``-i``), or the files a ``grep`` reads."""
    in_place = False
    script_given = False
    files: list[str] = []
    it = iter(args)
    for w in it:
        if w == "--":
            files += list(it)
            break
        if w.startswith("--"):
            in_place = in_place or w.startswith("--in-place")
            script_given = script_given or w.startswith(("--expression", "--file", "--regexp"))
            if "=" not in w and w in _SED_VALUES:
                next(it, None)
            continue
        if w.startswith("-") and len(w) > 1:
            flags = w[1:]
            in_place = in_place or "i" in flags
            if flags[-1:] in ("e", "f"):
                script_given = True
                next(it, None)
            continue
        files.append(w)
    if not script_given and files:
        files = files[1:]  # the first word is the script (sed) or the pattern (grep)
    return files if in_place or tool == "grep" else []


def _positional(ctx: _Context, args: list[str]) -> None:
    ctx.variables["@"] = list(args)
    for k in range(1, 10):
        if k <= len(args):
            ctx.variables[str(k)] = [args[k - 1]]
        else:
            ctx.variables.pop(str(k), None)


_GIT_APPLY_VALUES = {"-p": "strip", "--directory": "dir", "--exclude": "", "--include": "", "--whitespace": ""}
_GIT_NOT_APPLYING = ("--check", "--stat", "--numstat", "--summary", "--abort", "--skip", "--continue")
_PATCH_VALUES = {
    "-p": "strip",
    "--strip": "strip",
    "-d": "dir",
    "--directory": "dir",
    "-i": "input",
    "--input": "input",
    **dict.fromkeys(("-r", "-o", "-F", "-B", "-V", "-D", "-z", "-Y", "-g", "--fuzz", "--reject-file", "--output"), ""),
}


def _options(words: list[str], values: dict[str, str]) -> tuple[dict[str, list[str]], list[str]]:
    """A command's options by meaning (``-p1``, ``-p 1``, ``--strip=1`` alike), and its other words."""
    opts: dict[str, list[str]] = {}
    positional = []
    it = iter(words)
    for w in it:
        if not w.startswith("-") or w == "-":
            positional.append(w)
            continue
        key, eq, val = w.partition("=") if w.startswith("--") else (w[:2], "", w[2:])
        if key not in values:
            key, val = w, ""
        elif not eq and not val:
            val = next(it, "")
        opts.setdefault(values.get(key) or key, []).append(val)
    return opts, positional


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _variable_name(word: str) -> str | None:
    m = _VAR.fullmatch(word)
    if m is None:
        return None
    return (m["plain"] or m["braced"] or "").removesuffix("[0]")


def _walk(nodes: list[_Node]) -> Iterator[_Node]:
    for n in nodes:
        yield n
        for attr in ("body", "then", "orelse", "cond"):
            yield from _walk(getattr(n, attr, []))
        if isinstance(n, _Case):
            for _, body, _ in n.branches:
                yield from _walk(body)


def _applies_something(node: _Node) -> bool:
    """Whether a node (or a block) may apply a patch: read on its text (git apply, patch, a .patch or .diff)."""
    if isinstance(node, _Simple):
        text = " ".join(node.words)
        return bool(re.search(r"\bgit\b.*\b(?:apply|am)\b|\bpatch\b|\.patch\b|\.diff\b", text))
    return any(_applies_something(n) for n in _walk([node]) if n is not node)


# -- build files


@dataclass
class _Build:
    """A Containerfile's state while its instructions are read."""

    file: str
    variables: dict[str, list[str]] = field(default_factory=dict)
    inputs: set[str] = field(default_factory=set)
    workdir: str = "/"
    copies: list[tuple[str, str]] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)  # each stage's ``AS`` name ("" when it has none)
    made: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # stage -> the copies made in it
    errexit: bool = False  # SHELL ["/bin/bash", "-e…", "-c"]: a RUN line stops at a failing command
    dirs: set[str] = field(default_factory=set)  # the directories WORKDIR made

    def in_image(self, written: str, dest: str) -> bool:
        """Whether a COPY destination is a directory of the image, so that a file goes into it (docker copies
        so, trailing ``/`` or not): ``.``, one every base image has (``/opt``), one WORKDIR made or a COPY filled."""
        return (
            written.endswith("/")
            or written in (".", "..")
            or dest in containerfile.IMAGE_DIRS
            or dest in self.dirs
            or any(to.startswith(dest.rstrip("/") + "/") for _, to in self.copies)
        )

    def stage_copies(self, ref: str) -> list[tuple[str, str]]:
        """The repository files a stage (``--from=name`` or its index) copied in, as (repository path, path)."""
        k = int(ref) if ref.isdigit() else (self.stages.index(ref) if ref in self.stages else -1)
        return self.made.get(k, [])


class BuildReader:
    """Reads a repository's Containerfiles and scripts into one :class:`Reading`."""

    def text(self, rel: str) -> str:
        """The build file ``rel``; empty, and said, when it is over ``MAX_BUILD_FILE`` bytes."""
        text = _read_text(self.root, rel)
        if len(text) > MAX_BUILD_FILE:
            self.reading.add_unknown(rel, 1, f"over {MAX_BUILD_FILE >> 10} KiB: not read as a build file")
            return ""
        return text

    def __init__(self, root: Path) -> None:
        self.root = root
        self.reading = Reading()
        self.budget = _Budget()
        self.files: dict[str, bool] = {}

    def read(self, dockerfiles: list[str], scripts: list[str]) -> Reading:
        """Every Containerfile, then every script no build step ran (read on its own, from its directory)."""
        for rel in dockerfiles:
            self.dockerfile(rel)
        for rel in scripts:
            if rel not in self.reading.followed:
                self.standalone(rel)
        return self.reading

    # -- the two entry points

    def standalone(self, rel: str) -> None:
        here = posixpath.join(REPO, posixpath.dirname(rel))
        ctx = _Context(rel, None, {}, set(map(str, range(1, 10))) | {"@"}, {}, None, here)
        text = self.text(rel)
        ctx.errexit = _shebang_errexit(text)
        # A path in the image (an entrypoint's /opt/p/x.py) is the file a Containerfile copied there.
        copies = list(self.reading.copies)
        self.each_profile(ctx, text, lambda p: self.repo_path(p) or self.container_path(p, copies), copies)

    def dockerfile(self, rel: str) -> None:
        build = _Build(rel)
        parsed = containerfile.parse(self.text(rel))
        for line, why in parsed.problems:
            self.reading.add_unknown(rel, line, why)
        for ins in parsed.instructions:
            if ins.word in ("ARG", "ENV"):
                _build_variables(build, ins, parsed.escape)
            elif ins.word == "WORKDIR":
                where = _expand(build, ins.args.strip(), parsed.escape) or ins.args.strip()
                build.workdir = posixpath.normpath(posixpath.join(build.workdir, where))
                build.dirs.add(build.workdir)
            elif ins.word == "FROM":
                words = ins.args.split()
                build.stages.append(words[2] if len(words) >= 3 and words[1].lower() == "as" else "")
            elif ins.word in ("COPY", "ADD"):
                self.copy(build, ins, parsed.escape)
            elif ins.word in ("RUN", "ENTRYPOINT", "CMD"):
                self.run_step(build, ins)
            elif ins.word == "SHELL":
                argv = ins.exec_form() or []
                build.errexit = any(re.fullmatch(r"-[a-z]*e[a-z]*", a) for a in argv[1:]) or "errexit" in argv

    def copy(self, build: _Build, ins: containerfile.Instruction, escape: str) -> None:
        flags, rest = ins.flags()
        written = ins.exec_form() or rest.split()
        words = [w for w in (_expand(build, w, escape) for w in written) if w is not None]
        if len(words) < 2 or len(words) != len(written):
            return
        dest = posixpath.normpath(posixpath.join(build.workdir, words[-1]))
        if "from" in flags:
            self.copy_from(build, build.stage_copies(flags["from"]), words, dest)
            return
        for url in [w for w in words[:-1] if re.match(r"https?://", w)] if ins.word == "ADD" else []:
            name = posixpath.basename(url.split("?", 1)[0])
            at = posixpath.join(dest, name) if build.in_image(words[-1], dest) else dest
            self.reading.fetched[at] = url + (" (its --checksum pins it)" if "checksum" in flags else "")
        for src in words[:-1]:
            src_rel = self.context_path(build.file, src)
            if src_rel is None:
                continue
            into_dir = len(words) > 2 or build.in_image(words[-1], dest)
            target = posixpath.join(dest, posixpath.basename(src_rel)) if into_dir else dest
            if (self.root / src_rel).is_dir() and into_dir:
                target = dest
            self.add_copy(build, src_rel, target)

    def add_copy(self, build: _Build, src_rel: str, target: str) -> None:
        build.copies.append((src_rel, target))
        build.made.setdefault(len(build.stages) - 1, []).append((src_rel, target))
        self.reading.copies.append((src_rel, target))

    def copy_from(self, build: _Build, stage: list[tuple[str, str]], words: list[str], dest: str) -> None:
        """``COPY --from=<stage> SRC DEST``: the repository files that stage copied under SRC, now under DEST.
        Another image (``--from=alpine``) holds no file of the repository."""
        into = words[-1].endswith("/") or len(words) > 2
        for src in words[:-1]:
            src = posixpath.normpath(src)
            to = posixpath.join(dest, posixpath.basename(src)) if into else dest
            for rel, path in stage:
                if path == src:
                    self.add_copy(build, rel, to if (self.root / rel).is_file() else dest)
                elif path.startswith(src.rstrip("/") + "/"):
                    self.add_copy(build, rel, posixpath.join(dest, path[len(src.rstrip("/")) + 1 :]))
                elif src.startswith(path.rstrip("/") + "/"):  # a part of a directory the stage copied
                    part = posixpath.join(rel, src[len(path.rstrip("/")) + 1 :])
                    self.add_copy(build, part, to if (self.root / part).is_file() else dest)

    def context_path(self, dockerfile: str, src: str) -> str | None:
        """A COPY source in the repository: relative to the repository, else to the Containerfile's directory."""
        for base in ("", posixpath.dirname(dockerfile)):
            rel = posixpath.normpath(posixpath.join(base, src.rstrip("/")))
            if not rel.startswith("..") and (self.root / rel).exists():
                return "" if rel == "." else rel
        return None

    def run_step(self, build: _Build, ins: containerfile.Instruction) -> None:
        options, rest = ins.options()
        for name, value in options:
            if name == "mount" and "type=bind" in value:
                opts = dict(kv.split("=", 1) for kv in value.split(",") if "=" in kv)
                src = self.context_path(build.file, opts.get("source", opts.get("src", ".")))
                dst = opts.get("target", opts.get("dst", opts.get("destination")))
                if src is not None and dst:
                    build.copies.append((src, posixpath.normpath(posixpath.join(build.workdir, dst))))
        argv = ins.exec_form()
        if argv is not None:
            rest = argv[-1] if argv[:1] in (["bash"], ["sh"], ["/bin/sh"], ["/bin/bash"]) and "-c" in argv else ""
            rest = rest or shlex.join(argv)
        line, rest = _script(ins, rest)
        head = containerfile.HEREDOC_AT.sub(" ", rest).split()
        if len(ins.heredocs) == 1 and head and _PYTHON.fullmatch(posixpath.basename(head[0])):
            self.reading.inline.append((build.file, ins.heredocs[0].line, ins.heredocs[0].body))
        ctx = _Context(build.file, None, dict(build.variables), set(build.inputs), {}, build.workdir, build.workdir)
        ctx.errexit = build.errexit
        copies = list(build.copies)
        self.each_profile(ctx, "\n" * (line - 1) + rest, lambda path: self.container_path(path, copies), copies)

    # -- paths

    def repo_path(self, path: str) -> str | None:
        """A path as a standalone script names it: in the repository (never outside), when it exists."""
        if path.startswith(REPO + "/") or path == REPO:
            rel = posixpath.normpath(path[len(REPO) + 1 :] or ".")
            return rel if not rel.startswith("..") and self.is_file(rel) else None
        return None

    def is_file(self, rel: str) -> bool:
        """Whether the repository has the file ``rel``, asked once per reading: a loop asks again and again."""
        if (known := self.files.get(rel)) is None:
            known = self.files[rel] = (self.root / rel).is_file()
        return known

    def container_path(self, path: str, copies: list[tuple[str, str]]) -> str | None:
        """The repository file a container path is, through the build's COPY lines (the last one wins)."""
        if path.startswith(REPO + "/"):
            return self.repo_path(path)
        for src, dst in reversed(copies):
            if path == dst or path.startswith(dst.rstrip("/") + "/"):
                rel = posixpath.normpath(posixpath.join(src, path[len(dst) :].lstrip("/")) if path != dst else src)
                if not rel.startswith("..") and self.is_file(rel):
                    return rel
        return None

    def each_profile(self, ctx: _Context, text: str, locate: Locate, copies: list[tuple[str, str]]) -> None:
        """Read ``text`` once; if a case on an input picks a profile, once more per profile."""
        nodes, bad = parse(text)
        for line, why in bad:
            self.reading.add_unknown(ctx.file, line, why)
        start = len(self.reading.applies), len(self.reading.runs)
        reader = _Reader(self.root, self.reading, locate, lambda p: self.glob(p, copies), self.budget)
        try:
            with contextlib.suppress(_Stop):
                reader.run(_copy(ctx), nodes)
        except RecursionError:
            self.reading.add_unknown(ctx.file, 1, "nested too deeply to read")
            return
        except _TooLong:
            self.reading.add_unknown(ctx.file, 1, _TOO_LONG)
            return
        if reader.split is None:
            return
        variable, profiles = reader.split
        del self.reading.applies[start[0] :]
        del self.reading.runs[start[1] :]
        for profile in profiles:
            one = _copy(ctx)
            one.profile = profile
            one.chosen[variable] = profile
            one.variables[variable] = [profile]
            try:
                with contextlib.suppress(_Stop, RecursionError):
                    reader.run(one, nodes)
            except _TooLong:
                self.reading.add_unknown(ctx.file, 1, _TOO_LONG)
                return

    def glob(self, pattern: str, copies: list[tuple[str, str]]) -> list[str]:
        """The files a glob matches, sorted (as the shell sorts them), as paths in the build."""
        fixed = re.split(r"[*?[]", pattern, maxsplit=1)[0]
        directory = posixpath.dirname(fixed)
        # Files copied one by one (COPY a.patch b.patch /p/) are in the build whatever the directory is.
        out = [dst for src, dst in copies if fnmatch.fnmatchcase(dst, pattern) and (self.root / src).is_file()]
        found = self.directory(directory, copies)
        if found is None:
            return sorted(set(out))
        folder = self.root / found
        for p in folder.rglob("*"):
            path = posixpath.join(directory, p.relative_to(folder).as_posix())
            if p.is_file() and fnmatch.fnmatchcase(path, pattern) and path.count("/") == pattern.count("/"):
                out.append(path)
        return sorted(set(out))

    def directory(self, directory: str, copies: list[tuple[str, str]]) -> str | None:
        """The repository directory a directory of the build is (a repository path, or one a COPY filled)."""
        if directory == REPO or directory.startswith(REPO + "/"):
            rel = posixpath.normpath(directory[len(REPO) :].lstrip("/") or ".")
            return rel if not rel.startswith("..") and (self.root / rel).is_dir() else None
        for src, dst in reversed(copies):
            if directory == dst or directory.startswith(dst.rstrip("/") + "/"):
                rel = posixpath.normpath(posixpath.join(src, directory[len(dst) :].lstrip("/")))
                if not rel.startswith("..") and (self.root / rel).is_dir():
                    return rel
        return None


_TOO_LONG = (
    f"the build's scripts ran {MAX_STEPS} commands when read (loops or calls that multiply): the rest is not read"
)


def _copy(ctx: _Context) -> _Context:
    return _Context(
        ctx.file,
        ctx.profile,
        dict(ctx.variables),
        set(ctx.inputs),
        dict(ctx.chosen),
        ctx.cwd,
        ctx.script_dir,
        dict(ctx.functions),
        ctx.depth,
        dict(ctx.aliases),
        ctx.errexit,
    )


_SHELLS = re.compile(r"(?:/usr)?(?:/bin/)?(?:ba|da)?sh(?:\s+-[a-z]+)*")


def _script(ins: containerfile.Instruction, command: str) -> tuple[int, str]:
    """The shell a ``RUN`` runs, and its first line: the here-document a shell reads, else the command.

    ``RUN <<EOF`` (or ``RUN bash <<EOF``) runs the here-document as the
    script; a here-document another command reads (``patch -p1 <<EOF``) is
    that command's input, which the reading then says it cannot see.
    """
    if len(ins.heredocs) == 1:
        doc = ins.heredocs[0]
        head = containerfile.HEREDOC_AT.sub(" ", command).strip()
        shebang = doc.body.split("\n", 1)[0]
        if (not head or _SHELLS.fullmatch(head)) and (not shebang.startswith("#!") or "sh" in shebang):
            return doc.line, doc.body
    return ins.line, containerfile.HEREDOC_AT.sub(" ", command) if ins.heredocs else command


def _expand(build: _Build, word: str, escape: str) -> str | None:
    """A Containerfile word with the values read so far; None when it cannot be told."""
    env = {k: " ".join(v) for k, v in build.variables.items()}
    try:
        return containerfile.expand(word, env, escape)
    except containerfile.Unreadable:
        return None


def _build_variables(build: _Build, ins: containerfile.Instruction, escape: str) -> None:
    env = {k: " ".join(v) for k, v in build.variables.items()}
    try:
        pairs = containerfile.assignments(ins, env, escape)
    except containerfile.Unreadable:
        return  # import reports the line (build-unreadable)
    for name, value, written in pairs:
        if value is not None:
            build.variables[name] = [value]
        elif written is not None:
            build.variables.pop(name, None)  # a value no file sets: a use of it says so
        if ins.word == "ARG":
            build.inputs.add(name)
