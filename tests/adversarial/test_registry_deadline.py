"""A registry that drips: every request ends within its total deadline (connect, headers and body)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.images.errors import RegistryError
from patchkit.images.registry import RegistryClient

MANIFEST = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'


class Dripping:
    """A server on 127.0.0.1 that answers every request one byte at a time, ``interval`` seconds apart."""

    def __init__(self, what: str, interval: float) -> None:
        self.what = what
        self.interval = interval
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(MANIFEST)
        )
        with conn:
            conn.recv(65536)
            try:
                if self.what == "body":
                    conn.sendall(head)
                    drip = MANIFEST
                else:
                    drip = head + MANIFEST
                for i in range(len(drip)):
                    if self.stop.wait(self.interval):
                        return
                    conn.sendall(drip[i : i + 1])
            except OSError:
                return


@pytest.fixture(params=[("headers", 2.0), ("body", 1.0)], ids=["headers-every-2s", "body-every-1s"])
def dripping(request: pytest.FixtureRequest) -> Iterator[Dripping]:
    what, interval = request.param
    server = Dripping(what, interval)
    yield server
    server.close()


@pytest.mark.parametrize("retries", [0, 3])
def test_a_dripping_registry_ends_within_the_deadline(dripping: Dripping, retries: int, tmp_path: Path) -> None:
    deadline = 3.0
    # Each byte comes well within the 30 s read timeout: only the total deadline can end it.
    client = RegistryClient(
        timeout=30, deadline=deadline, retries=retries, backoff=0, docker_config=tmp_path / "none.json"
    )
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        client.resolve(f"127.0.0.1:{dripping.port}/drip/image:tag")
    elapsed = time.monotonic() - started
    assert elapsed < deadline + 1, f"took {elapsed:.1f} s"
    assert caught.value.message == (
        f"127.0.0.1:{dripping.port}/drip/image:tag: no complete answer within 3 s (connect, headers and body "
        "together); the registry is too slow or stalled"
    )


def test_the_cli_reports_a_stalled_registry_as_an_external_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchkit.images import registry

    server = Dripping("headers", 2.0)
    try:
        original = registry.RegistryClient.__init__

        def short(self: RegistryClient, **kwargs: object) -> None:
            kwargs["deadline"] = 2.0
            original(self, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(registry.RegistryClient, "__init__", short)
        from click.testing import CliRunner

        from patchkit.cli import cli

        started = time.monotonic()
        r = CliRunner().invoke(cli, ["image", "resolve", f"127.0.0.1:{server.port}/drip/image:tag"])
        assert time.monotonic() - started < 3
        assert r.exit_code == 3, r.output
        assert "no complete answer within 2 s" in r.stderr
    finally:
        server.close()
