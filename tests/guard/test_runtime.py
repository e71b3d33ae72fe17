"""The runtime guard script on its own: run as the entrypoint runs it, on files a test lays out.

The container tests (tests/images/test_guard_container.py) run it inside real
containers; these cover every input it can be handed, fast.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from patchkit.guard import runtime
from tests.conftest import REPO_ROOT

GUARD = REPO_ROOT / "patchkit" / "guard" / "runtime.py"
REVISION = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def guard(manifest: Path, *server_args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The guard as the entrypoint runs it: the script, ``--manifest``, ``--`` and the server's arguments."""
    argv = [sys.executable, str(GUARD), "--manifest", str(manifest)]
    if server_args:
        argv += ["--", *server_args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=env or {"PATH": "/usr/bin:/bin"})


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Any]:
    """Three files, a vllm package with its _version.py, a model snapshot, and the manifest naming all of them."""
    files = {"a.py": b"A = 1\n", "b.csv": b"m,n\n1,2\n", "entry.sh": b"#!/bin/sh\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("raise SystemExit('the guard must never import the runtime')\n")
    (site / "vllm" / "_version.py").write_text("__version__ = version = '0.26.1rc1.dev229+g124154a88'\n")
    snap = tmp_path / "hf" / "snapshots" / REVISION
    snap.mkdir(parents=True)
    (snap / "config.json").write_bytes(b"{}\n")
    doc = {
        "schema": 1,
        "deployment": "demo",
        "files": [
            {"name": n.split(".")[0], "kind": "module", "target": str(tmp_path / n), "sha256": sha(d)}
            for n, d in files.items()
        ],
        "runtime": {"image": "vllm", "package": "vllm", "version": "0.26.1rc1.dev229+g124154a88"},
        "model": {
            "repo": "o/m",
            "revision": REVISION,
            "path": str(snap),
            "files": [{"path": "config.json", "size": 3}],
        },
    }
    manifest = tmp_path / "guard.json"
    manifest.write_text(json.dumps(doc))
    return {"root": tmp_path, "doc": doc, "manifest": manifest, "env": {"PYTHONPATH": str(site)}, "snap": snap}


def rewrite(layout: dict[str, Any]) -> None:
    layout["manifest"].write_text(json.dumps(layout["doc"]))


def test_everything_matching_exits_0_with_one_line(layout: dict[str, Any]) -> None:
    r = guard(layout["manifest"], str(layout["snap"]), "--port=8000", env=layout["env"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith(
        f"guard: ok: 3 files match, vllm 0.26.1rc1.dev229+g124154a88, model at {REVISION} (demo, "
    )
    assert r.stderr.endswith(" ms)\n") and r.stderr.count("\n") == 1


def test_each_mismatch_is_one_line_and_exit_1(layout: dict[str, Any]) -> None:
    root = layout["root"]
    (root / "a.py").unlink()
    (root / "b.csv").write_bytes(b"m,n\n1,3\n")
    (root / "entry.sh").unlink()
    (root / "entry.sh").mkdir()
    (layout["snap"] / "config.json").write_bytes(b"{ }\n")
    layout["doc"]["runtime"]["version"] = "0.26.0"
    rewrite(layout)
    r = guard(layout["manifest"], "/elsewhere", env=layout["env"])
    assert r.returncode == 1
    site = Path(layout["env"]["PYTHONPATH"])
    found, pinned = sha(b"m,n\n1,3\n")[:12], sha(b"m,n\n1,2\n")[:12]
    assert r.stderr.splitlines() == [
        f"guard: MISSING {root}/a.py (a, module): not in the container; is its mount missing?",
        f"guard: STALE {root}/b.csv (b, module): sha256 {found}… but the lockfile pins "
        f"{pinned}… (a mount from an older checkout, a missing mount over the image's own file, "
        "or an edit)",
        f"guard: NOT-A-FILE {root}/entry.sh (entry, module): not a regular file",
        f"guard: VERSION vllm is 0.26.1rc1.dev229+g124154a88 ({site}/vllm/_version.py) but images.vllm records "
        "0.26.0 (a re-tagged nightly, or another image than the pinned digest)",
        f"guard: MODEL the server is asked to serve /elsewhere, not the pinned snapshot {layout['snap']}",
        f"guard: MODEL {layout['snap']}/config.json has 4 bytes, the pinned revision {REVISION} has 3",
        f"guard: refusing to start: 6 mismatch(es) against {layout['manifest']} (demo)",
    ]


def test_a_runtime_that_is_not_installed_is_refused(layout: dict[str, Any]) -> None:
    r = guard(layout["manifest"])
    assert r.returncode == 1
    assert "guard: VERSION vllm is not installed in the container; images.vllm records 0.26.1rc1" in r.stderr


def test_the_version_comes_from_metadata_without_a_version_file(layout: dict[str, Any], tmp_path: Path) -> None:
    site = Path(layout["env"]["PYTHONPATH"])
    (site / "vllm" / "_version.py").unlink()
    dist = site / "vllm-0.26.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n")
    r = guard(layout["manifest"], env=layout["env"])
    assert r.returncode == 1
    assert "guard: VERSION vllm is 0.26.0 (the vllm distribution's metadata) but images.vllm records" in r.stderr


def test_a_missing_snapshot_is_refused(layout: dict[str, Any]) -> None:
    layout["snap"].rename(layout["snap"].with_name("0" * 40))
    r = guard(layout["manifest"], env=layout["env"])
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == (
        f"guard: MODEL {layout['snap']} is missing: the model at the pinned revision {REVISION} is not in the "
        "mounted cache (patchkit model fetch, or mount the cache that has it)"
    )


def test_the_off_switch_is_logged_and_checks_nothing(tmp_path: Path) -> None:
    r = guard(tmp_path / "no-manifest.json", env={"PATCHKIT_GUARD": "off"})
    assert r.returncode == 0
    assert r.stderr == (
        "guard: PATCHKIT_GUARD=off: the runtime guard is switched off; nothing was checked, "
        "the server starts unchecked\n"
    )


@pytest.mark.parametrize("value", ["0", "false", "OFF", "no"])
def test_any_other_switch_value_fails_closed(tmp_path: Path, value: str) -> None:
    r = guard(tmp_path / "guard.json", env={"PATCHKIT_GUARD": value})
    assert r.returncode == 2
    assert r.stderr == f"guard: PATCHKIT_GUARD={value!r}: unknown value (on or off); refusing to start\n"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "cannot read the manifest: No such file or directory"),
        ("{", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ("[]", "not a JSON object"),
        ('{"schema": 2, "files": []}', "schema: expected 1, found 2"),
        ('{"schema": 1}', "manifest.files: expected list, found NoneType"),
        ('{"schema": 1, "files": [{"name": "a", "target": "rel/a", "sha256": "' + "0" * 64 + '"}]}',
         "files[0].target: not an absolute container path: 'rel/a'"),
        ('{"schema": 1, "files": [{"name": "a", "target": "/a/../b", "sha256": "' + "0" * 64 + '"}]}',
         "files[0].target: not an absolute container path: '/a/../b'"),
        ('{"schema": 1, "files": [{"name": "a", "target": "/a", "sha256": "' + "A" * 64 + '"}]}',
         "files[0].sha256: not a sha256 (64 lower-case hex digits): '" + "A" * 64 + "'"),
        ('{"schema": 1, "files": [], "runtime": {"package": "vllm"}}', "runtime.version: expected str, found NoneType"),
        ('{"schema": 1, "files": [], "model": {"path": "/m", "revision": "r", "files": [{"path": "x", "size": true}]}}',
         "model.files[0].size: expected int, found bool"),
    ],
)  # fmt: skip
def test_a_bad_manifest_is_one_line_and_exit_2(tmp_path: Path, text: str | None, why: str) -> None:
    manifest = tmp_path / "guard.json"
    if text is not None:
        manifest.write_text(text)
    r = guard(manifest)
    assert r.returncode == 2
    assert r.stderr == (
        f"guard: {manifest}: {why}; refusing to start (patchkit emit writes it; is its mount missing?)\n"
    )


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(GUARD), "--nope"], capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert r.stderr == "guard: unknown argument '--nope'; usage: guard.py [--manifest PATH] [-- SERVER ARGS...]\n"


