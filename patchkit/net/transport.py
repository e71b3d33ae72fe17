"""Bounded HTTP: the one place a requests session gets its timeouts, its total deadline and its retries.

The registry client (patchkit.images.registry) and the GitHub adapter
(patchkit.net.github) talk HTTP through ``Http``:

- **Timeouts**: ``Bounds.timeout`` bounds each connect and each read.
- **A total deadline** per request (connect, headers, body and retries
  together). Per-read timeouts do not bound a request: a server that sends
  one byte every two seconds never lets a read time out. So every
  connection hands its socket to the deadline of the request using it, and
  when the deadline passes a watchdog shuts those sockets down, which ends
  any blocked read at once. A large body may earn more time (an
  ``Allowance``): each byte that arrives moves the deadline later, at a
  minimum rate, never past a cap. The time is earned by what arrives, never
  by what the server says it will send, so a server that declares a huge
  body and drips it ends at the first deadline, and one that streams
  forever ends at the cap.
- **Redirects** are followed by ``Http`` itself (a few, within the same
  deadline), and a hop to another origin (scheme, host and port) carries no
  ``Authorization`` and no ``auth``: credentials go only to the host they
  were given for.
- **Retries** by urllib3's ``Retry``, mounted on the session's adapters:
  a connection that could not be made is tried again whatever the method
  (the server never saw the request); a timeout, a dropped connection before
  the answer, or a 5xx is tried again for ``GET`` and ``HEAD`` only, never
  for an upload (``POST``, ``PUT``, ``PATCH``), whose repetition could
  change what the server holds. A ``Retry-After`` (on a 503, or a 429 where
  the adapter wants it) is waited out. Exponential backoff between tries.
  No retry waits past the deadline: when the wait would not fit, the last
  answer (or error) is what the caller gets.
- **A byte cap** on bodies read whole (``read``): ``Content-Length`` checked
  before reading, the count while reading.

Failures are ``HttpError`` with a reason in words meant to follow the
adapter's "<what was asked>: "; each adapter raises its own error from it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypedDict, Unpack
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.exceptions import InvalidHeader, MaxRetryError, NewConnectionError, ResponseError
from urllib3.util.retry import Retry

if TYPE_CHECKING:
    from collections.abc import Mapping

    from urllib3.connectionpool import ConnectionPool
    from urllib3.response import BaseHTTPResponse

#: Statuses after which an idempotent request is sent again: the server failed, not the request.
RETRY_STATUSES = frozenset(range(500, 600))
#: Methods sent again after the server may have seen them (a timeout, a dropped answer, a 5xx).
IDEMPOTENT = frozenset({"GET", "HEAD"})
#: Answers whose ``Location`` ``Http`` follows (itself, so that it decides what each hop carries).
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Redirects followed per request; one more is an error.
MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Bounds:
    """How long and how often one request may try.

    ``timeout``: seconds for each connect and each read. ``deadline``: seconds
    for the whole request, retries and body included (``Http.request`` may
    extend it per request). ``retries``: how many times a request is sent
    again; ``backoff``: the base of the exponential wait between tries.
    ``retry_reads``: whether a ``GET`` that timed out or lost its connection
    before the answer is sent again. ``wait_on_429``: whether a 429 with a
    ``Retry-After`` is waited out and sent again (an adapter that reports
    rate limits to its user says no).
    """

    timeout: float
    deadline: float
    retries: int = 3
    backoff: float = 0.5
    retry_reads: bool = True
    wait_on_429: bool = True


@dataclass(frozen=True)
class Allowance:
    """More time for a long body, earned by the bytes that arrive.

    Every ``rate`` bytes received move the request's deadline one second
    later, never past ``cap`` seconds after the request began. A body that
    arrives at ``rate`` or faster never meets the deadline until the cap; a
    slower one meets it once the time spent exceeds the first deadline plus
    what its bytes earned (an average-throughput rule), whatever size the
    server declared.
    """

    rate: float
    cap: float


class HttpError(Exception):
    """A request that failed: ``reason`` in words, how many times it was sent, and whether the deadline ended it.

    ``late`` is the deadline in seconds when it was the deadline that ended
    the request (the reason then matters less than the time), else None.
    ``cause`` is the requests exception, if there was one.
    """

    def __init__(
        self, reason: str, *, cause: BaseException | None = None, attempts: int = 1, late: float | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cause = cause
        self.attempts = attempts
        self.late = late


class TooLong(HttpError):
    """A body longer than the caller's limit (its ``Content-Length`` said so, or the count while reading)."""


