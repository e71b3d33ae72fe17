"""Reading back the derived layer: only the bytes ``image build`` writes are patchkit's layer.

A layer whose tar another reader (GNU tar here, an engine's in production)
unpacks differently from Python's tarfile is refused, whatever tarfile
made of it.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from patchkit.ship.build import LayerFile, layer_tar, read_layer

FILES = [
    LayerFile("/opt/patchkit/entrypoint.sh", b"#!/bin/sh\nexec vllm serve\n", True),
    LayerFile("/opt/tuning/moe.csv", b"m,n\n1,2\n"),
    LayerFile("/usr/lib/python3/dist-packages/" + "d" * 120 + "/ünï.py", b"x = 1\n"),  # pax path record
]


def test_a_layer_image_build_writes_reads_back_as_its_files() -> None:
    tar = layer_tar(FILES, 1700000000)
    assert read_layer(tar) == sorted(FILES, key=lambda f: f.target)
    assert read_layer(layer_tar([], 0)) == []


def _record(key: str, value: str, blanks: int = 1) -> bytes:
    rest = b" " * blanks + f"{key}={value}\n".encode()
    size = next(len(rest) + d for d in range(1, 10) if len(str(len(rest) + d)) == d)
    return str(size).encode() + rest


def _with_pax(tar: bytes, payload: bytes) -> bytes:
    """The layer with a pax extended header carrying ``payload`` before its first member."""
    head = tarfile.TarInfo("././@PaxHeader")
    head.type, head.size = tarfile.XHDTYPE, len(payload)
    return head.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512) + tar


def _gnu_tar_names(tar: bytes, tmp_path: Path) -> list[str]:
    path = tmp_path / "layer.tar"
    path.write_bytes(tar)
    done = subprocess.run(["tar", "-tf", str(path)], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.split()


def _tarfile_names(tar: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return t.getnames()


@pytest.mark.parametrize(
    ("what", "payload", "tarfile_sees_it"),
    [
        ("two blanks after the length", _record("path", "etc/ld.so.preload", blanks=2), False),
        ("GNU.sparse.name on a plain file", _record("GNU.sparse.name", "etc/ld.so.preload"), True),
    ],
)
def test_a_pax_record_renaming_a_file_is_refused(
    what: str, payload: bytes, tarfile_sees_it: bool, tmp_path: Path
) -> None:
    tar = _with_pax(layer_tar(FILES, 0), payload)
    # The attack is real: GNU tar unpacks the first file as /etc/ld.so.preload (tarfile only in one case).
    assert "etc/ld.so.preload" in _gnu_tar_names(tar, tmp_path)
    assert ("etc/ld.so.preload" in _tarfile_names(tar)) is tarfile_sees_it
    assert read_layer(tar) is None, what


def _gnu_format(files: list[LayerFile]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for f in sorted(files, key=lambda f: f.target):
            info = tarfile.TarInfo(f.target.lstrip("/"))
            info.size, info.mode = len(f.data), 0o755 if f.executable else 0o644
            t.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


def _with_link(files: list[LayerFile]) -> bytes:
    """The layer as image build writes it, plus a symlink member."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as t:
        with tarfile.open(fileobj=io.BytesIO(layer_tar(files, 0))) as src:
            for m in src.getmembers():
                t.addfile(m, src.extractfile(m))
        link = tarfile.TarInfo("opt/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        t.addfile(link)
    return buf.getvalue()


@pytest.mark.parametrize(
    "tar",
    [
        _with_pax(layer_tar(FILES, 0), _record("size", "\u0660")),  # an Arabic-Indic zero
        _with_pax(layer_tar(FILES, 0), _record("comment", "harmless to every reader, still not ours")),
        _with_pax(layer_tar(FILES, 0), _record("mtime", "1700000000.5")),
        _gnu_format(FILES),
        _with_link(FILES),
        layer_tar(FILES, 0) + bytes(10240),
        layer_tar([LayerFile("/opt/a", b"a")], 0)[:-1024] + layer_tar([LayerFile("/opt/b", b"b")], 0),
        b"not a tar" * 200,
        b"",
    ],
    ids=[
        "arabic-indic size",
        "comment",
        "fractional mtime",
        "GNU format",
        "symlink",
        "padding",
        "two archives",
        "garbage",
        "empty",
    ],
)
def test_any_other_spelling_is_not_patchkits_layer(tar: bytes) -> None:
    assert read_layer(tar) is None
