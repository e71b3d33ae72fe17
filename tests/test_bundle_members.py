"""The bundle reader's member checks on their own: links and what a reader refuses outright."""

from __future__ import annotations

import tarfile

import pytest

from patchkit.bundle import _link_problem, _Member, _Unpacker


def _member(name: str, kind: bytes, linkname: str = "") -> _Member:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = linkname
    header = ti.tobuf(format=tarfile.GNU_FORMAT)
    return _Member(header[:512], name.encode(), 0)


@pytest.mark.parametrize(
    ("name", "kind", "target", "message"),
    [
        ("a/l", tarfile.SYMTYPE, "b", "a/l: symlink to b; refused (a bundle holds no links)"),
        ("a/l", tarfile.SYMTYPE, "../b", "a/l: symlink to ../b; refused (a bundle holds no links)"),
        (
            "a/l",
            tarfile.SYMTYPE,
            "../../b",
            "a/l: symlink to ../../b, outside the bundle; refused (a bundle holds no links)",
        ),
        (
            "l",
            tarfile.SYMTYPE,
            "/etc/passwd",
            "l: symlink to /etc/passwd, outside the bundle; refused (a bundle holds no links)",
        ),
        # A hard link's target is relative to the archive's root, not to the link's directory.
        (
            "a/h",
            tarfile.LNKTYPE,
            "../b",
            "a/h: hard link to ../b, outside the bundle; refused (a bundle holds no links)",
        ),
        ("a/h", tarfile.LNKTYPE, "a/b", "a/h: hard link to a/b; refused (a bundle holds no links)"),
    ],
)
def test_a_link_is_refused_saying_whether_it_leaves_the_bundle(
    name: str, kind: bytes, target: str, message: str
) -> None:
    assert _link_problem(_member(name, kind, target), name) == message


def test_refused_outright_in_order_name_duplicate_link_device() -> None:
    unpacker = _Unpacker({}, {}, set(), [], 100, 1000)
    assert unpacker.refused(_member("/abs", tarfile.REGTYPE), "/abs") == "/abs: absolute path; refused"
    assert unpacker.refused(_member("f", tarfile.REGTYPE), "f") is None
    assert unpacker.refused(_member("f", tarfile.REGTYPE), "f") == "f: duplicate member; refused"
    assert unpacker.refused(_member("d", tarfile.CHRTYPE), "d") == "d: device or fifo; refused"
    assert unpacker.refused(_member("p", tarfile.FIFOTYPE), "p") == "p: device or fifo; refused"


def test_files_count_against_the_total_and_only_sums_and_lockfile_are_kept() -> None:
    digests: dict[str, str] = {}
    contents: dict[str, bytes] = {}
    problems: list[str] = []
    unpacker = _Unpacker(digests, contents, set(), problems, 100, 10)
    for name in ("SHA256SUMS", "x"):
        m = _member(name, tarfile.REGTYPE)
        m.size = 4
        assert unpacker.member(m, b"abcd")
    assert sorted(digests) == ["SHA256SUMS", "x"]
    assert contents == {"SHA256SUMS": b"abcd"}
    big = _member("y", tarfile.REGTYPE)
    big.size = 4
    assert not unpacker.member(big, b"abcd")
    assert problems == ["y: the bundle exceeds 10 bytes unpacked here; refused"]
