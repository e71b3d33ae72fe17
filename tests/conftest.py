"""Shared fixtures: real deployments built in tmp_path, and the CLI run in-process."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from click.testing import CliRunner, Result

from patchkit.cli import cli

# The real dockerd (a session fixture) for every test that needs a Docker engine.
pytest_plugins = ["tests.dockerd"]

REPO_ROOT = Path(__file__).resolve().parent.parent

# The overlay calls a name its import defines, as real overlays do: check notes a new undefined name.
BASE = (
    b"from torch.cuda import synchronize as wait_for_compute\n\n\n"
    b"def restore(blocks):\n    for b in blocks:\n        copy(b)\n    return len(blocks)\n"
)
OVERLAY = (
    b"from torch.cuda import synchronize as wait_for_compute\n\n\n"
    b"def restore(blocks):\n    wait_for_compute()\n    for b in blocks:\n"
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


# The user's own patchkit cache (as their environment names it) and what it held when the session began.
USER_CACHE: dict[str, object] = {}


def listing(path: Path) -> dict[str, tuple[int, int, int]] | None:
    """Every entry under ``path`` with its inode, size and mtime (None: ``path`` does not exist)."""
    if not os.path.lexists(path):
        return None
    out = {}
    for top, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                st = os.lstat(os.path.join(top, name))
            except FileNotFoundError:
                continue
            out[os.path.relpath(os.path.join(top, name), path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def pytest_configure(config: pytest.Config) -> None:
    """One temporary cache for the whole session, subprocesses included: the suite never writes the user's.

    ``PATCHKIT_CACHE`` and ``XDG_CACHE_HOME`` (the fallback patchkit, the Hub
    and pip read) point into it before any fixture or test runs; each test
    still gets its own empty patchkit cache (``_isolated_cache``).
    """
    from patchkit.store.cache import cache_dir

    user = cache_dir(os.environ)
    session = Path(tempfile.mkdtemp(prefix="patchkit-tests-cache-"))
    USER_CACHE.update(path=user, before=listing(user), session=session)
    os.environ["XDG_CACHE_HOME"] = str(session)
    os.environ["PATCHKIT_CACHE"] = str(session / "patchkit")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when the user's own cache changed during it (a test or a fixture wrote there)."""
    if "path" not in USER_CACHE:
        return
    user = Path(str(USER_CACHE["path"]))
    before, after = USER_CACHE["before"], listing(user)
    if before != after:
        old = before if isinstance(before, dict) else {}
        new = after or {}
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        # Under CI nothing else runs patchkit, so a change is the suite's own and fails the run; on a
        # workstation another patchkit may have written it meanwhile, so it is a warning there.
        ci = bool(os.environ.get("CI"))
        session.config.get_terminal_writer().line(
            f"{'FAILED' if ci else 'WARNING'}: the user's patchkit cache {user} changed during the run "
            f"({shown or 'created'}); every test must use the session's temporary cache (another patchkit on this "
            "machine may also have written it)",
            red=True,
        )
        if ci and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    if "session" in USER_CACHE:
        shutil.rmtree(str(USER_CACHE["session"]), ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_internal_error(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any test in which patchkit ended in its internal-error path (exit 4), unless marked ``internal_error``.

    In-process through the one place that produces it (``cli.common.internal_error``), in a
    subprocess through the shared helpers (``tests.internal_errors.check_process``).
    """
    from patchkit.cli import common
    from tests import internal_errors

    start = len(internal_errors.SEEN)
    original = common.internal_error

    def recording(ctx: Any, e: Exception) -> NoReturn:
        internal_errors.record(f"in-process: {type(e).__name__}: {e}")
        original(ctx, e)

    monkeypatch.setattr(common, "internal_error", recording)
    yield
    seen = internal_errors.SEEN[start:]
    del internal_errors.SEEN[start:]
    if seen and request.node.get_closest_marker("internal_error") is None:
        pytest.fail(f"patchkit ended in its internal-error path (exit 4): {'; '.join(seen)}", pytrace=False)


@pytest.fixture
def user_cache() -> Path:
    """The user's own patchkit cache, as their environment named it before the session began."""
    return Path(str(USER_CACHE["path"]))


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
