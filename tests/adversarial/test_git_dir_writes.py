"""Writing where code runs: no patch of a series writes into a tree's ``.git``, and no file nests inside another.

A ``.git/hooks/post-checkout`` a patch creates, or a hunk that adds
``core.fsmonitor`` to ``.git/config``, runs at the next git command in that
checkout. The attacks are generated over every spelling a file system takes
for ``.git`` (any case, NTFS's trailing dots and 8.3 name, the code points
HFS+ ignores, a nested repository's ``.git``, ``./`` and ``..`` on the way)
and every kind of change (a new file with mode 755, a hunk, a rename, a copy,
a mode change, a deletion); each is applied with ``apply --to`` to a real git
checkout and rebased with ``rebase --series``. Each must be refused with one
line naming the patch file, with the checkout, its ``.git`` and the deployment
byte-identical, and git itself then running nothing of the attacker's. Files
nested inside another file (in one patch, across patches, inside a file of
the tree, and among the targets of a derived image's layer) are refused too.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.series.parse import PatchParseError, into_git_dir, parse_patch
from patchkit.ship.build import LayerFile, make_layer
from tests.conftest import Invoke, git
from tests.images.conftest import RegistryServer, TestImages, image_builder, oci_image, registry_server
from tests.images.test_build import make_derivable
from tests.series.conftest import queue
from tests.series.queue import Queue

__all__ = ["image_builder", "oci_image", "queue", "registry_server"]  # fixtures used here, defined elsewhere

EVIL = "patches/vllm/evil.patch"


def _tree_state(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and directory under ``root``, ``.git`` included: mode and sha256 (or "dir"/the link target)."""
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                what = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                what = os.readlink(p) if stat.S_ISLNK(st.st_mode) else "dir"
            out[p.relative_to(root).as_posix()] = (st.st_mode, what)
    return out


