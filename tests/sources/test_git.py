"""GitSource against real repositories built with the git CLI and reached through file:// URLs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import git

from patchkit.errors import EXIT_BAD_INPUT, EXIT_EXTERNAL, BadInput, SourceError
from patchkit.sources.directory import DirSource
from patchkit.sources.git import GitSnapshot, GitSource
from patchkit.sources.interface import Pin

WORKER = "".join(f"def step_{i}(x):\n    return x + {i}\n\n" for i in range(15)).encode()
BINARY = bytes(range(256)) * 4 + b"\0\xff\xfe\x00"
CRLF = b"first line\r\nsecond line\r\n\r\nno final newline"
UNICODE_PATH = "docs/with space/\u00fcn\u00ef.txt"
MANY = 280


def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the user's git configuration nor a surrounding repository may change what git does."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_TRACE2_EVENT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _hermetic_git(monkeypatch: pytest.MonkeyPatch) -> None:
    _hermetic(monkeypatch)


@dataclass
class Upstream:
    path: Path
    url: str
    c1: str  # the first commit (tag v1)
    c2: str  # main: worker.py renamed with an edit, gone.py deleted, keep.py changed
    feature: str  # a branch from c1

    def rev(self, ref: str) -> str:
        return git(self.path, "rev-parse", f"{ref}^{{commit}}").strip()


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def _upstream_template(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _hermetic(monkeypatch)
        return _build_upstream(tmp_path_factory.mktemp("template") / "upstream")


@pytest.fixture
def upstream(_upstream_template: Upstream, tmp_path: Path) -> Upstream:
    """The upstream repository, a private copy per test (tests move branches and delete it)."""
    repo = tmp_path / "upstream"
    shutil.copytree(_upstream_template.path, repo, symlinks=True)
    t = _upstream_template
    return Upstream(repo, repo.as_uri(), t.c1, t.c2, t.feature)


def _build_upstream(repo: Path) -> Upstream:
    """Two commits on main (a rename with an edit, a deletion), an annotated tag and a branch."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "core.autocrlf", "false")
    (repo / "vllm").mkdir()
    (repo / "vllm" / "worker.py").write_bytes(WORKER)
    (repo / "vllm" / "gone.py").write_bytes(b"DELETED = True\n")
    (repo / "vllm" / "keep.py").write_bytes(b"KEEP = 1\n")
    (repo / "data").mkdir()
    (repo / "data" / "blob.bin").write_bytes(BINARY)
    (repo / "crlf.txt").write_bytes(CRLF)
    (repo / UNICODE_PATH).parent.mkdir(parents=True)
    (repo / UNICODE_PATH).write_bytes("\u00fcnicode\n".encode())
    (repo / "many").mkdir()
    for i in range(MANY):
        (repo / "many" / f"f{i:03}.py").write_bytes(f"N = {i}\n".encode())
    os.symlink("vllm/keep.py", repo / "link.py")
    git(repo, "add", "-A")
    # A submodule entry (gitlink) whose commit is not in this repository.
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendor/sub")
    c1 = _commit(repo, "one")
    git(repo, "tag", "-a", "v1", "-m", "release 1")

    git(repo, "mv", "vllm/worker.py", "vllm/v1_worker.py")
    (repo / "vllm" / "v1_worker.py").write_bytes(WORKER.replace(b"x + 3\n", b"x + 3  # edited\n"))
    git(repo, "rm", "-q", "vllm/gone.py")
    (repo / "vllm" / "keep.py").write_bytes(b"KEEP = 2\n")
    c2 = _commit(repo, "two")

    git(repo, "checkout", "-q", "-b", "feature", c1)
    (repo / "feature.py").write_bytes(b"FEATURE = 1\n")
    feature = _commit(repo, "feature")
    git(repo, "checkout", "-q", "main")
    git(repo, "gc", "-q")  # a few pack files copy faster than hundreds of loose objects
    return Upstream(repo, repo.as_uri(), c1, c2, feature)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def _trace(path: Path) -> list[list[str]]:
    """The argv of every git process recorded in a GIT_TRACE2_EVENT file."""
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["argv"] for e in events if e["event"] == "start"]


def test_snapshot_resolves_commits_branches_and_tags(upstream: Upstream, cache: Path) -> None:
    source = GitSource(upstream.url, cache)
    assert source.snapshot(upstream.c1).commit == upstream.c1
    assert source.snapshot("main").commit == upstream.c2
    assert source.snapshot("HEAD").commit == upstream.c2
    assert source.snapshot("feature").commit == upstream.feature
    assert source.snapshot("refs/heads/feature").commit == upstream.feature
    assert source.snapshot("v1").commit == upstream.c1  # annotated tag, peeled to its commit
    assert source.snapshot(upstream.c2[:10]).commit == upstream.c2  # a version string's short id
    assert source.snapshot(upstream.c1.upper()).commit == upstream.c1
    snap = source.snapshot(upstream.c2)
    assert snap.pin == Pin(kind="git", commit=upstream.c2, path=source.url)  # the URL is recorded with the commit
    # One bare clone per URL, named for people browsing the cache.
    (clone,) = [p for p in (cache / "git").iterdir() if p.is_dir()]
    assert clone == source.path
    assert clone.name.startswith("upstream-")
    assert git(clone, "rev-parse", "--is-bare-repository").strip() == "true"
    assert git(clone, "cat-file", "-t", f"refs/patchkit/{upstream.c1}").strip() == "commit"


