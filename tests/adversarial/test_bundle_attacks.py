"""The bundle: verify-bundle checks exactly what GNU ``tar -xzf`` extracts; ``bundle -o`` writes only where asked.

Each hostile archive is also handed to the real GNU tar, to show the attack
is real (GNU tar extracts what Python's tarfile would not see) and that the
refusal is about what a host would unpack.
"""

from __future__ import annotations

import gzip
import io
import os
import resource
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from patchkit.bundle.tar import compress
from tests.conftest import Invoke

EVIL = b"services:\n  vllm:\n    image: evil@sha256:" + b"66" * 32 + b"\n"


@pytest.fixture
def good(deploy: Path, tmp_path: Path, invoke: Invoke) -> bytes:
    """The raw (uncompressed) tar of a sound bundle of the ``deploy`` deployment."""
    (deploy / "compose.yaml").write_text("services: {}\n")
    out = tmp_path / "good.tar.gz"
    r = invoke("bundle", "-o", str(out), repo=deploy)
    assert r.exit_code == 0, r.stderr
    return gzip.decompress(out.read_bytes())


def _member(name: str, data: bytes, **fields: int) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = 0o644
    for key, value in fields.items():
        setattr(ti, key, value)
    return ti.tobuf(tarfile.GNU_FORMAT) + data + bytes(-len(data) % 512)


def _without_end(raw: bytes) -> bytes:
    """The archive's members without its end-of-archive blocks and padding."""
    end = len(raw)
    while end >= 512 and raw[end - 512 : end] == bytes(512):
        end -= 512
    return raw[:end]


def _verify(invoke: Invoke, tmp_path: Path, raw: bytes) -> tuple[int, list[str], Path]:
    path = tmp_path / "hostile.tar.gz"
    path.write_bytes(compress(raw))  # compressed as patchkit bundle compresses: only the tar is hostile
    r = invoke("verify-bundle", str(path))
    return r.exit_code, r.stdout.splitlines(), path


def _gnu_tar(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tar", *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_sound_bundle_verifies_and_gnu_tar_lists_exactly_its_members(
    good: bytes, tmp_path: Path, invoke: Invoke
) -> None:
    code, lines, path = _verify(invoke, tmp_path, good)
    assert (code, lines) == (0, ["verify-bundle: ok"])
    listed = _gnu_tar("-tzf", str(path)).stdout.split()
    with tarfile.open(fileobj=io.BytesIO(good)) as tar:
        assert listed == [m.name + ("/" if m.isdir() else "") for m in tar]


