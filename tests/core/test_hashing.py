from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from patchkit.core import hashing


@pytest.mark.parametrize(
    "size", [0, 1, hashing.BUFFER - 1, hashing.BUFFER, hashing.BUFFER + 12345, hashing.WINDOW, 3 * hashing.WINDOW + 7]
)
def test_sha256_file_matches_hashlib(tmp_path: Path, size: int) -> None:
    data = (os.urandom(4096) * (size // 4096 + 1))[:size]
    p = tmp_path / "f"
    p.write_bytes(data)
    seen: list[int] = []
    assert hashing.sha256_file(p, seen.append) == hashlib.sha256(data).hexdigest()
    assert sum(seen) == size


def test_sha256_many_parallel_with_errors(tmp_path: Path) -> None:
    paths = []
    for i in range(20):
        p = tmp_path / f"f{i}"
        p.write_bytes(os.urandom(i * 100_000))
        paths.append(p)
    missing = tmp_path / "missing"
    result = hashing.sha256_many([*paths, missing], jobs=2)
    for p in paths:
        assert result[p] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert isinstance(result[missing], FileNotFoundError)


def test_does_not_follow_a_final_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        hashing.sha256_file(tmp_path / "link")


def _sha256sum(path: Path) -> str:
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
    return out.split()[0]


@pytest.mark.parametrize("jobs", [1, 2])
def test_sha256_many_agrees_with_sha256sum_across_windows(tmp_path: Path, jobs: int) -> None:
    """Files below, at and across a map window hash as sha256sum does, with or without a tail to read."""
    block = os.urandom(1 << 16)
    sizes = [0, 1, hashing.BUFFER + 1, hashing.WINDOW - 1, hashing.WINDOW, 2 * hashing.WINDOW + 4097]
    paths = []
    for i, size in enumerate(sizes):
        p = tmp_path / f"f{i}"
        p.write_bytes((block * (size // len(block) + 2))[i : i + size])
        paths.append(p)
    seen: list[int] = []
    result = hashing.sha256_many(paths, jobs=jobs, progress=seen.append)
    assert {p: result[p] for p in paths} == {p: _sha256sum(p) for p in paths}
    assert sum(seen) == sum(sizes)
    small = hashing.window_for(1024)  # very many threads share the memory budget: smaller buffers
    assert small < hashing.WINDOW
    assert [hashing.digest_file(p, hashing.SHA256, window=small) for p in paths] == [result[p] for p in paths]


def test_a_file_truncated_while_it_hashes_is_a_clear_error(tmp_path: Path) -> None:
    """No SIGBUS, no digest of half a file: ``Changed`` names the file and what changed."""
    data = os.urandom(3 * hashing.WINDOW)
    p = tmp_path / "shrinks"
    p.write_bytes(data)
    keep = hashing.WINDOW + 100

    def shrink(n: int) -> None:
        if p.stat().st_size == len(data):
            os.truncate(p, keep)

    with pytest.raises(hashing.Changed) as caught:
        hashing.sha256_file(p, shrink)
    assert caught.value.filename == str(p)
    assert f"changed while it was read ({len(data)} bytes at the start, {keep} read, {keep} at the end)" in str(
        caught.value
    )


def test_a_file_that_grows_or_is_rewritten_while_it_hashes_is_a_clear_error(tmp_path: Path) -> None:
    data = os.urandom(2 * hashing.WINDOW)
    p = tmp_path / "grows"
    p.write_bytes(data)

    def grow(n: int) -> None:
        if p.stat().st_size == len(data):
            with p.open("ab") as f:
                f.write(b"more")

    with pytest.raises(hashing.Changed):
        hashing.sha256_file(p, grow)
    p.write_bytes(data)
    written = []

    def rewrite(n: int) -> None:  # same size, other bytes: only the mtime tells
        if not written:
            written.append(1)
            os.utime(p, ns=(0, 0))

    with pytest.raises(hashing.Changed, match="modified during the read"):
        hashing.sha256_file(p, rewrite)
    result = hashing.sha256_many([p], jobs=1, progress=lambda n: os.utime(p, ns=(n, n)))
    assert isinstance(result[p], hashing.Changed)
    assert hashing.sha256_file(p) == hashlib.sha256(data).hexdigest()


def test_cancel_stops_a_large_file_within_a_window(tmp_path: Path) -> None:
    p = tmp_path / "big"
    p.write_bytes(os.urandom(4 * hashing.WINDOW))
    stop = threading.Event()
    seen: list[int] = []

    def progress(n: int) -> None:
        seen.append(n)
        stop.set()

    with pytest.raises(hashing.Cancelled):
        hashing.digest_file(p, hashing.SHA256, progress, stop)
    assert seen == [hashing.WINDOW]


def test_peak_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    """Hashing a 512 MiB file raises the process's peak RSS by a few windows at most, not by the file."""
    big = tmp_path / "sparse.bin"
    with big.open("wb") as f:
        f.truncate(512 * 1024 * 1024)  # sparse: no disk written, but every page is read through the cache
    script = (
        "import resource, sys\n"
        "from patchkit.core import hashing\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "digest = hashing.sha256_many([__import__('pathlib').Path(sys.argv[1])], jobs=2)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(after - before, *digest.values())\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(big)], capture_output=True, text=True, check=True)
    grown_kib, digest = done.stdout.split()
    assert digest == _sha256sum(big)
    assert int(grown_kib) < 16 * 1024, f"peak RSS grew by {int(grown_kib) // 1024} MiB"


def test_one_pin_match_helper_and_one_error_for_a_mismatch() -> None:
    import hashlib

    from patchkit.core.hashing import pin_mismatch, require_pin
    from patchkit.errors import EXIT_BAD_INPUT, BadInput, PinMismatch

    data = b"the pinned bytes\n"
    pinned = hashlib.sha256(data).hexdigest()
    assert pin_mismatch(data, pinned) is None
    got = pin_mismatch(data + b"!", pinned)
    assert got == hashlib.sha256(data + b"!").hexdigest()
    require_pin(data, pinned, lambda found: f"never: {found}")
    with pytest.raises(PinMismatch) as info:
        require_pin(
            data + b"!", pinned, lambda found: f"x has sha256 {found[:12]}…, not the pinned {pinned[:12]}…", "fix"
        )
    e = info.value
    assert (e.message, e.hint, e.exit_code) == (f"x has sha256 {got[:12]}…, not the pinned {pinned[:12]}…", "fix", 2)
    assert isinstance(e, BadInput) and e.exit_code == EXIT_BAD_INPUT


def test_kept_files_are_read_once_and_hash_to_the_bytes_kept(tmp_path: Path) -> None:
    small = [tmp_path / f"s{i}" for i in range(40)]
    for i, p in enumerate(small):
        p.write_bytes(b"%d\n" % i * (i + 1))
    big = tmp_path / "big"
    big.write_bytes(b"x" * (3 * 1024 * 1024 + 5))
    keep: dict[Path, bytes | None] = dict.fromkeys(small[:30])
    got = hashing.sha256_many([*small, big], keep=keep)
    assert got == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in [*small, big]}
    assert keep == {p: p.read_bytes() for p in small[:30]}  # only those asked for are kept
    (tmp_path / "link").symlink_to(small[0])
    keep = {tmp_path / "link": None}
    assert isinstance(hashing.sha256_many([tmp_path / "link"], keep=keep)[tmp_path / "link"], OSError)  # never followed


def test_a_blob_carries_the_digest_of_its_bytes_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(8192)
    want = hashlib.sha256(data).hexdigest()
    blob = hashing.Blob(data)
    assert blob.data is data and len(blob) == 8192
    calls: list[int] = []
    real = hashlib.sha256

    def counted(b: bytes = b"") -> object:
        calls.append(len(b))
        return real(b)

    monkeypatch.setattr(hashing.hashlib, "sha256", counted)
    assert blob.sha256 == hashing.sha256_bytes(blob) == hashing.sha256_bytes(data) == want
    assert hashing.pin_mismatch(blob, want) is None
    assert hashing.pin_mismatch(blob, "0" * 64) == want
    assert calls == [8192, 8192]  # once for the blob however often it is asked, once for the plain bytes
    # A mutable buffer is copied: the digest it carries cannot go stale.
    buf = bytearray(data)
    copied = hashing.Blob(buf)  # type: ignore[arg-type]
    buf[0] ^= 1
    assert copied.sha256 == want


def test_require_pin_takes_a_blob_and_names_the_digest_found() -> None:
    from patchkit.errors import PinMismatch

    blob = hashing.Blob(b"served\n")
    hashing.require_pin(blob, hashlib.sha256(b"served\n").hexdigest(), str)
    with pytest.raises(PinMismatch) as e:
        hashing.require_pin(blob, "0" * 64, lambda got: f"x: sha256 {got}")
    assert str(e.value) == f"x: sha256 {blob.sha256}"


@pytest.mark.parametrize("size", [hashing.BUFFER, hashing.window_for(2), hashing.WINDOW])
def test_the_read_buffer_starts_on_a_page_boundary(size: int) -> None:
    """The kernel copies into the buffer at full speed only when it is aligned (a bytearray of 128 KiB is not)."""
    got: list[int] = []

    def look() -> None:
        buf = hashing._buffer(size)
        got.append(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
        assert len(buf) == size

    worker = threading.Thread(target=look)
    worker.start()
    worker.join()
    assert got and got[0] % mmap.PAGESIZE == 0
