"""``patchkit sums --check``: the drift against the lockfile, and what the command loads to say there is none."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import Invoke

PROBE = (
    "import sys\n"
    "from patchkit.cli.app import main\n"
    "try:\n    main(['-C', sys.argv[1], 'sums', '--check'])\n"
    "except SystemExit as e:\n    print('exit', e.code)\n"
    "print(sorted(m for m in sys.modules if m.startswith('patchkit.check.')))\n"
)


def _probe(deploy: Path) -> tuple[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(deploy)], capture_output=True, text=True, check=True)
    *_, code, loaded = out.stdout.strip().splitlines()
    return code, eval(loaded)  # noqa: S307 - our own probe's repr of a list of names


def test_sums_as_generated_loads_no_rule_of_check(deploy: Path) -> None:
    """A SHA256SUMS that is what patchkit writes is verified without importing check's rules and state."""
    assert _probe(deploy) == ("exit 0", ["patchkit.check.verify_sums"])


def test_sums_drift_is_still_reported_in_full(invoke: Invoke, deploy: Path) -> None:
    """A listed file the lockfile does not pin, and a reordered file: the findings of ``check``'s SHA256SUMS rule."""
    sums = deploy / "SHA256SUMS"
    lines = sums.read_bytes().splitlines(keepends=True)
    (deploy / "extra.txt").write_bytes(b"extra\n")
    extra = hashlib.sha256(b"extra\n").hexdigest()
    sums.write_bytes(b"".join(lines) + f"{extra}  extra.txt\n".encode())
    r = invoke("sums", "--check", "--format", "json", repo=deploy)
    assert r.exit_code == 1
    found = [(f["code"], f["line"], f["message"]) for f in json.loads(r.stdout)["findings"]]
    assert found == [("sums-drift", len(lines) + 1, "lists extra.txt, which the lockfile does not pin")]
    sums.write_bytes(b"".join(reversed(lines)))
    r = invoke("sums", "--check", repo=deploy)
    assert r.exit_code == 1
    assert "lists its files in another order than patchkit writes, or one of them twice" in r.stdout
    code, loaded = _probe(deploy)
    assert code == "exit 1" and "patchkit.check.sums" in loaded
