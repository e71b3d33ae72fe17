"""The pre-commit hooks patchkit ships (``.pre-commit-hooks.yaml``), run by the real ``pre-commit try-repo``.

A deployment repository built with the CLI (the shared ``deploy`` fixture, a
git repository) runs the hooks with ``try-repo``, as a user trying them before
pinning a rev would, from a git repository holding this repository's
``.pre-commit-hooks.yaml`` as committed there (so an uncommitted working tree
cannot change what is tried). The hooks are ``language: system``: they run
the ``patchkit`` on ``PATH`` (this test's venv), so nothing is installed and no
network is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import OVERLAY, REPO_ROOT, git


def hook_repo(tmp_path: Path) -> Path:
    """A git repository with this repository's hooks file, committed."""
    repo = tmp_path / "hooks"
    if not repo.exists():
        repo.mkdir()
        (repo / ".pre-commit-hooks.yaml").write_bytes((REPO_ROOT / ".pre-commit-hooks.yaml").read_bytes())
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "hooks")
    return repo


def try_repo(deploy: Path, hook: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "PRE_COMMIT_COLOR": "never",
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo(tmp_path)), hook, "--all-files"],
        cwd=deploy, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def test_the_hooks_file_declares_both_hooks() -> None:
    hooks = {h["id"]: h for h in yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"patchkit-check", "patchkit-sums"}
    assert hooks["patchkit-check"]["entry"] == "patchkit check"
    assert hooks["patchkit-sums"]["entry"] == "patchkit sums"
    for h in hooks.values():
        assert (h["language"], h["pass_filenames"], h["always_run"]) == ("system", False, True)


def test_check_passes_on_an_exact_repository(deploy: Path, tmp_path: Path) -> None:
    r = try_repo(deploy, "patchkit-check", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "patchkit check" in r.stdout and "Passed" in r.stdout


def test_check_fails_the_commit_and_names_the_drift(deploy: Path, tmp_path: Path) -> None:
    (deploy / "patches" / "gpu_worker.py").write_bytes(OVERLAY.replace(b"wait_for_compute()", b"wait_for_compute(s)"))
    r = try_repo(deploy, "patchkit-check", tmp_path)
    assert r.returncode == 1
    assert "Failed" in r.stdout
    assert "- exit code: 1" in r.stdout
    assert "patches/gpu_worker.py (patch 'kv-restore-fence') does not match its pin" in r.stdout
    assert "check: FAILED" in r.stdout


def test_sums_rewrites_a_stale_file_and_fails_once(deploy: Path, tmp_path: Path) -> None:
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text().replace('name = "deploy"', 'name = "deploy-eu"'))  # a hand edit
    git(deploy, "commit", "-qam", "rename the deployment")
    before = (deploy / "SHA256SUMS").read_text()
    r = try_repo(deploy, "patchkit-sums", tmp_path)
    assert r.returncode == 1
    assert "files were modified by this hook" in r.stdout
    after = (deploy / "SHA256SUMS").read_text()
    assert after != before
    listed = dict(line.split("  ", 1)[::-1] for line in after.splitlines())
    import hashlib

    assert listed["lockfile.toml"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    git(deploy, "commit", "-qam", "sums")
    again = try_repo(deploy, "patchkit-sums", tmp_path)
    assert again.returncode == 0, again.stdout
    assert try_repo(deploy, "patchkit-check", tmp_path).returncode == 0


@pytest.mark.parametrize("hook", ["patchkit-check", "patchkit-sums"])
def test_a_hook_without_patchkit_on_path_says_so(deploy: Path, tmp_path: Path, hook: str) -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PRE_COMMIT_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo(tmp_path)), hook, "--all-files"],
        cwd=deploy, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1
    assert "Executable `patchkit` not found" in r.stdout


def test_the_code_s_own_hooks_run_the_installed_tools_offline() -> None:
    """.pre-commit-config.yaml (for patchkit's code): valid, and only local system hooks, so no download to run it."""
    config = REPO_ROOT / ".pre-commit-config.yaml"
    run = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(config)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    repos = yaml.safe_load(config.read_text())["repos"]
    assert [r["repo"] for r in repos] == ["local"]
    hooks = {h["id"]: h for h in repos[0]["hooks"]}
    assert set(hooks) == {"ruff", "ruff-format", "mypy"}
    assert {h["language"] for h in hooks.values()} == {"system"}
    assert "--check" in hooks["ruff-format"]["entry"]  # reports, never rewrites files under a commit