def test_garbage_block_then_more_members_is_refused(good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    garbage = b"\xde\xad\xbe\xef" * 128
    raw = _without_end(good) + garbage + _member("compose.yaml", EVIL) + _member("extra.sh", b"rm -rf /\n")
    raw += bytes(1024)
    code, lines, path = _verify(invoke, tmp_path, raw)
    assert code == 1
    offset = len(_without_end(good))
    assert lines == [
        f"byte {offset}: a block that is not a tar header (bad checksum); GNU tar would skip it and read the "
        "members after it; refused",
        "verify-bundle: FAILED: 1 problem(s)",
    ]
    # The attack is real: GNU tar skips the garbage and overwrites the verified compose.yaml.
    out = tmp_path / "unpacked"
    out.mkdir()
    _gnu_tar("-xzf", str(path), "-C", str(out))
    assert (out / "compose.yaml").read_bytes() == EVIL
    assert (out / "extra.sh").exists()


def test_members_after_the_end_of_archive_are_refused(good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    raw = good + _member("compose.yaml", EVIL) + bytes(1024)
    code, lines, path = _verify(invoke, tmp_path, raw)
    assert code == 1
    assert lines[0] == (
        f"byte {len(good)}: data after the end-of-archive block; a reader that skips zero blocks "
        "(tar --ignore-zeros) would extract it; refused"
    )
    assert "compose.yaml" in _gnu_tar("-tzif", str(path)).stdout.split()[-1:]


def test_zero_padding_beyond_the_writers_is_refused(good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    # Harmless to GNU tar, but not the bytes patchkit bundle writes: verify-bundle accepts only those.
    code, lines, _ = _verify(invoke, tmp_path, good + bytes(20 * 512))
    ends = len(good) - len(_without_end(good))
    assert (code, lines) == (
        1,
        [
            f"the archive ends with {ends + 20 * 512} bytes of zeros after its last member, not the {ends} "
            "patchkit bundle writes; refused",
            "verify-bundle: FAILED: 1 problem(s)",
        ],
    )


def test_setuid_world_writable_foreign_owner_is_refused(good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    raw = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(good)) as src,
        tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out,
    ):
        for m in src.getmembers():
            f = src.extractfile(m)
            if m.name == "entrypoint.sh":
                m.mode, m.uid, m.gid, m.uname, m.gname = 0o4777, 1000, 1000, "", ""
            out.addfile(m, f)
    code, lines, path = _verify(invoke, tmp_path, raw.getvalue())
    assert code == 1
    assert lines == [
        "entrypoint.sh: mode 4777, owner 1000:1000; the bundle format fixes mode 0644 or 0755 and owner 0:0 "
        "with no names; refused",
        "verify-bundle: FAILED: 1 problem(s)",
    ]
    listing = _gnu_tar("-tvzf", str(path), "--numeric-owner").stdout
    assert any(line.startswith("-rwsrwxrwx 1000/1000") and "entrypoint.sh" in line for line in listing.splitlines())


def test_directory_mode_and_names_are_fixed_too(good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    raw = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(good)) as src,
        tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out,
    ):
        for m in src.getmembers():
            if m.isdir() and m.name == "tuning":
                m.mode, m.uname = 0o777, "root"
            out.addfile(m, src.extractfile(m))
        empty = tarfile.TarInfo("stray")
        empty.type, empty.mode = tarfile.DIRTYPE, 0o755
        out.addfile(empty)
    code, lines, _ = _verify(invoke, tmp_path, raw.getvalue())
    assert code == 1
    assert lines == [
        "tuning: mode 0777, owner 0:0 (root:); the bundle format fixes mode 0755 and owner 0:0 with no names; refused",
        "stray: a directory that holds no file of the bundle; refused",
        "verify-bundle: FAILED: 2 problem(s)",
    ]


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.mark.parametrize("kind", ["L", "x"])
def test_a_long_name_claiming_a_gigabyte_is_bounded(kind: str, good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    claimed = 1024**3
    header = bytearray(tarfile.TarInfo("././@LongLink").tobuf(tarfile.GNU_FORMAT)[:512])
    header[156:157] = kind.encode()
    header[124:136] = b"%011o\0" % claimed
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    raw = _without_end(good) + bytes(header) + b"A" * (16 * 1024 * 1024)
    before = _peak_kib()
    started = time.monotonic()
    code, lines, _ = _verify(invoke, tmp_path, raw)
    assert time.monotonic() - started < 10
    assert _peak_kib() - before < 200 * 1024  # far below the gigabyte claimed
    assert code == 1
    offset = len(_without_end(good))
    what = (
        f"a GNU long name of {claimed} bytes, over the 4096-byte limit"
        if kind == "L"
        else "././@LongLink: a pax extended header ('x'), which patchkit bundle never writes"
    )
    assert lines == [f"byte {offset}: {what}; refused", "verify-bundle: FAILED: 1 problem(s)"]
    assert max(len(line) for line in lines) < 300


def test_long_names_within_bounds_verify(deploy: Path, tmp_path: Path, invoke: Invoke) -> None:
    deep = "tuning/" + "/".join(["d" * 60] * 4) + "/t.csv"  # over 100 characters: a GNU long name
    (deploy / deep).parent.mkdir(parents=True)
    (deploy / deep).write_bytes(b"1\n")
    assert invoke("add", str(deploy / deep), "--target", "/opt/deep.csv", repo=deploy).exit_code == 0
    (deploy / "compose.yaml").write_text("services: {}\n")
    out = tmp_path / "b.tar.gz"
    assert invoke("bundle", "-o", str(out), repo=deploy).exit_code == 0
    r = invoke("verify-bundle", str(out))
    assert (r.exit_code, r.stdout) == (0, "verify-bundle: ok\n")
    assert deep in _gnu_tar("-tzf", str(out)).stdout.split()


# --------------------------------------------------------------------------- bundle -o


@pytest.fixture
def bundled(deploy: Path) -> Path:
    (deploy / "compose.yaml").write_text("services: {}\n")
    return deploy


@pytest.mark.parametrize("pinned", ["lockfile.toml", "SHA256SUMS", "tuning/moe.csv", "compose.yaml", "patches/new.tgz"])
def test_bundle_never_writes_over_the_deployment(pinned: str, bundled: Path, invoke: Invoke) -> None:
    before = (bundled / pinned).read_bytes() if (bundled / pinned).exists() else None
    r = invoke("bundle", "-o", str(bundled / pinned), repo=bundled)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0] == (
        f"patchkit: error: {bundled / pinned}: is part of the deployment ({pinned}); refusing to write over it"
    )
    after = (bundled / pinned).read_bytes() if (bundled / pinned).exists() else None
    assert after == before


def test_bundle_creates_no_directories(bundled: Path, tmp_path: Path, invoke: Invoke) -> None:
    r = invoke("bundle", "-o", str(tmp_path / "nonexistent" / "d" / "b.tgz"), repo=bundled)
    assert r.exit_code == 2
    assert "does not exist; nothing is created on the way" in r.stderr
    assert not (tmp_path / "nonexistent").exists()


def test_bundle_refuses_a_device_a_fifo_and_a_link(bundled: Path, tmp_path: Path, invoke: Invoke) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.tgz"
    os.symlink(bundled / "lockfile.toml", link)
    for target, what in (
        ("/dev/full", "not a regular file"),
        (str(fifo), "not a regular file"),
        (str(link), "a symlink"),
    ):
        r = invoke("bundle", "-o", target, repo=bundled)
        assert r.exit_code == 2, target
        assert f"{target}: is {what}" in r.stderr
    assert Path("/dev/full").is_char_device()
    assert fifo.is_fifo() and link.is_symlink()


def test_bundle_to_standard_output_and_over_an_old_bundle(bundled: Path, tmp_path: Path) -> None:
    from tests.adversarial.conftest import patchkit

    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "bundle", "-o", "-"], cwd=bundled, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().startswith("wrote standard output (")
    old = tmp_path / "old.tgz"
    old.write_bytes(b"an older bundle")
    again = patchkit("bundle", "-o", str(old), cwd=bundled)
    assert again.returncode == 0, again.stderr
    assert old.read_bytes() == done.stdout
