"""The issue-tracker boundary: the state of upstream issues, pull requests and commits.

``IssueTracker`` is what the core (patchkit.tracking.refs) asks; ``GitHubTracker`` is
its adapter for the GitHub REST API over requests. It sends the recorded
``ETag`` as ``If-None-Match`` so an unchanged answer (304) costs no rate
limit, reads the ``X-RateLimit-*`` headers of every answer and stops before
sending a request it knows would be refused, and bounds every request in
time, tries and size through the bounded-HTTP helper (patchkit.net.transport):
a connection failure or a 5xx is tried again, a timeout or a rate limit is
reported at once. The command line reads ``GITHUB_API_URL`` and
``GITHUB_TOKEN`` and hands them in (tests point the URL at a local server).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from patchkit.core.values import Reference, Revision
from patchkit.errors import ExternalFailure
from patchkit.lockfile.model import RefState

if TYPE_CHECKING:
    from collections.abc import Mapping

    import requests

    from patchkit.net.transport import HttpError

DEFAULT_API_URL = "https://api.github.com"
#: Seconds to connect and to wait for each read; a slow API fails the refresh instead of hanging CI.
DEFAULT_TIMEOUT = 10.0
#: Seconds one request may take in all (connect, headers, body and retries together).
DEFAULT_DEADLINE = 60.0
#: How many times a request is sent again after a connection failure or a 5xx.
DEFAULT_RETRIES = 2
#: An issue or pull request answer bigger than this is refused (real ones are a few tens of kB).
MAX_BODY_BYTES = 4 << 20
_USER_AGENT = "patchkit (upstream reference tracking)"
_ISSUE = re.compile(r"(?P<owner>[^/]+)/(?P<repo>[^#]+)#(?P<number>\d+)")
_COMMIT = re.compile(r"https://github\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+)/commit/(?P<sha>[0-9a-f]{40})")


class AnswerStatus(Enum):
    """What the tracker said about one reference."""

    FOUND = "found"
    NOT_MODIFIED = "not-modified"  # the recorded state still holds (HTTP 304 for the recorded ETag)
    NOT_FOUND = "not-found"


@dataclass(frozen=True)
class Answer:
    """The tracker's answer; ``state`` (without ``checked_at``) is set when ``status`` is FOUND."""

    status: AnswerStatus
    state: RefState | None = None


@dataclass(frozen=True)
class RateLimit:
    """The API's rate-limit headers from the last answer: requests allowed, left, and when it resets."""

    limit: int
    remaining: int
    reset: dt.datetime | None
    used: int | None = None

    def describe(self) -> str:
        when = f", resets at {self.reset:%Y-%m-%d %H:%M:%S} UTC" if self.reset else ""
        return f"{self.remaining} of {self.limit} requests left{when}"


class RateLimited(ExternalFailure):
    """The API refuses requests until ``retry_at`` (its rate limit is used up)."""

    def __init__(self, message: str, hint: str | None, retry_at: dt.datetime | None) -> None:
        super().__init__(message, hint)
        self.retry_at = retry_at


class IssueTracker(Protocol):
    """Where reference states come from (GitHub in production, a local server in tests)."""

    @property
    def rate(self) -> RateLimit | None:
        """The rate limit as last reported, or None before the first answer."""
        ...

    def fetch(self, ref: Reference, known: RefState | None) -> Answer:
        """The current state of ``ref``; ``known`` (the recorded state) supplies its kind and ETag."""
        ...


def split_reference(ref: Reference) -> tuple[str, str, str]:
    """``(owner, repo, number-or-sha)`` of an issue/PR reference or a commit URL."""
    m = _COMMIT.fullmatch(ref.text) or _ISSUE.fullmatch(ref.text)
    if m is None:  # Reference refuses anything else
        raise ValueError(f"{ref.text!r} is not a reference")
    groups = m.groupdict()
    return groups["owner"], groups["repo"], groups.get("sha") or groups["number"]


def web_url(ref: Reference) -> str:
    """The page a person opens for ``ref`` (GitHub redirects /issues/N to /pull/N for a PR)."""
    if ref.is_commit:
        return ref.text
    owner, repo, number = split_reference(ref)
    return f"https://github.com/{owner}/{repo}/issues/{number}"


