"""The shipped diff-only patches against the real vLLM wheels from PyPI.

These download the vllm 0.26.0 and 0.27.0 wheels (about 300 MB each) with
pip. Without network access they are skipped with the reason, except in CI
(CI set), where a failed download fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT, Invoke, copy_shipped

from tests.bundle.test_bundle_deploys import assert_unpacked_bundle_deploys

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One patchkit cache for the session, so each wheel is downloaded once."""
    cache = tmp_path_factory.mktemp("wheel-cache")
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if probe.returncode != 0 and not os.environ.get("CI"):
        pytest.skip(f"the package index is not reachable: {probe.stderr.strip().splitlines()[-1:]}")
    yield cache


@pytest.fixture
def shipped(tmp_path: Path, wheel_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHKIT_CACHE", str(wheel_cache))
    return copy_shipped(tmp_path / "shipped")


def test_shipped_patches_materialize_from_the_pinned_wheel(invoke: Invoke, shipped: Path, tmp_path: Path) -> None:
    r = invoke("materialize", "--out", str(tmp_path / "build"), "--format", "json", repo=shipped)
    assert r.exit_code == 0, r.stderr
    results = {e["name"]: e for e in json.loads(r.stdout)}
    assert {n: e["ok"] for n, e in results.items()} == {
        "kv-restore-fence": True, "dsv4-indexer-fnuz": True, "aiter-dsv4-blockscale-gemm": True,
        "runtime-guard": True, "aiter-merge-dir": True, "aiter-private-merge": True,
    }  # fmt: skip
    fence = tmp_path / "build" / results["kv-restore-fence"]["target"].lstrip("/")
    text = fence.read_text()
    assert "stream.wait_stream(current_platform.current_stream())" in text
    assert "if self.gpu_to_cpu:\n            # wait for model computation" not in text
    compile(text, str(fence), "exec")  # the file that runs is valid Python
    fnuz = (tmp_path / "build" / results["dsv4-indexer-fnuz"]["target"].lstrip("/")).read_text()
    assert "tl.float8e4b8 if USE_FNUZ else tl.float8e4nv" in fnuz
    r = invoke("check", repo=shipped)
    assert r.exit_code == 0 and "3 diffs verified" in r.stdout, r.stdout


def test_the_shipped_bundle_deploys_as_it_is(invoke: Invoke, shipped: Path, tmp_path: Path) -> None:
    """Unpacked, the bundle holds every file its compose files mount: the materialized patches, the Caddyfile."""
    r = invoke("bundle", "-o", str(tmp_path / "deploy.tar.gz"), repo=shipped)
    assert r.exit_code == 0, r.stderr
    out = assert_unpacked_bundle_deploys(tmp_path / "deploy.tar.gz", tmp_path)
    assert (out / "Caddyfile").read_bytes() == (REPO_ROOT / "Caddyfile.example").read_bytes()


def test_worked_example_rebase_onto_0_27_0(invoke: Invoke, shipped: Path, tmp_path: Path) -> None:
    """docs/rebase-example.md, reproduced: the bump from the 0.26.0 to the 0.27.0 wheel."""
    summary = tmp_path / "summary.md"
    r = invoke(
        "rebase", "--upstream", "vllm-release", "--source", "wheel:vllm==0.27.0", "--summary", str(summary),
        "--format", "json", repo=shipped,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {p["name"]: p["outcome"] for p in doc["patches"]} == {
        "kv-restore-fence": "partially-upstreamed",
        "dsv4-indexer-fnuz": "unchanged",
    }
    (fence,) = [p for p in doc["patches"] if p["name"] == "kv-restore-fence"]
    assert fence["hunks_upstreamed"] == ["@@ -41,10 +41,10 @@"]
    diff = (shipped / "upstream" / "kv-restore-fence.diff").read_text()
    assert "is_rocm()" not in diff and "stream.wait_stream(current_platform.current_stream())" in diff
    assert invoke("check", repo=shipped).exit_code == 0
    recorded = (REPO_ROOT / "docs" / "rebase-example.md").read_text()
    assert summary.read_text() in recorded, "docs/rebase-example.md no longer shows what the rebase prints"
    assert diff in recorded
