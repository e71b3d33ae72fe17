"""A real git repository standing in for vLLM, for the checks that make a rebase trustworthy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rebase.test_overlays import Upstream


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")
