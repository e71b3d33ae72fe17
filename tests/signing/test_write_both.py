"""A key pair is written whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.signing.keys import _write_both


def test_both_files_appear_with_their_modes(tmp_path: Path) -> None:
    key, pub = tmp_path / "k", tmp_path / "k.pub"
    _write_both(key, ((key, b"secret", 0o600), (pub, b"public\n", 0o644)))
    assert key.read_bytes() == b"secret"
    assert pub.read_bytes() == b"public\n"
    assert (key.stat().st_mode & 0o777, pub.stat().st_mode & 0o777) == (0o600, 0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k", "k.pub"]


def test_a_file_in_the_way_leaves_nothing_behind(tmp_path: Path) -> None:
    key, pub = tmp_path / "k", tmp_path / "k.pub"
    pub.write_bytes(b"someone else's")
    with pytest.raises(BadInput, match="already exists; refusing to overwrite a key"):
        _write_both(key, ((key, b"secret", 0o600), (pub, b"public\n", 0o644)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.pub"]  # the private key linked first is gone again
    assert pub.read_bytes() == b"someone else's"
