"""Hostile compose YAML: alias bombs, recursive aliases and merge keys, oversize and deep documents."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.adversarial.conftest import patchkit
from tests.conftest import Invoke


def billion_laughs() -> str:
    """Nine nested anchors of ten aliases each, under a service's environment."""
    lines = ['x-a0: &a0 "lol"']
    for i in range(1, 10):
        lines.append(f"x-a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines += ["services:", "  vllm:", "    image: vllm/vllm-openai-rocm@sha256:" + "e6" * 32, "    command: *a9"]
    return "\n".join(lines) + "\n"


HOSTILE = {
    "billion-laughs": (
        billion_laughs(),
        "compose.yaml:7: aliases expand to more than 200000 nodes (an alias bomb); refused",
    ),
    "recursive-alias": (
        "services: &s\n  vllm:\n    image: x\n    command: [*s]\n",
        "compose.yaml:1: a recursive alias (an anchor used inside itself, directly or by a merge key); refused",
    ),
    "recursive-merge-key": (
        "services:\n  vllm: &v\n    image: x\n    <<: *v\n",
        "compose.yaml:2: a recursive alias (an anchor used inside itself, directly or by a merge key); refused",
    ),
    "deeply-nested": ("services:\n  vllm:\n    command: " + "[" * 5000 + "]" * 5000 + "\n", None),
    "oversized": ("services: {}\n" + "#" * (5 << 20) + "\n", "compose.yaml: 5242894 characters, over the 4 MiB limit"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_import_refuses_hostile_yaml_with_one_line(case: str, tmp_path: Path) -> None:
    text, message = HOSTILE[case]
    repo = tmp_path / "hand"
    repo.mkdir()
    (repo / "compose.yaml").write_text(text)
    started = time.monotonic()
    done = patchkit("import", "--dry-run", str(repo), cwd=tmp_path, timeout=60)
    assert time.monotonic() - started < 20
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("patchkit: error: compose.yaml")
    assert "Traceback" not in done.stderr and len(lines) <= 2
    if message is not None:
        assert lines[0].startswith(f"patchkit: error: {message}")
    assert not (repo / "lockfile.toml").exists()


@pytest.mark.parametrize("case", ["billion-laughs", "recursive-alias", "recursive-merge-key"])
def test_check_reports_hostile_yaml_in_a_hand_kept_compose(case: str, deploy: Path, invoke: Invoke) -> None:
    text, message = HOSTILE[case]
    (deploy / "compose.yaml").write_text(text)
    added = invoke("add", str(deploy / "compose.yaml"), "--name", "compose", repo=deploy)
    assert added.exit_code == 0, added.stderr
    started = time.monotonic()
    r = invoke("check", repo=deploy)
    assert time.monotonic() - started < 20
    assert r.exit_code == 1
    assert message is not None
    assert r.stdout.splitlines()[0] == f"compose.yaml: error: {message}"
