"""A cloned repository never runs code: what a commit carries in ``.patchkit/`` changes nothing in ``.git``.

A deployment is built with the real CLI, a hostile commit adds a journal
(old and new formats, with its data file and "staged" files), rebase states
naming ``.git``, and files that look like hooks; the repository is cloned
with the real ``git clone``. Every command that reads or writes runs in the
clone as a subprocess; ``.git`` must be byte-identical afterwards, and the
program the hostile files would install (as ``core.fsmonitor`` and as a
``post-checkout`` hook) must never run, not even when git itself runs next.
A malformed rebase state is one line naming the file and the field, exit 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from tests.adversarial.conftest import patchkit
from tests.conftest import Invoke, git
from tests.rebase.test_overlays import FENCED, WORKER, Upstream, make_deploy, rebase_json, upstream  # noqa: F401


def git_tree_digest(git_dir: Path) -> dict[str, str]:
    """Every entry of ``git_dir`` (not followed through links): its kind, mode and content digest."""
    out: dict[str, str] = {}
    for top, dirs, files in os.walk(git_dir):
        for name in dirs + files:
            path = Path(top) / name
            st = os.lstat(path)
            rel = path.relative_to(git_dir).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link {os.readlink(path)}"
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {stat.S_IMODE(st.st_mode):o}"
            else:
                out[rel] = f"file {stat.S_IMODE(st.st_mode):o} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return out


def _evil(tmp_path: Path) -> tuple[bytes, bytes, Path]:
    """A program that leaves a mark when run, a git config that runs it as fsmonitor, and the mark's path."""
    mark = tmp_path / "EXECUTED"
    program = tmp_path / "evil.sh"
    program.write_text(f"#!/bin/sh\ntouch {mark}\n")
    program.chmod(0o755)
    config = f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = {program}\n".encode()
    return program.read_bytes(), config, mark


def _journal_v2(root: Path, hook: bytes, config: bytes) -> None:
    """The format an older patchkit wrote in the work tree: renames, writes and deletions into .git."""
    tmp_hook = "patches/.patchkit-tmp-1-post-checkout.0000.tmp"
    tmp_config = "patches/.patchkit-tmp-1-config.0000.tmp"
    (root / tmp_hook).write_bytes(hook)
    (root / tmp_hook).chmod(0o755)
    (root / tmp_config).write_bytes(config)
    (root / ".patchkit" / "journal.data").write_bytes(config)
    record = {
        "version": 2,
        "replace": [[tmp_hook, ".git/hooks/post-checkout"], [tmp_config, ".git/config"]],
        "write": [],
        "delete": [],
    }
    (root / ".patchkit" / "journal.json").write_text(json.dumps(record))


def _journal_v3(root: Path, hook: bytes, config: bytes) -> None:
    """The current format, bound to the attacker's guess of the clone's device and inode."""
    _journal_v2(root, hook, config)
    st = root.stat()
    record = json.loads((root / ".patchkit" / "journal.json").read_text())
    record.update(version=3, kind="repository", state="commit", pid=1, run="0" * 32, dev=st.st_dev, ino=st.st_ino)
    record["delete"] = [".git/HEAD", ".GIT/index"]
    (root / ".patchkit" / "journal.json").write_text(json.dumps(record))


def _staging(root: Path, hook: bytes, config: bytes) -> None:
    """A journal "interrupted while staging" whose undo would delete files beside .git/config."""
    _journal_v3(root, hook, config)
    record = json.loads((root / ".patchkit" / "journal.json").read_text())
    record.update(state="staging", stage=[".git/config", ".git/hooks/pre-commit.sample"])
    (root / ".patchkit" / "journal.json").write_text(json.dumps(record))


