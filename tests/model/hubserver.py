"""A local stand-in for the Hugging Face Hub, on 127.0.0.1, answering what huggingface_hub asks.

It serves the Hub's real response shapes (read from huggingface_hub's
``hf_api.py``, ``file_download.py`` and ``utils/_http.py``):

- ``GET /api/models/{repo}/revision/{rev}``: model info (``sha``, ``siblings``…);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=…``: the tree listing,
  paginated with a ``Link: <…>; rel="next"`` header; LFS files carry
  ``lfs: {oid, size, pointerSize}`` and ``oid`` is the git id of the pointer;
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``: small files answer 200 with
  ``ETag`` (the git blob id), LFS files 302 to the "CDN" with ``X-Linked-Etag``
  (the sha256) and ``X-Linked-Size``; both carry ``X-Repo-Commit``;
- ``GET /cdn-lfs/{sha256}``: the bytes. The redirect names the host
  ``localhost`` (which resolves to 127.0.0.1 here) so that, as with the real
  CDN, huggingface_hub sees another host and reads the metadata from the 302;
- errors as the Hub sends them: 401 + ``X-Error-Code: RepoNotFound`` without
  a valid token, 404 + ``RevisionNotFound`` for an unknown revision.

Used by tests/model (a session fixture) and bench/bench_model.py. Files can
be registered without their bytes (``FileEntry.data`` None) for listings of
large synthetic caches that are never downloaded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class FileEntry:
    """One file of a commit: size, git object id, LFS sha256 (None for small files), and its bytes."""

    path: str
    size: int
    oid: str
    lfs_sha256: str | None = None
    pointer_size: int = 0
    data: bytes | None = None

    @classmethod
    def of(cls, path: str, data: bytes, lfs: bool | None = None) -> FileEntry:
        if lfs is None:
            lfs = path.endswith(LFS_SUFFIXES)
        if not lfs:
            return cls(path, len(data), git_blob_id(data), data=data)
        sha = hashlib.sha256(data).hexdigest()
        return cls.lfs(path, len(data), sha, data)

    @classmethod
    def lfs(cls, path: str, size: int, sha256: str, data: bytes | None = None) -> FileEntry:
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
        return cls(path, size, git_blob_id(pointer), sha256, len(pointer), data)


@dataclass
class HubRepo:
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, FileEntry]] = field(default_factory=dict)


class HubServer:
    """The stand-in: ``add`` repositories, point ``HF_ENDPOINT`` at ``url``."""

    def __init__(self, page_size: int = 50) -> None:
        self.page_size = page_size
        self.repos: dict[str, HubRepo] = {}
        self.token: str | None = None
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hub-stand-in", daemon=True)

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def reset(self) -> None:
        with self._lock:
            self.repos.clear()
            self.requests.clear()
            self.token = None

    def add(self, repo: str, files: list[FileEntry], branch: str = "main") -> str:
        """Commit ``files`` to ``branch`` of ``repo`` (created if new); the new commit id."""
        h = hashlib.sha1(repo.encode() + branch.encode(), usedforsecurity=False)
        for f in sorted(files, key=lambda f: f.path):
            h.update(f"{f.path}\0{f.oid}\0".encode())
        with self._lock:
            r = self.repos.setdefault(repo, HubRepo())
            h.update(str(len(r.commits)).encode())
            commit = h.hexdigest()
            r.commits[commit] = {f.path: f for f in files}
            r.branches[branch] = commit
        return commit

    def resolve(self, repo: str, rev: str) -> str | None:
        r = self.repos.get(repo)
        if r is None:
            return None
        if rev in r.commits:
            return rev
        return r.branches.get(rev)


class _Handler(BaseHTTPRequestHandler):
    """The stand-in's answers; ``hub`` is the server whose repositories it serves (set per server)."""

    protocol_version = "HTTP/1.1"
    hub: HubServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # -- answers

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, doc: object, headers: dict[str, str] | None = None, head: bool = False) -> None:
        body = json.dumps(doc).encode()
        self._send(status, body, {"Content-Type": "application/json", **(headers or {})}, head)

    def _error(self, status: int, code: str | None, message: str, head: bool) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, headers, head)

    def _authorized(self, head: bool) -> bool:
        if self.hub.token is None:
            return True
        given = self.headers.get("Authorization")
        if given == f"Bearer {self.hub.token}":
            return True
        if given:
            self._error(401, None, "Invalid credentials in Authorization header", head)
        else:
            # What the Hub answers for a private repo without a token.
            self._error(401, "RepoNotFound", "Invalid username or password.", head)
        return False

    # -- routing

    def _route(self, head: bool) -> None:
        split = urlsplit(self.path)
        path = split.path
        with self.hub._lock:
            self.hub.requests.append((self.command, path))
        if path.startswith("/cdn-lfs/"):
            self._cdn(path.removeprefix("/cdn-lfs/"), head)
            return
        if not self._authorized(head):
            return
        parts = path.split("/")
        if path.startswith("/api/models/") and len(parts) >= 7:
            repo = f"{parts[3]}/{parts[4]}"
            kind, rev = parts[5], unquote(parts[6])
            if kind == "revision":
                self._model_info(repo, rev, head)
                return
            if kind == "tree":
                self._tree(repo, rev, unquote("/".join(parts[7:])), parse_qs(split.query), head)
                return
        if len(parts) >= 6 and parts[3] == "resolve":
            repo = f"{parts[1]}/{parts[2]}"
            self._resolve(repo, unquote(parts[4]), unquote("/".join(parts[5:])), head)
            return
        self._error(404, None, "Sorry, we can't find the page you are looking for.", head)

    def _commit(self, repo: str, rev: str, head: bool) -> str | None:
        if repo not in self.hub.repos:
            self._error(404, "RepoNotFound", "Repository not found", head)
            return None
        commit = self.hub.resolve(repo, rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
        return commit

    def _model_info(self, repo: str, rev: str, head: bool) -> None:
        commit = self._commit(repo, rev, head)
        if commit is None:
            return
        files = self.hub.repos[repo].commits[commit]
        org = repo.split("/", maxsplit=1)[0]
        self._json(
            200,
            {
                "_id": hashlib.sha1(repo.encode(), usedforsecurity=False).hexdigest()[:24],
                "id": repo,
                "modelId": repo,
                "author": org,
                "sha": commit,
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2025-12-01T00:00:00.000Z",
                "private": self.hub.token is not None,
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": ["safetensors"],
                "library_name": "transformers",
                "siblings": [{"rfilename": p} for p in sorted(files)],
            },
            head=head,
        )

    def _tree(self, repo: str, rev: str, sub: str, query: dict[str, list[str]], head: bool) -> None:
        commit = self._commit(repo, rev, head)
        if commit is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        entries = _listing(self.hub.repos[repo].commits[commit], sub, recursive)
        start = int(query.get("cursor", ["0"])[0])
        page = entries[start : start + self.hub.page_size]
        headers = {}
        if start + self.hub.page_size < len(entries):
            base = f"{self.hub.url}/api/models/{repo}/tree/{quote(rev, safe='')}" + (f"/{quote(sub)}" if sub else "")
            flag = "true" if recursive else "false"
            nxt = f"{base}?recursive={flag}&expand=false&cursor={start + self.hub.page_size}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._json(200, page, headers, head)

    def _resolve(self, repo: str, rev: str, path: str, head: bool) -> None:
        commit = self._commit(repo, rev, head)
        if commit is None:
            return
        f = self.hub.repos[repo].commits[commit].get(path)
        if f is None:
            self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}, head)
            return
        if f.lfs_sha256 is not None:
            self._send(
                302,
                b"",
                {
                    "Location": f"http://localhost:{self.hub.port}/cdn-lfs/{f.lfs_sha256}",
                    "X-Repo-Commit": commit,
                    "ETag": f'"{f.oid}"',
                    "X-Linked-Etag": f'"{f.lfs_sha256}"',
                    "X-Linked-Size": str(f.size),
                },
                head,
            )
            return
        body = f.data or b""
        self._send(
            200,
            body,
            {"ETag": f'"{f.oid}"', "X-Repo-Commit": commit, "Content-Type": "application/octet-stream"},
            head,
        )

    def _cdn(self, sha: str, head: bool) -> None:
        for r in self.hub.repos.values():
            for files in r.commits.values():
                for f in files.values():
                    if f.lfs_sha256 == sha and f.data is not None:
                        self._send(200, f.data, {"Content-Type": "application/octet-stream"}, head)
                        return
        self._send(404, b"NoSuchKey", {}, head)


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    """A handler class bound to ``hub``."""
    return type("Handler", (_Handler,), {"hub": hub})


def _listing(files: dict[str, FileEntry], sub: str, recursive: bool) -> list[dict[str, object]]:
    """Tree entries as the Hub lists them: directories and files, in path order."""
    prefix = f"{sub}/" if sub else ""
    out: dict[str, dict[str, object]] = {}
    for path, f in files.items():
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :].split("/")
        for depth in range(1, len(rest)):
            d = prefix + "/".join(rest[:depth])
            if recursive or depth == 1:
                oid = hashlib.sha1(d.encode(), usedforsecurity=False).hexdigest()
                out.setdefault(d, {"type": "directory", "oid": oid, "size": 0, "path": d})
            if not recursive:
                break
        if not recursive and len(rest) > 1:
            continue
        entry: dict[str, object] = {"type": "file", "oid": f.oid, "size": f.size, "path": path}
        if f.lfs_sha256 is not None:
            entry["lfs"] = {"oid": f.lfs_sha256, "size": f.size, "pointerSize": f.pointer_size}
        out[path] = entry
    return [out[k] for k in sorted(out)]