# --- the total deadline ----------------------------------------------------------------------------


class Deadline:
    """The total time one request may take (connect, headers and body, retries included).

    ``seconds`` is the time allowed so far: ``base``, plus what the bytes
    received earned under ``allowance`` (see ``credit``). The watchdog
    fires at the deadline as it was when armed, and arms itself again if
    bytes moved it later since.
    """

    def __init__(self, seconds: float, allowance: Allowance | None = None) -> None:
        self.base = seconds
        self.seconds = seconds
        self.allowance = allowance
        self.received = 0
        self.started = time.monotonic()
        self.at = self.started + seconds
        self.expired = False
        self._ended: float | None = None
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._timer = self._arm(seconds)

    def _arm(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self._fire)
        timer.daemon = True
        timer.start()
        return timer

    def left(self) -> float:
        """Seconds until the deadline (negative once past)."""
        return self.at - time.monotonic()

    def passed(self) -> bool:
        """Whether the deadline has come (the watchdog may not have run yet: a read timed out at it first)."""
        now = self._ended if self._ended is not None else time.monotonic()
        return self.expired or now >= self.at

    def remaining(self) -> float:
        """Seconds left, at least a little (a timeout of 0 would mean 'no timeout' to some callers)."""
        return max(0.05, self.left())

    def credit(self, nbytes: int) -> None:
        """``nbytes`` more of the body arrived: with an allowance, the deadline moves later by what they earn."""
        with self._lock:
            self.received += nbytes
            if self.allowance is None or self.expired:
                return
            cap = max(self.base, self.allowance.cap)
            self.seconds = min(self.base + self.received / self.allowance.rate, cap)
            self.at = self.started + self.seconds

    def watch(self, sock: socket.socket | None) -> None:
        """Shut ``sock`` down when the deadline passes (at once if it has)."""
        if sock is None:
            return
        with self._lock:
            if self.expired:
                _shut(sock)
            else:
                self._sockets.add(sock)

    def forget(self) -> None:
        """The response is closed: its sockets may go back to the pool, never to be shut by this deadline."""
        with self._lock:
            self._sockets.clear()

    def cancel(self) -> None:
        """The request is over: stop the watchdog."""
        with self._lock:
            if self._ended is None:
                self._ended = time.monotonic()
            self._timer.cancel()
        self.forget()

    def _fire(self) -> None:
        with self._lock:
            if self._ended is not None:
                return
            left = self.at - time.monotonic()
            if left > 0:  # bytes arrived and earned more time since the watchdog was armed
                self._timer = self._arm(left)
                return
            self.expired = True
            for sock in list(self._sockets):
                _shut(sock)
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class _Call:
    """The request this thread is sending: its deadline, and how many times it has been sent."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.attempts = 1


_active = threading.local()


def _current() -> _Call | None:
    call: _Call | None = getattr(_active, "call", None)
    return call


def _watch_current(sock: socket.socket | None) -> None:
    call = _current()
    if call is not None:
        call.deadline.watch(sock)


class SendOptions(TypedDict, total=False):
    """What each hop of a request passes on to requests besides its method and URL."""

    headers: Mapping[str, str] | None
    auth: tuple[str, str] | None
    data: bytes | None


class RequestOptions(SendOptions, total=False):
    """A request's options: each hop's, and whether to follow redirects (by default it does)."""

    allow_redirects: bool


class _WatchedHTTPConnection(urllib3.connection.HTTPConnection):
    """A connection that hands its socket to the deadline of the request using it."""

    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)  # a kept-alive connection, reused
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)
        super().request(*args, **kwargs)


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


# --- retries --------------------------------------------------------------------------------------


class _DeadlineRetry(Retry):
    """urllib3's ``Retry`` that never waits past the current request's deadline, and counts the tries.

    When the deadline has passed, or the wait before the next try (the
    backoff, or the answer's ``Retry-After``) would not end before it, the
    retry is given up: urllib3 then returns the last answer (or raises the
    last error), and the caller reports that.
    """

    RETRY_AFTER_STATUS_CODES = frozenset({429, 503})

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> _DeadlineRetry:
        new = super().increment(method, url, response, error, _pool, _stacktrace)
        call = _current()
        if call is None:
            return new
        wait = new.get_retry_after(response) if response is not None else None
        if wait is None:
            wait = new.get_backoff_time()
        if call.deadline.passed() or wait >= call.deadline.left():
            # urllib3 raises it so too, with the pool it was given (None only outside a pool).
            raise MaxRetryError(_pool, url, error or ResponseError("no time left for another try"))  # type: ignore[arg-type]
        call.attempts = len(new.history) + 1
        return new

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        """The answer's ``Retry-After`` in seconds; None when it has none or one that is not a time."""
        try:
            return super().get_retry_after(response)
        except InvalidHeader:
            return None


class _NoRateLimitRetry(_DeadlineRetry):
    """As ``_DeadlineRetry``, but a 429 is the caller's to report, never waited out."""

    RETRY_AFTER_STATUS_CODES = frozenset({503})


def retry_policy(bounds: Bounds) -> Retry:
    """The urllib3 ``Retry`` for ``bounds`` (what ``Http`` mounts on its session's adapters)."""
    kind = _DeadlineRetry if bounds.wait_on_429 else _NoRateLimitRetry
    n = max(0, bounds.retries)
    return kind(
        total=n,
        connect=n,
        read=n if bounds.retry_reads else 0,
        status=n,
        other=0,
        redirect=False,
        allowed_methods=IDEMPOTENT,
        status_forcelist=RETRY_STATUSES,
        backoff_factor=bounds.backoff,
        raise_on_status=False,  # the last answer goes to the caller, which reports it in its own words
        respect_retry_after_header=True,
    )


def adopt(session: requests.Session, retry: Retry) -> None:
    """Make ``session``'s adapters retry by ``retry`` and report every socket to the current request's deadline.

    A session handed in by a caller (with adapters of its own, e.g. one that
    counts requests) is adopted in place; a session shared by several
    clients retries by the policy of the last one to adopt it.
    """
    for prefix in ("http://", "https://"):
        adapter = session.get_adapter(prefix)
        if not isinstance(adapter, HTTPAdapter):
            continue
        adapter.max_retries = retry
        manager = adapter.poolmanager
        if manager.pool_classes_by_scheme.get("http") is not _WatchedHTTPPool:
            manager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}
            manager.clear()  # pools opened before (idle ones) are rebuilt watched


