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

from patchkit.values import Reference

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
_TOKEN = re.compile(r"(?P<word>[A-Za-z][A-Za-z0-9_-]*)|#(?P<n>\d+)\b")


@dataclass(frozen=True)
class Found:
    """References found in one text, and the numbers whose project it never named."""

    refs: tuple[Reference, ...]
    unresolved: tuple[str, ...]


def references(text: str, default_repo: str | None = None) -> Found:
    """Every upstream reference in ``text``, in order of appearance, without duplicates.

    A bare ``#N`` (or ``PR #N``) belongs to the project named most recently
    before it in the same text ("vLLM #47282 / PR #47291": both vLLM), else to
    ``default_repo``; with neither it is reported as unresolved.
    """
    refs: list[Reference] = []
    unresolved: list[str] = []
    spans: list[tuple[int, int]] = []

    def add(ref: str) -> None:
        r = Reference(ref)
        if r not in refs:
            refs.append(r)

    for m in _URL.finditer(text):
        spans.append(m.span())
        if m["sha"]:
            add(f"https://github.com/{m['repo']}/commit/{m['sha']}")
        else:
            add(f"{m['repo']}#{m['n']}")
    for m in _QUALIFIED.finditer(text):
        if not _inside(m.start(), spans):
            spans.append(m.span())
            add(f"{m['repo']}#{m['n']}")
    project = default_repo
    for m in _TOKEN.finditer(text):
        if _inside(m.start(), spans):
            continue
        if m["word"]:
            alias = ALIASES.get(m["word"].lower())
            if alias is not None:
                project = alias
            continue
        if project is None:
            if m.group(0) not in unresolved:
                unresolved.append(m.group(0))
        else:
            add(f"{project}#{m['n']}")
    return Found(tuple(refs), tuple(unresolved))


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


@dataclass(frozen=True)
class Row:
    """One row of a provenance table: the overlay it describes and what it states."""

    source: str  # "patches/README.md:12"
    file: str
    repository: str | None
    commit: str | None
    path: str | None
    text: str  # the whole row, for references


_COLUMNS = {
    "file": ("overlay", "file", "patch", "local"),
    "repository": ("upstream", "repo", "repository", "project", "source"),
    "commit": ("commit", "base", "sha", "rev", "revision"),
    "path": ("path", "upstream path", "upstream file"),
}
_LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
_REPO = re.compile(r"(?:https?://github\.com/)?([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*?)(?:\.git)?/?$")


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
                row = _row(f"{name}:{i + 1}", cells, columns, lines[i])
                if row is not None:
                    rows.append(row)
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


def _row(source: str, cells: list[str], columns: dict[str, int], raw: str) -> Row | None:
    def cell(key: str) -> str | None:
        idx = columns.get(key)
        if idx is None or idx >= len(cells):
            return None
        return _plain(cells[idx]) or None

    file = cell("file")
    if file is None:
        return None
    repository = None
    if (rtext := cell("repository")) is not None:
        m = _REPO.search(rtext.split()[0])
        if m is not None:
            repository = m.group(1)
        elif rtext.lower() in ALIASES:
            repository = ALIASES[rtext.lower()]
    commit = None
    if (ctext := cell("commit")) is not None:
        m = _HEX.search(ctext)
        commit = m.group(0) if m else None
    path = cell("path")
    return Row(source, file, repository, commit, path.lstrip("/") if path else None, raw)
