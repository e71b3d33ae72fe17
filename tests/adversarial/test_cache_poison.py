"""A poisoned cache changes no answer: the same output and exit code with the cache empty, warm, planted or damaged.

A CI cache restored from another branch or a fork is written by whoever
controls that branch. Each state below fills ``PATCHKIT_CACHE`` the way such
a cache could be: every file name the former memos used (``verdicts/``,
``merges/``), holding pickles that run a command when loaded or that carry
another lockfile; the real content of a warm cache cut short, with a byte
flipped, or replaced by a directory. ``check`` (text and JSON), ``sums
--check`` and a small ``rebase`` then run as real processes, and each must
print byte for byte what it prints with an empty cache, with the same exit
code, never 4, and never run the planted command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import patchkit as patchkit_package
from patchkit.lockfile.reader import loads
from tests.adversarial.conftest import patchkit
from tests.conftest import Invoke, git, snapshot
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy

MARKER = "planted-code-ran"
FENCED = WORKER.replace(b"        for b in blocks:\n", b"        self.stream.synchronize()\n        for b in blocks:\n")
NEWER = WORKER.replace(b"import torch\n", b"import torch\nimport logging\n")


class _Runs:
    """What a pickle calls when it is loaded: a command that leaves ``marker`` behind."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _files(cache: Path, clones: bool = True) -> list[Path]:
    """The files of a cache; without ``clones``, those outside the upstreams' git clones (``git/``)."""
    found = sorted(p for p in cache.rglob("*") if p.is_file() and not p.is_symlink())
    return found if clones else [p for p in found if p.relative_to(cache).parts[0] != "git"]


def _old_memo_names(root: Path) -> list[str]:
    """The files the former memos kept for the repository at ``root``, relative to the cache."""
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32]
    uses = ("check", "sums", "rebase", "lockfile", "lines")
    rng = random.Random(29)
    merges = [f"merges/{kind}-{rng.randbytes(32).hex()}.memo" for kind in ("merges", "diffs") for _ in range(3)]
    return [f"verdicts/{use}-{name}" for use in uses] + merges


