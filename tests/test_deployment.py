"""The deployment this repository ships: it checks clean, and its runtime files behave."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT, Invoke, copy_shipped

from patchkit.lockfile.reader import loads


def test_shipped_deployment_checks_clean(invoke: Invoke) -> None:
    r = invoke("check", repo=REPO_ROOT)
    assert r.exit_code == 0, r.stdout + r.stderr
    sums = subprocess.run(
        ["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=REPO_ROOT, capture_output=True, check=False
    )
    assert sums.returncode == 0, sums.stdout


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """A copy of the shipped deployment, to damage."""
    return copy_shipped(tmp_path / "shipped")


def test_one_changed_byte_in_any_pinned_file_fails(invoke: Invoke, shipped: Path) -> None:
    lock = loads((shipped / "lockfile.toml").read_text())
    pinned = [str(rel) for _, rel, _ in lock.files()]
    assert pinned, "the shipped deployment pins files"
    for rel in pinned:
        path = shipped / rel
        original = path.read_bytes()
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 0x20]))
        r = invoke("check", repo=shipped)
        assert r.exit_code == 1, rel
        assert rel in r.stdout and "fix: if the change is intended: patchkit lock" in r.stdout
        path.write_bytes(original)
    assert invoke("check", repo=shipped).exit_code == 0


def test_compose_agrees_with_the_lockfile() -> None:
    import yaml

    lock = loads((REPO_ROOT / "lockfile.toml").read_text())
    for name in ("compose.yaml", "compose.tp1x2.yaml"):
        doc = yaml.safe_load((REPO_ROOT / name).read_text())
        images = {svc["image"] for svc in doc["services"].values()}
        assert images == {img.reference for img in lock.images}, name
        assert lock.model is not None
        org, model = lock.model.repo.split("/")
        inference = [svc for svc in doc["services"].values() if "vllm" in svc["image"]]
        assert inference
        for svc in inference:
            assert f"models--{org}--{model}/snapshots/{lock.model.revision}" in svc["command"][0]
            assert all(str(p).startswith("127.0.0.1:") for p in svc["ports"]), "inference on loopback only"
            for mount in svc["volumes"]:
                if str(mount).startswith("./"):
                    assert str(mount).endswith(":ro"), f"mount not read-only: {mount}"
            targets = {str(m).split(":")[1] for m in svc["volumes"]}
            for p in lock.patches:
                assert str(p.target) in targets, (name, p.name)


# --------------------------------------------------------------------------- entrypoint


def _entrypoint_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text('#!/bin/sh\necho "vllm $*"\n')
    fake.chmod(0o755)
    shm = tmp_path / "shm"
    shm.mkdir()
    transformers = tmp_path / "transformers"
    transformers.mkdir()
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PATCHKIT_SHM_DIR": str(shm),
        "PATCHKIT_TRANSFORMERS_DIR": str(transformers),
        "PATCHKIT_PYTHON": shutil.which("python3") or "python3",
        # The runtime guard is tested in tests/guard/ and tests/images/test_guard_container.py.
        "PATCHKIT_GUARD": "off",
    }


def test_entrypoint_syntax() -> None:
    subprocess.run(["sh", "-n", str(REPO_ROOT / "entrypoint.sh")], check=True)


def test_entrypoint_cleans_stale_maps_runs_transformers_then_serves(tmp_path: Path) -> None:
    env = _entrypoint_env(tmp_path)
    shm, transformers = Path(env["PATCHKIT_SHM_DIR"]), Path(env["PATCHKIT_TRANSFORMERS_DIR"])
    (shm / "vllm_offload_0.mmap").write_bytes(b"x")
    (shm / "vllm_offload_rank1.mmap").write_bytes(b"x")
    (shm / "other.mmap").write_bytes(b"keep")
    log = tmp_path / "order.log"
    for name in ("20-second.py", "10-first.py"):
        (transformers / name).write_text(f"open({str(log)!r}, 'a').write({name!r} + '\\n')\n")
    r = subprocess.run(
        ["sh", str(REPO_ROOT / "entrypoint.sh"), "/models/x", "--port=8000"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == "vllm serve /models/x --port=8000\n"
    assert sorted(p.name for p in shm.iterdir()) == ["other.mmap"]
    assert log.read_text() == "10-first.py\n20-second.py\n"


def test_entrypoint_refuses_to_start_when_a_transformer_fails(tmp_path: Path) -> None:
    env = _entrypoint_env(tmp_path)
    (Path(env["PATCHKIT_TRANSFORMERS_DIR"]) / "10-fails.py").write_text("raise SystemExit('block not found')\n")
    r = subprocess.run(["sh", str(REPO_ROOT / "entrypoint.sh")], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 1
    assert "refusing to start" in r.stderr
    assert "vllm serve" not in r.stdout


# --------------------------------------------------------------------------- Caddyfile


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def backend() -> Iterator[int]:
    """A stand-in inference service on 127.0.0.1 that answers 200 with the path it got."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"backend {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET  # noqa: N815 - the name http.server dispatches to

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


needs_caddy = pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy not installed (.ci/run installs it)")


@needs_caddy
def test_caddyfile_example_validates(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    r = subprocess.run(
        ["caddy", "validate", "--adapter", "caddyfile", "--config", str(REPO_ROOT / "Caddyfile.example")],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback URL built by the test
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@needs_caddy
@pytest.mark.parametrize("allow_loopback", [True, False])
def test_caddyfile_example_filters_paths_and_clients(tmp_path: Path, backend: int, allow_loopback: bool) -> None:
    """The shipped proxy rules, served for real by caddy on loopback (plain HTTP for the test)."""
    port = _free_port()
    config = (REPO_ROOT / "Caddyfile.example").read_text()
    config = config.replace("llm.example.com {", f"http://127.0.0.1:{port} {{")
    config = config.replace("reverse_proxy @api vllm:8000", f"reverse_proxy @api 127.0.0.1:{backend}")
    if allow_loopback:
        config = config.replace("not remote_ip 192.0.2.0/24", "not remote_ip 127.0.0.1/32 192.0.2.0/24")
    (tmp_path / "Caddyfile").write_text(config)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        ["caddy", "run", "--adapter", "caddyfile", "--config", str(tmp_path / "Caddyfile")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        proc.stderr.read().decode() if proc.stderr else "caddy did not start"
                    ) from None
                time.sleep(0.1)
        base = f"http://127.0.0.1:{port}"
        if allow_loopback:
            assert _get(f"{base}/v1/models") == (200, "backend /v1/models")
            assert _get(f"{base}/v1/chat/completions") == (200, "backend /v1/chat/completions")
            assert _get(f"{base}/health") == (200, "backend /health")
            assert _get(f"{base}/metrics")[0] == 403
            assert _get(f"{base}/v1/models/../../metrics")[0] in (403, 404)
            assert _get(f"{base}/")[0] == 403
        else:
            for path in ("/v1/models", "/health", "/metrics"):
                assert _get(f"{base}{path}")[0] == 403, path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
