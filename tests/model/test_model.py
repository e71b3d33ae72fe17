"""`patchkit model lock | fetch | verify` against the Hub stand-in and a real huggingface_hub cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import Invoke

from patchkit.core.hashing import GIT_SHA1, SHA256, WINDOW, digest_file
from patchkit.core.values import Revision
from patchkit.lockfile.model import Model
from patchkit.model.record import VerifyRecord
from patchkit.model.verify import ProblemKind, verify_cache

from .conftest import REPO_ID, Hub
from .hubserver import FileEntry

FOLDER = "models--org--tiny-model"


def snapshot(hub: Hub, commit: str) -> Path:
    return hub.cache / FOLDER / "snapshots" / commit


def verify(invoke: Invoke, root: Path, *args: str) -> tuple[int, dict[str, object]]:
    r = invoke("model", "verify", "--format", "json", *args, repo=root)
    return r.exit_code, json.loads(r.stdout)


def kinds(doc: dict[str, object]) -> set[tuple[str, str]]:
    problems = doc["problems"]
    assert isinstance(problems, list)
    return {(p["kind"], p["path"].split("/snapshots/")[-1].split("/", 1)[-1]) for p in problems}


# --------------------------------------------------------------------------- lock


def test_lock_pins_the_commit_and_every_file(hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke) -> None:
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 0, r.stderr
    assert f"model.revision: (none) -> {model_repo} (main)" in r.stdout
    doc = tomllib.loads((deploy_dir / "lockfile.toml").read_text())
    m = doc["model"]
    assert (m["repo"], m["revision"], m["ref"]) == (REPO_ID, model_repo, "main")
    by_path = {f["path"]: f for f in m["files"]}
    entries = {e.path: e for e in hub.server.repos[REPO_ID].commits[model_repo].values()}
    assert set(by_path) == set(entries)  # recursive: sub/generation_config.json is there
    for path, e in entries.items():
        want = {"path": path, "size": e.size}
        want.update({"sha256": e.lfs_sha256} if e.lfs_sha256 else {"blob": e.oid})
        assert by_path[path] == want
    assert invoke("check", repo=deploy_dir).exit_code == 0
    # A re-lock of an unchanged revision is a no-op, byte for byte.
    before = (deploy_dir / "lockfile.toml").read_bytes()
    r = invoke("model", "lock", repo=deploy_dir)
    assert (r.exit_code, r.stdout.strip()) == (0, "model pin is up to date")
    assert (deploy_dir / "lockfile.toml").read_bytes() == before


def test_lock_moves_to_the_new_commit_of_the_branch(
    hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke
) -> None:
    assert invoke("model", "lock", REPO_ID, repo=deploy_dir).exit_code == 0
    newer = hub.server.add(
        REPO_ID, [*hub.server.repos[REPO_ID].commits[model_repo].values(), FileEntry.of("README.md", b"# tiny\n")]
    )
    r = invoke("model", "lock", repo=deploy_dir)
    assert r.exit_code == 0, r.stderr
    assert f"model.revision: {model_repo} -> {newer} (main)" in r.stdout
    assert tomllib.loads((deploy_dir / "lockfile.toml").read_text())["model"]["revision"] == newer


def test_a_large_manifest_goes_to_its_own_pinned_file(hub: Hub, deploy_dir: Path, invoke: Invoke) -> None:
    files = [FileEntry.of(f"shards/part-{i:03d}.json", f'{{"i": {i}}}\n'.encode()) for i in range(40)]
    commit = hub.server.add(REPO_ID, files)
    r = invoke("model", "lock", REPO_ID, "--revision", commit, repo=deploy_dir)
    assert r.exit_code == 0, r.stderr
    m = tomllib.loads((deploy_dir / "lockfile.toml").read_text())["model"]
    assert "files" not in m and "ref" not in m  # a commit given is pinned as given, with no branch
    assert m["manifest"]["file"] == "model/manifest.json"
    manifest = json.loads((deploy_dir / "model/manifest.json").read_bytes())
    assert manifest["revision"] == commit and len(manifest["files"]) == 40
    assert "model/manifest.json" in (deploy_dir / "SHA256SUMS").read_text()
    subprocess.run(["sha256sum", "-c", "--strict", "--quiet", "SHA256SUMS"], cwd=deploy_dir, check=True)
    assert invoke("check", repo=deploy_dir).exit_code == 0

    # A manifest edited by hand no longer matches its pin: check says so, verify refuses to trust it.
    with (deploy_dir / "model/manifest.json").open("ab") as f:
        f.write(b" ")
    r = invoke("check", "--format", "json", repo=deploy_dir)
    assert r.exit_code == 1
    found = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "model-manifest"]
    assert found and "does not match its pin" in found[0]["message"]
    r = invoke("model", "verify", repo=deploy_dir)
    assert r.exit_code == 2
    assert "model/manifest.json (model manifest) does not match its pin" in r.stderr


def test_401_without_a_token_says_to_set_hf_token(
    hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.server.token = "hf_secret"
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 3
    assert "401 unauthorized" in r.stderr and "set HF_TOKEN" in r.stderr
    assert "Traceback" not in r.stderr
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 3 and "the token was refused" in r.stderr
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 0, r.stderr


def test_404_repo_and_revision(hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke) -> None:
    r = invoke("model", "lock", "org/no-such-model", repo=deploy_dir)
    assert r.exit_code == 3
    assert "org/no-such-model@main: no such model repository" in r.stderr
    r = invoke("model", "lock", REPO_ID, "--revision", "no-such-branch", repo=deploy_dir)
    assert r.exit_code == 3
    assert "no such revision (404)" in r.stderr
    assert "model" not in tomllib.loads((deploy_dir / "lockfile.toml").read_text())


def test_offline_mode_refuses_lock_before_any_request(
    hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 2
    assert "HF_HUB_OFFLINE is set" in r.stderr and "unset HF_HUB_OFFLINE" in r.stderr
    assert hub.server.requests == []


def test_bad_repo_id_is_bad_input(hub: Hub, deploy_dir: Path, invoke: Invoke) -> None:
    r = invoke("model", "lock", "not a repo", repo=deploy_dir)
    assert r.exit_code == 2 and "is not a Hugging Face repo id" in r.stderr


# --------------------------------------------------------------------------- fetch and verify


def test_fetch_downloads_at_the_commit_and_verifies(hub: Hub, model_repo: str, fetched: Path, invoke: Invoke) -> None:
    snap = snapshot(hub, model_repo)
    link = snap / "model-00001-of-00002.safetensors"
    assert link.is_symlink()
    sha = hub.server.repos[REPO_ID].commits[model_repo]["model-00001-of-00002.safetensors"].lfs_sha256
    assert os.readlink(link) == f"../../blobs/{sha}"
    # Every file was asked for at the pinned commit, never by branch name.
    resolves = [p for _, p in hub.server.requests if "/resolve/" in p]
    assert resolves and all(f"/resolve/{model_repo}/" in p for p in resolves)
    code, doc = verify(invoke, fetched)
    assert code == 0, doc
    assert doc["files"] == 5 and doc["problems"] == []


def _flip_lfs_byte(hub: Hub, commit: str) -> None:
    blob = (snapshot(hub, commit) / "model-00001-of-00002.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[1_000_000] ^= 0x01
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))


def _truncate_small(hub: Hub, commit: str) -> None:
    blob = (snapshot(hub, commit) / "config.json").resolve()
    blob.write_bytes(blob.read_bytes()[:-3])


def _delete(hub: Hub, commit: str) -> None:
    (snapshot(hub, commit) / "sub" / "generation_config.json").unlink()


def _extra(hub: Hub, commit: str) -> None:
    (snapshot(hub, commit) / "extra.py").write_text("import os\n")


def _wrong_blob(hub: Hub, commit: str) -> None:
    link = snapshot(hub, commit) / "tokenizer.json"
    other = os.readlink(snapshot(hub, commit) / "config.json")
    link.unlink()
    link.symlink_to(other)


def _outside(hub: Hub, commit: str) -> None:
    outside = hub.cache.parent / "elsewhere.json"
    outside.write_bytes(b'{"version": "1.0"}\n')  # the right content, outside the cache
    link = snapshot(hub, commit) / "tokenizer.json"
    link.unlink()
    link.symlink_to(os.path.relpath(outside, link.parent))


@pytest.mark.parametrize(
    ("corrupt", "kind", "path"),
    [
        (_flip_lfs_byte, "content", "model-00001-of-00002.safetensors"),
        (_truncate_small, "size", "config.json"),
        (_delete, "missing", "sub/generation_config.json"),
        (_extra, "extra", "extra.py"),
        (_wrong_blob, "wrong-blob", "tokenizer.json"),
        (_outside, "escapes", "tokenizer.json"),
    ],
)
def test_verify_reports_each_corruption_with_its_path(
    hub: Hub, model_repo: str, fetched: Path, invoke: Invoke, corrupt: object, kind: str, path: str
) -> None:
    assert verify(invoke, fetched)[0] == 0  # also fills the verification record
    corrupt(hub, model_repo)  # type: ignore[operator]
    code, doc = verify(invoke, fetched)
    assert code == 1
    assert kinds(doc) == {(kind, path)}
    r = invoke("model", "verify", repo=fetched)
    assert r.exit_code == 1
    assert f"{FOLDER}/snapshots/{model_repo}/{path}: " in r.stdout
    assert "model verify: FAILED: 1 problem(s)" in r.stdout
    # A fetch alone would keep the damaged file: huggingface_hub skips what it has.
    assert "fix: delete the snapshot entries (and their blobs) listed above, then patchkit model fetch" in r.stdout


def test_a_moved_ref_is_reported(hub: Hub, model_repo: str, fetched: Path, invoke: Invoke) -> None:
    refs = hub.cache / FOLDER / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text(model_repo)
    assert verify(invoke, fetched)[0] == 0
    (refs / "main").write_text("0" * 40)
    code, doc = verify(invoke, fetched)
    assert code == 1
    [problem] = doc["problems"]  # type: ignore[misc]
    assert problem["kind"] == "ref-moved" and problem["path"] == f"{FOLDER}/refs/main"


def test_a_branch_name_as_revision_is_refused(hub: Hub, model_repo: str, fetched: Path, invoke: Invoke) -> None:
    text = (fetched / "lockfile.toml").read_text().replace(f'revision = "{model_repo}"', 'revision = "main"')
    (fetched / "lockfile.toml").write_text(text)
    r = invoke("model", "verify", repo=fetched)
    assert r.exit_code == 2
    assert "model.revision: 'main' is not a full commit id" in r.stderr


def test_nothing_cached_and_no_model_pinned(hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke) -> None:
    r = invoke("model", "verify", repo=deploy_dir)
    assert r.exit_code == 2 and "pins no model" in r.stderr
    assert invoke("model", "lock", REPO_ID, repo=deploy_dir).exit_code == 0
    code, doc = verify(invoke, deploy_dir)
    assert code == 1 and kinds(doc) == {("not-cached", FOLDER)}
    assert doc["fix"] == "patchkit model fetch"


def test_the_record_skips_unchanged_blobs_and_full_ignores_it(
    hub: Hub, model_repo: str, fetched: Path, invoke: Invoke
) -> None:
    code, first = verify(invoke, fetched)
    assert code == 0 and first["bytes_hashed"] > 1_500_000
    code, again = verify(invoke, fetched)
    assert code == 0 and again["bytes_hashed"] == 0 and again["bytes_trusted"] == first["bytes_hashed"]
    code, full = verify(invoke, fetched, "--full")
    assert code == 0 and full["bytes_trusted"] == 0 and full["bytes_hashed"] == first["bytes_hashed"]
    _flip_lfs_byte(hub, model_repo)  # a rewrite changes mtime and ctime: the record does not hide it
    code, doc = verify(invoke, fetched)
    assert code == 1 and kinds(doc) == {("content", "model-00001-of-00002.safetensors")}


def test_an_interrupt_leaves_no_record(hub: Hub, model_repo: str, fetched: Path, tmp_path: Path) -> None:
    from patchkit.lockfile.model import ModelFile
    from patchkit.model.manifest import pinned_files
    from patchkit.store.repo import Repo

    lockf, _ = Repo(fetched).read_lockfile()
    assert lockf.model is not None
    files: tuple[ModelFile, ...] = pinned_files(Repo(fetched), lockf.model)
    record = VerifyRecord(tmp_path / "record.json")

    def start(total: int):  # type: ignore[no-untyped-def]
        def progress(n: int) -> None:
            raise KeyboardInterrupt

        return progress

    with pytest.raises(KeyboardInterrupt):
        verify_cache(hub.cache, lockf.model, files, start_progress=start, record=record)
    record.save()  # what was remembered before the interrupt: nothing
    assert not (tmp_path / "record.json").exists()


def test_verify_runs_as_a_real_subprocess(hub: Hub, model_repo: str, fetched: Path) -> None:
    env = {**os.environ, "PATCHKIT_CACHE": str(fetched.parent / "pk-cache")}
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "--repo", str(fetched), "model", "verify", "--jobs", "2"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("model verify: ok: 5 files")
    assert done.stderr == ""  # not a terminal: no progress bar


# --------------------------------------------------------------------------- check --online


def test_check_online_confirms_the_revision_exists(hub: Hub, model_repo: str, fetched: Path, invoke: Invoke) -> None:
    r = invoke("check", "--online", "--format", "json", repo=fetched)
    assert not [f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("model")]
    del hub.server.repos[REPO_ID].commits[model_repo]
    del hub.server.repos[REPO_ID].branches["main"]
    r = invoke("check", "--online", "--format", "json", repo=fetched)
    assert r.exit_code == 1
    [gone] = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "model-revision-gone"]
    assert gone["field"] == "model.revision" and gone["line"] is not None


# --------------------------------------------------------------------------- digests


def test_digest_file_matches_git_and_sha256sum(tmp_path: Path) -> None:
    for size in (0, 5, 1024 * 1024 + 7, 2 * WINDOW + 7):  # the last through the sliding map and its tail
        p = tmp_path / f"f{size}"
        p.write_bytes(os.urandom(size))
        git = subprocess.run(["git", "hash-object", str(p)], capture_output=True, text=True, check=True).stdout
        assert digest_file(p, GIT_SHA1) == git.strip()
        out = subprocess.run(["sha256sum", str(p)], capture_output=True, text=True, check=True).stdout
        assert digest_file(p, SHA256) == out.split()[0]


def test_verify_core_without_a_cache_dir(tmp_path: Path) -> None:
    m = Model("org/x", Revision("a" * 40))
    result = verify_cache(tmp_path / "none", m, ())
    assert [p.kind for p in result.problems] == [ProblemKind.NOT_CACHED]
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_pin_without_a_manifest_is_told_to_model_lock(
    hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke
) -> None:
    """A revision-only pin (as hand-kept lockfiles and this repository's own have): no false 'extra' files."""
    lock = deploy_dir / "lockfile.toml"
    lock.write_text(lock.read_text() + f'\n[model]\nrepo = "{REPO_ID}"\nrevision = "{model_repo}"\n')
    assert invoke("lock", repo=deploy_dir).exit_code == 0
    assert invoke("model", "fetch", repo=deploy_dir).exit_code == 1
    assert hub.server.requests == []  # refused before any download
    r = invoke("model", "verify", repo=deploy_dir)
    assert r.exit_code == 1 and r.stdout == ""
    assert f"model {REPO_ID}@{model_repo[:12]} is pinned without a file manifest" in r.stderr
    assert "fix: pin its files" in r.stderr and "patchkit model lock" in r.stderr
    assert "not in the pinned manifest" not in r.stderr
    r = invoke("check", "--format", "json", repo=deploy_dir)
    assert r.exit_code == 0
    (note,) = json.loads(r.stdout)["findings"]
    assert (note["code"], note["severity"], note["field"]) == ("model-no-manifest", "note", "model")
    assert note["fix"].endswith("patchkit model lock")
    assert invoke("model", "lock", repo=deploy_dir).exit_code == 0
    assert invoke("model", "fetch", repo=deploy_dir).exit_code == 0


def test_an_unreachable_hub_is_exit_3(
    hub: Hub, deploy_dir: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 3, r.stderr
    assert f"cannot reach http://127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
