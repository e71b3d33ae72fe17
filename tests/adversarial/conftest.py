"""Shared helpers of the adversarial tests: patchkit run as a real process, as an attacker drives it.

Each module here is one attack surface (the bundle, paths and links, the
write lock, the registry client, YAML, diffs, rebase, text output, signatures);
``corpus.py`` holds the corrupted fixtures every command is run on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def patchkit(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m patchkit ARGS`` in ``cwd`` as a user would, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the repository holding a file that must never be touched."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.csv").write_bytes(b"do not touch\n")
    return d
