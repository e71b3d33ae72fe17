"""DirSource on real trees: an image-like filesystem with a prefix, symlinks in and out, special files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from patchkit.errors import EXIT_BAD_INPUT, BadInput
from patchkit.sources.directory import DirSource
from patchkit.sources.interface import Pin

PREFIX = "usr/lib/python3/dist-packages"
SECRET = b"outside the tree\n"


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """An extracted image filesystem, with a secret beside it that no read may reach."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_bytes(SECRET)
    root = tmp_path / "rootfs"
    pkg = root / PREFIX / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_bytes(b"")
    (pkg / "envs.py").write_bytes(b"VLLM_USE_V1 = 1\r\n\xff\n")
    (pkg / "sub").mkdir()
    (pkg / "sub" / "deep.py").write_bytes(b"DEEP = True\n")
    (root / "etc").mkdir()
    (root / "etc" / "version").write_bytes(b"image 1\n")
    # Links as an image has them: relative, absolute (meaning the image's root), and hostile.
    os.symlink("envs.py", pkg / "relative_link.py")
    os.symlink(f"/{PREFIX}/vllm/sub/deep.py", pkg / "absolute_link.py")
    os.symlink("../../../../../../outside/secret.py", pkg / "escape_relative.py")
    os.symlink(str(tmp_path / "outside" / "secret.py"), pkg / "escape_absolute.py")
    os.symlink(str(tmp_path / "outside"), pkg / "escape_dir")
    os.symlink("loop_b", pkg / "loop_a")
    os.symlink("loop_a", pkg / "loop_b")
    os.mkfifo(pkg / "fifo")
    return root


def test_read_with_prefix(image: Path) -> None:
    snap = DirSource(image, PREFIX).snapshot()
    assert snap.read(["vllm/envs.py", "vllm/sub/deep.py", "vllm/missing.py", "vllm/sub", "vllm/envs.py/x"]) == {
        "vllm/envs.py": b"VLLM_USE_V1 = 1\r\n\xff\n",
        "vllm/sub/deep.py": b"DEEP = True\n",
        "vllm/missing.py": None,
        "vllm/sub": None,  # a directory
        "vllm/envs.py/x": None,
    }
    assert snap.read([]) == {}


def test_read_without_prefix_and_the_ref_is_ignored(image: Path) -> None:
    whole = DirSource(image).snapshot()
    assert whole.read(["etc/version", f"{PREFIX}/vllm/sub/deep.py"]) == {
        "etc/version": b"image 1\n",
        f"{PREFIX}/vllm/sub/deep.py": b"DEEP = True\n",
    }
    etc = DirSource(image, "etc/").snapshot()
    assert etc.read(["version", "vllm/envs.py"]) == {"version": b"image 1\n", "vllm/envs.py": None}
    assert etc.pin.path == str(image / "etc")
    # A tree has no versions: whatever ref a caller passes (often the tree's own path), it is this tree.
    for ref in ("", str(image), "etc", "whatever"):
        assert DirSource(image).snapshot(ref).read(["etc/version"]) == {"etc/version": b"image 1\n"}


def test_symlinks_resolve_inside_the_root_and_never_escape(image: Path) -> None:
    snap = DirSource(image, PREFIX).snapshot()
    got = snap.read(
        [
            "vllm/relative_link.py",
            "vllm/absolute_link.py",
            "vllm/escape_relative.py",
            "vllm/escape_absolute.py",
            "vllm/escape_dir/secret.py",
            "vllm/loop_a",
            "vllm/fifo",
        ]
    )
    assert got == {
        "vllm/relative_link.py": b"VLLM_USE_V1 = 1\r\n\xff\n",
        "vllm/absolute_link.py": b"DEEP = True\n",  # '/' is the image's root, as in the container
        "vllm/escape_relative.py": None,  # '..' stops at the root: <root>/outside/secret.py does not exist
        "vllm/escape_absolute.py": None,
        "vllm/escape_dir/secret.py": None,
        "vllm/loop_a": None,
        "vllm/fifo": None,  # a special file is not read (reading a FIFO would block)
    }
    assert SECRET not in [v for v in got.values() if v is not None]
    # What the container would see at those paths, the tree itself provides.
    (image / "outside").mkdir()
    (image / "outside" / "secret.py").write_bytes(b"the image's own file\n")
    assert snap.read(["vllm/escape_relative.py"]) == {"vllm/escape_relative.py": b"the image's own file\n"}


