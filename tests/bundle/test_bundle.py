"""The production bundle: reproducible bytes, sound when unpacked, and verify_bundle's refusals."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Invoke

from patchkit.bundle.archive import build_bundle, collect_files_that_run, parse_epoch, verify_bundle
from patchkit.errors import BadInput
from patchkit.sources.context import Context
from patchkit.store.cache import BlobStore, cache_dir
from patchkit.store.repo import Repo
from tests.rebase.test_overlays import FENCED, WORKER, Upstream

COMPOSE = b"services:\n  vllm:\n    image: vllm@sha256:" + b"a" * 64 + b"\n"
REPLICAS = b"services:\n  vllm-0:\n    image: vllm@sha256:" + b"a" * 64 + b"\n"
CADDY = b"example.com {\n\treverse_proxy 127.0.0.1:8000\n}\n"
TARGET = "/opt/vllm/worker.py"


@pytest.fixture
def deployment(invoke: Invoke, tmp_path: Path) -> Path:
    """A deployment with a diff-only patch, a committed module, a tuning table, an entrypoint, compose files."""
    up = Upstream(tmp_path / "vllm")
    up.commit({"vllm/worker.py": WORKER})
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("upstream", "add", "vllm", "--git", up.url, "--commit", "main", repo=root).exit_code == 0
    edited = tmp_path / "worker.py"
    edited.write_bytes(FENCED)
    r = invoke(
        "add", str(edited), "--diff-only", "--name", "fence", "--target", TARGET,
        "--upstream", "vllm", "--upstream-path", "vllm/worker.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (root / "patches" / "fp8_fnuz.py").write_bytes(b"FP8_MAX = 224.0\n")
    r = invoke("add", str(root / "patches" / "fp8_fnuz.py"), "--target", "/opt/vllm/fp8_fnuz.py", repo=root)
    assert r.exit_code == 0, r.stderr
    (root / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,64\n")
    r = invoke("add", str(root / "tuning" / "moe.csv"), "--target", "/opt/tuning/moe.csv", repo=root)
    assert r.exit_code == 0, r.stderr
    (root / "entrypoint.sh").write_bytes(b'#!/bin/sh\nexec vllm serve "$@"\n')
    r = invoke("add", str(root / "entrypoint.sh"), "--target", "/opt/patchkit/entrypoint.sh", repo=root)
    assert r.exit_code == 0, r.stderr
    (root / "compose.yaml").write_bytes(COMPOSE)
    (root / "compose.replicas.yaml").write_bytes(REPLICAS)
    (root / "Caddyfile.example").write_bytes(CADDY)
    return root


def bundle_of(root: Path, **kw: int) -> bytes:
    repo = Repo(root.resolve())
    lock, lock_bytes = repo.read_lockfile()
    files = collect_files_that_run(repo, lock, BlobStore(cache_dir(os.environ)), Context(cache_dir(os.environ)))
    return build_bundle(repo, lock, lock_bytes, files, **kw)


def copy_shuffled(src: Path, dst: Path, seed: int, mode: int) -> None:
    """Copy ``src`` file by file in a random order, with random mtimes and the given mode bits."""
    rng = random.Random(seed)
    files = [p for p in src.rglob("*") if p.is_file()]
    rng.shuffle(files)
    for p in files:
        out = dst / p.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(p.read_bytes())
        out.chmod(mode | (0o100 if os.access(p, os.X_OK) else 0))
        t = rng.uniform(0, 2e9)
        os.utime(out, (t, t))
    for d in dst.rglob("*"):
        if d.is_dir():
            t = rng.uniform(0, 2e9)
            os.utime(d, (t, t))


@pytest.fixture
def tz(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def set_tz(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_tz
    monkeypatch.undo()
    time.tzset()


def test_bundle_is_byte_identical_across_copies(
    deployment: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tz: Callable[[str], None]
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    bundles = []
    for i, (umask, mode, zone, locale) in enumerate(
        [(0o022, 0o644, "UTC", "C"), (0o077, 0o600, "Pacific/Chatham", "en_US.UTF-8")]
    ):
        old = os.umask(umask)
        try:
            tz(zone)
            monkeypatch.setenv("LC_ALL", locale)
            copy = tmp_path / f"copy{i}"
            copy_shuffled(deployment, copy, seed=i, mode=mode)
            bundles.append(bundle_of(copy))
        finally:
            os.umask(old)
    assert bundles[0] == bundles[1]
    assert bundles[0] == bundle_of(deployment)


def test_bundle_unpacks_and_sha256sum_passes(deployment: Path, tmp_path: Path) -> None:
    path = tmp_path / "b.tar.gz"
    path.write_bytes(bundle_of(deployment, source_date_epoch=0))
    out = tmp_path / "unpacked"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(path), "-C", str(out)], check=True)
    r = subprocess.run(
        ["sha256sum", "-c", "--strict", "SHA256SUMS"], check=False, cwd=out, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == sorted(
        [
            "Caddyfile.example",
            "SHA256SUMS",
            "build/opt/vllm/worker.py",
            "compose.replicas.yaml",
            "compose.yaml",
            "entrypoint.sh",
            "lockfile.toml",
            "patches/fp8_fnuz.py",
            "tuning/moe.csv",
            "upstream/fence.diff",
        ]
    )
    assert (out / "build/opt/vllm/worker.py").read_bytes() == FENCED
    listed = (out / "SHA256SUMS").read_text().splitlines()
    assert len(listed) == len(names) - 1 and not any(line.endswith("SHA256SUMS") for line in listed)
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0)
        assert not m.pax_headers
        want = 0o755 if m.isdir() or m.name == "entrypoint.sh" else 0o644
        assert m.mode == want, m.name


def test_source_date_epoch_and_gzip_header(
    deployment: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    path = tmp_path / "b.tar.gz"
    r = invoke("bundle", "--output", str(path), repo=deployment)  # the command reads the environment
    assert r.exit_code == 0, r.stderr
    data = path.read_bytes()
    assert data[:4] == b"\x1f\x8b\x08\x00"  # no FNAME flag: no file name
    assert data[4:8] == b"\0\0\0\0"  # gzip mtime 0
    listing = subprocess.run(
        ["tar", "--utc", "--numeric-owner", "-tvzf", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LC_ALL": "C"},
    ).stdout
    lines = listing.splitlines()
    assert lines and all("2023-11-14 22:13" in line and " 0/0 " in line for line in lines), listing
    assert bundle_of(deployment, source_date_epoch=1700000000) == data  # the argument, same epoch
    assert bundle_of(deployment, source_date_epoch=0) != data
    assert bundle_of(deployment) == bundle_of(deployment, source_date_epoch=0)  # the core reads no environment
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    r = invoke("bundle", "--output", str(tmp_path / "c.tar.gz"), repo=deployment)
    assert r.exit_code == 2
    assert "SOURCE_DATE_EPOCH='yesterday': not a non-negative integer of seconds" in r.stderr
    assert not (tmp_path / "c.tar.gz").exists()
    with pytest.raises(BadInput, match="SOURCE_DATE_EPOCH"):
        parse_epoch("yesterday")


def test_build_refuses_a_file_that_breaks_its_pin(deployment: Path) -> None:
    (deployment / "tuning" / "moe.csv").write_bytes(b"tampered\n")
    with pytest.raises(BadInput, match=r"tuning/moe\.csv: sha256 .* is not the pinned"):
        bundle_of(deployment)


def test_build_refuses_a_wrong_materialized_file(deployment: Path) -> None:
    repo = Repo(deployment.resolve())
    lock, lock_bytes = repo.read_lockfile()
    with pytest.raises(BadInput, match=f"{TARGET}: materialized 'fence'"):
        build_bundle(repo, lock, lock_bytes, {TARGET: b"not it\n"})
    with pytest.raises(BadInput, match="'fence' is diff-only"):
        build_bundle(repo, lock, lock_bytes, {})


def test_build_refuses_without_compose(deployment: Path) -> None:
    (deployment / "compose.yaml").unlink()
    with pytest.raises(BadInput, match=r"compose\.yaml: missing"):
        bundle_of(deployment)


# --------------------------------------------------------------------------- verify_bundle


@pytest.fixture
def good(deployment: Path) -> bytes:
    return bundle_of(deployment)


def repack(good: bytes, extra: Callable[[tarfile.TarFile], None], change: dict[str, bytes] | None = None) -> bytes:
    """The good bundle's members (some replaced by ``change``), then whatever ``extra`` adds."""
    raw = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(good)) as src,
        tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out,
    ):
        for m in src.getmembers():
            f = src.extractfile(m)
            data = f.read() if f else b""
            if change and m.name in change:
                data = change[m.name]
                m.size = len(data)
            out.addfile(m, io.BytesIO(data) if m.isfile() else None)
        extra(out)
    return gzip.compress(raw.getvalue(), mtime=0)


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(data)
    return path