def _rebase_state(root: Path, hook: bytes, config: bytes) -> None:
    """Rebase states that name .git: a patch's path, its conflict file, its cache key; the series' work files."""
    lock_sha = hashlib.sha256((root / "lockfile.toml").read_bytes()).hexdigest()
    state = {
        "version": 1,
        "upstream": "vllm",
        "old_pin": "0" * 40,
        "new_pin": {"kind": "git", "commit": "1" * 40},
        "lockfile_sha256": lock_sha,
        "image_pins": {},
        "skipped": [],
        "patches": [
            {
                "name": "../../../.git/hooks",
                "outcome": "conflict",
                "old_path": "vllm/worker.py",
                "new_path": ".git/hooks/post-checkout",
                "old_target": "/usr/lib/python3/dist-packages/vllm/worker.py",
                "new_target": "relative/target.py",
                "theirs_sha256": "../../../../etc/passwd",
                "merged_sha256": None,
                "ours_sha256": None,
                "text_outcome": None,
            }
        ],
    }
    work = root / ".patchkit" / "rebase"
    (work / "conflicts" / "worker").mkdir(parents=True)
    (work / "conflicts" / "worker" / "post-checkout").write_bytes(hook)
    (work / "state.json").write_text(json.dumps(state))
    series = {
        "series": "vllm",
        "onto": "1" * 40,
        "lockfile_sha256": lock_sha,
        "stopped": "../../../.git",
        "conflicts": ["config"],
        "broken": [],
        "resolved": {"x": {".git/config": "AAAA"}},
        "accepted": {},
    }
    (root / ".patchkit" / "series-rebase").mkdir(parents=True)
    (root / ".patchkit" / "series-rebase" / "state.json").write_text(json.dumps(series))


def _hooks_lookalikes(root: Path, hook: bytes, config: bytes) -> None:
    """Files named like git's own, outside .git: nothing may install them."""
    for rel in (".githooks/post-checkout", "hooks/post-checkout", "patches/.git/config", ".patchkit/config"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(hook if "hook" in rel else config)
    _journal_v3(root, hook, config)


HOSTILE = {
    "journal-v2": _journal_v2,
    "journal-v3": _journal_v3,
    "journal-staging": _staging,
    "rebase-state": _rebase_state,
    "hooks-lookalikes": _hooks_lookalikes,
}


@pytest.fixture
def deployment(tmp_path: Path, invoke: Invoke, upstream: Upstream) -> Path:  # noqa: F811
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    return make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_clone_with_committed_patchkit_state_changes_nothing_in_git(
    attack: str, deployment: Path, tmp_path: Path
) -> None:
    hook, config, mark = _evil(tmp_path)
    (deployment / ".patchkit").mkdir(exist_ok=True)
    HOSTILE[attack](deployment, hook, config)
    git(deployment, "add", "-f", "-A")
    git(deployment, "commit", "-qm", "hostile")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(deployment), str(clone))
    assert (clone / ".patchkit").is_dir()
    before = git_tree_digest(clone / ".git")
    new_file = tmp_path / "extra.py"
    new_file.write_bytes(b"x = 1\n")
    commands = [
        ("status",),
        ("status", "--format", "json"),
        ("check",),
        ("check", "--format", "json"),
        ("sums", "--check"),
        ("lock",),
        ("sums",),
        ("add", str(new_file), "--name", "extra", "--target", "/opt/extra.py"),
        ("rebase", "--continue"),
        ("rebase", "--abort"),
        ("status",),
    ]
    for args in commands:
        r = patchkit(*args, cwd=clone)
        assert r.returncode in (0, 1, 2), (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (args, r.stderr)
        assert git_tree_digest(clone / ".git") == before, args
        if attack != "rebase-state" and args == ("status",):
            # The journal in the work tree is refused, one line, exit 1: it is never carried out.
            assert r.returncode == 1, r.stderr
            assert ".patchkit/journal.json: a journal in the work tree" in r.stderr
        if attack != "rebase-state" and args == ("check",):
            assert r.returncode == 1 and "where patchkit never writes one" in r.stdout, r.stdout
    git(clone, "status")  # would run a planted core.fsmonitor
    git(clone, "checkout", "-q", "HEAD~0")  # would run a planted post-checkout hook
    assert not mark.exists(), "a program the clone carried was run"
    assert (clone / ".patchkit" / "journal.json").exists() or not attack.startswith("journal")


# --------------------------------------------------------------------------- malformed rebase states


def _conflicted(invoke: Invoke, tmp_path: Path, up: Upstream) -> Path:
    """A deployment (a git work tree) whose rebase stopped at a conflict."""
    c1 = up.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, up, c1, {"vllm/worker.py": FENCED})
    theirs = WORKER.replace(
        b"        for b in blocks:\n", b"        torch.cuda.current_stream().synchronize()\n        for b in blocks:\n"
    )
    c2 = up.commit({"vllm/worker.py": theirs})
    code, _ = rebase_json(invoke, root, "--onto", c2)
    assert code == 1
    return root


