"""Signals and races: files changed under a hash, directories swapped for links, a writer killed mid-merge.

Each attack runs as a bounded loop against real processes: a writer thread
truncates and rewrites a pinned file while ``sums --check``, ``check`` and
the library hasher read it; a thread swaps ``patches/`` for a symlink to an
outside directory while ``remove``, ``lock`` and ``sums`` run; a rebase is
``kill -9``-ed while its merge workers run. ``RACE_RUNS`` makes the loops
longer locally (``RACE_RUNS=1200``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Invoke

RUNS = int(os.environ.get("RACE_RUNS", "120"))
BIG = 12 * 1024 * 1024  # several read chunks: the file changes while it is read, not only between reads


@pytest.fixture
def pinned_big(tmp_path: Path, invoke: Invoke) -> Path:
    """A deployment pinning ``tuning/big.bin`` (``BIG`` bytes), with its SHA256SUMS written."""
    root = tmp_path / "d"
    assert invoke("init", str(root)).exit_code == 0
    (root / "tuning" / "big.bin").write_bytes(random.Random(29).randbytes(BIG))
    added = invoke("add", str(root / "tuning" / "big.bin"), "--target", "/opt/big.bin", repo=root)
    assert added.exit_code == 0, added.stderr
    assert invoke("sums", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 0
    return root


def _churn(path: Path, stop: threading.Event) -> None:
    """Truncate ``path`` to a random length and write it back whole, again and again, until ``stop``."""
    data = path.read_bytes()
    rng = random.Random(7)
    while not stop.is_set():
        os.truncate(path, rng.randrange(0, len(data)))
        stop.wait(rng.random() * 0.002)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
        stop.wait(rng.random() * 0.004)


@pytest.fixture
def churning(pinned_big: Path) -> Iterator[Path]:
    """``pinned_big`` with a writer truncating and rewriting its big file for as long as the test runs."""
    stop = threading.Event()
    writer = threading.Thread(target=_churn, args=(pinned_big / "tuning" / "big.bin", stop), daemon=True)
    writer.start()
    try:
        yield pinned_big
    finally:
        stop.set()
        writer.join()


# The reader: one process running the commands and the library hasher RUNS times (a Python start per run would
# spend the time on interpreter start-up, not on the race). A signal kills it and shows in its return code.
READER = """
import json, sys
from pathlib import Path
from click.testing import CliRunner
from patchkit.core import hashing
from patchkit.cli import cli
out = []
for i in range(int(sys.argv[1])):
    kind = ("sums", "check", "library")[i % 3]
    if kind == "library":
        got = hashing.sha256_many([Path("tuning/big.bin")], jobs=2)[Path("tuning/big.bin")]
        out.append([kind, 0 if isinstance(got, str) else 1, str(got)])
        continue
    args = ["sums", "--check"] if kind == "sums" else ["check"]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    out.append([kind, r.exit_code, r.stdout + r.stderr])
print(json.dumps(out))
"""


def _reader(script: str, runs: int, cwd: Path, *args: str) -> list[Any]:
    """What the reader ``script`` printed after ``runs`` runs in ``cwd``; fails when a signal killed it."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(runs), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the reader died of signal {-done.returncode}" if done.returncode < 0 else done.stderr
    return list(json.loads(done.stdout))


