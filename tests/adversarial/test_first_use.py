"""What a new user meets first, run as a real process: broken lockfiles under CI formats, wrong -C, stray
--continue, and the work area kept out of git by import and init."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from patchkit.core.findings import CheckResult
from patchkit.formats.findings import as_json
from tests.adversarial.conftest import patchkit
from tests.conftest import REPO_ROOT, Invoke, copy_shipped
from tests.importing.conftest import build

# Lockfiles that cannot be loaded, each with the file and line the error names (None: no line).
BROKEN: dict[str, tuple[bytes | None, int | None]] = {
    "no lockfile": (None, None),
    "not TOML": (b'schema = 1\n\n[deployment]\nname = "x"\nbad = \n', 5),
    "not UTF-8": (b'schema = 1\n\n[deployment]\nname = "\xff"\n', 4),
    "unknown schema": (b"schema = 9\n", 1),
    "unknown field": (b'schema = 1\n\n[deployment]\nname = "x"\ncolour = "red"\n', 5),
    "a directory": (None, None),
}


def _broken(tmp_path: Path, case: str) -> Path:
    root = tmp_path / "deploy"
    root.mkdir()
    data, _ = BROKEN[case]
    if data is not None:
        (root / "lockfile.toml").write_bytes(data)
    if case == "a directory":
        (root / "lockfile.toml").mkdir()
    return root


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_json_is_a_document_when_the_lockfile_cannot_be_loaded(case: str, tmp_path: Path) -> None:
    root = _broken(tmp_path, case)
    run = patchkit("check", "--format", "json", cwd=root)
    assert run.returncode == 2, (run.stdout, run.stderr)
    doc = json.loads(run.stdout)  # CI parses stdout: a document, never nothing
    assert doc.keys() == json.loads(as_json(CheckResult())).keys() and doc["ok"] is False
    (finding,) = doc["findings"]
    assert finding.keys() == {"code", "severity", "file", "line", "field", "message", "fix"}
    assert finding["code"] == "lockfile-unloadable" and finding["severity"] == "error"
    assert (finding["file"], finding["line"]) == ("lockfile.toml", BROKEN[case][1])
    # The person reading stderr still gets the same one line.
    assert run.stderr.startswith("patchkit: error: ") and "Traceback" not in run.stderr
    assert finding["message"] in run.stderr


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_github_annotates_the_lockfile_when_it_cannot_be_loaded(case: str, tmp_path: Path) -> None:
    run = patchkit("check", "--format", "github", cwd=_broken(tmp_path, case))
    assert run.returncode == 2, (run.stdout, run.stderr)
    line = BROKEN[case][1]
    where = "file=lockfile.toml" + (f",line={line}" if line is not None else "")
    annotations = [a for a in run.stdout.splitlines() if a.startswith("::error ")]
    assert len(annotations) == 1 and annotations[0].startswith(f"::error {where},title=patchkit lockfile-unloadable::")
    assert run.stdout.splitlines()[-1] == "patchkit check: FAILED (1 errors)"


def test_check_json_carries_every_problem_of_the_lockfile(tmp_path: Path) -> None:
    root = tmp_path / "deploy"
    root.mkdir()
    (root / "lockfile.toml").write_text('schema = 1\n\n[deployment]\nname = "x"\ncolour = 1\nshade = 2\n')
    run = patchkit("check", "--format", "json", cwd=root)
    assert run.returncode == 2
    found = [(f["file"], f["line"]) for f in json.loads(run.stdout)["findings"]]
    assert found == [("lockfile.toml", 5), ("lockfile.toml", 6)], run.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_repo_option_naming_no_directory_says_so(where: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    args = ("-C", missing, "check") if where == "before" else ("check", "-C", missing)
    run = patchkit(*args, cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.splitlines()[0] == f"patchkit: error: -C {missing}: no such directory"
    assert run.stdout == "" and "parent directory" not in run.stderr


def test_repo_option_naming_a_file_says_so(tmp_path: Path) -> None:
    root = copy_shipped(tmp_path / "deploy")
    run = patchkit("-C", str(root / "lockfile.toml"), "check", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.splitlines()[0] == f"patchkit: error: -C {root / 'lockfile.toml'}: not a directory"
    assert "Usage:" not in run.stderr


def test_repo_option_naming_a_directory_without_a_lockfile_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    copy_shipped(tmp_path / "shipped")
    for d in ("empty", "shipped/patches"):  # a subdirectory of a deployment is not the deployment
        run = patchkit("-C", str(tmp_path / d), "check", cwd=tmp_path)
        assert run.returncode == 2
        assert run.stderr.splitlines()[0] == f"patchkit: error: -C {tmp_path / d}: no lockfile.toml there"


@pytest.mark.parametrize(
    "args",
    [
        ("rebase", "--continue"),
        ("rebase", "--abort"),
        ("rebase", "--series", "vllm", "--continue"),
        ("rebase", "--series", "vllm", "--abort"),
    ],
)
def test_continue_or_abort_with_no_rebase_is_a_refused_state(args: tuple[str, ...], tmp_path: Path) -> None:
    root = copy_shipped(tmp_path / "deploy")
    run = patchkit(*args, cwd=root)
    assert run.returncode == 1, (run.stdout, run.stderr)  # the documented code of a state to build on
    assert re.match(r"patchkit: error: no (series )?rebase in progress\n  fix: start one with ", run.stderr)
    assert run.stdout == ""


def test_the_exit_code_table_says_so() -> None:
    refused = "1  findings: a check failed, or the repository is not in a state the command can build on"
    assert refused in patchkit("--help", cwd=REPO_ROOT).stdout
    readme = (REPO_ROOT / "README.md").read_text()
    assert "| 1 | findings: a check failed, or the repository is not in a state the command can build on |" in readme


IGNORE = b"# patchkit's work area (rebase in progress, journal)\n.patchkit/\n"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, IGNORE),
        (b"", IGNORE),
        (b"*.log\n", b"*.log\n" + IGNORE),
        (b"*.log", b"*.log\n" + IGNORE),  # no final newline: the entry goes on its own line
        (b"/.patchkit/\n", None),
        (b"build/\n.patchkit  \r\n", None),
    ],
)
def test_import_keeps_the_work_area_out_of_git(
    before: bytes | None, after: bytes | None, tmp_path: Path, invoke: Invoke
) -> None:
    handkept = build(tmp_path / "handkept")
    ignore = handkept.root / ".gitignore"
    if before is not None:
        ignore.write_bytes(before)
    dry = invoke("import", "--dry-run", str(handkept.root))
    assert dry.exit_code == 0, dry.stderr
    assert ignore.exists() == (before is not None) and (before is None or ignore.read_bytes() == before)
    assert ("would add .patchkit/ to .gitignore" in dry.stdout) == (after is not None)
    for _ in range(2):  # idempotent: the second import adds nothing
        run = invoke("import", "--format", "json", str(handkept.root))
        assert run.exit_code == 0, run.stderr
        assert ignore.read_bytes() == (after if after is not None else before)
        assert json.loads(run.stdout)["import"]["gitignore"] == (after is not None and _ == 0)


def test_import_adds_the_entry_to_a_repository_imported_before(tmp_path: Path) -> None:
    handkept = build(tmp_path / "handkept")
    assert patchkit("import", cwd=handkept.root).returncode == 0
    (handkept.root / ".gitignore").write_bytes(b"*.log\n")  # as an older patchkit left it
    run = patchkit("import", cwd=handkept.root)
    assert run.returncode == 0 and "unchanged: lockfile.toml" in run.stdout
    assert (handkept.root / ".gitignore").read_bytes() == b"*.log\n" + IGNORE


def test_import_never_writes_through_a_gitignore_link(tmp_path: Path) -> None:
    handkept = build(tmp_path / "handkept")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"elsewhere\n")
    os.symlink(outside, handkept.root / ".gitignore")
    run = patchkit("import", cwd=handkept.root)
    assert run.returncode == 0, run.stderr
    assert outside.read_bytes() == b"elsewhere\n" and (handkept.root / ".gitignore").is_symlink()


@pytest.mark.parametrize(("before", "after"), [(None, IGNORE), (b"*.log\n", b"*.log\n" + IGNORE), (IGNORE, IGNORE)])
def test_init_keeps_the_work_area_out_of_git(before: bytes | None, after: bytes, tmp_path: Path) -> None:
    root = tmp_path / "new"
    root.mkdir()
    if before is not None:
        (root / ".gitignore").write_bytes(before)
    run = patchkit("init", str(root), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (root / ".gitignore").read_bytes() == after
    assert patchkit("check", cwd=root).returncode == 0
