"""What a repository's own scripts, tests and build files rely on, found by name.

A hand-kept repository often reads its own files: a test applies
``patches/diffs/x.diff`` to check it still reproduces the overlay, a
Makefile target runs ``git apply --check`` on it, a Containerfile copies
it. Such a file must not be deleted by patchkit (``import --normalize``
keeps it). The reading is grep-level and says where: the file's
repository path, or its name, appears in the text of a script (``*.sh``,
``*.bash``), a Python file outside ``patches/``, a Makefile, a
Containerfile or Dockerfile, a compose file, a CI workflow or a tox/nox
configuration.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SKIP_DIRS = frozenset({".git", ".patchkit", "upstream", "node_modules", ".venv", "venv", "__pycache__"})
_NAMES = re.compile(
    r"(?:Makefile|GNUmakefile|justfile|Justfile|noxfile\.py|tox\.ini|Containerfile.*|Dockerfile.*|.*\.Dockerfile"
    r"|.*\.containerfile|compose.*\.ya?ml|docker-compose.*\.ya?ml|.*\.sh|.*\.bash|.*\.mk|.*\.py)"
)
_LIMIT = 1 << 20  # a file this large is not a script


def _readers(root: Path) -> list[str]:
    """The repository files that may read others: scripts, tests, build files (sorted; no symlinks)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not (Path(dirpath) / d).is_symlink())
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        workflows = rel_dir.startswith(".github/workflows")
        for f in sorted(filenames):
            rel = f if rel_dir == "." else f"{rel_dir}/{f}"
            if (Path(dirpath) / f).is_symlink():
                continue
            if rel.startswith("patches/") and f.endswith(".py"):
                continue  # overlays and modules: what the deployment runs, not what reads the repository
            if _NAMES.fullmatch(f) or (workflows and f.endswith((".yml", ".yaml"))):
                out.append(rel)
    return out


def referenced(root: Path, files: list[str]) -> dict[str, str]:
    """Each of ``files`` a script, test or build file of the repository names, with ``file:line`` of the first."""
    wanted = {rel: (rel, Path(rel).name) for rel in files}
    out: dict[str, str] = {}
    for reader in _readers(root):
        if len(out) == len(wanted):
            break
        path = root / reader
        try:
            if path.stat().st_size > _LIMIT:
                continue
            text = path.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        for rel, (full, name) in wanted.items():
            if rel in out or reader == rel:
                continue
            at = _find(text, full, name)
            if at is not None:
                out[rel] = f"{reader}:{text[:at].count(chr(10)) + 1}"
    return out


def _find(text: str, full: str, name: str) -> int | None:
    """Where the path, or the file name standing alone (not inside a longer name), first appears."""
    at = text.find(full)
    if at >= 0:
        return at
    m = re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", text)
    return m.start() if m else None
