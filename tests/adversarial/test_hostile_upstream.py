"""An upstream URL from a stranger's lockfile never runs a command, whatever the user's git allows.

``ext::sh -c …`` is a git URL that is a command: git refuses it by default,
but a user whose git config says ``protocol.allow=always`` (or
``protocol.ext.allow=always``) would run it on the first fetch. The
lockfile names the URL, and a repository from anyone names what it likes:
``rebase`` against it must refuse the transport (exit 3, one line), and the
command must never run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.conftest import patchkit


@pytest.mark.parametrize("allowed", ["protocol.allow", "protocol.ext.allow"])
def test_an_ext_url_in_the_lockfile_runs_nothing(allowed: str, tmp_path: Path) -> None:
    root = tmp_path / "deploy"
    assert patchkit("init", str(root), cwd=tmp_path).returncode == 0
    mark = tmp_path / "EXECUTED"
    with (root / "lockfile.toml").open("a") as f:
        f.write(f'\n[upstreams.x]\ngit = "ext::sh -c touch% {mark}"\ncommit = "{"a" * 40}"\n')
    user_git = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": allowed, "GIT_CONFIG_VALUE_0": "always"}
    done = patchkit("rebase", "--upstream", "x", "--onto", "main", cwd=root, env=user_git)
    assert not mark.exists()
    assert done.returncode == 3, done.stderr
    assert "transport 'ext' not allowed" in done.stderr.splitlines()[0]
