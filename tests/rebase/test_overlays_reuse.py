"""A rebase made again merges again from the pinned inputs, and writes the same repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Invoke, git, snapshot

from patchkit.rebase import overlays as rebase
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy, rebase_json


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


FENCED = WORKER.replace(b"        for b in blocks:\n", b"        fence()\n        for b in blocks:\n")


def test_the_same_rebase_again_merges_again_and_writes_the_same_files(
    invoke: Invoke, tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/other.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED, "vllm/other.py": FENCED})
    c2 = upstream.commit(
        {
            "vllm/worker.py": WORKER.replace(b"import torch\n", b"import torch\nimport os\n"),
            "vllm/other.py": WORKER.replace(b"        return len(blocks)\n", b"        return 0\n"),
        }
    )
    code, first = rebase_json(invoke, root, "--onto", c2)
    assert code == 0, first
    after_first = snapshot(root)
    cache = Path(os.environ["PATCHKIT_CACHE"])
    assert not (cache / "merges").exists() and not (cache / "verdicts").exists()  # no result is kept for next time

    git(root, "reset", "-q", "--hard", "HEAD")  # back to the deployment before the rebase
    git(root, "clean", "-qfdx")

    merged: list[object] = []
    real = rebase.rebase_files
    monkeypatch.setattr(rebase, "rebase_files", lambda items: merged.extend(items) or real(items))
    code, second = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and second == first
    assert len(merged) == 2  # each file merged again, from its pinned inputs
    assert snapshot(root) == after_first
    assert invoke("check", repo=root).exit_code == 0
