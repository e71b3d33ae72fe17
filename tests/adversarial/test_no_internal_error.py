"""Every command on every corrupted deployment of the corpus: a finding or a refusal, never exit 4."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.adversarial.corpus import CORPUS
from tests.conftest import Invoke

# Every command that runs offline on a deployment (the network ones are covered
# by their own tests against local servers).
COMMANDS: list[tuple[str, ...]] = [
    ("check",),
    ("check", "--format", "json"),
    ("check", "--format", "github"),
    ("sums", "--check"),
    ("sums",),
    ("lock",),
    ("add", "tuning/new.csv", "--target", "/opt/tuning/new.csv"),
    ("remove", "moe"),
    ("diff",),
    ("diff", "--stat"),
    ("diff", "--write"),
    ("upstream", "list"),
    ("status",),
    ("status", "--format", "json"),
    ("emit", "--check"),
    ("emit",),
    ("bundle", "-o", "{out}/b.tar.gz"),
    ("verify-bundle", "{out}/b.tar.gz"),
    ("rebase", "--continue"),
    ("rebase", "--abort"),
    ("import", "--dry-run", "."),
]


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_no_command_ends_in_an_internal_error(case: str, deploy: Path, tmp_path: Path, invoke: Invoke) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "precious.csv").write_bytes(b"do not touch\n")
    template = tmp_path / "template"
    shutil.copytree(deploy, template, symlinks=True)
    internal = []
    for n, command in enumerate(COMMANDS):
        root = tmp_path / f"run{n}"
        shutil.copytree(template, root, symlinks=True)
        CORPUS[case](root, outside)
        tuning = root / "tuning"
        if tuning.is_dir() and not tuning.is_symlink():
            (tuning / "new.csv").write_bytes(b"1\n")  # what `add` pins
        out = tmp_path / f"out{n}"
        out.mkdir()
        args = [a.replace("{out}", str(out)) for a in command]
        cwd = os.getcwd()
        os.chdir(root)
        try:
            r = invoke(*args, repo=None if command[0] == "import" else root)
        finally:
            os.chdir(cwd)
        if r.exit_code == 4 or r.exit_code not in (0, 1, 2, 3):
            internal.append((" ".join(command), r.exit_code, r.stderr[-300:]))
    assert internal == []
    assert (outside / "precious.csv").read_bytes() == b"do not touch\n"
    assert sorted(p.name for p in outside.iterdir()) in (["precious.csv"], ["moe.csv", "precious.csv"],
                                                          ["lockfile.toml", "precious.csv"])  # fmt: skip