def _checkout(queue: Queue, dest: Path) -> Path:
    """A real git checkout of the vllm upstream at the series' commit, ``.git`` and all."""
    subprocess.run(["git", "clone", "-q", str(queue.vllm), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", "--detach", queue.vllm_c1)
    return dest


def _new_file(path: str, marker: Path, *, plain: bool = False) -> bytes:
    body = f'+#!/bin/sh\n+touch "{marker}"\n'
    if plain:
        return f"--- /dev/null\n+++ {path}\n@@ -0,0 +1,2 @@\n{body}".encode()
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100755\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,2 @@\n{body}"
    ).encode()


def _config_hunk(tree: Path, marker: Path, path: str = ".git/config") -> bytes:
    """A hunk that would add ``core.fsmonitor`` to the checkout's own config (it matches it exactly)."""
    lines = (tree / ".git" / "config").read_text().splitlines()
    context = "".join(f" {line}\n" for line in lines)
    added = f'+[core]\n+\tfsmonitor = "touch {marker}; false"\n'
    return (
        f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -1,{len(lines)} +1,{len(lines) + 2} @@\n{context}{added}"
    ).encode()


def _move(kind: str, dest: str) -> bytes:
    return (
        f"diff --git a/vllm/envs.py b/{dest}\nsimilarity index 100%\n{kind} from vllm/envs.py\n{kind} to {dest}\n"
    ).encode()


def _mode(path: str) -> bytes:
    return f"diff --git a/{path} b/{path}\nold mode 100644\nnew mode 100755\n".encode()


def _delete_head(tree: Path) -> bytes:
    lines = (tree / ".git" / "HEAD").read_text().splitlines()
    removed = "".join(f"-{line}\n" for line in lines)
    return (
        f"diff --git a/.git/HEAD b/.git/HEAD\ndeleted file mode 100644\nindex 1111111..0000000\n"
        f"--- a/.git/HEAD\n+++ /dev/null\n@@ -1,{len(lines)} +0,0 @@\n{removed}"
    ).encode()


# Every spelling of a path into the tree's .git (the last part of each is a file git would run or read).
SPELLINGS = [
    ".git/hooks/post-checkout",
    ".GIT/hooks/post-checkout",
    ".Git/hooks/x",
    ".gIT/config",
    ".git./hooks/post-checkout",
    ".git../hooks/post-checkout",
    ".git /hooks/post-checkout",
    "git~1/hooks/post-checkout",
    "GIT~1/config",
    ".git::$INDEX_ALLOCATION/hooks/post-checkout",
    ".g\u200cit/hooks/post-checkout",
    "\ufeff.git/hooks/post-checkout",
    ".gi\u200et/config",
    "vendor/.git/hooks/post-checkout",
    "vendor\\.git\\hooks/post-checkout",
    ".git",
]

Attack = Callable[[Path, Path], bytes]


def _attacks() -> dict[str, Attack]:
    found: dict[str, Attack] = {}
    for path in SPELLINGS:
        found[f"new:{path}"] = lambda tree, marker, path=path: _new_file(path, marker)  # type: ignore[misc]
    found["new:./.git/x"] = lambda tree, marker: _new_file("./.git/hooks/post-checkout", marker, plain=True)
    found["new:a/../.git/config"] = lambda tree, marker: _new_file("a/../.git/hooks/post-checkout", marker)
    found["new:./.GIT/x"] = lambda tree, marker: _new_file("./.GIT/hooks/post-checkout", marker, plain=True)
    found["hunk:.git/config"] = _config_hunk
    found["hunk:vllm/../.git/config"] = lambda tree, marker: _config_hunk(tree, marker, "vllm/../.git/config")
    found["rename:.git/hooks"] = lambda tree, marker: _move("rename", ".git/hooks/post-checkout")
    found["copy:.GIT/hooks"] = lambda tree, marker: _move("copy", ".GIT/hooks/pre-commit")
    found["mode:.git/config"] = lambda tree, marker: _mode(".git/config")
    found["delete:.git/HEAD"] = lambda tree, marker: _delete_head(tree)
    return found


ATTACKS = _attacks()


def _add_patch(queue: Queue, data: bytes) -> None:
    """``data`` as the last patch of series vllm, pinned, in both profiles (an attacker's pull request)."""
    (queue.root / EVIL).write_bytes(data)
    with (queue.root / "lockfile.toml").open("a") as f:
        f.write(
            f'\n[[series.vllm.patches]]\nname = "evil"\nfile = "{EVIL}"\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nprofiles = ["full", "mxfp4"]\n'
        )


def _refused_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert lines and lines[0].startswith(f"patchkit: error: {EVIL}"), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_apply_to_a_checkout_never_writes_into_its_git_dir(
    attack: str, queue: Queue, invoke: Invoke, tmp_path: Path
) -> None:
    tree = _checkout(queue, tmp_path / "src")
    marker = tmp_path / "PWNED"
    _add_patch(queue, ATTACKS[attack](tree, marker))
    before = _tree_state(tree)
    run = invoke("apply", "--series", "vllm", "--profile", "mxfp4", "--to", str(tree), repo=queue.root)
    assert run.exit_code == 2, run.stdout + run.stderr
    line = _refused_line(run.stderr)
    assert any(why in line for why in ("inside the tree", "outside the tree", "the tree's .git directory")), line
    assert _tree_state(tree) == before
    for command in (["status"], ["checkout", "-q", "--detach", queue.vllm_c1], ["commit", "-qam", "x"]):
        subprocess.run(["git", *command], cwd=tree, capture_output=True, check=False, timeout=30)
    assert not marker.exists()


@pytest.mark.parametrize("attack", ["new:.git/hooks/post-checkout", "new:.GIT/hooks/post-checkout", "copy:.GIT/hooks"])
def test_rebase_of_a_series_refuses_a_patch_into_git(attack: str, queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = _checkout(queue, tmp_path / "src")
    _add_patch(queue, ATTACKS[attack](tree, tmp_path / "PWNED"))
    before = _tree_state(queue.root)
    run = invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root)
    assert run.exit_code == 2, run.stdout + run.stderr
    assert "goes into the tree's .git directory" in _refused_line(run.stderr)
    assert {k: v for k, v in _tree_state(queue.root).items() if not k.startswith(".patchkit")} == {
        k: v for k, v in before.items() if not k.startswith(".patchkit")
    }
    assert not (tmp_path / "PWNED").exists()


def test_git_dir_spellings_and_their_innocent_neighbours() -> None:
    for path in SPELLINGS:
        assert into_git_dir(path.split("/")), path
    for path in (".gitignore", ".github/workflows/ci.yml", "x.git/config", "git/config", ".gitmodules", "gitx~1/a"):
        assert not into_git_dir(path.split("/")), path
    with pytest.raises(PatchParseError) as e:
        parse_patch(_new_file(".GIT/config", Path("/tmp/x")), "p.patch")
    assert str(e.value).startswith("p.patch:1: the path '.GIT/config' goes into the tree's .git directory")


# --- files nested inside files ---------------------------------------------------------------------


def _nested_in_one_patch(tree: Path, marker: Path) -> bytes:
    return _new_file("vllm/newpkg", marker) + _new_file("vllm/newpkg/x.py", marker)


def _nested_outer_second(tree: Path, marker: Path) -> bytes:
    return _new_file("vllm/newpkg/deeper/x.py", marker) + _new_file("vllm/newpkg", marker)


def _nested_in_a_tree_file(tree: Path, marker: Path) -> bytes:
    return _new_file("vllm/envs.py/x.py", marker)


NESTED: dict[str, tuple[Attack, int, str]] = {
    "one-patch": (_nested_in_one_patch, 1, "it would be a file inside vllm/newpkg, which is a file too"),
    "outer-second": (_nested_outer_second, 1, "it would be a file inside vllm/newpkg, which is a file too"),
    "inside-a-tree-file": (_nested_in_a_tree_file, 2, "vllm/envs.py is not a directory"),
}


@pytest.mark.parametrize("case", sorted(NESTED))
def test_apply_refuses_a_file_nested_inside_another(case: str, queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = _checkout(queue, tmp_path / "src")
    make, code, message = NESTED[case]
    _add_patch(queue, make(tree, tmp_path / "PWNED"))
    before = _tree_state(tree)
    run = invoke("apply", "--series", "vllm", "--profile", "mxfp4", "--to", str(tree), repo=queue.root)
    assert run.exit_code == code, run.stdout + run.stderr
    first = run.stderr.strip().splitlines()[0]
    assert message in first, first
    assert _tree_state(tree) == before


def test_rebase_refuses_a_file_nested_inside_another(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = _checkout(queue, tmp_path / "src")
    _add_patch(queue, _nested_in_one_patch(tree, tmp_path / "PWNED"))
    run = invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root)
    assert run.exit_code == 1, run.stdout + run.stderr
    assert "it would be a file inside vllm/newpkg, which is a file too" in _refused_line(run.stderr)
    assert not (queue.root / ".patchkit" / "series-rebase").exists()


LAYERS = [
    ["/opt/patchkit/entrypoint.sh", "/opt/patchkit/entrypoint.sh/x"],
    ["/opt/patchkit/entrypoint.sh/x", "/opt/patchkit/entrypoint.sh"],
    ["/a", "/a/b/c/d"],
    ["/srv/app/.git/config"],
    ["/srv/app/.GIT/hooks/post-checkout"],
    ["/srv/.git"],
]


@pytest.mark.parametrize("targets", LAYERS, ids=["+".join(t) for t in LAYERS])
def test_a_derived_layer_refuses_nested_targets_and_git_dirs(targets: list[str]) -> None:
    with pytest.raises(BadInput) as e:
        make_layer([LayerFile(t, b"x\n") for t in targets], 0)
    assert "refusing to build" in str(e.value)
    # Siblings that only share a prefix are fine.
    make_layer([LayerFile("/opt/x.sh", b"1"), LayerFile("/opt/x.sh2/y", b"2"), LayerFile("/opt/.github/x", b"3")], 0)


def test_image_build_refuses_a_target_below_another_file(
    deploy: Path, oci_image: TestImages, registry_server: RegistryServer, invoke: Invoke
) -> None:
    """``add`` refuses such a target; a lockfile edited by hand must not get one into the layer either."""
    root = make_derivable(deploy, oci_image.single, invoke)
    script = b"#!/bin/sh\n"
    (root / "extra.sh").write_bytes(script)
    with (root / "lockfile.toml").open("a") as f:
        f.write(
            '\n[[artifacts]]\nname = "extra"\nfile = "extra.sh"\n'
            f'sha256 = "{hashlib.sha256(script).hexdigest()}"\ntarget = "/opt/patchkit/entrypoint.sh/x"\n'
        )
    push = f"{registry_server.host}/derived/nested:v1"
    r = invoke("image", "build", "--push", push, repo=root)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert r.stderr.splitlines()[0] == (
        "patchkit: error: /opt/patchkit/entrypoint.sh/x: a target below /opt/patchkit/entrypoint.sh, which is "
        "another file of the layer; refusing to build"
    )
    fetched = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{push}"], capture_output=True, check=False, timeout=60
    )
    assert fetched.returncode != 0  # nothing was pushed under the tag
