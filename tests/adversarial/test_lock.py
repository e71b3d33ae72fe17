"""Concurrent writers: one exclusive lock per repository, no lost pins, no exit 4."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from patchkit.lockfile.reader import loads
from patchkit.store.repo import LOCK_FILE, TMP_PREFIX, recover, stale_temporaries
from tests.adversarial.conftest import patchkit

WRITERS = 8
ROUNDS = 20


# One writer: a real process running ``patchkit add`` ROUNDS times through the CLI's entry point
# (a Python start per round would spend the time budget on interpreter start-up, not on the lock).
WRITER = """
import json, sys
from patchkit.cli import cli
w, rounds = int(sys.argv[1]), int(sys.argv[2])
codes = []
for r in range(rounds):
    name = f"w{w}r{r}"
    with open(f"tuning/{name}.csv", "w") as f:
        f.write(f"{w},{r}\\n")
    try:
        cli.main(["add", f"tuning/{name}.csv", "--target", f"/opt/tuning/{name}.csv"], prog_name="patchkit")
    except SystemExit as e:
        codes.append(e.code or 0)
print(json.dumps(codes), file=sys.stderr)
"""


def _writer(root: Path, w: int) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(w), str(ROUNDS)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stderr.splitlines()[-1]))


def test_soak_eight_writers_twenty_rounds_lose_no_pin(tmp_path: Path) -> None:
    root = tmp_path / "d"
    assert patchkit("init", str(root), cwd=tmp_path).returncode == 0
    started = time.monotonic()
    with ThreadPoolExecutor(WRITERS) as pool:
        codes = list(pool.map(lambda w: _writer(root, w), range(WRITERS)))
    elapsed = time.monotonic() - started
    assert codes == [[0] * ROUNDS] * WRITERS  # no exit 4, no refusal: every writer waited its turn
    lock = loads((root / "lockfile.toml").read_text(), "lockfile.toml")
    assert sorted(a.name for a in lock.tuning) == sorted(f"w{w}r{r}" for w in range(WRITERS) for r in range(ROUNDS))
    check = patchkit("check", cwd=root)
    assert check.returncode == 0, check.stdout
    assert not list(root.rglob(f"{TMP_PREFIX}*"))
    assert elapsed < 50, f"{WRITERS}x{ROUNDS} writers took {elapsed:.1f}s"


def _hold_lock(root: Path) -> subprocess.Popen[str]:
    """Another process holding the repository's write lock, as a running writer does."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(root / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.ftruncate(fd, 0)\n"
            "os.write(fd, f'{os.getpid()} add tuning/x.csv'.encode())\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_second_writer_waits_with_a_message_then_writes(deploy: Path) -> None:
    (deploy / ".patchkit").mkdir(exist_ok=True)
    holder = _hold_lock(deploy)
    (deploy / "tuning" / "late.csv").write_bytes(b"1\n")
    waiting = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "add", "tuning/late.csv", "--target", "/opt/tuning/late.csv"],
        cwd=deploy,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    assert waiting.poll() is None  # still waiting: nothing written while the other holds the lock
    assert "late" not in (deploy / "lockfile.toml").read_text()
    holder.communicate("")
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert (
        f"patchkit: waiting for another patchkit writing this repository (pid {holder.pid}: patchkit add tuning/x.csv)"
        in err
    )
    assert "late" in (deploy / "lockfile.toml").read_text()


def test_no_wait_fails_at_once_and_changes_nothing(deploy: Path) -> None:
    (deploy / ".patchkit").mkdir(exist_ok=True)
    before = (deploy / "lockfile.toml").read_bytes()
    holder = _hold_lock(deploy)
    try:
        (deploy / "tuning" / "late.csv").write_bytes(b"1\n")
        started = time.monotonic()
        done = patchkit("--no-wait", "add", "tuning/late.csv", "--target", "/opt/tuning/late.csv", cwd=deploy)
        assert time.monotonic() - started < 10
        assert done.returncode == 1
        assert done.stderr.splitlines()[0] == (
            f"patchkit: error: .patchkit/lock: another patchkit is writing this repository "
            f"(pid {holder.pid}: patchkit add tuning/x.csv); nothing was changed"
        )
        assert (deploy / "lockfile.toml").read_bytes() == before
        env_done = patchkit("remove", "moe", cwd=deploy, env={"PATCHKIT_NO_WAIT": "1"})
        assert env_done.returncode == 1
    finally:
        holder.communicate("")


def test_check_waits_for_a_journaled_write_in_progress(deploy: Path) -> None:
    (deploy / ".patchkit").mkdir(exist_ok=True)
    (deploy / ".patchkit" / "journal.json").write_text('{"replace": [], "delete": []}')
    holder = _hold_lock(deploy)
    checking = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "check"],
        cwd=deploy,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    assert checking.poll() is None
    (deploy / ".patchkit" / "journal.json").unlink()  # the writer finishes its transaction
    holder.communicate("")
    out, err = checking.communicate(timeout=30)
    assert checking.returncode == 0, out + err
    assert "waiting for another patchkit" in err


def test_recovery_leaves_a_live_process_staging_alone(deploy: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        live = deploy / "tuning" / f"{TMP_PREFIX}{sleeper.pid}-moe.csv.abcd1234.tmp"
        live.write_bytes(b"being staged\n")
        dead = deploy / "tuning" / f"{TMP_PREFIX}999999999-moe.csv.abcd1234.tmp"
        dead.write_bytes(b"left by a crash\n")
        assert stale_temporaries(deploy) == [dead]
        recover(deploy)
        assert live.exists() and not dead.exists()
    finally:
        sleeper.communicate(b"")


def test_lock_file_as_symlink_is_refused(deploy: Path, outside: Path) -> None:
    (deploy / ".patchkit").mkdir(exist_ok=True)
    (deploy / LOCK_FILE).unlink(missing_ok=True)
    os.symlink(outside / "precious.csv", deploy / LOCK_FILE)
    done = patchkit("remove", "moe", cwd=deploy)
    assert done.returncode == 2
    assert ".patchkit/lock is a symlink" in done.stderr
    assert (outside / "precious.csv").read_bytes() == b"do not touch\n"
