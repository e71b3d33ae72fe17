"""Source transformer: AITER writes its merged tuning tables to a private directory, not a shared /tmp path.

Run by the entrypoint at every start, before vLLM imports AITER. It replaces one
exact line of ``aiter/jit/core.py`` (in ``update_config_files``)::

    new_file_path = f"/tmp/{merge_name}.csv"

with a call to ``aiter_merge_dir.merged_config_path`` (a module of this
deployment, see ``patches/aiter_merge_dir.py``). It fails closed: when the line
is not there exactly once (AITER changed), it changes nothing and exits 1, and
the container refuses to start; run again on a file it already changed, it
changes nothing and exits 0. The file is found without importing AITER
(``AITER_CORE`` names it directly, for tests), and rewritten atomically.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

OLD = b'    new_file_path = f"/tmp/{merge_name}.csv"\n'
NEW = (
    b"    from aiter_merge_dir import merged_config_path  # patchkit transformer 10-aiter-private-merge\n"
    b"\n"
    b"    new_file_path = merged_config_path(merge_name)\n"
)


def log(message: str) -> None:
    sys.stderr.write(f"10-aiter-private-merge: {message}\n")


def core_path() -> str | None:
    """``aiter/jit/core.py`` of the installed AITER, found without importing it."""
    if os.environ.get("AITER_CORE"):
        return os.environ["AITER_CORE"]
    spec = importlib.util.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "jit", "core.py")


def find(lines: list[bytes], block: bytes) -> list[int]:
    """Where ``block`` starts as whole lines of ``lines`` (a longer, re-indented or joined line does not count)."""
    want = block.splitlines(keepends=True)
    return [i for i in range(len(lines) - len(want) + 1) if lines[i : i + len(want)] == want]


def transform(source: bytes) -> bytes | None:
    """The changed source; the same bytes when already changed; None when the block is not there exactly once."""
    lines = source.splitlines(keepends=True)
    old, new = find(lines, OLD), find(lines, NEW)
    if not old and len(new) == 1:
        return source
    if len(old) != 1 or new:
        return None
    i = old[0]
    return b"".join([*lines[:i], NEW, *lines[i + 1 :]])


def main() -> int:
    path = core_path()
    if path is None:
        log("aiter is not installed; refusing to start")
        return 1
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        log(f"{path}: cannot read ({e.strerror}); refusing to start")
        return 1
    changed = transform(source)
    if changed is None:
        log(f"{path}: the block to replace is not there exactly once (AITER changed?); refusing to start")
        return 1
    if changed == source:
        log(f"{path}: already transformed")
        return 0
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".core.py.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(changed)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        log(f"{path}: cannot write ({e.strerror}); refusing to start")
        return 1
    log(f"{path}: merged tuning tables now go to a private directory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