class GitHubTracker:
    """The GitHub REST API (or GitHub Enterprise at ``api_url``) through requests.

    ``api_url`` is the API's root (``DEFAULT_API_URL``, or GitHub
    Enterprise's). ``token`` raises the rate limit from 60 to 5000 requests
    an hour and reaches private repositories. Both come from the caller (the
    command line reads ``GITHUB_API_URL`` and ``GITHUB_TOKEN``, as GitHub
    Actions sets them): nothing here reads the environment.
    """

    def __init__(
        self,
        api_url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        deadline: float = DEFAULT_DEADLINE,
        retries: int = DEFAULT_RETRIES,
        session: requests.Session | None = None,
        now: dt.datetime | None = None,
    ) -> None:
        from patchkit.net.transport import Bounds, Http

        self.api_url = api_url.rstrip("/")
        self._token = token or None
        self._timeout = timeout
        # A timeout is not tried again (a slow API fails the refresh instead of hanging CI), nor is a 429
        # waited out: the rate limit is the user's to see (RateLimited says until when).
        bounds = Bounds(timeout, deadline, retries, backoff=0.5, retry_reads=False, wait_on_429=False)
        self._http = Http(bounds, session)
        self._now = now
        self._rate: RateLimit | None = None
        #: Requests sent (304 answers included), for the summary and the tests.
        self.requests_sent = 0

    @property
    def rate(self) -> RateLimit | None:
        return self._rate

    def fetch(self, ref: Reference, known: RefState | None) -> Answer:
        owner, repo, ident = split_reference(ref)
        etag = known.etag if known is not None else None
        if ref.is_commit:
            return self._commit(ref, owner, repo, ident, etag)
        kind = known.kind if known is not None else None
        if kind == "pull":
            return self._pull(ref, owner, repo, ident, etag)
        issue_etag = etag if kind == "issue" else None
        status, doc, new_etag = self._get(f"/repos/{owner}/{repo}/issues/{ident}", issue_etag, ref)
        if status is AnswerStatus.NOT_MODIFIED:
            return Answer(status)
        if status is AnswerStatus.NOT_FOUND:
            return Answer(status)
        if "pull_request" in doc:
            # The issues endpoint answers for pull requests too, without merge or head commits.
            return self._pull(ref, owner, repo, ident, None)
        state = "closed" if doc.get("state") == "closed" else "open"
        return Answer(AnswerStatus.FOUND, RefState(ref, state, kind="issue", title=_title(doc), etag=new_etag))

    def _pull(self, ref: Reference, owner: str, repo: str, number: str, etag: str | None) -> Answer:
        status, doc, new_etag = self._get(f"/repos/{owner}/{repo}/pulls/{number}", etag, ref)
        if status is not AnswerStatus.FOUND:
            return Answer(status)
        merged = bool(doc.get("merged")) or doc.get("merged_at") is not None
        state = "merged" if merged else ("closed" if doc.get("state") == "closed" else "open")
        head, merged_at = doc.get("head"), doc.get("merged_at")
        return Answer(
            AnswerStatus.FOUND,
            RefState(
                ref,
                state,
                kind="pull",
                title=_title(doc),
                # GitHub also fills merge_commit_sha for an open PR (its test merge); only a merge counts.
                merge_commit=_revision(doc.get("merge_commit_sha")) if merged else None,
                head_commit=_revision(head.get("sha") if isinstance(head, dict) else None),
                merged_at=merged_at if merged and isinstance(merged_at, str) else None,
                etag=new_etag,
            ),
        )

    def _commit(self, ref: Reference, owner: str, repo: str, sha: str, etag: str | None) -> Answer:
        status, doc, new_etag = self._get(f"/repos/{owner}/{repo}/commits/{sha}", etag, ref)
        if status is not AnswerStatus.FOUND:
            return Answer(status)
        commit = _object(doc.get("commit"))
        message = commit.get("message")
        if not isinstance(message, str):
            message = ""
        when = _object(commit.get("committer")).get("date")
        if not isinstance(when, str):
            when = None
        # A commit of the repository is "merged" by definition; git tells whether the pin contains it.
        return Answer(
            AnswerStatus.FOUND,
            RefState(
                ref,
                "merged",
                kind="commit",
                title=message.split("\n", 1)[0][:200] or None,
                merge_commit=_revision(doc.get("sha")) or Revision(sha),
                merged_at=when,
                etag=new_etag,
            ),
        )

    # -- HTTP ----------------------------------------------------------------

    def _clock(self) -> dt.datetime:
        return self._now or dt.datetime.now(dt.UTC)

    def _get(self, path: str, etag: str | None, ref: Reference) -> tuple[AnswerStatus, dict[str, object], str | None]:
        from patchkit.net.transport import HttpError

        if (
            self._rate is not None
            and self._rate.remaining == 0
            and self._rate.reset
            and self._rate.reset > self._clock()
        ):
            raise self._limited(ref, self._rate.reset)
        url = self.api_url + path
        self.requests_sent += 1
        try:
            resp, _ = self._http.request("GET", url, headers=self._headers(etag), allow_redirects=True)
            self._read_rate(resp.headers)
            body = self._http.read(resp, MAX_BODY_BYTES)
        except HttpError as e:
            raise self._failure(ref, url, e) from e
        return self._answer(resp, body, ref, url, etag)

    def _headers(self, etag: str | None) -> dict[str, str]:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": _USER_AGENT,
        }
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if etag:
            headers["If-None-Match"] = etag
        return headers

    def _answer(
        self, resp: requests.Response, body: bytes, ref: Reference, url: str, etag: str | None
    ) -> tuple[AnswerStatus, dict[str, object], str | None]:
        """What an answer (read whole) says: found with its document, not modified, not found; or it raises."""
        status = resp.status_code
        if status == 304:
            return AnswerStatus.NOT_MODIFIED, {}, etag
        if status in (404, 410):
            return AnswerStatus.NOT_FOUND, {}, None
        if status in (403, 429):
            self._refused(resp, ref)
        if status == 401:
            raise ExternalFailure(
                f"{ref}: {self.api_url} refused the token (401 {_api_message(body)})",
                "set GITHUB_TOKEN to a valid token, or unset it to ask anonymously",
            )
        if not 200 <= status < 300:
            raise ExternalFailure(f"{ref}: GET {url} answered {status} {_api_message(body)}", "retry later")
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise ExternalFailure(f"{ref}: GET {url} answered something that is not JSON") from e
        if not isinstance(doc, dict):
            raise ExternalFailure(f"{ref}: GET {url} answered JSON that is not an object")
        return AnswerStatus.FOUND, doc, resp.headers.get("ETag")

    def _failure(self, ref: Reference, url: str, e: HttpError) -> ExternalFailure:
        """The one line for a request that got no (complete) answer: too slow, unreachable, or too big."""
        from patchkit.net.transport import is_timeout

        retry = "retry later; the recorded states are unchanged (`patchkit refs` shows them offline)"
        if e.late is not None:
            return ExternalFailure(
                f"{ref}: {self.api_url} did not answer within {e.late:g} s (connect, headers and body together)",
                retry,
            )
        if e.cause is not None and is_timeout(e.cause):
            return ExternalFailure(f"{ref}: {self.api_url} did not answer within {self._timeout:g} s", retry)
        if e.cause is not None:
            return ExternalFailure(
                f"{ref}: cannot reach {self.api_url}: {type(e.cause).__name__}",
                "check the network (GITHUB_API_URL for GitHub Enterprise); nothing was recorded for it",
            )
        return ExternalFailure(f"{ref}: GET {url}: {e.reason}")

    def _read_rate(self, headers: Mapping[str, str]) -> None:
        try:
            limit = int(headers["X-RateLimit-Limit"])
            remaining = int(headers["X-RateLimit-Remaining"])
        except (KeyError, ValueError):
            return
        reset = _epoch(headers.get("X-RateLimit-Reset"))
        used = headers.get("X-RateLimit-Used")
        self._rate = RateLimit(limit, remaining, reset, int(used) if used and used.isdigit() else None)

    def _refused(self, resp: requests.Response, ref: Reference) -> None:
        retry_after = resp.headers.get("Retry-After")
        if retry_after and retry_after.strip().isdigit():
            raise self._limited(ref, self._clock() + dt.timedelta(seconds=int(retry_after)), secondary=True)
        if resp.headers.get("X-RateLimit-Remaining") == "0":
            raise self._limited(ref, self._rate.reset if self._rate else None)
        raise ExternalFailure(
            f"{ref}: {self.api_url} refused access ({resp.status_code})",
            "the repository may be private: set GITHUB_TOKEN to a token that can read it",
        )

    def _limited(self, ref: Reference, retry_at: dt.datetime | None, secondary: bool = False) -> RateLimited:
        what = "asks to slow down (secondary rate limit)" if secondary else "rate limit is used up"
        when = f" until {retry_at:%Y-%m-%d %H:%M:%S} UTC" if retry_at else ""
        hint = "retry after that" + (
            "" if self._token else ", or set GITHUB_TOKEN (5000 requests an hour instead of 60)"
        )
        return RateLimited(f"{ref}: the GitHub API {what}{when}", hint, retry_at)


def _api_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    message = doc.get("message") if isinstance(doc, dict) else None
    return f"({' '.join(str(message).split())[:200]})" if message else ""


def _epoch(text: str | None) -> dt.datetime | None:
    if not text or not text.strip().isdigit():
        return None
    return dt.datetime.fromtimestamp(int(text), dt.UTC)


def _object(value: object) -> Mapping[str, object]:
    """A JSON object of the answer, or an empty one for anything else (a field GitHub left out or changed)."""
    return value if isinstance(value, dict) else {}


def _title(doc: Mapping[str, object]) -> str | None:
    title = doc.get("title")
    return " ".join(title.split())[:200] if isinstance(title, str) and title.strip() else None


def _revision(value: object) -> Revision | None:
    if not isinstance(value, str):
        return None
    try:
        return Revision(value)
    except ValueError:
        return None
