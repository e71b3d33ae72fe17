"""The bounded-HTTP helper against real servers on 127.0.0.1: retries, Retry-After, deadlines, byte caps."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from patchkit.net.transport import MAX_REDIRECTS, Allowance, Bounds, Http, HttpError, origin


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunked: bool = False  # no Content-Length: the body's size is known only by reading it


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        del request, client_address  # a client that gave up (a timeout under test) resets its connection


class Scripted:
    """An HTTP/1.1 server answering every request with the next scripted answer (the last one repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.seen: list[str] = []
        self.authorization: list[str | None] = []  # the Authorization header of each request
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, method: str) -> Answer:
        self.seen.append(method)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                owner.authorization.append(self.headers.get("Authorization"))
                answer = owner._next(self.command)
                time.sleep(answer.delay)
                with contextlib.suppress(OSError):
                    self.send_response(answer.status)
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    if answer.chunked:
                        self.send_header("Connection", "close")
                        self.end_headers()
                        self.wfile.write(answer.body)
                        self.close_connection = True
                    else:
                        self.send_header("Content-Length", str(len(answer.body)))
                        self.end_headers()
                        self.wfile.write(answer.body)

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def do_PUT(self) -> None:
                self._serve()

            def do_PATCH(self) -> None:
                self._serve()

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        return Handler


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Scripted] = []

    def start(*answers: Answer) -> Scripted:
        servers.append(Scripted(*answers))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def http(**kwargs: Any) -> Http:
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment for 127.0.0.1
    bounds = {"timeout": 5.0, "deadline": 10.0, "retries": 2, "backoff": 0.0, **kwargs}
    return Http(Bounds(**bounds), session)


def test_a_503_then_200_is_retried(serve: Any) -> None:
    server = serve(Answer(503, b"busy"), Answer(200, b"fine"))
    resp, attempts = http().request("GET", server.url + "/x")
    assert (resp.status_code, attempts, server.seen) == (200, 2, ["GET", "GET"])
    assert http().read(resp, 1 << 20) == b"fine"


def test_persistent_5xx_returns_the_last_answer_with_the_count(serve: Any) -> None:
    server = serve(Answer(500, b"down"))
    resp, attempts = http(retries=2).request("GET", server.url + "/x")
    assert (resp.status_code, attempts, len(server.seen)) == (500, 3, 3)
    assert resp.content == b"down"  # the caller reports the server's own words


def test_retry_after_is_honoured_within_the_deadline(serve: Any) -> None:
    server = serve(Answer(503, headers={"Retry-After": "1"}), Answer(200, b"fine"))
    started = time.monotonic()
    resp, attempts = http(deadline=5.0).request("GET", server.url + "/x")
    assert (resp.status_code, attempts) == (200, 2)
    assert time.monotonic() - started >= 1.0


def test_a_retry_after_past_the_deadline_is_not_waited_for(serve: Any) -> None:
    server = serve(Answer(503, headers={"Retry-After": "30"}), Answer(200))
    started = time.monotonic()
    resp, attempts = http(deadline=2.0).request("GET", server.url + "/x")
    assert (resp.status_code, attempts, len(server.seen)) == (503, 1, 1)
    assert time.monotonic() - started < 1.0
    assert resp.headers["Retry-After"] == "30"


def test_a_429_is_waited_out_only_when_the_adapter_wants_it(serve: Any) -> None:
    server = serve(Answer(429, headers={"Retry-After": "0"}), Answer(200))
    resp, _ = http().request("GET", server.url + "/x")
    assert resp.status_code == 200 and len(server.seen) == 2
    server = serve(Answer(429, headers={"Retry-After": "0"}), Answer(200))
    resp, _ = http(wait_on_429=False).request("GET", server.url + "/x")
    assert resp.status_code == 429 and len(server.seen) == 1
    server = serve(Answer(429), Answer(200))  # no Retry-After: a rate limit, not a 'come back soon'
    resp, _ = http().request("GET", server.url + "/x")
    assert resp.status_code == 429 and len(server.seen) == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_an_upload_is_not_blindly_retried(serve: Any, method: str) -> None:
    server = serve(Answer(503, b"busy"), Answer(201))
    resp, attempts = http(retries=3).request(method, server.url + "/upload", data=b"layer bytes")
    assert (resp.status_code, attempts, server.seen) == (503, 1, [method])


def test_an_upload_that_timed_out_is_not_sent_again(serve: Any) -> None:
    server = serve(Answer(201, delay=1.0))
    with pytest.raises(HttpError) as e:
        http(timeout=0.3, retries=3).request("PUT", server.url + "/upload", data=b"x")
    assert (e.value.reason, e.value.attempts, server.seen) == ("timed out", 1, ["PUT"])


def test_a_get_that_timed_out_is_sent_again_unless_reads_are_not_retried(serve: Any) -> None:
    server = serve(Answer(200, delay=1.0))
    with pytest.raises(HttpError) as e:
        http(timeout=0.3, retries=1).request("GET", server.url + "/x")
    assert (e.value.reason, e.value.attempts) == ("timed out", 2)
    with pytest.raises(HttpError) as e:
        http(timeout=0.3, retries=1, retry_reads=False).request("GET", server.url + "/x")
    assert (e.value.reason, e.value.attempts) == ("timed out", 1)


def test_a_connection_refused_is_retried_for_any_method_then_described() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with pytest.raises(HttpError) as e:
        http(retries=2).request("POST", f"http://127.0.0.1:{port}/x", data=b"x")
    assert e.value.attempts == 3 and e.value.late is None
    assert e.value.reason.startswith("cannot connect (") and "refused" in e.value.reason.lower()


