"""A rebase made again reuses the merges and diffs of the first run, and writes the same repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Invoke, git, snapshot
from test_rebase import WORKER, Upstream, make_deploy, rebase_json

from patchkit import rebase


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


FENCED = WORKER.replace(b"        for b in blocks:\n", b"        fence()\n        for b in blocks:\n")


def test_the_same_rebase_again_reads_its_merges_back_and_writes_the_same_files(
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
    memo = Path(os.environ["PATCHKIT_CACHE"]) / "merges"
    assert sorted(p.name.split("-")[0] for p in memo.iterdir()) == ["diffs", "merges"]

    git(root, "reset", "-q", "--hard", "HEAD")  # back to the deployment before the rebase
    git(root, "clean", "-qfdx")

    def no_work(item: object) -> object:
        raise AssertionError("merged or diffed again instead of reusing the first run's result")

    monkeypatch.setattr(rebase, "_merge", no_work)
    monkeypatch.setattr(rebase, "_diff", no_work)
    code, second = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and second == first
    assert snapshot(root) == after_first
    assert invoke("check", repo=root).exit_code == 0