# --- the helper -----------------------------------------------------------------------------------


class Http:
    """A requests session with ``bounds``: timeouts, a total deadline per request, retries, capped bodies.

    ``session`` lets a caller hand in its own (proxies, adapters, counting in
    tests); it is adopted (see ``adopt``) and not closed by ``close``.
    """

    def __init__(self, bounds: Bounds, session: requests.Session | None = None) -> None:
        self.bounds = bounds
        self._own_session = session is None
        self.session = session if session is not None else requests.Session()
        adopt(self.session, retry_policy(bounds))
        self._deadlines: weakref.WeakKeyDictionary[requests.Response, Deadline] = weakref.WeakKeyDictionary()

    def close(self) -> None:
        """Close the session if this helper made it."""
        if self._own_session:
            self.session.close()

    def request(
        self, method: str, url: str, *, allowance: Allowance | None = None, **kwargs: Unpack[RequestOptions]
    ) -> tuple[requests.Response, int]:
        """Send one request (streamed), retried as the bounds say; the answer and how many times it was sent.

        ``allowance``: how a long body earns more time (the caller reports
        the bytes it reads with ``received``). The deadline stays armed until
        the response is closed, so a body read after this returns is bounded
        by it too. Redirects are followed (``allow_redirects=False`` says
        not), without credentials to another origin. Any answer, 2xx or
        not, is returned; a request that got none raises ``HttpError``.
        """
        deadline = Deadline(self.bounds.deadline, allowance)
        call = _Call(deadline)
        _active.call = call
        try:
            follow = kwargs.pop("allow_redirects", True)
            resp = self._follow(method, url, deadline, kwargs, follow=follow)
        except requests.RequestException as e:
            deadline.cancel()
            late = deadline.seconds if deadline.passed() else None
            raise HttpError(describe(e), cause=e, attempts=call.attempts, late=late) from e
        except HttpError:
            deadline.cancel()
            raise
        finally:
            _active.call = None
        self._deadlines[resp] = deadline
        _cancel_on_close(resp, deadline)
        return resp, call.attempts

    def _follow(
        self, method: str, url: str, deadline: Deadline, kwargs: SendOptions, *, follow: bool
    ) -> requests.Response:
        """Send ``method url``, then follow its redirects; a hop to another origin carries no credentials."""
        home = origin(url)
        for _ in range(MAX_REDIRECTS + 1):
            timeout = min(self.bounds.timeout, deadline.remaining())
            resp = self.session.request(method, url, timeout=timeout, stream=True, allow_redirects=False, **kwargs)
            location = resp.headers.get("Location")
            if not follow or resp.status_code not in REDIRECTS or not location:
                return resp
            resp.close()
            url = urljoin(resp.url, location)
            method, kwargs = _redirected(method, resp.status_code, kwargs, keep_credentials=origin(url) == home)
        raise HttpError(f"more than {MAX_REDIRECTS} redirects")

    def received(self, resp: requests.Response, nbytes: int) -> None:
        """``nbytes`` more of ``resp``'s body were read (they earn time under the request's allowance)."""
        deadline = self._deadlines.get(resp)
        if deadline is not None:
            deadline.credit(nbytes)

    def late(self, resp: requests.Response) -> float | None:
        """The deadline in seconds if it ended ``resp`` (its body may be cut short), else None."""
        deadline = self._deadlines.get(resp)
        return deadline.seconds if deadline is not None and deadline.passed() else None

    def read(self, resp: requests.Response, limit: int, within: float | None = None) -> bytes:
        """``resp``'s whole body, refused past ``limit`` bytes (or ``within`` seconds); the response is closed.

        ``Content-Length`` is checked before a byte is read, the count while
        reading, so an over-cap body costs at most ``limit`` bytes of memory.
        """
        deadline = self._deadlines.get(resp)
        try:
            body = _read_capped(resp, limit, within, deadline)
        except requests.RequestException as e:
            resp.close()
            raise HttpError(f"the response broke off ({describe(e)})", cause=e, late=self.late(resp)) from e
        except HttpError as e:
            resp.close()
            e.late = self.late(resp)
            raise
        resp.close()
        late = self.late(resp)
        if late is not None:
            raise HttpError("the deadline passed", late=late)
        return body


