"""Shared helpers of the adversarial tests: patchkit run as a real process, as an attacker drives it.

One module per attack surface: ``test_bundle_attacks`` (what GNU tar would
extract, ``bundle -o``), ``test_paths`` (symlinks and traversal),
``test_lock`` (concurrent writers, the soak), ``test_registry_deadline`` (a
dripping registry), ``test_yaml`` (alias bombs, recursion), ``test_diffs``
(hostile headers and hunks, nested lockfiles), ``test_rebase_attacks``
(links, markers, state), ``test_output`` (names in text and JSON),
``test_check_findings`` (special files, nested targets, staged leftovers),
``test_signature_armor`` (parity with ssh-keygen), ``test_races`` (files
changed while hashed, directories swapped for links, killed writers). ``corpus.py`` holds the
corrupted deployments ``test_no_internal_error`` runs every command on: add
an attack there, or a module here.
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
