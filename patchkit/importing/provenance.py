"""What hand-kept repositories say about where their patches come from.

Two kinds of statements: upstream references written in prose ("vLLM #47282 /
PR #47291", a pull request URL) and Markdown tables that map each overlay to
its upstream repository, commit and path. Both are read from text; a
reference whose project cannot be told from the text is returned as
unresolved rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from patchkit.core.values import Reference

# Project names people write in comments, and the GitHub repository each means.
ALIASES = {
    "vllm": "vllm-project/vllm",
    "aiter": "ROCm/aiter",
    "triton": "triton-lang/triton",
    "sglang": "sgl-project/sglang",
    "transformers": "huggingface/transformers",
    "pytorch": "pytorch/pytorch",
    "torch": "pytorch/pytorch",
    "rocm": "ROCm/ROCm",
}
_URL = re.compile(
    r"https?://github\.com/(?P<repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)/(?:(?P<kind>pull|issues)/(?P<n>\d+)|commit/(?P<sha>[0-9a-f]{40}))"
)
_QUALIFIED = re.compile(r"(?<![\w/.-])(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)#(?P<n>\d+)\b")
# "owner/repo@<sha>": a commit of a repository, as compose comments and READMEs write it.
_AT_COMMIT = re.compile(
    r"(?<![\w/.:-])(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)@(?P<sha>[0-9a-f]{7,40})\b"
)
_MD_LINK = re.compile(r"\[[^\]]*\]\(([^)]*)\)")
_TOKEN = re.compile(r"(?P<word>[A-Za-z][A-Za-z0-9_-]*)|#(?P<n>\d+)\b")


@dataclass(frozen=True)
class Found:
    """References found in one text, and the numbers whose project it never named."""

    refs: tuple[Reference, ...]
    unresolved: tuple[str, ...]


class _Refs:
    """References in order of first appearance, without duplicates, and the numbers left unresolved."""

    def __init__(self) -> None:
        self.refs: list[Reference] = []
        self.unresolved: list[str] = []

    def add(self, ref: str) -> None:
        r = Reference(ref)
        if r not in self.refs:
            self.refs.append(r)

    def unresolvable(self, number: str) -> None:
        if number not in self.unresolved:
            self.unresolved.append(number)


def _explicit(text: str, found: _Refs) -> list[tuple[int, int]]:
    """The references that name their project (GitHub URLs, ``org/repo#N``); the spans they cover.

    A Markdown link whose target is such a URL covers its link text too
    ("[#47291](…/pull/47291)": the link text is the URL's reference).
    """
    spans = [m.span() for m in _MD_LINK.finditer(text) if _URL.search(m.group(1))]
    for m in _URL.finditer(text):
        spans.append(m.span())
        found.add(f"https://github.com/{m['repo']}/commit/{m['sha']}" if m["sha"] else f"{m['repo']}#{m['n']}")
    for m in _QUALIFIED.finditer(text):
        if not _inside(m.start(), spans):
            spans.append(m.span())
            found.add(f"{m['repo']}#{m['n']}")
    for m in _AT_COMMIT.finditer(text):
        if _inside(m.start(), spans):
            continue
        spans.append(m.span())
        if len(m["sha"]) == 40:
            found.add(f"https://github.com/{m['repo']}/commit/{m['sha']}")
        else:  # an abbreviated commit is no reference patchkit can check
            found.unresolvable(m.group(0))
    return spans


def _in_a_path(text: str, m: re.Match[str]) -> bool:
    """Whether a word is part of a path ("aiter/ops/triton/x.py") rather than a project named in prose."""
    return text[m.end() : m.end() + 1] in ("/", ".", "_") or text[m.start() - 1 : m.start()] in ("/", ".", "_")


def _bare(text: str, spans: list[tuple[int, int]], project: str | None, found: _Refs) -> None:
    """Each bare ``#N`` outside ``spans``, given to the project named most recently before it."""
    for m in _TOKEN.finditer(text):
        if _inside(m.start(), spans):
            continue
        if m["word"]:
            alias = None if _in_a_path(text, m) else ALIASES.get(m["word"].lower())
            project = alias or project
        elif project is None:
            found.unresolvable(m.group(0))
        else:
            found.add(f"{project}#{m['n']}")


def references(text: str, default_repo: str | None = None) -> Found:
    """Every upstream reference in ``text``, in order of appearance, without duplicates.

    A bare ``#N`` (or ``PR #N``) belongs to the project named most recently
    before it in the same text ("vLLM #47282 / PR #47291": both vLLM), else to
    ``default_repo``; with neither it is reported as unresolved.
    """
    found = _Refs()
    spans = _explicit(text, found)
    _bare(text, spans, default_repo, found)
    return Found(tuple(found.refs), tuple(found.unresolved))


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


@dataclass(frozen=True)
class Row:
    """What one row of a provenance table states about one file it names.

    A row naming several files gives one ``Row`` per file, each with the row's
    repository and commit. ``new_module``: the row says the file is new (no
    upstream counterpart).
    """

    source: str  # "patches/README.md:12"
    file: str
    repository: str | None
    commit: str | None
    path: str | None
    text: str  # the whole row, for references
    new_module: bool = False


_COLUMNS = {
    "file": ("overlay", "overlays", "file", "files", "patch", "patches", "local", "module", "modules"),
    "repository": ("upstream", "repo", "repository", "project", "source", "origin", "based on"),
    "commit": ("commit", "base", "sha", "rev", "revision"),
    "path": ("path", "upstream path", "upstream file"),
}
_LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
# "@ `<hex>`": the commit a statement is pinned at; a "head <sha>" is a pull request's, not the base.
_AT_HEX = re.compile(r"@\s*`?([0-9a-f]{7,40})\b")
_HEAD_HEX = re.compile(r"\bhead\s*`?[0-9a-f]{7,40}\b", re.IGNORECASE)
_REPO = re.compile(r"(?:https?://github\.com/)?([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*?)(?:\.git)?/?$")
_CODE = re.compile(r"`([^`]+)`")
_FILE_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]*\.[A-Za-z0-9]+")
# A row calling the file new: "new module", "new file", "new companion module", "new helper", "added module",
# "companion module": a file with no upstream counterpart.
_NEW_MODULE = re.compile(
    r"\b(?:new|added)\s+(?:[\w-]+\s+){0,2}?(?:module|file|helper)s?\b|\bcompanion\s+(?:module|file)\b",
    re.IGNORECASE,
)


# Where hand-kept repositories keep their provenance tables, in the order they are read.
DOCUMENTS = ("README.md", "patches/README.md", "PATCHES.md", "patches/PROVENANCE.md")


def names(row: Row, rel: str) -> bool:
    """Whether ``row`` names the repository file ``rel``: by its path, its file name, its path under patches/,
    or the end of its path (``vllm/v1/x.py`` names ``overlay/vllm/v1/x.py``)."""
    return row.file in (rel, PurePosixPath(rel).name, rel.removeprefix("patches/")) or (
        "/" in row.file and rel.endswith("/" + row.file)
    )


def rows_naming(root: Path, rel: str) -> list[Row]:
    """The rows of the repository's provenance tables that name ``rel``, as ``patchkit import`` read them.

    For ``check`` and ``--normalize`` on an imported repository: whether the
    provenance says anything about a file decides what an upstream may
    decide. A document that is not a regular file inside the repository names
    nothing; bytes that are not UTF-8 are read as replacement characters.
    """
    top = root.resolve()
    out: list[Row] = []
    for doc in DOCUMENTS:
        path = root / doc
        if not path.is_file() or not path.resolve().is_relative_to(top):
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        out.extend(row for row in tables(doc, text) if names(row, rel))
    return out


def tables(name: str, text: str) -> list[Row]:
    """Rows of every Markdown table in ``text`` that has a file column and an upstream column."""
    rows: list[Row] = []
    lines = text.splitlines()
    i = 0
    while i + 1 < len(lines):
        header, sep = lines[i].strip(), lines[i + 1].strip()
        if not (header.startswith("|") and re.fullmatch(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?", sep)):
            i += 1
            continue
        columns = _columns(_cells(header))
        i += 2
        while i < len(lines) and lines[i].strip().startswith("|"):
            cells = _cells(lines[i])
            if "file" in columns and ("repository" in columns or "commit" in columns or "path" in columns):
                rows.extend(_row(f"{name}:{i + 1}", cells, columns, lines[i]))
            i += 1
    return rows


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _columns(headers: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in ("path", "file", "repository", "commit"):  # "upstream path" is a path, not a repository
        for idx, h in enumerate(headers):
            h = h.lower().strip("* _`")
            if idx in out.values():
                continue
            if any(h == w or h.startswith(w + " ") or h.endswith(" " + w) for w in _COLUMNS[key]):
                out.setdefault(key, idx)
    return out


def _plain(cell: str) -> str:
    cell = _LINK.sub(lambda m: m.group(1) if not m.group(2).startswith("http") else m.group(2), cell)
    return cell.replace("`", "").replace("*", "").strip()


def files_named(cell: str) -> list[str]:
    """The files a table cell names: its code spans that are file names, else the file names in its text.

    "`a.py`, `b.py`" names two files; "`x.py` reasoning-token follow-up" names
    ``x.py``; "[`a.py`](patches/a.py)" names ``a.py``.
    """
    text = _LINK.sub(lambda m: m.group(1), cell)
    spans = [c.strip() for c in _CODE.findall(text)]
    named = [c for c in spans if _FILE_NAME.fullmatch(c)]
    if not named:
        named = _FILE_NAME.findall(text.replace("*", ""))
    return list(dict.fromkeys(n.removeprefix("./") for n in named))


# Words that may follow a repository named in a cell: a branch, a tag, a commit ("`o/r` main @ `<sha>`").
_AFTER_REPO = re.compile(
    r"@.*|[0-9a-f]{7,40}|main|master|nightly|dev|develop|trunk|release\S*|v\d\S*|[-\u2013\u2014(].*"
)


_GITHUB_PAGE = re.compile(
    r"https?://github\.com/([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)/(?:commit|pull|tree|blob|issues)/"
)
# Slashed words a cell may hold alone that are no repository: a one-letter side, "and/or".
_PROSE_PAIR = re.compile(r"[^/]/[^/]+|[^/]+/[^/]|(?i:and/or|either/or|yes/no|on/off|read/write|input/output)")


def _repository(text: str) -> str | None:
    """The repository a cell states, in a form people use for code, never a pair of prose words.

    A GitHub URL (``git+https`` too), a code span ``owner/repo``, ``owner/repo@<sha>``
    or ``owner/repo#N``, or a bare ``owner/repo`` that is the cell or is followed
    only by a branch, tag or commit; else a project alias as the cell's first
    word. "eviction/write coordination" names no repository.
    """
    for token in [c.strip() for c in _CODE.findall(text)]:
        m = _REPO.fullmatch(token.removeprefix("git+"))
        if m is not None and not _FILE_NAME.fullmatch(m.group(1).split("/")[-1]):
            return m.group(1)
    words = _plain(text).split()
    for k, token in enumerate(words):
        token = token.strip(",;()").removeprefix("git+")
        qualified = re.fullmatch(r"([^@#\s]+/[^@#\s]+)[@#]\w+", token)
        url = token.startswith(("https://", "http://"))
        if not (url or qualified or k == 0):
            continue
        if url and (gh := _GITHUB_PAGE.match(token)) is not None:
            token = f"https://github.com/{gh.group(1)}"  # a commit, pull request or tree URL names its repository
        m = _REPO.fullmatch(qualified.group(1) if qualified else token)
        if m is None or _FILE_NAME.fullmatch(m.group(1).split("/")[-1]):
            continue
        if not (url or qualified) and _PROSE_PAIR.fullmatch(m.group(1)):
            continue  # "n/a", "and/or" written alone in a cell
        rest = words[k + 1 :]
        if url or qualified or not rest or _AFTER_REPO.fullmatch(rest[0].strip("`,;")):
            return m.group(1)
    word = words[0].lower() if words else ""
    return ALIASES.get(word)


def _commit(text: str) -> str | None:
    """The commit a cell states: the one after ``@``, else the first hex that is not a PR's ``head``."""
    plain = _LINK.sub(lambda m: m.group(1), text)
    if (m := _AT_HEX.search(plain)) is not None:
        return m.group(1)
    m = _HEX.search(_HEAD_HEX.sub("", plain))
    return m.group(0) if m else None


def _paths(text: str) -> list[str]:
    """Upstream paths a cell states: code spans (or words) with a directory and a file name."""
    spans = [c.strip() for c in _CODE.findall(text)] or _plain(text).split()
    return [p.lstrip("/") for p in spans if "/" in p and _FILE_NAME.fullmatch(p.lstrip("/")) and "://" not in p]


def _row(source: str, cells: list[str], columns: dict[str, int], raw: str) -> list[Row]:
    def cell(key: str) -> str | None:
        idx = columns.get(key)
        if idx is None or idx >= len(cells):
            return None
        return cells[idx].strip() or None

    files = files_named(cell("file") or "")
    if not files:
        return []
    rtext, ctext, ptext = cell("repository"), cell("commit"), cell("path")
    repository = _repository(rtext) if rtext else None
    # "`owner/repo` `main` @ `<hex>` — `path`": one cell may state the commit and path too.
    commit = (_commit(ctext) if ctext else None) or (_commit(rtext) if rtext else None)
    paths = _paths(ptext) if ptext else []
    if not paths and rtext:
        paths = [p for p in _paths(rtext) if p != repository]
    # "new module" in a row that states no upstream commit or path: the file has no upstream counterpart.
    # Any cell but the file's may say so (a "Notes" or "What" column too).
    others = " ".join(c for k, c in enumerate(cells) if k != columns.get("file"))
    new_module = not (commit or paths) and bool(_NEW_MODULE.search(others))
    out = []
    for k, f in enumerate(files):
        path = None
        if len(paths) == len(files):
            path = paths[k]
        else:  # several files, fewer paths: a path belongs to the file it ends with
            path = next((p for p in paths if PurePosixPath(p).name == PurePosixPath(f).name), None)
            if path is None and len(files) == 1 and len(paths) == 1:
                path = paths[0]
        out.append(Row(source, f, repository, commit, path, raw, new_module))
    return out


_HEADING = re.compile(r"#{1,6}\s")
_ITEM = re.compile(r"(?:[-*+]|\d+[.)])\s")


@dataclass(frozen=True)
class Block:
    """A paragraph, list item or heading of a Markdown document (outside tables and code), and the heading above."""

    source: str  # "README.md:12"
    text: str
    heading: str


def prose(name: str, text: str) -> list[Block]:
    """The prose blocks of ``text``: where READMEs cite pull requests and commits beside the file they changed."""
    out: list[Block] = []
    buf: list[str] = []
    heading, start, fenced = "", 0, False

    def flush() -> None:
        if buf:
            out.append(Block(f"{name}:{start}", " ".join(buf), heading))
            buf.clear()

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            flush()
            fenced = not fenced
            continue
        if fenced or not line or line.startswith("|"):
            flush()
            continue
        if _HEADING.match(line):
            flush()
            heading = line.lstrip("#").strip()
            out.append(Block(f"{name}:{n}", heading, ""))
            continue
        if _ITEM.match(line):
            flush()
        if not buf:
            start = n
        buf.append(line)
    flush()
    return out


def mentions(text: str, rel: str) -> bool:
    """Whether prose names the repository file ``rel``: its file name, or the end of its path."""
    name = PurePosixPath(rel).name
    for token in _FILE_NAME.findall(text.replace("`", " ").replace("*", " ")):
        token = token.strip("./")
        if token == name or ("/" in token and (rel == token or rel.endswith("/" + token))):
            return True
    return False


@dataclass(frozen=True)
class Cited:
    """References a prose block cites: the one file they belong to (``rel``), or why none can be told (``why``)."""

    source: str  # "README.md:12"
    text: str
    default_repo: str | None
    cited: tuple[str, ...]  # the references, and the numbers whose project is never named
    rel: str | None
    why: str | None


def _cited(block: Block, files: dict[str, str | None]) -> Cited | None:
    named = [rel for rel in files if mentions(block.text, rel)]
    if not named and block.heading:
        named = [rel for rel in files if mentions(block.heading, rel)]
    default = files[named[0]] if len(named) == 1 else None
    found = references(block.text, default)
    cited = tuple([str(r) for r in found.refs] + list(found.unresolved))
    if not cited:
        return None
    if len(named) == 1 and not found.unresolved:
        return Cited(block.source, block.text, default, cited, named[0], None)
    why = (
        f"{', '.join(found.unresolved)} names no project"
        if len(named) == 1
        else "names no patch's file"
        if not named
        else f"names several patches ({', '.join(named)})"
    )
    return Cited(block.source, block.text, default, cited, None, why)


def prose_citations(root: Path, files: dict[str, str | None]) -> list[Cited]:
    """What the provenance documents' prose cites, each block given to the one of ``files`` it names.

    ``files`` maps each patch's repository path to its repository (``owner/repo``,
    for a bare ``#N``). A paragraph, list item or heading names a file by its
    name or the end of its path; a block naming none gets its heading's. Read
    by ``import`` (which records the placed ones) and ``check`` (which notes
    the others again); a document that is not a regular file inside the
    repository cites nothing.
    """
    top = root.resolve()
    out: list[Cited] = []
    for doc in DOCUMENTS:
        path = root / doc
        if not path.is_file() or not path.resolve().is_relative_to(top):
            continue
        for block in prose(doc, path.read_bytes().decode("utf-8", "replace")):
            if (c := _cited(block, files)) is not None:
                out.append(c)
    return out