def _read_capped(resp: requests.Response, limit: int, within: float | None, deadline: Deadline | None) -> bytes:
    try:
        declared = int(resp.headers.get("Content-Length", "0"))
    except ValueError:
        declared = 0
    if declared > limit:
        raise TooLong(f"{declared} bytes is over the {_size(limit)} limit; refusing it")
    until = time.monotonic() + within if within is not None else None
    chunks: list[bytes] = []
    total = 0
    for chunk in resp.iter_content(64 << 10):
        total += len(chunk)
        if total > limit:
            raise TooLong(f"over the {_size(limit)} limit; refusing it")
        if deadline is not None:
            deadline.credit(len(chunk))
        if until is not None and time.monotonic() > until:
            raise HttpError(f"the body took longer than {within:g} s")
        chunks.append(chunk)
    return b"".join(chunks)


def origin(url: str) -> tuple[str, str, int]:
    """``url``'s origin: scheme and host in lower case, and the port (the scheme's default when none is given)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a port: no origin matches it
        port = -1
    return scheme, (parts.hostname or "").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme, -1)


def _redirected(method: str, status: int, kwargs: SendOptions, *, keep_credentials: bool) -> tuple[str, SendOptions]:
    """The method and arguments of the hop a redirect asks for (as browsers and requests do), credentials removed
    unless the hop stays on the origin they were given for."""
    kwargs = kwargs.copy()
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method = "GET"
        kwargs.pop("data", None)
        kwargs["headers"] = _without(kwargs.get("headers"), {"content-type", "content-length", "content-range"})
    if not keep_credentials:
        kwargs["headers"] = _without(kwargs.get("headers"), {"authorization"})
        kwargs["auth"] = None
    return method, kwargs


def _without(headers: Mapping[str, str] | None, names: set[str]) -> dict[str, str]:
    return {k: v for k, v in (headers or {}).items() if k.lower() not in names}


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


def _cancel_on_close(resp: requests.Response, deadline: Deadline) -> None:
    """End ``deadline`` when ``resp`` is closed (or dropped): its socket may then serve another request."""
    ref = weakref.ref(resp)

    def closed() -> None:
        deadline.cancel()
        alive = ref()
        if alive is not None:
            requests.Response.close(alive)

    resp.close = closed  # type: ignore[method-assign]
    weakref.finalize(resp, deadline.cancel)


# --- describing failures ---------------------------------------------------------------------------


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


def is_timeout(e: BaseException) -> bool:
    """Whether ``e`` is a timeout, also when urllib3's retries wrapped it (a ``MaxRetryError`` of one)."""
    if isinstance(e, requests.Timeout):
        return True
    inner = e.args[0] if e.args else None
    reason = inner.reason if isinstance(inner, MaxRetryError) else None
    return isinstance(reason, urllib3.exceptions.TimeoutError) and not isinstance(reason, NewConnectionError)


