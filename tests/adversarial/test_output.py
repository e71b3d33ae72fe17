"""Hostile file names in output: no forged lines, no terminal escapes, lossless JSON."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from tests.adversarial.conftest import patchkit
from tests.conftest import Invoke

FORGED = "x\ncheck: ok: 99 files hashed, 0 diffs verified, 0 errors"


def test_an_orphan_name_cannot_print_a_fake_success_line(deploy: Path, invoke: Invoke) -> None:
    (deploy / "tuning" / FORGED).write_bytes(b"1\n")
    (deploy / "tuning" / "red\x1b[31m.csv").write_bytes(b"1\n")
    r = invoke("check", repo=deploy)
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert not any(line.startswith("check: ok") for line in lines)
    assert "\x1b" not in r.stdout
    assert lines[0] == "tuning/red\\x1b[31m.csv: error: tuning/red\\x1b[31m.csv is not named by the lockfile"
    assert lines[2].startswith(
        "tuning/x\\ncheck: ok: 99 files hashed, 0 diffs verified, 0 errors: error: tuning/x\\ncheck"
    )
    gh = invoke("check", "--format", "github", repo=deploy).stdout
    assert "\x1b" not in gh and not any(line.startswith("check: ok") for line in gh.splitlines())


def test_a_non_utf8_name_is_lossless_and_valid_in_json(deploy: Path) -> None:
    raw = b"tuning/caf\xe9.csv"
    with open(os.path.join(os.fsencode(deploy), raw), "wb") as f:
        f.write(b"1\n")
    done = patchkit("check", "--format", "json", cwd=deploy)
    assert done.returncode == 1
    # Strict UTF-8 (no lone surrogates): any JSON parser reads it.
    done.stdout.encode("utf-8")
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["file"] == "tuning/caf\\xe9.csv"
    assert base64.b64decode(finding["file_base64"]) == raw
    assert "\\udc" not in done.stdout
    text = patchkit("check", cwd=deploy)
    assert text.stdout.splitlines()[0] == "tuning/caf\\xe9.csv: error: tuning/caf\\xe9.csv is not named by the lockfile"


def test_add_of_a_non_utf8_name_is_bad_input(deploy: Path) -> None:
    raw = b"tuning/caf\xe9.csv"
    with open(os.path.join(os.fsencode(deploy), raw), "wb") as f:
        f.write(b"1\n")
    done = patchkit("add", os.fsdecode(raw), "--target", "/opt/cafe.csv", cwd=deploy)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "patchkit: error: tuning/caf\\xe9.csv: the name is not UTF-8; lockfile paths are UTF-8 text, rename the file"
    ]


def test_an_error_naming_a_hostile_path_stays_on_one_line(deploy: Path) -> None:
    done = patchkit("add", "tuning/none\n\x1b[2Jcheck: ok", "--target", "/opt/x", cwd=deploy)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "\x1b" not in done.stderr
