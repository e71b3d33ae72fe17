"""Where AITER writes the tuning tables it merges at start: a directory private to this process.

AITER merges its default tuning table with ``aiter/configs/model_configs/*``
(or the files ``AITER_CONFIG_*`` lists) and writes the result to the fixed path
``/tmp/<name>.csv``, shared by every process of every replica on the host, so
two servers starting together race on it and a later start can read a table
another one wrote. The transformer ``10-aiter-private-merge.py`` makes AITER
call :func:`merged_config_path` instead. ``AITER_MERGE_DIR`` chooses the parent
directory (default: the system's temporary directory).

A new module of this deployment (no upstream file): mounted into the image's
site-packages beside ``aiter``.
"""

from __future__ import annotations

import os
import tempfile

_private_dir: str | None = None


def merged_config_path(merge_name: str) -> str:
    """The path of the merged table ``merge_name`` in this process's own directory (made mode 0700 once)."""
    global _private_dir  # noqa: PLW0603 - one directory per process, made on first use
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="aiter-merged-", dir=os.environ.get("AITER_MERGE_DIR") or None)
    return os.path.join(_private_dir, f"{os.path.basename(merge_name)}.csv")