def describe(e: BaseException) -> str:
    """A requests failure in a few words: ``timed out``, ``TLS failed (…)``, ``cannot connect (…)``."""
    if is_timeout(e):
        return "timed out"
    if isinstance(e, requests.exceptions.SSLError):
        return f"TLS failed ({innermost(e)})"
    if isinstance(e, requests.ConnectionError):
        return f"cannot connect ({innermost(e)})"
    return innermost(e)


def innermost(e: BaseException) -> str:
    """The first cause of ``e`` (what the operating system or the TLS library said), on one line."""
    seen = e
    while True:
        nxt = seen.__cause__ or seen.__context__
        if nxt is None or nxt is seen:
            break
        seen = nxt
    reason = getattr(seen, "reason", None)
    return one_line(str(reason or seen) or type(seen).__name__)[:300]


def network_hint(e: BaseException | None, url: str, *, service: str, plain_http: str | None = None) -> str:
    """What to try after failing to reach ``url``: ``plain_http`` names the option allowing plain HTTP, if any."""
    host = urlsplit(url).netloc
    if isinstance(e, requests.exceptions.SSLError) and plain_http:
        return f"if {host} speaks plain HTTP, allow it with {plain_http} {host}"
    if e is not None and is_timeout(e):
        return f"{service} is slow or unreachable; try again later"
    return f"check that {host} is {service}'s address and is reachable"
