"""A deployment carrying patch series over two upstreams, made with git and the patchkit CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Invoke
from tests.series.queue import Queue, build_queue, lockfile_text


@pytest.fixture
def queue(tmp_path: Path, invoke: Invoke) -> Queue:
    q = build_queue(tmp_path)
    (q.root / "lockfile.toml").write_text(lockfile_text(q))
    run = invoke("lock", repo=q.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    return q
