"""check on hostile repository states: staged leftovers, special files, nested targets."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import Invoke


def _findings(invoke: Invoke, root: Path) -> list[dict[str, object]]:
    r = invoke("check", "--format", "json", repo=root)
    assert r.exit_code in (0, 1), r.stderr
    return list(json.loads(r.stdout)["findings"])


def test_leftover_staging_files_point_at_status_not_add(deploy: Path, invoke: Invoke) -> None:
    left = deploy / "upstream" / ".patchkit-tmp-999999999-kv-restore-fence.diff.0a1b2c3d.tmp"
    left.write_bytes(b"half a diff\n")
    found = [
        (f["code"], f["message"], f["fix"])
        for f in _findings(invoke, deploy)
        if f["file"] == str(left.relative_to(deploy))
    ]
    assert found == [
        (
            "interrupted-write",
            f"{left.relative_to(deploy)} is a file patchkit staged for a write that was interrupted",
            "finish or clean up the interrupted write: patchkit status",
        )
    ]
    r = invoke("status", repo=deploy)
    assert r.exit_code == 0
    assert not left.exists()
    assert _findings(invoke, deploy) == []


def test_fifo_in_managed_directories_is_an_orphan(deploy: Path, invoke: Invoke) -> None:
    for top in ("patches", "upstream", "tuning"):
        os.mkfifo(deploy / top / "pipe")
    found = [(f["code"], f["file"], f["message"]) for f in _findings(invoke, deploy)]
    assert found == [
        ("orphan", f"{top}/pipe", f"{top}/pipe is a named pipe (FIFO), not a file; nothing can pin it")
        for top in ("patches", "upstream", "tuning")
    ]


def test_device_node_is_an_orphan(deploy: Path, invoke: Invoke) -> None:
    if os.geteuid() != 0:
        import pytest

        pytest.skip("creating a device node needs root")
    os.mknod(deploy / "tuning" / "null", 0o600 | 0o020000, os.makedev(1, 3))
    found = [(f["code"], f["message"]) for f in _findings(invoke, deploy)]
    assert found == [("orphan", "tuning/null is a character device, not a file; nothing can pin it")]


def test_nested_container_targets_are_caught(deploy: Path, invoke: Invoke) -> None:
    (deploy / "tuning" / "dir.csv").write_bytes(b"a\n")
    r = invoke("add", str(deploy / "tuning" / "dir.csv"), "--target", "/opt/patchkit", repo=deploy)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0] == (
        "patchkit: error: --target /opt/patchkit and the target /opt/patchkit/entrypoint.sh of 'entrypoint' nest: "
        "a file cannot also be a directory"
    )
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text().replace('target = "/opt/tuning/moe.csv"', 'target = "/opt/patchkit"'))
    found = [(f["code"], f["field"], f["message"]) for f in _findings(invoke, deploy) if f["code"] == "nested-target"]
    assert found == [
        (
            "nested-target",
            "artifacts[entrypoint].target",
            "target /opt/patchkit/entrypoint.sh lies below /opt/patchkit, which tuning[moe].target mounts as a file",
        )
    ]
