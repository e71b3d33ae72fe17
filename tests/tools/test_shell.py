"""``patchkit --version`` and shell completion (click's, for bash, zsh and fish), as a user's shell runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import patchkit

PATCHKIT = Path(sys.executable).parent / "patchkit"
ENV = {**os.environ, "PATH": f"{PATCHKIT.parent}{os.pathsep}{os.environ['PATH']}"}


def test_version() -> None:
    r = subprocess.run([str(PATCHKIT), "--version"], capture_output=True, text=True, check=False, env=ENV)
    assert (r.returncode, r.stdout) == (0, f"patchkit, version {patchkit.__version__}\n")


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o nosort -F _patchkit_completion patchkit"), ("zsh", "#compdef patchkit"),
     ("fish", "complete --no-files --command patchkit")],
)  # fmt: skip
def test_each_shell_gets_its_completion_script(shell: str, marker: str) -> None:
    env = {**ENV, "_PATCHKIT_COMPLETE": f"{shell}_source"}
    r = subprocess.run([str(PATCHKIT)], capture_output=True, text=True, check=False, env=env)
    assert r.returncode == 0
    assert marker in r.stdout


def bash_complete(*words: str) -> list[str]:
    """What bash offers after ``words`` (the last one being completed), with the script patchkit prints."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    quoted = " ".join(f"'{w}'" for w in words)
    script = (
        'eval "$(_PATCHKIT_COMPLETE=bash_source patchkit)"\n'
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        "_patchkit_completion patchkit 2>/dev/null\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run([bash, "--norc", "-c", script], capture_output=True, text=True, check=True, env=ENV)
    return r.stdout.split()


def test_bash_completes_commands_subcommands_and_options() -> None:
    assert bash_complete("patchkit", "che") == ["check"]
    assert bash_complete("patchkit", "image", "") == ["build", "cat", "files", "pin", "resolve"]
    assert bash_complete("patchkit", "check", "--fo") == ["--format"]
    assert bash_complete("patchkit", "check", "--format", "") == ["text", "json", "github"]
