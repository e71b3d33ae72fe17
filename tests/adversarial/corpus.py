"""Corrupted deployments: each entry breaks a copy of the ``deploy`` fixture the way an attacker or an accident would.

Add an attack by adding a function here: ``test_no_internal_error`` runs
every command on every entry and fails on any exit 4 (an internal error).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

Corrupt = Callable[[Path, Path], None]  # (repository, a directory outside it)

DIFF = "upstream/kv-restore-fence.diff"
CORPUS: dict[str, Corrupt] = {}


def entry(f: Corrupt) -> Corrupt:
    CORPUS[f.__name__.replace("_", "-")] = f
    return f


def _edit_lock(root: Path, old: str, new: str) -> None:
    lock = root / "lockfile.toml"
    lock.write_text(lock.read_text().replace(old, new))


@entry
def lockfile_not_utf8(root: Path, outside: Path) -> None:
    (root / "lockfile.toml").write_bytes(b'schema = 1\nname = "\xff"\n')


@entry
def lockfile_not_toml(root: Path, outside: Path) -> None:
    (root / "lockfile.toml").write_text("schema = 1\n[patches\n")


@entry
def lockfile_nested_arrays(root: Path, outside: Path) -> None:
    with (root / "lockfile.toml").open("a") as f:
        f.write("x = " + "[" * 5000 + "]" * 5000 + "\n")


@entry
def lockfile_wrong_types(root: Path, outside: Path) -> None:
    _edit_lock(root, 'target = "/opt/tuning/moe.csv"', "target = 5")


@entry
def lockfile_symlinked_out(root: Path, outside: Path) -> None:
    (root / "lockfile.toml").rename(outside / "lockfile.toml")
    os.symlink(outside / "lockfile.toml", root / "lockfile.toml")


@entry
def sums_garbage(root: Path, outside: Path) -> None:
    (root / "SHA256SUMS").write_bytes(b"\x00\xff" * 300 + b"\n\\x  y\n")


@entry
def sums_is_a_directory(root: Path, outside: Path) -> None:
    (root / "SHA256SUMS").unlink()
    (root / "SHA256SUMS").mkdir()


@entry
def diff_garbage(root: Path, outside: Path) -> None:
    (root / DIFF).write_bytes(os.urandom(2048))


@entry
def diff_bad_quoting(root: Path, outside: Path) -> None:
    data = (root / DIFF).read_bytes().split(b"\n", 1)[1]
    (root / DIFF).write_bytes(b'--- "a/x\\x"\n' + data)


@entry
def diff_escapes_the_tree(root: Path, outside: Path) -> None:
    (root / DIFF).write_bytes((root / DIFF).read_bytes().replace(b"a/vllm", b"a/../../etc"))


@entry
def diff_hunk_counts_lie(root: Path, outside: Path) -> None:
    (root / DIFF).write_bytes((root / DIFF).read_bytes().replace(b"@@ -", b"@@ -999999999999,", 1))


@entry
def patch_is_a_directory(root: Path, outside: Path) -> None:
    (root / "patches" / "gpu_worker.py").unlink()
    (root / "patches" / "gpu_worker.py").mkdir()


@entry
def patch_is_a_fifo(root: Path, outside: Path) -> None:
    (root / "patches" / "gpu_worker.py").unlink()
    os.mkfifo(root / "patches" / "gpu_worker.py")


@entry
def tuning_dir_symlinked_out(root: Path, outside: Path) -> None:
    (root / "tuning" / "moe.csv").rename(outside / "moe.csv")
    (root / "tuning").rmdir()
    os.symlink(outside, root / "tuning")


@entry
def upstream_is_a_file(root: Path, outside: Path) -> None:
    for f in (root / "upstream").iterdir():
        f.unlink()
    (root / "upstream").rmdir()
    (root / "upstream").write_text("not a directory\n")


@entry
def orphan_names(root: Path, outside: Path) -> None:
    (root / "tuning" / "x\ncheck: ok\x1b[2J").write_bytes(b"1\n")
    with open(os.path.join(os.fsencode(root), b"patches/caf\xe9.py"), "wb") as f:
        f.write(b"x = 1\n")


@entry
def journal_hostile(root: Path, outside: Path) -> None:
    (root / ".patchkit").mkdir(exist_ok=True)
    (root / ".patchkit" / "journal.json").write_text(
        json.dumps({"replace": [["../outside/x", "lockfile.toml"]], "delete": ["../outside/precious.csv"]})
    )


@entry
def journal_not_json(root: Path, outside: Path) -> None:
    (root / ".patchkit").mkdir(exist_ok=True)
    (root / ".patchkit" / "journal.json").write_bytes(b"\xff{")


@entry
def rebase_state_malformed(root: Path, outside: Path) -> None:
    (root / ".patchkit" / "rebase").mkdir(parents=True, exist_ok=True)
    (root / ".patchkit" / "rebase" / "state.json").write_text('{"version": 1, "patches": [{"outcome": 3}]}')


@entry
def compose_alias_bomb(root: Path, outside: Path) -> None:
    lines = ['x0: &a0 "lol"'] + [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    (root / "compose.yaml").write_text("\n".join(lines) + "\nservices:\n  s:\n    command: *a9\n")


@entry
def deploy_toml_garbage(root: Path, outside: Path) -> None:
    (root / "deploy.toml").write_bytes(b"[service\n\xff")


@entry
def staged_leftovers(root: Path, outside: Path) -> None:
    (root / "upstream" / ".patchkit-tmp-999999999-kv-restore-fence.diff.0a1b2c3d.tmp").write_bytes(b"half\n")
