"""check --deep and find-base on a wheel upstream: real wheels, the real pip, from a find-links directory."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from patchkit.core import diffs
from tests.conftest import Invoke, git

MOD_1 = b"from pkg.util import old_name\n\n\ndef run(x):\n    return old_name(x)\n"
MOD_2 = b"from pkg.util import new_name\n\n\ndef run(x):\n    return new_name(x)\n"


def build_wheel(directory: Path, version: str, files: dict[str, bytes]) -> None:
    dist_info = f"demo_pkg-{version}.dist-info"
    files = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: patchkit-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items()) + f"{dist_info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"demo_pkg-{version}-py3-none-any.whl", "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist_info}/RECORD", record)


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two releases of demo-pkg; 2.0.0 renames pkg.util.old_name to new_name. pip sees only these."""
    links = tmp_path / "links"
    links.mkdir()
    build_wheel(
        links,
        "1.0.0",
        {"pkg/__init__.py": b"", "pkg/util.py": b"def old_name(x):\n    return x\n", "pkg/mod.py": MOD_1},
    )
    build_wheel(
        links,
        "2.0.0",
        {"pkg/__init__.py": b"", "pkg/util.py": b"def new_name(x):\n    return x\n", "pkg/mod.py": MOD_2},
    )
    for var in list(os.environ):
        if var.startswith("PIP_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    return links


def deployment(invoke: Invoke, tmp_path: Path) -> Path:
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    r = invoke("upstream", "add", "demo", "--wheel", "demo-pkg==2.0.0", repo=root)
    assert r.exit_code == 0, r.stderr
    return root


def test_deep_check_of_a_wheel_upstream(invoke: Invoke, tmp_path: Path, wheels: Path) -> None:
    root = deployment(invoke, tmp_path)
    edited = tmp_path / "mod.py"
    # The overlay still imports the name 1.0.0 had.
    edited.write_bytes(MOD_2 + b"\n\nfrom pkg.util import old_name  # kept from 1.0.0\n")
    r = invoke(
        "add", str(edited), "--name", "mod", "--target", "/usr/lib/python3/site-packages/pkg/mod.py",
        "--upstream", "demo", "--upstream-path", "pkg/mod.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    git(root, "init", "-q")
    r = invoke("check", "--deep", "--format", "json", repo=root)
    found = [
        (f["file"], f["line"], f["severity"])
        for f in json.loads(r.stdout)["findings"]
        if f["code"] == "import-unresolved"
    ]
    assert r.exit_code == 1 and found == [("patches/mod.py", 8, "error")]


def test_find_base_across_wheel_versions(invoke: Invoke, tmp_path: Path, wheels: Path) -> None:
    root = deployment(invoke, tmp_path)
    overlay = MOD_1.replace(b"    return old_name(x)\n", b"    return old_name(x) + 1\n")
    (root / "patches" / "mod.py").write_bytes(overlay)
    hand = diffs.make(MOD_1, overlay, "a/pkg/mod.py", "b/pkg/mod.py")
    (root / "patches" / "mod.diff").write_bytes(hand)
    with (root / "lockfile.toml").open("a") as f:
        f.write(
            f'\n[[patches]]\nname = "mod"\nkind = "overlay"\nfile = "patches/mod.py"\n'
            f'sha256 = "{hashlib.sha256(overlay).hexdigest()}"\n'
            'target = "/usr/lib/python3/site-packages/pkg/mod.py"\n\n'
            '[patches.origin]\npath = "pkg/mod.py"\n\n'
            f'[[diffs]]\nfile = "patches/mod.diff"\nsha256 = "{hashlib.sha256(hand).hexdigest()}"\npatches = ["mod"]\n'
        )
    assert invoke("sums", repo=root).exit_code == 0
    r = invoke("upstream", "find-base", "--candidate", "1.0.0", "--candidate", "2.0.0", "--format", "json", repo=root)
    assert r.exit_code == 0, r.stderr
    (found,) = json.loads(r.stdout)["found"]
    assert found["verdict"] == "1.0.0: exact, the base its diff rebuilds"
    assert [(t["candidate"], t["lines_differing"]) for t in found["tried"]] == [("1.0.0", 0), ("2.0.0", 4)]
    r = invoke("upstream", "find-base", "--candidate", "1.0.0", "--candidate", "2.0.0", "--record", repo=root)
    assert r.exit_code == 0, r.stderr
    assert 'version = "1.0.0"' in (root / "lockfile.toml").read_text()
