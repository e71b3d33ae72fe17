"""verify-bundle reads every member as tar -x would unpack it, without writing anything anywhere."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.conftest import Invoke

from .test_bundle_attacks import _member, _verify, _without_end, good

_ = good


def test_members_tar_could_not_create_are_refused(good: bytes, tmp_path: Path, invoke: Invoke) -> None:
    long_name = "x" * 256
    raw = (
        _without_end(good)
        + _member("notes", b"a file\n")
        + _member("notes/inside", b"below a file\n")
        + _member(long_name, b"a name no file system takes\n")
        + bytes(1024)
    )
    code, lines, _ = _verify(invoke, tmp_path, raw)
    assert code == 1
    assert "notes/inside: cannot unpack (Not a directory); refused" in lines
    assert [line.endswith(": cannot unpack (File name too long); refused") for line in lines].count(True) == 1


def test_verify_bundle_makes_no_temporary_directory(
    good: bytes,
    tmp_path: Path,
    invoke: Invoke,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError("verify-bundle made a temporary directory")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)  # what TemporaryDirectory calls
    code, lines, _ = _verify(invoke, tmp_path, good)
    assert (code, lines) == (0, ["verify-bundle: ok"])