def add_file(name: str, data: bytes = b"x\n") -> Callable[[tarfile.TarFile], None]:
    def add(tar: tarfile.TarFile) -> None:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))

    return add


def test_verify_accepts_a_good_bundle(good: bytes, tmp_path: Path) -> None:
    assert verify_bundle(write(tmp_path, good)) == []


def test_verify_refuses_path_traversal(good: bytes, tmp_path: Path) -> None:
    problems = verify_bundle(write(tmp_path, repack(good, add_file("../x"))))
    assert problems == ["../x: path traversal ('..'); refused"]
    assert not (tmp_path / "x").exists()


def test_verify_refuses_an_absolute_path(good: bytes, tmp_path: Path) -> None:
    problems = verify_bundle(write(tmp_path, repack(good, add_file("/tmp/patchkit-evil"))))
    assert problems == ["/tmp/patchkit-evil: absolute path; refused"]


def test_verify_refuses_a_symlink_out(good: bytes, tmp_path: Path) -> None:
    def link(tar: tarfile.TarFile) -> None:
        ti = tarfile.TarInfo("patches/escape")
        ti.type = tarfile.SYMTYPE
        ti.linkname = "../../etc/passwd"
        tar.addfile(ti)

    problems = verify_bundle(write(tmp_path, repack(good, link)))
    assert len(problems) == 1
    assert problems[0].startswith("patches/escape: symlink to ../../etc/passwd, outside the bundle; refused")