def _patch(**fields: object) -> object:
    def change(state: dict[str, object]) -> None:
        state["patches"][0].update(fields)  # type: ignore[index]

    return change


def _top(**fields: object) -> object:
    return lambda state: state.update(fields)


MALFORMED = {
    "relative-target": (_patch(new_target="usr/lib/x.py"), "patches[0].new_target"),
    "nul-in-path": (_patch(new_path="vllm/wor\0ker.py"), "patches[0].new_path"),
    "dotdot-in-path": (_patch(old_path="../../etc/passwd"), "patches[0].old_path"),
    "git-path": (_patch(new_path=".GIT/hooks/post-checkout"), "patches[0].new_path"),
    "dotdot-name": (_patch(name="../../.git/hooks"), "patches[0].name"),
    "cache-key-traversal": (_patch(theirs_sha256="../../../../etc/passwd"), "patches[0].theirs_sha256"),
    "unknown-outcome": (_patch(outcome="exploded"), "patches[0].outcome"),
    "pin-not-object": (_top(new_pin="main"), "new_pin"),
    "lock-sha-number": (_top(lockfile_sha256=5), "lockfile_sha256"),
    "patches-not-list": (_top(patches={"a": 1}), "patches"),
    "upstream-bad-name": (_top(upstream="../x"), "upstream"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_rebase_state_is_one_line_naming_its_field(
    case: str,
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    root = _conflicted(invoke, tmp_path, upstream)
    path = root / ".patchkit" / "rebase" / "state.json"
    state = json.loads(path.read_text())
    change, field = MALFORMED[case]
    change(state)  # type: ignore[operator]
    path.write_text(json.dumps(state))
    _assert_refused(root, f".patchkit/rebase/state.json: {field}:")


@pytest.mark.parametrize("case", ["deep-nesting", "directory", "symlink-to-git", "not-utf8", "symlinked-work-area"])
def test_a_rebase_state_that_is_not_a_file_patchkit_wrote_is_bad_input(
    case: str,
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    root = _conflicted(invoke, tmp_path, upstream)
    path = root / ".patchkit" / "rebase" / "state.json"
    path.unlink()
    expected = ".patchkit/rebase/state.json: "
    if case == "deep-nesting":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "directory":
        path.mkdir()
    elif case == "symlink-to-git":
        path.symlink_to(root / ".git" / "config")
    elif case == "not-utf8":
        path.write_bytes(b'{"version": 1, "upstream": "\xff"}')
    else:
        work = root / ".patchkit" / "rebase"
        work.rename(root / "elsewhere")
        work.symlink_to(root / "elsewhere")
        expected = ".patchkit/rebase: is a symlink or not a directory"
    _assert_refused(root, expected)


def _assert_refused(root: Path, expected: str) -> None:
    """status, rebase --continue: exit 2, one line naming the file; --abort cleans up; .git never changes."""
    before = git_tree_digest(root / ".git")
    for args in (("rebase", "--continue"), ("status",), ("status", "--format", "json")):
        r = patchkit(*args, cwd=root)
        assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
        assert expected in r.stderr + r.stdout, (args, r.stderr, r.stdout)
    r = patchkit("rebase", "--abort", cwd=root)
    assert r.returncode == 0, r.stderr
    assert not os.path.lexists(root / ".patchkit" / "rebase")
    assert git_tree_digest(root / ".git") == before
    assert patchkit("check", cwd=root).returncode == 0
