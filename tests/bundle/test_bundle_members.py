"""The bundle's archive format on its own: the writer's bytes, and the reader's member checks."""

from __future__ import annotations

import io
import tarfile

import pytest

from patchkit.bundle import tar as bundletar
from patchkit.bundle.tar import Contents, Limits, Member, _Collector, header, link_problem


@pytest.mark.parametrize(
    ("name", "directory"),
    [
        ("a", False),
        ("tuning", True),
        ("x" * 99, True),  # 100 bytes with its "/": still in the header
        ("x" * 100, False),
        ("x" * 100, True),  # a GNU long name
        ("tuning/" + "/".join(["d" * 60] * 4) + "/t.csv", False),
        ("ünïcode/名前.py", False),
        ("bad-\udcff-byte", False),  # a file name that is not UTF-8
    ],
)
def test_the_writer_writes_what_tarfile_writes_in_gnu_format(name: str, directory: bool) -> None:
    """Bundles written before patchkit had its own writer read back, byte for byte."""
    for size, executable, epoch in ((0, False, 0), (7, True, 1700000000), (8**11 - 1, False, 8**11 - 1)):
        ti = tarfile.TarInfo(name)
        ti.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
        ti.size = 0 if directory else size
        ti.mode = 0o755 if directory or executable else 0o644
        ti.mtime = epoch
        ti.uname = ti.gname = ""
        expected = ti.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
        got = header(name, epoch, size=ti.size, directory=directory, executable=executable)
        assert got == expected


def test_the_end_of_archive_is_tarfiles() -> None:
    for sizes in ([], [1], [10000], [511, 512, 513] * 7):
        raw = io.BytesIO()
        writer = bundletar.Writer(0)
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for i, size in enumerate(sizes):
                ti = tarfile.TarInfo(f"f{i}")
                ti.size = size
                tar.addfile(ti, io.BytesIO(b"a" * size))
                writer.file(f"f{i}", b"a" * size, False)
        assert writer.close() == raw.getvalue()


def test_the_gzip_header_is_fixed() -> None:
    assert bundletar.GZIP_HEADER == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"


@pytest.mark.parametrize(
    ("name", "kind", "target", "message"),
    [
        ("a/l", b"2", "b", "a/l: symlink to b; refused (a bundle holds no links)"),
        ("a/l", b"2", "../b", "a/l: symlink to ../b; refused (a bundle holds no links)"),
        ("a/l", b"2", "../../b", "a/l: symlink to ../../b, outside the bundle; refused (a bundle holds no links)"),
        ("l", b"2", "/etc/passwd", "l: symlink to /etc/passwd, outside the bundle; refused (a bundle holds no links)"),
        # A hard link's target is relative to the archive's root, not to the link's directory.
        ("a/h", b"1", "../b", "a/h: hard link to ../b, outside the bundle; refused (a bundle holds no links)"),
        ("a/h", b"1", "a/b", "a/h: hard link to a/b; refused (a bundle holds no links)"),
    ],
)
def test_a_link_is_refused_saying_whether_it_leaves_the_bundle(
    name: str, kind: bytes, target: str, message: str
) -> None:
    assert link_problem(name, kind, target) == message


def test_names_duplicates_and_limits_in_order() -> None:
    contents = Contents()
    collector = _Collector(contents, {"SHA256SUMS"}, Limits(members=3))
    collector.add(Member("/abs", False, 0o644, b"", 0))
    collector.add(Member("SHA256SUMS", False, 0o644, b"abcd", 0))
    collector.add(Member("SHA256SUMS", False, 0o644, b"abcd", 0))
    assert contents.problems == ["/abs: absolute path; refused", "SHA256SUMS: duplicate member; refused"]
    assert contents.kept == {"SHA256SUMS": b"abcd"}
    with pytest.raises(bundletar.NotBundle, match="more than 3 members"):
        collector.add(Member("x", False, 0o644, b"", 0))
