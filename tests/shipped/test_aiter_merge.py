"""The shipped deployment's own code: the AITER transformer (exact block, fails closed) and its new module.

The transformer runs as the entrypoint runs it (``python3 FILE``, ``AITER_CORE``
naming the file) on a ``core.py`` laid out the way AITER's ``update_config_files``
ends; the module is imported from ``patches/`` as the rewritten AITER imports it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TRANSFORMER = REPO_ROOT / "patches" / "transformers" / "10-aiter-private-merge.py"
MODULE_DIR = REPO_ROOT / "patches"
BLOCK = b'    new_file_path = f"/tmp/{merge_name}.csv"\n'
CORE = (
    b"import os\n\n\ndef update_config_files(file_path: str, merge_name: str):\n"
    b"    merge_df = load(file_path)\n" + BLOCK + b"    merge_df.to_csv(new_file_path, index=False)\n"
    b"    return new_file_path\n"
)


def transform(core: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "AITER_CORE": str(core)}
    return subprocess.run([sys.executable, str(TRANSFORMER)], capture_output=True, text=True, check=False, env=env)


def test_the_exact_block_is_replaced_once_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    core = tmp_path / "core.py"
    core.write_bytes(CORE)
    core.chmod(0o644)
    r = transform(core)
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"10-aiter-private-merge: {core}: merged tuning tables now go to a private directory\n"
    changed = core.read_bytes()
    assert BLOCK not in changed
    assert changed == CORE.replace(
        BLOCK,
        b"    from aiter_merge_dir import merged_config_path  # patchkit transformer 10-aiter-private-merge\n\n"
        b"    new_file_path = merged_config_path(merge_name)\n",
    )
    assert stat.S_IMODE(core.stat().st_mode) == 0o644
    compile(changed, str(core), "exec")
    again = transform(core)
    assert again.returncode == 0
    assert again.stderr == f"10-aiter-private-merge: {core}: already transformed\n"
    assert core.read_bytes() == changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["core.py"]  # no temporary file left


@pytest.mark.parametrize(
    "source",
    [
        CORE.replace(BLOCK, b'    new_file_path = f"/var/tmp/{merge_name}.csv"\n'),  # upstream changed the line
        CORE.replace(BLOCK, BLOCK.replace(b"    ", b"        ")),  # re-indented: not the exact block
        CORE + b"\n\ndef other(merge_name):\n" + BLOCK,  # twice: which one is meant cannot be told
        b"",
    ],
    ids=["changed-upstream", "reindented", "twice", "empty"],
)
def test_anything_but_the_exact_block_once_fails_closed(tmp_path: Path, source: bytes) -> None:
    core = tmp_path / "core.py"
    core.write_bytes(source)
    r = transform(core)
    assert r.returncode == 1
    assert r.stderr == (
        f"10-aiter-private-merge: {core}: the block to replace is not there exactly once (AITER changed?); "
        "refusing to start\n"
    )
    assert core.read_bytes() == source


def test_a_missing_file_fails_closed(tmp_path: Path) -> None:
    r = transform(tmp_path / "core.py")
    assert r.returncode == 1
    assert r.stderr.startswith(f"10-aiter-private-merge: {tmp_path / 'core.py'}: cannot read (No such file")


def test_without_aiter_installed_it_fails_closed(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-I", str(TRANSFORMER)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert r.returncode == 1
    assert r.stderr == "10-aiter-private-merge: aiter is not installed; refusing to start\n"


def test_the_transformed_function_writes_to_a_private_directory(tmp_path: Path) -> None:
    """The rewritten function, run with the new module importable as the image makes it."""
    core = tmp_path / "core.py"
    core.write_bytes(CORE)
    assert transform(core).returncode == 0
    parent = tmp_path / "merge"
    parent.mkdir()
    program = (
        f"import sys; sys.path[:0] = [{str(MODULE_DIR)!r}, {str(tmp_path)!r}]\n"
        "import core\n"
        "class Df:\n    def to_csv(self, path, index):\n        open(path, 'w').write('a,b\\n')\n"
        "core.load = lambda path: Df()\n"
        "print(core.update_config_files('x', 'a8w8_blockscale_tuned_gemm'))\n"
        "print(core.update_config_files('x', 'tuned_fmoe'))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "AITER_MERGE_DIR": str(parent)}
    r = subprocess.run([sys.executable, "-B", "-c", program], capture_output=True, text=True, check=True, env=env)
    first, second = (Path(line) for line in r.stdout.splitlines())
    assert first.parent == second.parent  # one directory per process
    assert first.parent.parent == parent and first.parent.name.startswith("aiter-merged-")
    assert (first.name, second.name) == ("a8w8_blockscale_tuned_gemm.csv", "tuned_fmoe.csv")
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    assert first.read_text() == "a,b\n"
    other = subprocess.run([sys.executable, "-B", "-c", program], capture_output=True, text=True, check=True, env=env)
    assert Path(other.stdout.splitlines()[0]).parent != first.parent  # another process, another directory
    assert not os.path.exists("/tmp/a8w8_blockscale_tuned_gemm.csv") or first != Path(
        "/tmp/a8w8_blockscale_tuned_gemm.csv"
    )
