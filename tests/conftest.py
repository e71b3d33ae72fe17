"""Shared fixtures: real deployments built in tmp_path, and the CLI run in-process."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from patchkit.cli import cli

# The real dockerd (a session fixture) for every test that needs a Docker engine.
pytest_plugins = ["tests.dockerd"]

REPO_ROOT = Path(__file__).resolve().parent.parent

BASE = b"import os\n\n\ndef restore(blocks):\n    for b in blocks:\n        copy(b)\n    return len(blocks)\n"
OVERLAY = (
    b"import os\n\n\ndef restore(blocks):\n    wait_for_compute()\n    for b in blocks:\n"
    b"        copy(b)\n    return len(blocks)\n"
)
UPSTREAM_COMMIT = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"


@dataclasses.dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str
    result: Result


Invoke = Callable[..., Run]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty patchkit cache, never the user's."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    return cache


@pytest.fixture
def invoke() -> Invoke:
    """Run the CLI in-process: invoke("check", "--format", "json", repo=path)."""

    def run(*args: str, repo: Path | None = None) -> Run:
        argv = (["--repo", str(repo)] if repo is not None else []) + list(args)
        result = CliRunner().invoke(cli, argv, catch_exceptions=False)
        return Run(result.exit_code, result.stdout, result.stderr, result)

    return run


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    return out.stdout.decode()


@pytest.fixture
def deploy(tmp_path: Path, invoke: Invoke) -> Path:
    """A deployment with one committed overlay, one module, one tuning table and an artifact.

    Built with the CLI, as a user would, and committed to a git repository.
    """
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    with (root / "lockfile.toml").open("a") as f:
        f.write(f'\n[upstreams.vllm]\ngit = "https://github.com/vllm-project/vllm"\ncommit = "{UPSTREAM_COMMIT}"\n')
    assert invoke("lock", repo=root).exit_code == 0

    work = tmp_path / "work"
    work.mkdir()
    (work / "gpu_worker.py").write_bytes(BASE)
    (root / "patches" / "gpu_worker.py").write_bytes(OVERLAY)
    r = invoke(
        "add", str(root / "patches" / "gpu_worker.py"),
        "--target", "/usr/local/lib/python3.12/dist-packages/vllm/v1/kv_offload/cpu/gpu_worker.py",
        "--upstream", "vllm", "--upstream-path", "vllm/v1/kv_offload/cpu/gpu_worker.py",
        "--base", str(work / "gpu_worker.py"),
        "--ref", "vllm-project/vllm#47282", "--ref", "vllm-project/vllm#47291",
        "--reason", "fence CPU->GPU KV restores behind in-flight compute",
        "--name", "kv-restore-fence",
        repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (root / "patches" / "fp8_fnuz.py").write_bytes(b"FP8_MAX = 224.0\n")
    r = invoke(
        "add", str(root / "patches" / "fp8_fnuz.py"),
        "--target", "/usr/local/lib/python3.12/dist-packages/vllm/fp8_fnuz.py",
        repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (root / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,64\n")
    r = invoke("add", str(root / "tuning" / "moe.csv"), "--target", "/opt/tuning/moe.csv", repo=root)
    assert r.exit_code == 0, r.stderr
    (root / "entrypoint.sh").write_bytes(b'#!/bin/sh\nexec vllm serve "$@"\n')
    r = invoke("add", str(root / "entrypoint.sh"), "--target", "/opt/patchkit/entrypoint.sh", repo=root)
    assert r.exit_code == 0, r.stderr
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "deployment")
    return root


# The files of this repository's own deployment (the top level, beside the tool).
SHIPPED_FILES = (
    "lockfile.toml", "SHA256SUMS", "entrypoint.sh", "Caddyfile.example", "Caddyfile.tp1x2.example",
    "deploy.toml", "compose.yaml", "compose.tp1x2.yaml", "guard.json",
)  # fmt: skip


def copy_shipped(root: Path) -> Path:
    """A copy of the shipped deployment at ``root`` (created), to change without touching the repository."""
    root.mkdir(parents=True)
    for name in SHIPPED_FILES:
        shutil.copy2(REPO_ROOT / name, root / name)
    for d in ("patches", "upstream", "tuning"):
        if (REPO_ROOT / d).is_dir():
            shutil.copytree(REPO_ROOT / d, root / d)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (except .git) with its bytes, to prove nothing changed."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and ".git" not in p.relative_to(root).parts
        and p.relative_to(root).as_posix() != ".patchkit/lock"  # the write lock, not content
    }