def test_read_is_byte_exact(upstream: Upstream, cache: Path) -> None:
    old = GitSource(upstream.url, cache).snapshot(upstream.c1)
    files = ["data/blob.bin", "crlf.txt", UNICODE_PATH, "vllm/worker.py", "vllm/gone.py", "link.py"]
    got = old.read([*files, "vllm", "vendor/sub", "nope.py", "vllm/keep.py/x", "many/f007.py"])
    assert got == {
        "data/blob.bin": BINARY,
        "crlf.txt": CRLF,
        UNICODE_PATH: "\u00fcnicode\n".encode(),
        "vllm/worker.py": WORKER,
        "vllm/gone.py": b"DELETED = True\n",
        "link.py": b"vllm/keep.py",  # a symlink reads as git stores it: its target
        "vllm": None,  # a directory
        "vendor/sub": None,  # a submodule
        "nope.py": None,
        "vllm/keep.py/x": None,
        "many/f007.py": b"N = 7\n",
    }
    new = GitSource(upstream.url, cache).snapshot("main")
    assert new.read(["vllm/gone.py", "vllm/worker.py", "vllm/keep.py"]) == {
        "vllm/gone.py": None,
        "vllm/worker.py": None,
        "vllm/keep.py": b"KEEP = 2\n",
    }
    assert new.read([]) == {}