def test_a_file_truncated_and_rewritten_while_it_hashes_never_kills_the_reader(churning: Path) -> None:
    runs = max(RUNS // 4, 12)  # each CLI run costs tens of milliseconds more than a library run
    results = _reader(READER, runs, churning)
    assert len(results) == runs
    disturbed = 0
    for kind, code, text in results:
        assert code in (0, 1), f"{kind} exited {code}: {text}"
        if code == 1:
            disturbed += 1
            # The clear error names the file: changed while read, or read whole at a moment it was short.
            assert "big.bin" in text, f"{kind}: {text}"
            assert "internal error" not in text and "Traceback" not in text
    assert disturbed, "the writer never caught a reader: the race was not run"


def test_the_library_hasher_reports_a_change_as_an_error_naming_the_file(churning: Path) -> None:
    """Each read gives a digest (of the file as it stood through the whole read) or ``Changed`` naming it."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from patchkit.core import hashing\n"
        "p = Path('tuning/big.bin')\n"
        "out = []\n"
        "for i in range(int(sys.argv[1])):\n"
        "    try:\n"
        "        out.append(hashing.digest_file(p, hashing.SHA256 if i % 2 else hashing.GIT_SHA1))\n"
        "    except hashing.Changed as e:\n"
        "        out.append(f'changed {e.filename}: {e.strerror}')\n"
        "print(json.dumps(out))\n"
    )
    results = _reader(script, RUNS, churning)
    assert len(results) == RUNS
    changed = [r for r in results if r.startswith("changed")]
    assert all(len(r) in (40, 64) and set(r) <= set("0123456789abcdef") for r in results if r not in changed)
    assert changed, "the writer never caught the hasher: the race was not run"
    assert all(r.startswith("changed tuning/big.bin: changed while it was read (") for r in changed), changed[0]


# A writer holding the repository lock while its merge workers run a long job: 64 items of 1 s on 4 workers, each
# taking 4 items at a time, so a worker left alone would keep running for seconds after its parent died.
LONG_MERGE = """
import os, sys, time
from pathlib import Path
from patchkit.core import fanout
from patchkit.store.repo import lock_repository
fanout.cores = lambda: 4  # four workers even on a one-core runner
root, seen = Path(sys.argv[1]), Path(sys.argv[2])
held = lock_repository(root)

def merge(i):
    (seen / str(os.getpid())).touch()
    time.sleep(1)
    return i

fanout.map_items(merge, list(range(64)), min_items=8)
"""


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for its new parent to reap it has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _lock_free(root: Path) -> bool:
    fd = os.open(root / ".patchkit" / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with their parent through prctl")
def test_kill_9_of_a_writer_mid_merge_frees_the_lock_and_leaves_no_worker(tmp_path: Path) -> None:
    root, seen = tmp_path / "d", tmp_path / "seen"
    root.mkdir()
    seen.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", LONG_MERGE, str(root), str(seen)], cwd=tmp_path)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(workers := {int(p.name) for p in seen.iterdir()}) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers, "the merge workers never started"
        time.sleep(0.5)  # well into their first items
        assert not _lock_free(root), "the writer does not hold the lock: the attack was not run"
        writer.send_signal(signal.SIGKILL)
        assert writer.wait(timeout=10) == -signal.SIGKILL
        killed = time.monotonic()
        while time.monotonic() - killed < 2 and not (_lock_free(root) and all(map(_gone, workers))):
            time.sleep(0.05)
        assert _lock_free(root), "an orphaned worker still holds the repository lock"
        assert [p for p in workers if not _gone(p)] == [], "workers outlived the writer"
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if writer.poll() is None:
            writer.kill()
            writer.wait()


# --------------------------------------------------------------------------- bundle -o


def test_bundle_output_is_refused_everywhere_inside_the_deployment_and_at_its_hard_links(
    deploy: Path, tmp_path: Path, invoke: Invoke
) -> None:
    """Every file of the repository, a new name in each of its directories, a hard link of each file: exit 2."""
    from tests.conftest import snapshot

    (deploy / "compose.yaml").write_text("services: {}\n")
    (deploy / "guard.json").write_text("{}\n")
    (deploy / "dist").mkdir()
    before = snapshot(deploy)
    files = [p for p in deploy.rglob("*") if p.is_file() and ".git" not in p.relative_to(deploy).parts]
    directories = [deploy, *(p for p in deploy.rglob("*") if p.is_dir() and ".git" not in p.parts)]
    links = tmp_path / "links"
    links.mkdir()
    hard = []
    for i, p in enumerate(files):
        os.link(p, links / f"{i}.tar.gz")
        hard.append((links / f"{i}.tar.gz", p.relative_to(deploy).as_posix()))
    for target in [*files, *(d / "new.tar.gz" for d in directories)]:
        r = invoke("bundle", "-o", str(target), repo=deploy)
        assert r.exit_code == 2, (target, r.stdout, r.stderr)
        line = r.stderr.splitlines()[0]
        assert line.startswith(f"patchkit: error: {target}: is ") and "deployment" in line, line
        assert line.endswith(("refusing to write over it", "refusing to write there")), line
    for link, rel in hard:
        r = invoke("bundle", "-o", str(link), repo=deploy)
        assert r.exit_code == 2, (link, r.stderr)
        assert r.stderr.splitlines()[0] == (
            f"patchkit: error: {link}: is a hard link of {rel}, a file of the deployment; refusing to write over it"
        )
    assert snapshot(deploy) == before
    assert not list(deploy.rglob("new.tar.gz"))
    assert invoke("bundle", "-o", str(tmp_path / "fine.tar.gz"), repo=deploy).exit_code == 0


# --------------------------------------------------------------------------- a directory swapped for a link

# The runner: RUNS commands that delete, write and read under patches/ while a thread swaps patches/ for a symlink
# to the outside directory and back, as fast as it can. Between runs the swapping pauses and the repository gets
# its pinned files back. Prints each run's exit code and output.
SWAPPER = """
import hashlib, json, os, random, sys, threading, time
from pathlib import Path
from click.testing import CliRunner
from patchkit.cli import cli
sys.setswitchinterval(1e-5)  # the swapping thread gets in between any two steps of the command
runs, outside = int(sys.argv[1]), sys.argv[2]
foreign = hashlib.sha256(b"outside, not the repository's\\n").hexdigest()  # what a read outside would pin
kept = {p: p.read_bytes() for p in [Path("lockfile.toml"), Path("SHA256SUMS"), *Path("patches").iterdir()]}
go, stop, cycle = threading.Event(), threading.Event(), threading.Lock()
rng = random.Random(60)

def swap():
    while not stop.is_set():
        if not go.wait(0.01):
            continue
        with cycle:
            if not go.is_set():  # paused while waiting for the lock: the runner is restoring the files
                continue
            os.rename("patches", "patches.real")
            os.symlink(outside, "patches")
            time.sleep(rng.random() * 0.0003)
            os.unlink("patches")
            os.rename("patches.real", "patches")
        time.sleep(rng.random() * 0.0003)

threading.Thread(target=swap, daemon=True).start()
out = []
for i in range(runs):
    for p, data in kept.items():
        p.write_bytes(data)
    args = [["remove", "kv-restore-fence"], ["lock"], ["sums"], ["remove", "fp8_fnuz"], ["check"]][i % 5]
    go.set()
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    go.clear()
    with cycle:
        pass
    pinned = Path("lockfile.toml").read_text() + Path("SHA256SUMS").read_text()
    out.append([args, r.exit_code, r.stdout + r.stderr, foreign in pinned])
stop.set()
print(json.dumps(out))
"""


def test_a_directory_swapped_for_a_link_mid_command_never_leads_outside(
    deploy: Path, tmp_path: Path, outside: Path
) -> None:
    for p in (deploy / "patches").iterdir():  # the names a command reaching outside would read, write or delete
        (outside / p.name).write_bytes(b"outside, not the repository's\n")
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    results = _reader(SWAPPER, max(RUNS // 2, 60), deploy, str(outside))
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before, "a command wrote or deleted outside"
    for args, code, text, read_outside in results:
        assert code in (0, 1, 2), f"{args} exited {code}: {text}"
        assert "internal error" not in text and "Traceback" not in text, text
        assert not read_outside, f"{args} pinned the bytes of a file outside the repository"
    assert any(code == 0 for _, code, _, _ in results), "no command got through: the race was not run"


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_the_one_resolution_refuses_a_link_at_any_depth(tmp_path: Path, outside: Path, depth: int) -> None:
    """``Dirs`` (every read, write and delete under the repository) never follows a link, wherever it is."""
    from patchkit.errors import BadInput
    from patchkit.store.repo import Dirs

    root = tmp_path / "repo"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "precious.csv").write_bytes(b"inside\n")
    (outside / "a" / "b").mkdir(parents=True)
    (outside / "a" / "b" / "precious.csv").write_bytes(b"do not touch\n")
    rel = "a/b/precious.csv"
    parts = rel.split("/")
    swapped = root.joinpath(*parts[: depth + 1]) if depth < 3 else root
    if depth < 3:  # a directory, or the file itself, replaced by a link to its twin outside
        twin = outside.joinpath(*parts[: depth + 1])
        os.rename(swapped, tmp_path / "moved")
        os.symlink(twin, swapped)
    with Dirs(root) as dirs:
        if depth == 3:  # nothing swapped: the same calls reach the file inside
            fd = dirs.open(rel, os.O_RDONLY)
            assert os.read(fd, 100) == b"inside\n"
            os.close(fd)
        else:
            with pytest.raises(OSError):  # ENOTDIR for a directory that is a link, ELOOP for the file itself
                os.close(dirs.open(rel, os.O_WRONLY | os.O_TRUNC))
            if depth < 2:  # a directory on the way is a link: not even its descriptor is had, so nothing is deleted
                with pytest.raises(OSError):
                    dirs.at(rel)
        for bad in ("../outside/precious.csv", "/etc/passwd", "a//b", "a/./b", ""):
            with pytest.raises(BadInput):
                dirs.at(bad)
    assert (outside / "a" / "b" / "precious.csv").read_bytes() == b"do not touch\n"
    assert (outside / "precious.csv").read_bytes() == b"do not touch\n"
