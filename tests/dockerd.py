"""A real dockerd for the tests that need a Docker engine, started once per session.

Debian's ``dockerd`` runs as root with vfs, no iptables and no bridge, on a
socket, data root and exec root of its own below the session's temporary
directory; the host's ``/etc/docker/daemon.json`` is never read. Fixtures
(registered for every test by ``tests/conftest.py``):

- ``dockerd`` -> ``Dockerd``: ``.url`` (``unix://...``) for patchkit's
  ``DockerEngine`` and the SDK, ``.client`` (a ``docker.DockerClient`` to look
  behind patchkit's back), ``.root`` and the ``.argv`` it was started with.
- ``engine`` -> patchkit's ``DockerEngine`` on it.

A test skips only where dockerd cannot start (with dockerd's own reason) or
the tests do not run as root; a missing dockerd fails in CI (``CI`` set).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from patchkit.images.engine import DockerEngine

START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


@dataclass
class Dockerd:
    """A running dockerd on a private socket, and an SDK client to look behind patchkit's back."""

    url: str
    root: Path
    client: Any  # docker.DockerClient (the SDK is untyped)
    argv: list[str]


def _ping(sock: Path) -> bool:
    """True when the engine on ``sock`` answers ``GET /_ping`` with 200."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status = s.recv(64).split(b"\r\n", 1)[0]
    except OSError:
        return False
    return status.split()[1:2] == [b"200"]


def _dockerd_reason(log: str) -> str:
    """The line of dockerd's log that says why it stopped (its ``msg``), or its last line."""
    lines = [line for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if "level=fatal" in line or "failed to start daemon" in line or "level=error" in line:
            m = re.search(r'msg="((?:[^"\\]|\\.)*)"', line)
            return m.group(1) if m else line.strip()
    return lines[-1].strip() if lines else "dockerd exited without a word"


def _unmount_below(root: Path) -> None:
    """Lazily unmount what a killed dockerd left mounted below ``root`` (a clean stop leaves nothing)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(f"{root}/"):
            mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _stop(proc: subprocess.Popen[bytes], exec_root: Path) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT; a killed dockerd's own containerd is stopped by its pid."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        else:
            return
    pidfile = exec_root / "containerd" / "containerd.pid"
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dockerd]:
    """dockerd as root with vfs, no iptables and no bridge, on a socket, data root and exec root of its own."""
    binary = shutil.which("dockerd")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("dockerd is not installed: .ci/run must install Debian's docker.io")
        pytest.skip("dockerd is not installed (Debian package docker.io)")
    if os.geteuid() != 0:
        pytest.skip(f"dockerd needs root; the tests run as uid {os.geteuid()}")
    root = tmp_path_factory.mktemp("dockerd")
    sock, data, exec_root = root / "docker.sock", root / "data", root / "exec"
    (root / "daemon.json").write_text("{}\n")  # never the host's /etc/docker/daemon.json
    argv = [
        binary,
        "--config-file", str(root / "daemon.json"),
        "--storage-driver=vfs",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--bridge=none",
        "--host", f"unix://{sock}",
        "--data-root", str(data),
        "--exec-root", str(exec_root),
        "--pidfile", str(root / "docker.pid"),
    ]  # fmt: skip
    log_path = root / "dockerd.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = None
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(sock):
            if proc.poll() is not None:
                pytest.skip(f"dockerd cannot start here: {_dockerd_reason(log_path.read_text(errors='replace'))}")
            if time.monotonic() > deadline:
                reason = _dockerd_reason(log_path.read_text(errors="replace"))
                pytest.skip(f"dockerd did not answer within {START_TIMEOUT:g} s; its log ends: {reason}")
            time.sleep(0.05)
        client = docker.DockerClient(base_url=f"unix://{sock}", timeout=30)
        yield Dockerd(f"unix://{sock}", root, client, argv)
    finally:
        if client is not None:
            client.close()
        _stop(proc, exec_root)
        _unmount_below(root)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def engine(dockerd: Dockerd) -> Iterator[DockerEngine]:
    with DockerEngine(base_url=dockerd.url, timeout=30) as e:
        yield e


def leftover_containers(dockerd: Dockerd) -> list[Any]:
    return list(dockerd.client.containers.list(all=True))
