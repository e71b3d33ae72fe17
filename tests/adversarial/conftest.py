"""Shared helpers of the adversarial tests: patchkit run as a real process, as an attacker drives it.

One module per attack surface: ``test_bundle_attacks`` (what GNU tar would
extract, ``bundle -o``), ``test_tar_smuggling`` (generated pax keys, digit
forms, member types and sparse maps against the real GNU tar), ``test_paths`` (symlinks and traversal),
``test_lock`` (concurrent writers, the soak), ``test_registry_deadline`` (a
dripping registry), ``test_registry_bounds`` (declared sizes, credentials
on redirects and upload locations, oversized blobs, many referrers),
``test_yaml`` (alias bombs, recursion), ``test_diffs``
(hostile headers and hunks, nested lockfiles), ``test_rebase_attacks``
(links, markers, state), ``test_output`` (names in text and JSON),
``test_check_findings`` (special files, nested targets, staged leftovers),
``test_signature_armor`` (parity with ssh-keygen), ``test_allowed_signers``
(generated allowed-signers files against ``ssh-keygen -Y verify``),
``test_sums_reader`` (generated SHA256SUMS against ``sha256sum -c --strict``),
``test_host_files`` (pinned files that are symlinks to host files, through
``image build``, ``bundle``, ``materialize``, ``emit`` and ``import``),
``test_git_dir_writes`` (patches into a tree's ``.git`` in every spelling,
files nested inside files, through ``apply --to`` a git checkout, ``rebase
--series`` and a derived layer),
``test_cache_poison``
(planted, truncated and flipped cache content), ``test_lockfile_toml`` (the
lockfile reader against tomllib on generated mutations),
``test_first_use`` (what
a new user meets: unloadable lockfiles under CI formats, a wrong ``-C``, a
stray ``--continue``, the work area kept out of git),
``test_cloned_repo`` (a
clone carrying a journal, rebase states or hooks changes nothing in ``.git``;
malformed rebase states), ``test_apply_kill`` (``apply --to`` killed with
SIGKILL, finished or undone by the next run),
``test_races`` (files
changed while hashed, directories swapped for links, killed writers), ``test_build_bombs``
(build files whose static reading would never end), ``test_hostile_upstream`` (an ``ext::``
URL in the lockfile). ``corpus.py`` holds the
corrupted deployments ``test_no_internal_error`` runs every command on: add
an attack there, or a module here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.internal_errors import check_process


def patchkit(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m patchkit ARGS`` in ``cwd`` as a user would, capturing its output (an exit 4 is recorded)."""
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    check_process(["patchkit", *args], done)
    return done


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the repository holding a file that must never be touched."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.csv").write_bytes(b"do not touch\n")
    return d
