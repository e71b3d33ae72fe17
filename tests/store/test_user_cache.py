"""The suite never writes the user's own cache: one temporary cache per session, subprocesses included.

``tests/conftest.py`` points ``PATCHKIT_CACHE`` and ``XDG_CACHE_HOME`` into a
temporary directory before anything runs, and fails the run when the user's
cache changed by its end. These tests hold the parts of that promise a test can
see: where a process started by the suite caches, and that a command which
fills the cache (a rebase cloning its upstream) leaves the user's cache alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import Invoke, listing
from tests.rebase.test_overlays import FENCED, WORKER, Upstream, make_deploy, upstream  # noqa: F401


def _cache_of_a_process(env: dict[str, str]) -> Path:
    out = subprocess.run(
        [sys.executable, "-c", "import os; from patchkit.store.cache import cache_dir; print(cache_dir(os.environ))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def test_a_process_the_suite_starts_never_caches_in_the_users_cache(user_cache: Path) -> None:
    assert not _cache_of_a_process(dict(os.environ)).is_relative_to(user_cache)
    # Code that drops PATCHKIT_CACHE still lands in the session's directory, not under ~/.cache.
    bare = {k: v for k, v in os.environ.items() if k != "PATCHKIT_CACHE"}
    fallback = _cache_of_a_process(bare)
    assert fallback != user_cache and not fallback.is_relative_to(Path.home() / ".cache")
    assert fallback.parent == Path(os.environ["XDG_CACHE_HOME"])


def test_a_command_that_fills_the_cache_leaves_the_users_cache_alone(
    tmp_path: Path,
    user_cache: Path,
    invoke: Invoke,
    upstream: Upstream,  # noqa: F811
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": WORKER + b"# upstream moved on\n"})
    env = {k: v for k, v in os.environ.items() if k != "PATCHKIT_CACHE"}  # the fallback, as a careless caller
    session = Path(env["XDG_CACHE_HOME"]) / "patchkit"
    before, session_before = listing(user_cache), listing(session)
    r = subprocess.run(
        [sys.executable, "-m", "patchkit", "rebase", "--onto", c2],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert listing(user_cache) == before
    assert listing(session) != session_before  # the upstream's clone went into the session's cache