def _code_version() -> bytes:
    """The digest of patchkit's sources that keyed the former memos: public, so anyone could compute it."""
    package = Path(patchkit_package.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.digest()


def _lockfile_memo(root: Path, lock: bytes) -> bytes:
    """A typed-lockfile memo as the former code keyed it for the bytes of ``root``'s lockfile, holding ``lock``."""
    data = (root / "lockfile.toml").read_bytes() if (root / "lockfile.toml").exists() else b""
    key = hashlib.sha256(_code_version() + sys.version.encode() + b"\0lockfile\0" + data).digest()
    return key + lock


def _planted(cache: Path, warm: Path, roots: list[Path], tmp: Path, clones: bool = True) -> None:
    """Every former memo file of each repository: a harmful pickle, another lockfile (keyed as before), keys."""
    shutil.copytree(warm, cache, dirs_exist_ok=True)
    runs = pickle.dumps(_Runs(tmp / MARKER))
    lock = loads((roots[0] / "lockfile.toml").read_text())
    stale = pickle.dumps(dataclasses.replace(lock, patches=lock.patches[:1]))  # another lockfile
    for root in roots:
        for i, rel in enumerate(_old_memo_names(root)):
            path = cache / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            body = (runs, stale, hashlib.sha256(rel.encode()).digest() * 8)[i % 3]
            magic = b"patchkit merge memo 3\n" if rel.startswith("merges/") else hashlib.sha256(b"key").digest()
            path.write_bytes(_lockfile_memo(root, stale) if "/lockfile-" in rel else magic + body)


def _truncated(cache: Path, warm: Path, roots: list[Path], tmp: Path, clones: bool = True) -> None:
    shutil.copytree(warm, cache, dirs_exist_ok=True)
    for path in _files(cache, clones):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def _flipped(cache: Path, warm: Path, roots: list[Path], tmp: Path, clones: bool = True) -> None:
    shutil.copytree(warm, cache, dirs_exist_ok=True)
    rng = random.Random(2929)
    for path in _files(cache, clones):
        data = bytearray(path.read_bytes())
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            path.chmod(0o644)
            path.write_bytes(bytes(data))


def _directories(cache: Path, warm: Path, roots: list[Path], tmp: Path, clones: bool = True) -> None:
    """A directory wherever a file is expected: every file of a warm cache and every former memo name."""
    shutil.copytree(warm, cache, dirs_exist_ok=True)
    for path in _files(cache, clones):
        path.chmod(0o644)
        path.unlink()
        path.mkdir()
    for root in roots:
        for rel in _old_memo_names(root):
            (cache / rel).mkdir(parents=True, exist_ok=True)


def _warm(cache: Path, warm: Path, roots: list[Path], tmp: Path, clones: bool = True) -> None:
    shutil.copytree(warm, cache, dirs_exist_ok=True)


State = Callable[[Path, Path, list[Path], Path, bool], None]
STATES: dict[str, State] = {
    "warm": _warm,
    "planted": _planted,
    "truncated": _truncated,
    "flipped": _flipped,
    "directories": _directories,
}
COMMANDS = [("check",), ("check", "--format", "json"), ("sums", "--check"), ("sums", "--check", "--format", "json")]


def _answer(root: Path, cache: Path, command: tuple[str, ...]) -> tuple[int, str]:
    r = patchkit(*command, cwd=root, env={"PATCHKIT_CACHE": str(cache)})
    assert r.returncode != 4 and "Traceback" not in r.stderr, (command, r.stderr)
    return r.returncode, r.stdout


@pytest.fixture
def stale(deploy: Path) -> Path:
    """The deployment with an overlay edited after it was pinned: check must report it in every cache state."""
    overlay = deploy / "patches" / "fp8_fnuz.py"
    overlay.write_bytes(overlay.read_bytes() + b"# edited\n")
    return deploy


@pytest.mark.parametrize("repo", ["deploy", "stale"])
def test_check_and_sums_answer_alike_whatever_the_cache_holds(
    repo: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    root: Path = request.getfixturevalue(repo)
    warm = Path(os.environ["PATCHKIT_CACHE"])  # what building the deployment left: the overlay's base
    assert _files(warm)
    empty = {c: _answer(root, tmp_path / "empty", c) for c in COMMANDS}
    assert empty[("check",)][0] == (0 if repo == "deploy" else 1)
    for name, fill in STATES.items():
        cache = tmp_path / f"cache-{name}"
        fill(cache, warm, [root], tmp_path)
        got = {c: _answer(root, cache, c) for c in COMMANDS}
        assert got == empty, name
    assert not (tmp_path / MARKER).exists()


def _rebase_answers(invoke: Invoke, tmp_path: Path, states: list[str], clones: bool) -> None:
    """A small rebase from an empty cache, then from each state (``clones``: the git clones damaged too)."""
    upstream = Upstream(tmp_path / "vllm")
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    template = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": NEWER})
    warm = tmp_path / "warm"

    def rebase(name: str, cache: Path) -> tuple[int, str, dict[str, bytes]]:
        root = tmp_path / f"run-{name}"
        shutil.copytree(template, root, symlinks=True)
        code, out = _answer(root, cache, ("rebase", "--onto", c2))
        return code, out, snapshot(root)

    first = rebase("empty", warm)  # an empty cache: the rebase fills it (the clone, the blobs)
    assert first[0] == 0 and b"import logging" in first[2]["patches/worker.py"]
    assert _files(warm, clones=False) and _files(warm)
    for name in states:
        cache = tmp_path / f"cache-{name}"
        STATES[name](cache, warm, [template, tmp_path / f"run-{name}"], tmp_path, clones)
        assert rebase(name, cache) == first, name
    assert not (tmp_path / MARKER).exists()


def test_a_rebase_writes_the_same_repository_whatever_the_cache_holds(invoke: Invoke, tmp_path: Path) -> None:
    _rebase_answers(invoke, tmp_path, list(STATES), clones=False)


@pytest.mark.parametrize("state", ["truncated", "flipped", "directories"])
def test_a_rebase_from_a_damaged_clone_writes_the_same_repository(state: str, invoke: Invoke, tmp_path: Path) -> None:
    _rebase_answers(invoke, tmp_path, [state], clones=True)


def _plant_in_clone(clone: Path, marker: Path, evil: Path, blob: str) -> None:
    """A clone made hostile: a replace ref, alternates, hooks, and programs and another origin in its config."""
    env = {**os.environ, "GIT_DIR": str(clone)}
    planted = (
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"], input=b"planted\n", env=env, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    subprocess.run(["git", "update-ref", f"refs/replace/{blob}", planted], env=env, check=True)
    hooks = clone / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("reference-transaction", "post-update", "pre-auto-gc", "post-checkout", "fsmonitor-watchman"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}-hook-{name}\n")
        hook.chmod(0o755)
    with (clone / "config").open("a") as f:
        f.write(
            f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = touch {marker}-fsmon\n\tsshCommand = touch {marker}-ssh\n"
            f'[remote "origin"]\n\tuploadpack = touch {marker}-up; git-upload-pack\n'
            f'[url "{evil.as_uri()}"]\n\tinsteadOf = {evil.parent.joinpath("vllm").as_uri()}\n'
            f'[credential]\n\thelper = !touch {marker}-cred\n[protocol "ext"]\n\tallow = always\n'
        )
    (clone / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (clone / "objects" / "info" / "alternates").write_text(f"{evil / '.git' / 'objects'}\n")


def test_a_planted_clone_runs_nothing_and_reads_only_its_upstream(invoke: Invoke, tmp_path: Path) -> None:
    upstream = Upstream(tmp_path / "vllm")
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    template = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    c2 = upstream.commit({"vllm/worker.py": NEWER})
    blob = git(upstream.path, "rev-parse", f"{c2}:vllm/worker.py").strip()
    evil = Upstream(tmp_path / "evil")
    evil.commit({"vllm/worker.py": b"import os\nos.system('id')\n"})
    warm = Path(os.environ["PATCHKIT_CACHE"])  # what building the deployment left: the clone at C1, the bases
    (clone,) = [p for p in (warm / "git").iterdir() if p.is_dir()]

    def rebase(name: str, cache: Path) -> tuple[int, str, dict[str, bytes]]:
        root = tmp_path / f"run-{name}"
        shutil.copytree(template, root, symlinks=True)
        code, out = _answer(root, cache, ("rebase", "--onto", c2))
        return code, out, snapshot(root)

    first = rebase("empty", tmp_path / "empty")
    assert first[0] == 0 and b"import logging" in first[2]["patches/worker.py"]
    marker = tmp_path / MARKER
    _plant_in_clone(clone, marker, evil.path, blob)
    assert rebase("planted", warm) == first  # C2 fetched into the planted clone, from the upstream
    assert rebase("again", warm) == first  # and read back from it
    assert not list(tmp_path.glob(f"{MARKER}*"))