def test_verify_refuses_a_huge_member(good: bytes, tmp_path: Path) -> None:
    def huge(tar: tarfile.TarFile) -> None:
        # A header declaring 8 GiB, with no data behind it: refused before any read.
        ti = tarfile.TarInfo("tuning/huge.bin")
        ti.size = 8 * 1024**3
        assert tar.fileobj is not None
        tar.fileobj.write(ti.tobuf(tarfile.GNU_FORMAT))

    problems = verify_bundle(write(tmp_path, repack(good, huge)))
    assert problems == [
        f"tuning/huge.bin: {8 * 1024**3} bytes, over the {256 * 1024**2}-byte limit per member; refused"
    ]


def test_verify_refuses_a_bundle_over_the_total_limit(good: bytes, tmp_path: Path) -> None:
    problems = verify_bundle(write(tmp_path, repack(good, add_file("tuning/big.bin", b"0" * 4096))), max_total=2048)
    assert any("exceeds 2048 bytes" in p for p in problems), problems


def test_a_bundle_larger_than_any_the_limits_allow_is_refused_unread_by_every_reader(tmp_path: Path) -> None:
    from patchkit.bundle.tar import LIMITS
    from patchkit.ship.artifact import MAX_BUNDLE_BYTES, sums_of

    assert LIMITS.archive == MAX_BUNDLE_BYTES  # push and pull send and take what verify-bundle could accept
    big = tmp_path / "big.tar.gz"
    with big.open("wb") as f:
        f.truncate(LIMITS.archive + 1)  # sparse: nothing is written, and nothing must be read
    assert verify_bundle(big) == [f"{big}: {LIMITS.archive + 1} bytes, over the {LIMITS.archive} a bundle may have"]
    with pytest.raises(BadInput, match=r"over the \d+ a bundle may have"):
        sums_of(big)


def test_verify_refuses_a_duplicate_and_a_device(good: bytes, tmp_path: Path) -> None:
    def dev(tar: tarfile.TarFile) -> None:
        ti = tarfile.TarInfo("dev/sda")
        ti.type = tarfile.BLKTYPE
        tar.addfile(ti)
        add_file("compose.yaml", COMPOSE)(tar)

    problems = verify_bundle(write(tmp_path, repack(good, dev)))
    assert problems == ["dev/sda: device or fifo; refused"]  # nothing after it is read
    problems = verify_bundle(write(tmp_path, repack(good, add_file("compose.yaml", COMPOSE))))
    assert problems == ["compose.yaml: duplicate member; refused"]


def test_verify_refuses_a_tampered_file(good: bytes, tmp_path: Path) -> None:
    problems = verify_bundle(write(tmp_path, repack(good, lambda _: None, {"tuning/moe.csv": b"tampered\n"})))
    bad = hashlib.sha256(b"tampered\n").hexdigest()[:12]
    assert any(p.startswith(f"tuning/moe.csv: sha256 {bad}… does not match SHA256SUMS line") for p in problems)
    assert any(p.startswith(f"tuning/moe.csv: sha256 {bad}… is not the pin") for p in problems)
    assert len(problems) == 2, problems


def test_verify_refuses_an_unlisted_file(good: bytes, tmp_path: Path) -> None:
    problems = verify_bundle(write(tmp_path, repack(good, add_file("patches/extra.py"))))
    assert problems == ["patches/extra.py: in the bundle but not listed in SHA256SUMS"]


def test_verify_reports_an_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, b"not a tarball")
    (problem,) = verify_bundle(path)
    assert problem.startswith(f"{path}: not a readable .tar.gz")