def test_paths_and_prefixes_that_leave_the_tree_are_bad_input(image: Path) -> None:
    snap = DirSource(image, PREFIX).snapshot()
    for bad in ("../../../../etc/version", "/etc/version", "vllm/../vllm/envs.py", "", "a\x00b"):
        with pytest.raises(BadInput, match=r"not a path inside the upstream tree|empty|control character") as e:
            snap.read([bad])
        assert e.value.exit_code == EXIT_BAD_INPUT
        assert e.value.hint is not None
    with pytest.raises(BadInput, match="directory prefix"):
        DirSource(image, "../outside")
    with pytest.raises(BadInput, match="directory prefix"):
        DirSource(image, "/etc")


def test_a_missing_tree_is_bad_input(image: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not a directory"):
        DirSource(tmp_path / "nope").snapshot()
    with pytest.raises(BadInput, match="not a directory"):
        DirSource(image, "usr/lib/python3/nope").snapshot()
    with pytest.raises(BadInput, match="not a directory"):
        DirSource(image, "etc/version").snapshot()


def _expected_digest(tree: Path) -> str:
    """The documented tree digest, computed independently: sorted '<path> NUL <sha256> LF' lines."""
    lines = []
    for dirpath, _, filenames in os.walk(tree):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(tree).as_posix().encode()
                lines.append(rel + b"\0" + hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return hashlib.sha256(b"".join(sorted(lines))).hexdigest()


def test_pin_is_a_digest_of_every_regular_file_computed_when_asked(image: Path) -> None:
    snap = DirSource(image, PREFIX).snapshot()
    # Changed after the snapshot was taken but before its pin was asked for: the pin sees it.
    (image / PREFIX / "vllm" / "envs.py").write_bytes(b"VLLM_USE_V1 = 0\n")
    pin = snap.pin
    assert pin.kind == "dir"
    assert pin.path == str(image / PREFIX)
    assert pin.sha256 == _expected_digest(image / PREFIX)
    assert pin == Pin(kind="dir", path=str(image / PREFIX), sha256=pin.sha256)
    # Symlinks and special files are not part of it; a new file is.
    again = DirSource(image, PREFIX).snapshot()
    os.symlink("envs.py", image / PREFIX / "vllm" / "another_link.py")
    assert again.pin.sha256 == pin.sha256
    (image / PREFIX / "vllm" / "new.py").write_bytes(b"")
    assert DirSource(image, PREFIX).snapshot().pin.sha256 != pin.sha256


def test_resolving_in_the_root_walks_as_a_chroot(tmp_path: Path) -> None:
    from patchkit.sources.directory import _resolve_in_root

    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.py").write_bytes(b"x")
    os.symlink("/a", root / "abs")
    os.symlink("..", root / "a" / "up")
    os.symlink("self", root / "self")
    top = str(root.resolve())
    found = _resolve_in_root(top, "../../a/f.py")  # ".." never climbs above the root
    assert found is not None and found[0] == f"{top}/a/f.py"
    found = _resolve_in_root(top, "abs/f.py")  # an absolute target restarts at the root
    assert found is not None and found[0] == f"{top}/a/f.py"
    found = _resolve_in_root(top, "a/up/a/up/a/f.py")  # a link to ".." goes back up one step
    assert found is not None and found[0] == f"{top}/a/f.py"
    found = _resolve_in_root(top, "a/..")
    assert found is not None and found[0] == top
    assert _resolve_in_root(top, "a/f.py/x") is None  # a file is no directory
    assert _resolve_in_root(top, "self") is None  # too many links
    assert _resolve_in_root(top, "a/missing.py") is None
