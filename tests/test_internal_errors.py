"""The internal-error path (exit 4): what a user sees, and the suite's guard that no other test ends there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import cli
from tests.conftest import REPO_ROOT
from tests.internal_errors import SEEN, check_process


def _a_bug(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("boom")


@pytest.mark.internal_error
def test_a_bug_is_one_line_and_exit_4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("patchkit.cli.common.find_repo", _a_bug)
    start = len(SEEN)
    plain = CliRunner().invoke(cli, ["check"])
    assert plain.exit_code == 4
    assert plain.stderr == (
        "patchkit: internal error: RuntimeError: boom\n  rerun with --verbose for the traceback, and please report it\n"
    )
    verbose = CliRunner().invoke(cli, ["--verbose", "check"])
    assert verbose.exit_code == 4 and verbose.stderr.startswith("Traceback (most recent call last):")
    assert SEEN[start:] == ["in-process: RuntimeError: boom"] * 2  # the guard saw both; the marker lets them pass


def test_a_process_that_exits_4_is_recorded() -> None:
    start = len(SEEN)
    check_process(["patchkit", "check"], subprocess.CompletedProcess([], 4, "", "patchkit: internal error: X: y\n"))
    check_process(["patchkit", "sums"], subprocess.CompletedProcess([], 2, b"", b"patchkit: error: bad\n"))
    check_process(["patchkit", "lock"], subprocess.CompletedProcess([], 4, None, None))
    assert SEEN[start:] == ["patchkit check: patchkit: internal error: X: y", "patchkit lock: exit 4"]
    del SEEN[start:]  # recorded on purpose: not this test's failure


INNER = """
import subprocess, sys
import pytest
from click.testing import CliRunner
from patchkit.cli import cli
from tests.adversarial.conftest import patchkit

def bug(*args, **kwargs):
    raise RuntimeError("boom")

def test_in_process(monkeypatch):
    monkeypatch.setattr("patchkit.cli.common.find_repo", bug)
    assert CliRunner().invoke(cli, ["check"]).exit_code == 4

@pytest.mark.internal_error
def test_in_process_on_purpose(monkeypatch):
    monkeypatch.setattr("patchkit.cli.common.find_repo", bug)
    assert CliRunner().invoke(cli, ["check"]).exit_code == 4

def test_clean(tmp_path):
    assert patchkit("check", cwd=tmp_path).returncode == 2
"""


def test_any_other_test_that_reaches_it_fails(tmp_path: Path) -> None:
    """An inner run with this suite's fixtures: the test that hits exit 4 unmarked errors, the others pass."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import _no_internal_error  # noqa: F401\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "--strict-markers",
         "-o", "markers=internal_error: on purpose", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "3 passed, 1 error" in done.stdout, done.stdout
    assert "ERROR test_inner.py::test_in_process" in done.stdout  # the summary line, cut to the terminal's width
    assert "patchkit ended in its internal-error path (exit 4): in-process: RuntimeError: boom" in done.stdout
