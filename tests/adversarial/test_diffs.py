"""Hostile diffs: headers naming paths outside the tree, bad quoting, wrong hunk starts, stale diff-only patches."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from patchkit.core.hashing import sha256_bytes
from tests.conftest import BASE, OVERLAY, Invoke

DIFF = "upstream/kv-restore-fence.diff"


def _repin_diff(root: Path, data: bytes) -> None:
    """Write ``data`` as the overlay's diff and pin it by hand, as someone editing the lockfile would."""
    old = sha256_bytes((root / DIFF).read_bytes())
    (root / DIFF).write_bytes(data)
    lock = root / "lockfile.toml"
    lock.write_text(lock.read_text().replace(old, sha256_bytes(data)))


def _findings(invoke: Invoke, root: Path) -> list[tuple[str, str, int | None, str]]:
    r = invoke("check", "--format", "json", repo=root)
    assert r.exit_code in (0, 1), r.stderr
    return [(f["code"], f["file"], f["line"], f["message"]) for f in json.loads(r.stdout)["findings"]]


def test_lock_refuses_to_repin_a_diff_naming_etc_passwd(deploy: Path, invoke: Invoke) -> None:
    evil = (deploy / DIFF).read_bytes().replace(b"a/vllm/v1/kv_offload/cpu/gpu_worker.py", b"a/../../etc/passwd")
    _repin_diff(deploy, evil)
    message = (
        "diff of 'kv-restore-fence' does not parse: the header names 'a/../../etc/passwd', a path outside "
        "the tree; a diff covers a file in it"
    )
    assert ("diff-invalid", DIFF, 1, message) in _findings(invoke, deploy)
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 0, r.stderr
    assert f"{DIFF}: stale diff -> regenerated from the base" in r.stdout
    assert b"etc/passwd" not in (deploy / DIFF).read_bytes()
    assert invoke("check", repo=deploy).exit_code == 0


@pytest.mark.parametrize("name", ['"a/x\\x"', '"a/\\u1234"', '"a/x\\400"'])
def test_badly_quoted_header_is_one_finding_and_bad_input(name: str, deploy: Path, invoke: Invoke) -> None:
    header = f"--- {name}".encode()
    evil = re.sub(rb"^--- .*$", lambda _: header, (deploy / DIFF).read_bytes(), count=1, flags=re.M)
    _repin_diff(deploy, evil)
    found = [f for f in _findings(invoke, deploy) if f[0] == "diff-invalid"]
    assert len(found) == 1 and found[0][2] == 1 and "the quoted file name has an escape" in found[0][3]
    r = invoke("lock", repo=deploy)
    assert r.exit_code in (0, 2), r.stderr  # regenerated from the cached base, or refused: never exit 4
    assert "internal error" not in r.stderr


def test_git_quoted_names_still_parse() -> None:
    from patchkit.core import diffs

    (fd,) = diffs.parse(b'--- "a/caf\\303\\251.py"\n+++ "b/caf\\303\\251.py"\n@@ -1 +1 @@\n-x\n+y\n')
    assert fd.old_path == "a/café.py" and fd.new_path == "b/café.py"


def test_a_wrong_old_side_hunk_start_is_caught(deploy: Path, invoke: Invoke) -> None:
    data = (deploy / DIFF).read_bytes()
    m = re.search(rb"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", data, flags=re.M)
    assert m is not None
    evil = data.replace(m.group(0), b"@@ -40,%s +%s,%s @@" % (m.group(2), m.group(3), m.group(4)), 1)
    _repin_diff(deploy, evil)
    stale = [f for f in _findings(invoke, deploy) if f[0] == "diff-stale"]
    assert len(stale) == 1, _findings(invoke, deploy)
    assert stale[0][1] == DIFF
    assert "hunk header says the new side starts at line 40" in stale[0][3]