def test_reading_300_paths_runs_one_listing_and_one_cat_file_process(
    upstream: Upstream, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = GitSource(upstream.url, cache).snapshot(upstream.c1)
    paths = [f"many/f{i:03}.py" for i in range(MANY)] + [f"missing/{i}.py" for i in range(20)]
    trace = tmp_path / "trace.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    got = snap.read(paths)
    monkeypatch.delenv("GIT_TRACE2_EVENT")
    assert len(got) == 300
    assert got["many/f279.py"] == b"N = 279\n"
    assert got["missing/3.py"] is None
    processes = _trace(trace)
    assert len(processes) == 2, processes  # as many for 3 paths as for 300
    assert "ls-tree" in processes[0]
    assert "cat-file" in processes[1]
    assert "--batch" in processes[1]


def test_renames_follow_gits_rename_detection(upstream: Upstream, cache: Path) -> None:
    source = GitSource(upstream.url, cache)
    old, new = source.snapshot(upstream.c1), source.snapshot(upstream.c2)
    wanted = ["vllm/worker.py", "vllm/gone.py", "vllm/keep.py", "crlf.txt"]
    assert old.renames(new, wanted) == {"vllm/worker.py": "vllm/v1_worker.py"}
    assert old.renames(new, ["vllm/keep.py"]) == {}
    assert new.renames(old, ["vllm/v1_worker.py"]) == {"vllm/v1_worker.py": "vllm/worker.py"}
    assert old.renames(DirSource(upstream.path).snapshot(), wanted) == {}


def test_a_cached_commit_needs_no_network(
    upstream: Upstream, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    GitSource(upstream.url, cache).snapshot(upstream.c1)
    shutil.rmtree(upstream.path)
    trace = tmp_path / "trace.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    again = GitSource(upstream.url, cache).snapshot(upstream.c1)
    assert again.read(["crlf.txt"]) == {"crlf.txt": CRLF}
    monkeypatch.delenv("GIT_TRACE2_EVENT")
    assert not [argv for argv in _trace(trace) if "fetch" in argv or "git-upload-pack" in argv]
    # A branch name always asks the remote, which is gone now.
    with pytest.raises(SourceError):
        GitSource(upstream.url, cache).snapshot("main")


def test_a_moved_branch_is_fetched_again(upstream: Upstream, cache: Path) -> None:
    source = GitSource(upstream.url, cache)
    first = source.snapshot("feature")
    git(upstream.path, "checkout", "-q", "feature")
    (upstream.path / "feature.py").write_bytes(b"FEATURE = 2\n")
    moved = _commit(upstream.path, "feature again")
    second = source.snapshot("feature")
    assert (first.commit, second.commit) == (upstream.feature, moved)
    assert first.read(["feature.py"]) == {"feature.py": b"FEATURE = 1\n"}
    assert second.read(["feature.py"]) == {"feature.py": b"FEATURE = 2\n"}


def test_a_server_that_refuses_unadvertised_commits(
    upstream: Upstream, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Protocol v0 serves only advertised tips: an older commit comes with every branch and tag."""
    git(upstream.path, "tag", "-d", "v1")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    trace = tmp_path / "trace.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    snap = GitSource(upstream.url, cache).snapshot(upstream.c1)
    monkeypatch.delenv("GIT_TRACE2_EVENT")
    assert snap.read(["vllm/gone.py"]) == {"vllm/gone.py": b"DELETED = True\n"}
    fetches = [argv for argv in _trace(trace) if "fetch" in argv]
    assert len(fetches) == 2
    assert fetches[0][-1] == upstream.c1
    assert "+refs/heads/*:refs/remotes/origin/*" in fetches[1]


def test_unknown_refs_are_bad_input(upstream: Upstream, cache: Path) -> None:
    source = GitSource(upstream.url, cache)
    with pytest.raises(BadInput, match="no branch or tag named 'no-such-branch'") as e:
        source.snapshot("no-such-branch")
    assert e.value.exit_code == EXIT_BAD_INPUT
    with pytest.raises(BadInput, match=r"commit 0{40} is not in"):
        source.snapshot("0" * 40)
    for bad in ("-uhoh", "main:refs/heads/x", "+main", "a..b", "main@{1}", "has space", ""):
        with pytest.raises(BadInput, match="is not a git commit id, branch or tag"):
            source.snapshot(bad)
    snap = source.snapshot("main")
    for bad in ("../etc/passwd", "/etc/passwd", "vllm/../crlf.txt", "a\nb"):
        with pytest.raises(BadInput, match=r"not a path inside the upstream tree|control character"):
            snap.read([bad])
    # The cache still works after all of that.
    assert source.snapshot(upstream.c1).read(["vllm/keep.py"]) == {"vllm/keep.py": b"KEEP = 1\n"}


def test_an_unreachable_url_is_a_source_error_and_leaves_the_cache_usable(tmp_path: Path, cache: Path) -> None:
    later = tmp_path / "later"
    source = GitSource(later.as_uri(), cache)
    with pytest.raises(SourceError) as e:
        source.snapshot("main")
    assert e.value.exit_code == EXIT_EXTERNAL
    assert "\n" not in str(e.value)
    assert str(e.value) == f"git fetch from {later.as_uri()} failed: '{later}' does not appear to be a git repository"
    with pytest.raises(SourceError, match="does not appear to be a git repository"):
        source.snapshot("a" * 40)
    # The remote appears: the same cache fetches from it.
    later.mkdir()
    git(later, "init", "-q", "-b", "main")
    (later / "x").write_bytes(b"x\n")
    commit = _commit(later, "x")
    assert source.snapshot("main").commit == commit
    assert source.snapshot(commit).read(["x"]) == {"x": b"x\n"}


def test_the_environment_of_another_repository_is_not_followed(
    upstream: Upstream, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a git hook, patchkit sees GIT_DIR and friends for the user's repository; the cache ignores them."""
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    git(decoy, "init", "-q")
    before = {p.relative_to(decoy).as_posix(): p.read_bytes() for p in decoy.rglob("*") if p.is_file()}
    monkeypatch.setenv("GIT_DIR", str(decoy / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(decoy / ".git" / "index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(decoy / ".git" / "objects"))
    monkeypatch.setenv("GIT_COMMON_DIR", str(decoy / ".git"))
    source = GitSource(upstream.url, cache)
    snap = source.snapshot("main")
    assert snap.commit == upstream.c2
    assert snap.read(["vllm/keep.py"]) == {"vllm/keep.py": b"KEEP = 2\n"}
    assert source.snapshot(upstream.c1).renames(snap, ["vllm/worker.py"]) == {"vllm/worker.py": "vllm/v1_worker.py"}
    assert {p.relative_to(decoy).as_posix(): p.read_bytes() for p in decoy.rglob("*") if p.is_file()} == before


def test_a_url_that_is_an_option_is_refused(cache: Path) -> None:
    with pytest.raises(BadInput):
        GitSource("--upload-pack=touch /tmp/pwned", cache)


def test_concurrent_processes_share_one_cache(upstream: Upstream, cache: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from patchkit.sources.git import GitSource
        snap = GitSource(sys.argv[1], Path(sys.argv[2])).snapshot(sys.argv[3])
        data = snap.read(["vllm/keep.py"])["vllm/keep.py"]
        print(snap.commit, data.decode().strip())
        """
    )
    refs = ["main", upstream.c1, "feature", "v1", "main", upstream.c2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, upstream.url, str(cache), ref],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for ref in refs
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        outputs.append(out.decode().split())
    assert outputs == [
        [upstream.c2, "KEEP", "=", "2"],
        [upstream.c1, "KEEP", "=", "1"],
        [upstream.feature, "KEEP", "=", "1"],
        [upstream.c1, "KEEP", "=", "1"],
        [upstream.c2, "KEEP", "=", "2"],
        [upstream.c2, "KEEP", "=", "2"],
    ]
    clones = [p for p in (cache / "git").iterdir() if p.is_dir()]
    assert len(clones) == 1
    git(clones[0], "fsck", "--strict", "--no-progress")
    assert isinstance(GitSource(upstream.url, cache).snapshot(upstream.feature), GitSnapshot)
