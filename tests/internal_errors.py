"""Where a test run ended in patchkit's internal-error path (exit 4), in-process or in a process the tests started.

A bug must never be the answer to any input, so ``tests/conftest.py`` fails
every test in which this list grew, unless the test is marked
``internal_error`` (it exercises that path on purpose). One module, imported by
this one name, so the in-process hook and the subprocess helpers share it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

INTERNAL_EXIT = 4
SEEN: list[str] = []


def record(what: str) -> None:
    SEEN.append(what)


def check_process(argv: Sequence[object], done: subprocess.CompletedProcess[Any]) -> None:
    """Record a patchkit process that exited 4 or printed the internal-error line."""
    stderr = done.stderr.decode("utf-8", "replace") if isinstance(done.stderr, bytes) else done.stderr or ""
    if done.returncode == INTERNAL_EXIT or "patchkit: internal error:" in stderr:
        line = next((s for s in stderr.splitlines() if "internal error" in s), f"exit {done.returncode}")
        record(f"{' '.join(map(str, argv))}: {line}")