def test_the_manifest_path_comes_from_the_environment(layout: dict[str, Any]) -> None:
    env = {**layout["env"], "PATCHKIT_GUARD_MANIFEST": str(layout["manifest"])}
    r = subprocess.run([sys.executable, str(GUARD)], capture_output=True, text=True, check=False, env=env)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("args", "model"),
    [
        (["/m", "--port=8000"], "/m"),
        (["--served-model-name", "x", "/m"], None),  # nargs="+": /m is a second served name
        (["--trust-remote-code", "/m"], "/m"),
        (["--model", "/m", "--port=1"], "/m"),
        (["--port=1", "--model=/m"], "/m"),
        (["--port=1"], None),
    ],
)
def test_the_served_model_is_read_as_vllm_serve_reads_it(args: list[str], model: str | None) -> None:
    assert runtime.served_model(args) == model


def test_the_guard_imports_only_the_standard_library() -> None:
    tree = ast.parse(GUARD.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_the_shipped_deployment_pins_the_guard_patchkit_ships() -> None:
    assert (REPO_ROOT / "patches" / "guard.py").read_bytes() == GUARD.read_bytes()


# --- the same, in process (what coverage sees; the subprocess runs above are what the entrypoint does) ---


def run_in_process(
    layout: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, list[str]]:
    import importlib

    monkeypatch.syspath_prepend(layout["env"]["PYTHONPATH"])
    importlib.invalidate_caches()
    monkeypatch.delenv("PATCHKIT_GUARD", raising=False)
    status = runtime.run(["--manifest", str(layout["manifest"]), *args])
    return status, capsys.readouterr().err.splitlines()


def test_in_process_a_match_and_each_mismatch(
    layout: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = run_in_process(layout, monkeypatch, capsys, "--", str(layout["snap"]))
    assert status == 0 and len(lines) == 1 and lines[0].startswith("guard: ok: 3 files match")
    (layout["root"] / "a.py").write_bytes(b"A = 2\n")
    layout["doc"]["runtime"]["version"] = "0.27.0"
    layout["doc"]["model"]["files"].append({"path": "missing.bin", "size": 1})
    rewrite(layout)
    status, lines = run_in_process(layout, monkeypatch, capsys, "--", "--model", "/other")
    assert status == 1
    assert [line.split()[1] for line in lines] == ["STALE", "VERSION", "MODEL", "MODEL", "refusing"]


def test_in_process_bad_input(
    layout: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layout["manifest"].write_text('{"schema": 1, "files": [7]}')
    status, lines = run_in_process(layout, monkeypatch, capsys)
    assert status == 2 and lines[0].endswith("files[0]: expected an object; refusing to start (patchkit emit "
                                             "writes it; is its mount missing?)")  # fmt: skip
    monkeypatch.setenv("PATCHKIT_GUARD", "maybe")
    assert runtime.run([]) == 2
    monkeypatch.setenv("PATCHKIT_GUARD", "off")
    assert runtime.run(["--manifest=/nonexistent"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        runtime.parse_args(["--manifest"])
    assert exit_info.value.code == 2
    assert runtime.parse_args(["--manifest=/m.json", "--", "x"]) == ("/m.json", ["x"])