def test_a_hunk_git_apply_would_take_a_line_away_is_named(deploy: Path, invoke: Invoke, tmp_path: Path) -> None:
    """Both header sides one line off: ``git apply -R`` still takes the hunk; check says exactly what is wrong."""
    data = (deploy / DIFF).read_bytes()
    m = re.search(rb"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", data, flags=re.M)
    assert m is not None
    old, old_len, new, new_len = (int(g) for g in m.groups())
    moved = data.replace(m.group(0), b"@@ -%d,%d +%d,%d @@" % (old + 1, old_len, new + 1, new_len), 1)
    (tmp_path / "gpu_worker.py").write_bytes(OVERLAY)
    (tmp_path / "p.diff").write_bytes(
        moved.replace(b"a/vllm/v1/kv_offload/cpu/", b"a/").replace(b"b/vllm/v1/kv_offload/cpu/", b"b/")
    )
    done = subprocess.run(["git", "apply", "-R", "p.diff"], cwd=tmp_path, capture_output=True, check=False)
    assert done.returncode == 0 and (tmp_path / "gpu_worker.py").read_bytes() == BASE, done.stderr
    _repin_diff(deploy, moved)
    stale = [f for f in _findings(invoke, deploy) if f[0] == "diff-stale"]
    assert [(f[1], f[2]) for f in stale] == [(DIFF, data[: m.start()].count(b"\n") + 1)]
    assert "git apply would still take it" in stale[0][3]
    assert (
        f"hunk header says line {new + 1} (after the hunks before it), but its lines are at line {new}" in stale[0][3]
    )


def test_stale_diff_only_patch_in_diff_and_rebase_is_bad_input(tmp_path: Path, invoke: Invoke) -> None:
    root = tmp_path / "d"
    assert invoke("init", str(root)).exit_code == 0
    with (root / "lockfile.toml").open("a") as f:
        f.write('\n[upstreams.vllm]\ngit = "https://github.com/vllm-project/vllm"\ncommit = "' + "1" * 40 + '"\n')
    assert invoke("lock", repo=root).exit_code == 0
    (tmp_path / "base.py").write_bytes(BASE)
    (tmp_path / "edited.py").write_bytes(OVERLAY)
    r = invoke(
        "add", str(tmp_path / "edited.py"), "--diff-only", "--name", "fence", "--target", "/opt/w.py",
        "--upstream", "vllm", "--upstream-path", "vllm/w.py", "--base", str(tmp_path / "base.py"), repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    diff = root / "upstream" / "fence.diff"
    diff.write_bytes(diff.read_bytes().replace(b" def restore(blocks):", b" def restore(stale):"))
    r = invoke("diff", repo=root)
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert lines[0].startswith(
        "patchkit: error: upstream/fence.diff:3: the diff of 'fence' does not apply to its pinned base"
    )
    assert lines[1].startswith("  fix: restore the diff that matches the pin")
    new = tmp_path / "new" / "vllm" / "w.py"
    new.parent.mkdir(parents=True)
    new.write_bytes(BASE + b"# upstream moved on\n")
    r = invoke("rebase", "--onto", "main", "--source", f"dir:{new.parent.parent}", repo=root)
    assert r.exit_code == 2, r.stdout
    assert "the diff of 'fence' does not apply to its pinned base" in r.stderr
    assert not (root / ".patchkit" / "rebase").exists()


def test_a_lockfile_of_5000_nested_arrays_is_bad_input(deploy: Path, invoke: Invoke) -> None:
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text() + "x = " + "[" * 5000 + "]" * 5000 + "\n")
    line = lock.read_text().count("\n")
    for command in ("check", "lock", "status", "sums"):
        r = invoke(command, repo=deploy)
        if command == "status":
            continue  # status reads no lockfile
        assert r.exit_code == 2, (command, r.stderr)
        assert r.stderr.splitlines()[0] == f"patchkit: error: lockfile.toml:{line}: nested too deeply to be read"


def test_verbose_keeps_the_exit_code_of_a_refused_import(tmp_path: Path) -> None:
    from tests.adversarial.conftest import patchkit

    repo = tmp_path / "hand"
    repo.mkdir()
    (repo / "compose.yaml").write_text("services: [unclosed\n")
    plain = patchkit("import", str(repo), cwd=tmp_path)
    verbose = patchkit("-v", "import", str(repo), cwd=tmp_path)
    assert plain.returncode == verbose.returncode == 2
    assert "Traceback" in verbose.stderr and "Traceback" not in plain.stderr
    assert plain.stderr.splitlines()[0] in verbose.stderr.splitlines()