class Trickle:
    """A server sending its answer one byte every ``interval`` seconds: no read ever times out."""

    def __init__(self, interval: float, head_first: bool) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.interval = interval
        self.head_first = head_first
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while not self.stop.is_set():
                conn, _ = self.sock.accept()
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        body = b"x" * 100
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            drip = body if self.head_first else head + body
            if self.head_first:
                conn.sendall(head)
            for i in range(len(drip)):
                if self.stop.wait(self.interval):
                    return
                conn.sendall(drip[i : i + 1])

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("head_first", [False, True], ids=["headers-trickle", "body-trickles"])
def test_a_trickling_server_is_cut_at_the_deadline(head_first: bool) -> None:
    server = Trickle(0.5, head_first)
    try:
        client = http(timeout=30.0, deadline=2.0, retries=3)
        started = time.monotonic()
        with pytest.raises(HttpError) as e:
            resp, _ = client.request("GET", server.url + "/x")
            client.read(resp, 1 << 20)
        assert time.monotonic() - started < 3.0
        assert e.value.late == 2.0
    finally:
        server.close()


def test_an_over_cap_body_is_refused_in_one_line(serve: Any) -> None:
    server = serve(Answer(200, b"x" * 5000))
    client = http()
    resp, _ = client.request("GET", server.url + "/big")
    with pytest.raises(HttpError) as e:
        client.read(resp, 4096)
    assert e.value.reason == "5000 bytes is over the 4096 bytes limit; refusing it"
    # Without a Content-Length the count while reading refuses it.
    server = serve(Answer(200, b"x" * (3 << 20), chunked=True))
    resp, _ = client.request("GET", server.url + "/big")
    with pytest.raises(HttpError) as e:
        client.read(resp, 2 << 20)
    assert e.value.reason == "over the 2 MiB limit; refusing it"


def test_a_handed_in_session_is_adopted_and_left_open(serve: Any) -> None:
    server = serve(Answer(502), Answer(200))
    session = requests.Session()
    session.trust_env = False
    helper = Http(Bounds(timeout=5.0, deadline=10.0, retries=1, backoff=0.0), session)
    resp, attempts = helper.request("GET", server.url + "/x")
    assert (resp.status_code, attempts) == (200, 2)
    helper.close()
    assert session.get(server.url + "/x", timeout=5).status_code == 200  # still usable: the caller owns it


class Steady:
    """A server sending a ``total``-byte body (declared) in ``piece``-byte pieces every ``interval`` seconds."""

    def __init__(self, total: int, piece: int, interval: float) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.total, self.piece, self.interval = total, piece, interval
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.sock.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.total)
                sent = 0
                while sent < self.total and not self.stop.wait(self.interval):
                    conn.sendall(b"x" * self.piece)
                    sent += self.piece

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize(
    ("rate", "cap", "ends"),
    [(64 << 10, 60.0, None), (1 << 30, 60.0, 1.0), (1024.0, 2.0, 2.0)],
    ids=["earns-its-time", "too-slow", "capped"],
)
def test_a_body_earns_time_by_what_arrives_up_to_the_cap(rate: float, cap: float, ends: float | None) -> None:
    # 16 pieces of 64 KiB, one every 0.2 s: 3.2 s, well past the 1 s deadline. At one second per 64 KiB
    # received it earns its time; at one second per GiB it does not; at one per KiB the cap ends it.
    server = Steady(16 * (64 << 10), 64 << 10, 0.2)
    try:
        client = http(timeout=30.0, deadline=1.0, retries=0)
        started = time.monotonic()
        resp, _ = client.request("GET", server.url + "/blob", allowance=Allowance(rate, cap))
        if ends is None:
            assert len(client.read(resp, 1 << 20)) == 1 << 20
            return
        with pytest.raises(HttpError) as e:
            client.read(resp, 1 << 20)
        assert ends - 0.1 < time.monotonic() - started < ends + 1.0
        assert e.value.late is not None and round(e.value.late) == ends
    finally:
        server.close()


def test_a_redirect_to_another_origin_carries_no_credentials(serve: Any) -> None:
    elsewhere = serve(Answer(200, b"blob"))
    home = serve(
        Answer(307, b"", {"Location": "/same-origin"}),
        Answer(307, b"", {"Location": elsewhere.url + "/storage"}),
    )
    client = http()
    resp, _ = client.request("GET", home.url + "/blob", headers={"Authorization": "Bearer secret"})
    assert client.read(resp, 100) == b"blob"
    assert home.authorization == ["Bearer secret", "Bearer secret"]  # the same origin keeps them
    assert elsewhere.authorization == [None]
    resp, _ = client.request("GET", home.url + "/blob", auth=("alice", "password"))  # requests' auth= too
    assert client.read(resp, 100) == b"blob" and elsewhere.authorization == [None, None]


def test_redirects_are_bounded_and_may_be_declined(serve: Any) -> None:
    loop = serve(Answer(302, b"", {"Location": "/again"}))
    client = http()
    with pytest.raises(HttpError) as e:
        client.request("GET", loop.url + "/x")
    assert e.value.reason == f"more than {MAX_REDIRECTS} redirects"
    resp, _ = client.request("GET", loop.url + "/x", allow_redirects=False)
    assert resp.status_code == 302
    resp.close()


def test_an_origin_is_scheme_host_and_port_with_the_default_port_made_explicit() -> None:
    assert (
        origin("https://Registry.Example/v2/")
        == origin("https://registry.example:443/x")
        == (
            "https",
            "registry.example",
            443,
        )
    )
    assert origin("http://registry.example/") != origin("https://registry.example/")
    assert origin("http://127.0.0.1:5000/") != origin("http://127.0.0.1:5001/")
    assert origin("http://127.0.0.1:notaport/") != origin("http://127.0.0.1/")
