"""A stand-in for the GitHub REST API on 127.0.0.1, and deployments whose references it answers.

``github`` -> ``GitHubStandIn``: an http.server answering
``/repos/{owner}/{repo}/pulls/{n}``, ``/issues/{n}`` and ``/commits/{sha}``
with the real API's response shapes (the fields patchkit reads and their
neighbours), a weak ``ETag`` over each body with 304 for a matching
``If-None-Match`` (not counted against the limit, as GitHub does), the
``X-RateLimit-*`` headers on every answer, a 403 with ``X-RateLimit-Remaining:
0`` once ``remaining`` reaches 0, and a per-path ``delay`` for slow answers.
``GITHUB_API_URL`` points at it for the test's duration and ``GITHUB_TOKEN``
is unset. ``requests`` records (path, headers) of every request.

``tracked`` -> a ``deploy`` deployment whose upstream ``vllm`` is a real git
repository under ``.../vllm-project/vllm`` (so references to
vllm-project/vllm match it) with history ``fix -> pinned -> later``, pinned
at ``pinned``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import UPSTREAM_COMMIT, Invoke, git

RESET_EPOCH = 1_900_000_000  # 2030-03-17T17:46:40Z


@dataclass
class GitHubStandIn:
    url: str
    pulls: dict[str, dict[str, Any]] = field(default_factory=dict)
    issues: dict[str, dict[str, Any]] = field(default_factory=dict)
    commits: dict[str, dict[str, Any]] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    limit: int = 60
    remaining: int = 60

    # -- building answers in the API's shapes

    def pull(
        self,
        repo: str,
        number: int,
        *,
        state: str = "open",
        merged: bool = False,
        merge_commit: str | None = None,
        head: str = "1" * 40,
        title: str = "A fix",
    ) -> None:
        """Serve pull request ``repo#number`` (and its issue, with a ``pull_request`` key)."""
        api = f"{self.url}/repos/{repo}"
        doc = {
            "url": f"{api}/pulls/{number}",
            "html_url": f"https://github.com/{repo}/pull/{number}",
            "number": number,
            "state": "closed" if merged else state,
            "locked": False,
            "title": title,
            "user": {"login": "contributor", "id": 1, "type": "User"},
            "body": "Fixes a race.",
            "created_at": "2025-07-20T10:00:00Z",
            "updated_at": "2025-08-01T10:00:00Z",
            "closed_at": "2025-08-01T10:00:00Z" if merged or state == "closed" else None,
            "merged_at": "2025-08-01T10:00:00Z" if merged else None,
            # GitHub fills this for open PRs too (the test merge commit).
            "merge_commit_sha": merge_commit or "9" * 40,
            "draft": False,
            "head": {"label": "contributor:fix", "ref": "fix", "sha": head, "repo": {"full_name": f"x/{repo}"}},
            "base": {"label": "vllm-project:main", "ref": "main", "sha": "8" * 40},
            "merged": merged,
            "mergeable": None,
            "comments": 3,
            "commits": 2,
            "additions": 10,
            "deletions": 2,
            "changed_files": 1,
        }
        self.pulls[f"/repos/{repo}/pulls/{number}"] = doc
        self.issues[f"/repos/{repo}/issues/{number}"] = {
            "url": f"{api}/issues/{number}",
            "html_url": doc["html_url"],
            "number": number,
            "state": doc["state"],
            "title": title,
            "pull_request": {"url": doc["url"], "html_url": doc["html_url"], "merged_at": doc["merged_at"]},
        }

    def issue(self, repo: str, number: int, *, state: str = "open", title: str = "A bug") -> None:
        self.issues[f"/repos/{repo}/issues/{number}"] = {
            "url": f"{self.url}/repos/{repo}/issues/{number}",
            "html_url": f"https://github.com/{repo}/issues/{number}",
            "number": number,
            "state": state,
            "state_reason": "completed" if state == "closed" else None,
            "title": title,
            "labels": [{"name": "bug"}],
            "comments": 5,
        }

    def commit(self, repo: str, sha: str, message: str = "Fix the race\n\nLonger text.") -> None:
        self.commits[f"/repos/{repo}/commits/{sha}"] = {
            "sha": sha,
            "html_url": f"https://github.com/{repo}/commit/{sha}",
            "commit": {
                "author": {"name": "A", "email": "a@example.invalid", "date": "2025-07-30T12:00:00Z"},
                "committer": {"name": "GitHub", "email": "noreply@github.com", "date": "2025-07-30T12:00:00Z"},
                "message": message,
            },
            "parents": [{"sha": "7" * 40}],
        }

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]

    # -- serving

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        self.requests.append((path, headers))
        if path in self.delay:
            time.sleep(self.delay[path])
        rate = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Reset": str(RESET_EPOCH),
            "X-RateLimit-Resource": "core",
        }
        if self.remaining <= 0:
            body = {
                "message": "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated "
                "requests get a higher rate limit. Check out the documentation for more details.)",
                "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting",
            }
            rate |= {"X-RateLimit-Remaining": "0", "X-RateLimit-Used": str(self.limit)}
            return 403, rate, json.dumps(body).encode()
        doc = self.pulls.get(path) or self.issues.get(path) or self.commits.get(path)
        if doc is None:
            self.remaining -= 1
            rate |= {"X-RateLimit-Remaining": str(self.remaining), "X-RateLimit-Used": str(self.limit - self.remaining)}
            body = {"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"}
            return 404, rate, json.dumps(body).encode()
        data = json.dumps(doc, indent=2).encode()
        etag = f'W/"{hashlib.sha256(data).hexdigest()[:32]}"'
        if headers.get("If-None-Match") == etag:
            # A 304 does not count against the rate limit.
            rate |= {"X-RateLimit-Remaining": str(self.remaining), "X-RateLimit-Used": str(self.limit - self.remaining)}
            return 304, {**rate, "ETag": etag}, b""
        self.remaining -= 1
        rate |= {"X-RateLimit-Remaining": str(self.remaining), "X-RateLimit-Used": str(self.limit - self.remaining)}
        return 200, {**rate, "ETag": etag, "Cache-Control": "private, max-age=60, s-maxage=60"}, data


def _handler(owner: GitHubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            status, headers, body = owner.answer(urlsplit(self.path).path, dict(self.headers.items()))
            with contextlib.suppress(OSError):
                self.send_response(status)
                if status != 304:
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHubStandIn]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    standin = GitHubStandIn(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(standin)
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("GITHUB_API_URL", standin.url)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    try:
        yield standin
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class Tracked:
    root: Path
    upstream: Path
    fix: str  # an ancestor of the pinned commit
    pinned: str
    later: str  # a descendant of the pinned commit, not contained in it


def _commit(repo: Path, name: str) -> str:
    (repo / f"{name}.txt").write_text(name)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def tracked(deploy: Path, tmp_path: Path, invoke: Invoke) -> Tracked:
    upstream = tmp_path / "up" / "vllm-project" / "vllm"
    upstream.mkdir(parents=True)
    git(upstream, "init", "-q", "-b", "main")
    fix = _commit(upstream, "fix")
    pinned = _commit(upstream, "pinned")
    later = _commit(upstream, "later")
    lock = deploy / "lockfile.toml"
    text = lock.read_text().replace(UPSTREAM_COMMIT, pinned)
    lock.write_text(text.replace("https://github.com/vllm-project/vllm", upstream.as_uri()))
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 0, r.stderr
    r = invoke("check", repo=deploy)
    assert r.exit_code == 0, r.stdout
    return Tracked(deploy, upstream, fix, pinned, later)
