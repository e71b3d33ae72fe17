"""Git upstreams: a bare clone per URL in the user cache, read with one batched object reader.

``GitSource(url, cache_dir)`` keeps a bare repository for ``url`` under
``cache_dir/git/<name>-<sha1(url)[:12]>``, created on first use. A snapshot
of a full commit id that is already in the cache needs no network at all;
anything else is fetched first, under a lock file beside the clone, so two
patchkit processes sharing the cache never fetch into it at once.

Fetches keep their objects as one pack that git moves into place only when
it is complete (``fetch.unpackLimit=1``), so an interrupted fetch leaves the
cache as it was: a commit present in the cache always has its whole tree.
Every commit a snapshot resolved to is kept by a ref (``refs/patchkit/<id>``)
and automatic gc is off, so nothing a lockfile pins is ever pruned.

Reading many paths costs one ``git cat-file --batch`` process per ``read``
call, whatever the number of paths. Every git command goes through the one
git client, ``patchkit.vcs.gitclient``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from patchkit.core.progress import StartProgress, no_progress
from patchkit.errors import BadInput, SourceError, WriteFailed
from patchkit.sources.interface import Pin, Snapshot, UpstreamSource, check_path
from patchkit.vcs import gitclient

_FULL_SHA = re.compile(r"[0-9a-fA-F]{40}")
_SHORT_SHA = re.compile(r"[0-9a-fA-F]{4,39}")
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")

# Set in every cache repository when it is created (see the module docstring).
_CONFIG = {
    ("fetch", "unpackLimit"): "1",
    ("gc", "auto"): "0",
    ("maintenance", "auto"): "false",
    # Abort an HTTP transfer that stalls below 1 kB/s for a minute: a bound in time
    # that still lets a large first clone take as long as it needs.
    ("http", "lowSpeedLimit"): "1000",
    ("http", "lowSpeedTime"): "60",
}

_HEADS_AND_TAGS = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")


class GitSource(UpstreamSource):
    """An upstream that is a git repository, reached by URL and cached as a bare clone."""

    kind = "git"

    def __init__(self, url: str, cache_dir: Path, *, progress: StartProgress = no_progress) -> None:
        if not url or url.startswith("-") or any(c in url for c in "\x00\n\r"):
            raise BadInput(f"{url!r} is not a git URL", "give the repository's URL, e.g. https://github.com/o/r")
        self.url = url
        base = cache_dir / "git"
        name = f"{_readable_name(url)}-{hashlib.sha1(url.encode(), usedforsecurity=False).hexdigest()[:12]}"
        #: The bare clone of ``url`` (exists once a snapshot has been taken).
        self.path = base / name
        self._lock_path = base / f"{name}.lock"
        self._progress = progress  # a fetch shows as one step: its URL
        self._owned = False  # whether this process has made the clone's configuration its own (``_own``)

    def __repr__(self) -> str:
        return f"GitSource({self.url!r}, cache={self.path})"

    def snapshot(self, ref: str) -> GitSnapshot:
        """Resolve ``ref`` (a full or short commit id, a branch, a tag, ``HEAD``) to a commit.

        A full commit id already in the cache is used without any network.
        Otherwise the ref is fetched from ``url``: a commit id by itself first
        (servers may refuse that), then every branch and tag; a name by itself.
        Raises ``BadInput`` when ``url`` has no such ref or commit and
        ``SourceError`` when ``url`` cannot be fetched from. A clone that git
        finds damaged (``_damaged``) is removed and cloned again, once.
        """
        _check_ref(ref)
        try:
            return self._snapshot(ref)
        except (SourceError, WriteFailed, gitclient.GitFailed):
            if not self._damaged():
                raise
            self._discard()
            return self._snapshot(ref)

    def _snapshot(self, ref: str) -> GitSnapshot:
        full = ref.lower() if _FULL_SHA.fullmatch(ref) else None
        if full is not None and self.path.is_dir() and (commit := self._resolve(full)):
            return GitSnapshot(self, commit)
        with self._locked():
            self._ensure_repo()
            # A commit id: another process may have fetched it while this one waited for the lock.
            commit = self._fetch_name(ref) if full is None else (self._resolve(full) or self._fetch_commit(full))
            self._keep(commit)
        return GitSnapshot(self, commit)

    def cached(self, commit: str) -> bool:
        """Whether the full commit id ``commit`` is already in the cache: a snapshot of it needs no network."""
        return bool(_FULL_SHA.fullmatch(commit)) and self.path.is_dir() and self._resolve(commit.lower()) is not None

    # -- the cache repository -------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the clone's lock file: one creator or fetcher at a time across processes."""
        try:
            self._lock_path.parent.mkdir(parents=True, exist_ok=True)
            if self._lock_path.is_symlink() or not (self._lock_path.is_file() or not self._lock_path.exists()):
                _remove(self._lock_path)  # a link or a directory where the lock file goes: not patchkit's
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        except OSError as e:
            raise WriteFailed(
                f"{self._lock_path}: cannot create the git cache ({e.strerror})",
                "make the cache writable or point PATCHKIT_CACHE at a writable directory",
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _ensure_repo(self) -> None:
        """Create the bare clone, complete or not at all (built aside, then renamed in)."""
        if self.path.is_dir():
            return
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        except OSError as e:
            raise WriteFailed(f"{self.path.parent}: cannot create the git cache ({e.strerror})") from e
        try:
            status, _, err = _run_git(tmp, "init", "--bare", "--quiet")
            if status != 0:
                raise WriteFailed(f"{self.path}: cannot create the git cache ({_reason(err)})")
            _write_config(tmp, self.url)
            tmp.rename(self.path)
            self._owned = True
        except (gitclient.GitFailed, OSError) as e:
            raise WriteFailed(f"{self.path}: cannot create the git cache ({_one_line(str(e))})") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _damaged(self) -> bool:
        """Whether the clone exists and git finds it damaged (``git fsck``): asked only after a command failed."""
        if not self.path.exists() and not self.path.is_symlink():
            return False
        if not self.path.is_dir() or self.path.is_symlink() or not (self.path / "config").is_file():
            return True
        status, _, _ = _run_git(self.path, "fsck", "--no-dangling", "--no-progress")
        return status != 0

    def _discard(self) -> None:
        """Remove a damaged clone, so the next snapshot clones the upstream again."""
        with self._locked():
            try:
                _remove(self.path)
            except OSError as e:
                raise WriteFailed(
                    f"{self.path}: the cached clone is damaged and cannot be removed ({e.strerror})"
                ) from e
        self._owned = False

    def _own(self) -> None:
        """Make an existing clone's configuration patchkit's own, once per process, before git reads it.

        A cache restored from another branch or a fork may hold a clone whose
        ``config`` points ``origin`` elsewhere or names a program git runs
        (``uploadpack``, ``sshCommand``, a credential helper), or whose
        ``objects/info/alternates`` lends it another store's objects. The
        configuration is written anew, as ``_ensure_repo`` writes it, and the
        alternates removed; hooks and replace refs are off for every command
        (``_run_git``, ``gitclient.repo_env``).
        """
        if self._owned or not self.path.is_dir():
            return
        try:
            _write_config(self.path, self.url)
            (self.path / "objects" / "info" / "alternates").unlink(missing_ok=True)
        except (gitclient.GitFailed, OSError, WriteFailed) as e:
            if _config_is(self.path, self.url) and not (self.path / "objects" / "info" / "alternates").exists():
                self._owned = True  # a read-only cache that holds patchkit's own clone
                return
            raise WriteFailed(
                f"{self.path}: cannot reset the configuration of the cached clone ({_one_line(str(e))})",
                "make the cache writable, or delete the clone: it is fetched again",
            ) from e
        self._owned = True

    def _git(self, *args: str, check: bool = False) -> tuple[int, bytes, str]:
        """Run git on the cache repository: (status, stdout bytes, stderr text)."""
        self._own()
        status, out, err = _run_git(self.path, *args)
        if check and status != 0:
            raise SourceError(f"git {args[0]} in the cache {self.path} failed: {_reason(err)}")
        return status, out, err

    def _resolve(self, rev: str) -> str | None:
        """The full id of the commit ``rev`` names in the cache, or None."""
        status, out, _ = self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        sha = out.decode("ascii", "replace").strip()
        return sha if status == 0 and _FULL_SHA.fullmatch(sha) else None

    def _fetch(self, *refspecs: str) -> tuple[int, str]:
        with self._progress(f"git fetch {re.sub(r'//[^/@]*@', '//', self.url)}", unit=None):  # never a token on screen
            status, _, err = self._git("fetch", "--no-tags", "--no-recurse-submodules", "--quiet", "origin", *refspecs)
        return status, err

    def _fetch_commit(self, sha: str) -> str:
        status, _ = self._fetch(sha)
        if status == 0 and (commit := self._resolve(sha)):
            return commit
        # The server may not serve unadvertised objects: fetch what it advertises.
        status, err = self._fetch(*_HEADS_AND_TAGS)
        if status != 0:
            raise self._fetch_failed(err)
        if commit := self._resolve(sha):
            return commit
        raise BadInput(
            f"commit {sha} is not in {self.url} (fetched every branch and tag)",
            "check the commit id; a commit only on a deleted branch or a pull request cannot be fetched",
        )

    def _fetch_name(self, ref: str) -> str:
        status, err = self._fetch(ref)
        if status == 0:
            if commit := self._resolve("FETCH_HEAD"):
                return commit
            raise BadInput(f"{ref!r} in {self.url} does not name a commit")
        if "couldn't find remote ref" not in err:
            raise self._fetch_failed(err)
        if _SHORT_SHA.fullmatch(ref):
            # A short commit id (a version string's '+g<hex>'): resolve it among everything.
            status, err = self._fetch(*_HEADS_AND_TAGS)
            if status != 0:
                raise self._fetch_failed(err)
            if commit := self._resolve(ref.lower()):
                return commit
            raise BadInput(f"{ref!r} is not a unique commit id, branch or tag of {self.url}")
        raise BadInput(
            f"{self.url} has no branch or tag named {ref!r}",
            "give a branch, a tag or a full commit id",
        )

    def tags(self) -> list[tuple[str, str]]:
        """Every tag of ``url`` and the commit it names, in version order (fetches all branches and tags)."""
        with self._locked():
            self._ensure_repo()
            status, err = self._fetch(*_HEADS_AND_TAGS)
            if status != 0:
                raise self._fetch_failed(err)
        fmt = "--format=%(refname:short) %(objectname) %(*objectname)"
        _, out, _ = self._git("for-each-ref", "--sort=version:refname", fmt, "refs/tags", check=True)
        found = []
        for line in out.decode("utf-8", "replace").splitlines():
            name, _, rest = line.partition(" ")
            obj, _, peeled = rest.partition(" ")
            commit = peeled.strip() or obj
            if _FULL_SHA.fullmatch(commit):
                found.append((name, commit))
        return found

    def read_at(self, wanted: list[tuple[str, str]]) -> list[bytes | None]:
        """The blob at each (commit, path), all in one ``git cat-file --batch``: many versions of a file at once."""
        for _, path in wanted:
            check_path(path)
        names = [f"{commit}:{path}" for commit, path in wanted]
        self._own()
        return _cat_file_batch(self.path, names) if names else []

    def _fetch_failed(self, err: str) -> SourceError:
        return SourceError(
            f"git fetch from {self.url} failed: {_reason(err)}",
            f"check the URL and the network; the cache ({self.path}) is unchanged",
        )

    def contains(self, commit: str, in_commit: str, *, fetch: bool = False) -> bool | None:
        """Whether ``commit`` is ``in_commit`` or one of its ancestors; None when the cache cannot say.

        Without ``fetch`` no network is used: None unless ``in_commit`` is in
        the cache. With it, ``in_commit`` is fetched first. A fetch brings a
        commit's whole history, so a ``commit`` still absent afterwards is no
        ancestor of it.
        """
        if not (_FULL_SHA.fullmatch(commit) and _FULL_SHA.fullmatch(in_commit)):
            raise BadInput(f"{commit!r} / {in_commit!r}: containment needs two full commit ids")
        if not self.path.is_dir() or self._resolve(in_commit) is None:
            if not fetch:
                return None
            self.snapshot(in_commit)
        if self._resolve(commit) is None:
            return False
        status, _, err = self._git("merge-base", "--is-ancestor", commit, in_commit)
        if status in (0, 1):
            return status == 0
        raise SourceError(f"git merge-base --is-ancestor in the cache {self.path} failed: {_reason(err)}")

    def commit_age(self, commit: str, pinned: str | None = None) -> tuple[str, int | None] | None:
        """From the cache only: ``commit``'s committer date (RFC 3339) and how many commits ``pinned`` is ahead.

        None when ``commit`` is not in the cache; the count is None when
        ``pinned`` is not (or is not a descendant).
        """
        if not self.path.is_dir() or self._resolve(commit) is None:
            return None
        status, out, _ = self._git("show", "-s", "--format=%cI", commit)
        if status != 0:
            return None
        ahead = None
        if pinned and pinned != commit and self._resolve(pinned) is not None:
            status, count, _ = self._git("rev-list", "--count", f"{commit}..{pinned}")
            if status == 0 and count.strip().isdigit():
                ahead = int(count)
        elif pinned == commit:
            ahead = 0
        return out.decode("ascii", "replace").strip(), ahead

    def _keep(self, commit: str) -> None:
        """Keep ``commit`` reachable by a ref, so no gc ever prunes a pinned commit."""
        self._git("update-ref", f"refs/patchkit/{commit}", commit, check=True)


class GitSnapshot(Snapshot):
    """One commit of a git upstream, read from the cache repository."""

    def __init__(self, source: GitSource, commit: str) -> None:
        self.source = source
        #: The full 40-hex commit id.
        self.commit = commit

    def __repr__(self) -> str:
        return f"GitSnapshot({self.source.url!r}, {self.commit})"

    @property
    def pin(self) -> Pin:
        return Pin(kind="git", commit=self.commit, path=self.source.url)

    def read(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The blob at each path of this commit: one ``git ls-tree`` and one ``git cat-file --batch``.

        A path that does not exist at this commit, or names a directory or a
        submodule, reads as None; a symlink reads as git stores it (its target
        text). A path that is not a clean relative path raises ``BadInput``.
        The blobs are asked for by id from the commit's listing: naming them
        ``COMMIT:PATH`` would make git walk the tree again for every path.
        """
        wanted = list(dict.fromkeys(paths))
        for p in wanted:
            check_path(p)
        if not wanted:
            return {}
        try:
            return self._read(wanted)
        except SourceError:
            if not self.source._damaged():
                raise
            self.source._discard()
            self.source.snapshot(self.commit)  # fetched again into a new clone
            return self._read(wanted)

    def _read(self, wanted: list[str]) -> dict[str, bytes | None]:
        """``read``, each blob checked against its object id: a blob the listing names and git cannot give is damage."""
        ids = self.blob_ids()
        found = [p for p in wanted if p in ids]
        blobs = dict(zip(found, _cat_file_batch(self.source.path, [ids[p] for p in found]), strict=True))
        for p in found:
            data = blobs[p]
            if data is None or _object_id(b"blob", data, len(ids[p])) != ids[p]:
                raise SourceError(f"{self.source.path}: the blob of {p} at {self.commit[:12]} is damaged in the cache")
        return {p: blobs.get(p) for p in wanted}

    def blob_ids(self) -> dict[str, str]:
        """Every file of this commit (regular, executable or symlink) and its blob id, from ``git ls-tree -r``."""
        _, out, _ = self.source._git("ls-tree", "-r", "-z", "--full-tree", self.commit, check=True)
        ids: dict[str, str] = {}
        for record in out.split(b"\0"):
            meta, _, path = record.partition(b"\t")
            _, _, rest = meta.partition(b" ")
            kind, _, oid = rest.partition(b" ")
            if kind == b"blob":
                ids[path.decode("utf-8", "surrogateescape")] = oid.decode("ascii")
        return ids

    def renames(self, other: Snapshot, paths: Iterable[str]) -> Mapping[str, str]:
        """Paths of this commit that ``other``'s commit has under a new name, by git's rename detection.

        Runs ``git diff -M --diff-filter=R`` over the whole tree (a rename's new
        name lies outside any pathspec of the old one). A snapshot of another
        kind of source, or of a commit not in this cache, has no renames.
        """
        wanted = set(paths)
        if not isinstance(other, GitSnapshot) or not wanted:
            return {}
        if other.source.path != self.source.path and not self.source._resolve(other.commit):
            return {}
        status, out, err = self.source._git(
            "diff", "--no-ext-diff", "-M", "--name-status", "-z", "--diff-filter=R", self.commit, other.commit
        )
        if status != 0:
            raise SourceError(f"git diff {self.commit[:12]} {other.commit[:12]} failed: {_reason(err)}")
        fields = out.split(b"\0")
        found: dict[str, str] = {}
        i = 0
        while i + 2 < len(fields):
            if fields[i].startswith(b"R"):
                old = fields[i + 1].decode("utf-8", "surrogateescape")
                new = fields[i + 2].decode("utf-8", "surrogateescape")
                if old in wanted:
                    found[old] = new
                i += 3
            else:
                i += 1
        return found


def _remove(path: Path) -> None:
    """Remove ``path``, whatever it is: a directory and what it holds, a file, a link (never what it points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _object_id(kind: bytes, data: bytes, width: int) -> str:
    """Git's id of an object: the sha1 (40 hex digits) or sha256 (64) of its header and bytes."""
    h = hashlib.sha256() if width == 64 else hashlib.sha1(usedforsecurity=False)
    h.update(kind + b" %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def _config(url: str) -> dict[tuple[str, str], str]:
    """Every value of a clone's ``config``: what ``git init --bare`` writes, ``_CONFIG`` and ``origin`` at ``url``."""
    core = {("core", "repositoryformatversion"): "0", ("core", "filemode"): "true", ("core", "bare"): "true"}
    remote = {('remote "origin"', "url"): url, ('remote "origin"', "fetch"): _HEADS_AND_TAGS[0]}
    return {**core, **_CONFIG, **remote}


def _config_is(git_dir: Path, url: str) -> bool:
    """Whether the clone's ``config`` holds exactly ``_config(url)``, as ``git config --list`` reads it."""
    status, out, _ = gitclient.run(git_dir, ["config", "--file", str(git_dir / "config"), "--list"])
    want = sorted(_listed(section, option, value) for (section, option), value in _config(url).items())
    return status == 0 and sorted(out.decode("utf-8", "replace").splitlines()) == want


def _listed(section: str, option: str, value: str) -> str:
    """One value as ``git config --list`` prints it: ``remote.origin.url=…`` (section and key in lower case)."""
    name, _, sub = section.partition(" ")
    prefix = f"{name.lower()}.{sub.strip(chr(34))}." if sub else f"{name.lower()}."
    return f"{prefix}{option.lower()}={value}"


def _write_config(git_dir: Path, url: str) -> None:
    """The clone's ``config``, whole: what ``git init --bare`` writes, ``_CONFIG`` and ``origin`` at ``url``.

    Written beside it and renamed over it, so a reader sees the old file or
    this one, and nothing of the old survives.
    """
    from patchkit.store.repo import move_into

    fd, tmp = tempfile.mkstemp(prefix=".config-", dir=git_dir)
    os.close(fd)
    try:
        gitclient.write_config(Path(tmp), _config(url))
        move_into(Path(tmp), git_dir / "config", durable=False)  # a cache: fetched again if lost
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _run_git(git_dir: Path, *args: str) -> tuple[int, bytes, str]:
    """Run git on the repository ``git_dir``, its hooks off; never raises on a non-zero status.

    ``ext::`` URLs stay refused whatever the user's git allows (``protocol.allow=always``):
    an ``ext::`` URL is a command, and the URL comes from a lockfile anyone may have written.
    """
    try:
        argv = ["-c", f"core.hooksPath={os.devnull}", "-c", "protocol.ext.allow=never", f"--git-dir={git_dir}", *args]
        return gitclient.run(git_dir.parent, argv, env=gitclient.repo_env(git_dir))
    except gitclient.GitMissing as e:
        raise SourceError(str(e), e.hint) from e


def _cat_file_batch(git_dir: Path, names: list[str]) -> list[bytes | None]:
    """Each object name's blob (None otherwise), read by one ``git cat-file --batch``."""
    try:
        return gitclient.read_objects(git_dir, names)
    except (gitclient.GitMissing, gitclient.GitFailed) as e:
        raise SourceError(str(e), e.hint) from e


def _check_ref(ref: str) -> None:
    """Refuse what git would take as an option, a refspec or a revision expression."""
    bad = (
        not ref
        or ref.startswith(("-", "+", "/"))
        or ref.endswith(("/", ".", ".lock"))
        or ".." in ref
        or "@{" in ref
        or "//" in ref
        or _REF_FORBIDDEN.search(ref) is not None
    )
    if bad:
        raise BadInput(
            f"{ref!r} is not a git commit id, branch or tag",
            "give a full commit id (40 hex digits), a branch or a tag name",
        )


def _readable_name(url: str) -> str:
    """The last component of a URL, safe as a directory name: for people browsing the cache."""
    last = re.split(r"[/:]", url.rstrip("/"))[-1].removesuffix(".git")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", last).lstrip(".")[:40]
    return name or "repo"


def _reason(stderr: str) -> str:
    """git's one-line reason: its first ``fatal:``/``error:`` line, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal:", "error:"):
            if line.startswith(prefix):
                return _one_line(line[len(prefix) :])
    return _one_line(lines[-1]) if lines else ""


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."
