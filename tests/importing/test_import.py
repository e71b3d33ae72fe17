"""``patchkit import`` on a hand-kept repository: what it finds, what it reports, what check says after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.core import diffs
from patchkit.core.hashing import sha256_bytes
from patchkit.lockfile.model import Lockfile, PatchKind
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke, copy_shipped, git
from tests.importing.conftest import (
    BASE_COMMIT,
    CADDY_DIGEST,
    HELPER,
    INDEXER_BASE,
    INDEXER_PATH,
    MODEL_REV,
    ROPE,
    SAMPLER,
    SAMPLER_BASE,
    SITE,
    VLLM_DIGEST,
    WORKER,
    WORKER_BASE,
    WORKER_PATH,
    HandKept,
    build,
    write,
)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def imported(handkept: HandKept, invoke: Invoke) -> tuple[Lockfile, dict[str, object]]:
    run = invoke("import", str(handkept.root), "--format", "json")
    assert run.exit_code == 0, run.stderr
    lock = loads((handkept.root / "lockfile.toml").read_text())
    return lock, json.loads(run.stdout)["import"]


def test_import_pins_every_image_model_file_and_diff(handkept: HandKept, invoke: Invoke) -> None:
    lock, report = imported(handkept, invoke)

    images = {i.name: (i.repository, str(i.digest), i.tag) for i in lock.images}
    assert images == {
        "vllm": ("vllm/vllm-openai-rocm", VLLM_DIGEST, "nightly"),
        "proxy": ("caddy", CADDY_DIGEST, None),
    }
    assert lock.model is not None
    assert (lock.model.repo, str(lock.model.revision)) == ("deepseek-ai/DeepSeek-V4-Flash-0731", MODEL_REV)
    # The upstream and its commit come from the provenance table; "124154a" abbreviates the same commit.
    assert [(u.name, u.git, str(u.commit)) for u in lock.upstreams] == [
        ("vllm", "https://github.com/vllm-project/vllm", BASE_COMMIT)
    ]

    patches = {p.name: p for p in lock.patches}
    assert {n: (p.kind.value, str(p.file), str(p.target)) for n, p in patches.items()} == {
        "kv-restore-fence": ("overlay", "patches/gpu_worker_fixed.py", f"{SITE}/{WORKER_PATH}"),
        "fnuz-indexer": ("overlay", "patches/fnuz_indexer.py", f"{SITE}/{INDEXER_PATH}"),
        "sampler": ("overlay", "patches/sampler.py", f"{SITE}/vllm/v1/sample/sampler.py"),
        # A diff from /dev/null says it is new: a module, not an overlay.
        "new-helper": ("module", "patches/new_helper.py", f"{SITE}/vllm/v1/new_helper.py"),
        "rope-fix": ("overlay", "patches/rope_fix.py", f"{SITE}/vllm/model_executor/layers/rope.py"),
        # Mounted outside the Python tree and run by the entrypoint.
        "transform-moe": ("transformer", "patches/transform_moe.py", "/opt/patches/transform_moe.py"),
    }
    assert patches["kv-restore-fence"].sha256.hex == sha256_bytes(WORKER)
    # References: the comment above the mount ("vLLM #47282 / PR #47291") and the table's URL.
    assert [str(r) for r in patches["kv-restore-fence"].refs] == ["vllm-project/vllm#47282", "vllm-project/vllm#47291"]
    assert [str(r) for r in patches["sampler"].refs] == ["vllm-project/vllm#48001"]
    origin = patches["kv-restore-fence"].origin
    assert origin is not None
    assert (origin.repository, origin.commit, str(origin.path)) == ("vllm-project/vllm", BASE_COMMIT, WORKER_PATH)
    assert "patches/README.md:5" in origin.stated_in
    # Stated as written: a short commit stays short; nothing stated stays unknown.
    assert patches["sampler"].origin is not None and patches["sampler"].origin.commit == "124154a"
    rope = patches["rope-fix"].origin
    assert rope is not None and (rope.repository, rope.commit, rope.path) == (None, None, None)

    assert {(t.name, str(t.file), str(t.target)) for t in lock.tuning} == {
        ("moe-tp1", "tuning/moe_tp1.csv", "/opt/tuning/moe_tp1.csv"),
        ("moe-tp2", "tuning/moe_tp2.csv", "/opt/tuning/moe_tp2.csv"),  # only in compose.tp2.yaml
    }
    artifacts = {str(a.file): (str(a.target) if a.target else None) for a in lock.artifacts}
    assert artifacts == {
        "entrypoint.sh": "/opt/entrypoint.sh",
        "compose.yaml": None,
        "compose.tp2.yaml": None,
        "patches/README.md": None,
    }
    hand = {str(d.file): (d.patches, d.against) for d in lock.diffs}
    assert hand == {
        "patches/diffs/01-kv-restore-fence.patch": (("kv-restore-fence",), "upstream"),
        "patches/diffs/02-fnuz-indexer.patch": (("fnuz-indexer",), "upstream"),
        "patches/diffs/03-sampler-and-helper.patch": (("new-helper", "sampler"), "upstream"),
        "patches/diffs/04-kv-dma-fallback.patch": (("kv-restore-fence",), "overlay"),
    }
    assert report["found"] == {
        "images": 2,
        "model": 1,
        "upstreams": 1,
        "overlays": 4,
        "modules": 1,
        "transformers": 1,
        "tuning": 2,
        "artifacts": 4,
        "diffs": 4,
        "references": 3,
    }
    assert report["written"] is True
    assert any("patchkit import --normalize" in c for c in report["next"])


def test_import_reports_every_defect_with_file_and_line(handkept: HandKept, invoke: Invoke) -> None:
    _, report = imported(handkept, invoke)
    issues = {(i["kind"], i["file"], i["line"]) for i in report["issues"]}  # type: ignore[attr-defined]
    h = handkept
    sampler_hunk = h.line_of("patches/diffs/03-sampler-and-helper.patch", "+++ b/vllm/v1/sample") + 1
    assert issues == {
        ("mount-missing", "compose.yaml", h.line_of("compose.yaml", "gone.py")),
        ("diff-hunk-count", "patches/diffs/02-fnuz-indexer.patch", 3),
        ("diff-incremental", "patches/diffs/04-kv-dma-fallback.patch", 1),
        ("diff-stale", "patches/diffs/03-sampler-and-helper.patch", sampler_hunk),
        ("no-diff", "patches/rope_fix.py", None),
        ("base-unknown", "patches/rope_fix.py", None),
        ("base-short-commit", "patches/README.md", 7),
        ("sums-format", "SHA256SUMS", 2),  # sha256sum reads it: a note to rewrite it, not "unlisted"
        ("sums-not-present", "SHA256SUMS", 4),
        ("sums-unlisted", "compose.yaml", h.line_of("compose.yaml", "fnuz_indexer.py")),
        ("sums-unlisted", "compose.yaml", h.line_of("compose.yaml", "rope_fix.py")),
        ("sums-unlisted", "compose.yaml", h.line_of("compose.yaml", "moe_tp1.csv")),
        ("sums-unlisted", "compose.tp2.yaml", h.line_of("compose.tp2.yaml", "moe_tp2.csv")),
        # new_helper.py: a module only by its /dev/null part, in vllm's tree, and no row names it
        ("module-maybe-upstream", "patches/diffs/03-sampler-and-helper.patch", 1),
    }


def test_check_after_import_reports_the_defects(handkept: HandKept, invoke: Invoke) -> None:
    imported(handkept, invoke)
    run = invoke("check", "--format", "json", repo=handkept.root)
    assert run.exit_code == 1
    found = json.loads(run.stdout)["findings"]
    errors = {(f["code"], f["file"], f["line"]) for f in found if f["severity"] == "error"}
    h = handkept
    lock_text = (h.root / "lockfile.toml").read_text()
    rope_line = lock_text.splitlines().index('name = "rope-fix"') + 1
    assert ("diff-invalid", "patches/diffs/02-fnuz-indexer.patch", 3) in errors  # wrong hunk counts
    assert ("diff-incremental", "patches/diffs/04-kv-dma-fallback.patch", 1) in errors
    sampler_hunk = h.line_of("patches/diffs/03-sampler-and-helper.patch", "+++ b/vllm/v1/sample") + 1
    assert ("diff-stale", "patches/diffs/03-sampler-and-helper.patch", sampler_hunk) in errors
    assert ("no-diff", "lockfile.toml", rope_line) in errors
    assert ("mount-missing", "compose.yaml", h.line_of("compose.yaml", "gone.py")) in errors
    messages = {(f["code"], f["line"], f["message"]) for f in found}
    assert [(f["code"], f["severity"]) for f in found if f["file"] == "SHA256SUMS" and f["line"] == 2] == [
        ("sums-format", "note")
    ]
    assert ("module-maybe-upstream", "note") in {
        (f["code"], f["severity"]) for f in found if f["file"] == "patches/diffs/03-sampler-and-helper.patch"
    }
    assert not any("patches/sampler.py" in m for c, _, m in messages if c == "sums-drift")
    assert any(
        "lists patches/removed_long_ago.py" in m and "does not exist" in m
        for c, ln, m in messages
        if c == "sums-drift" and ln == 4
    )
    assert any(m == "does not list patches/fnuz_indexer.py" for c, _, m in messages if c == "sums-drift")
    # The diffs that are fine are verified, not reported.
    assert not any(f["file"] == "patches/diffs/01-kv-restore-fence.patch" for f in found)


def test_check_reports_a_mount_of_an_unpinned_file(handkept: HandKept, invoke: Invoke) -> None:
    imported(handkept, invoke)
    compose = handkept.root / "compose.yaml"
    write(handkept.root, "patches/late.py", "x = 1\n")
    text = compose.read_text().replace(
        "    - ./entrypoint.sh:/opt/entrypoint.sh:ro\n",
        "    - ./entrypoint.sh:/opt/entrypoint.sh:ro\n    - ./patches/late.py:/opt/late.py:ro\n",
    )
    compose.write_text(text)
    run = invoke("check", "--format", "json", repo=handkept.root)
    codes = {(f["code"], f["file"], f["line"]) for f in json.loads(run.stdout)["findings"]}
    assert ("mount-unpinned", "compose.yaml", handkept.line_of("compose.yaml", "late.py")) in codes
    assert ("hash-mismatch", "lockfile.toml") in {(c, f) for c, f, _ in codes}  # compose.yaml is pinned


def test_import_twice_is_a_no_op(handkept: HandKept, invoke: Invoke) -> None:
    imported(handkept, invoke)
    before = tree(handkept.root)
    mtime = (handkept.root / "lockfile.toml").stat().st_mtime_ns
    run = invoke("import", str(handkept.root))
    assert run.exit_code == 0, run.stderr
    assert "unchanged" in run.stdout
    assert tree(handkept.root) == before
    assert (handkept.root / "lockfile.toml").stat().st_mtime_ns == mtime


def test_import_refuses_a_patchkit_deployment(tmp_path: Path, invoke: Invoke) -> None:
    root = copy_shipped(tmp_path / "shipped")
    before = tree(root)
    run = invoke("import", str(root))
    assert run.exit_code == 2
    assert "already a patchkit deployment" in run.stderr
    assert "Traceback" not in run.stderr
    assert tree(root) == before


def test_dry_run_writes_nothing(handkept: HandKept, invoke: Invoke) -> None:
    before = tree(handkept.root)
    run = invoke("import", str(handkept.root), "--dry-run")
    assert run.exit_code == 0, run.stderr
    assert "would write lockfile.toml" in run.stdout
    assert "compose.yaml:" in run.stdout and "next:" in run.stdout
    assert tree(handkept.root) == before


@pytest.mark.parametrize(
    ("rel", "content", "message"),
    [
        ("compose.yaml", "services:\n  vllm: [\n", "compose.yaml:3: not valid YAML"),
        (
            "compose.yaml",
            "services:\n  vllm:\n    image: x@sha256:"
            + "a" * 64
            + "\n    volumes:\n      - ./entrypoint.sh:opt/e.sh:ro\n",
            "compose.yaml:5: services.vllm.volumes[0]: container path 'opt/e.sh' is relative",
        ),
        (
            "patches/diffs/05-notes.patch",
            "These are notes about the patches, not a diff.\n",
            "patches/diffs/05-notes.patch: not a diff at all",
        ),
        ("compose.yaml", "- just\n- a list\n", "compose.yaml: not a compose file"),
        ("compose.tp2.yaml", b"services:\n  vllm:\n    image: caf\xe9\n", "compose.tp2.yaml: not UTF-8 text"),
        (
            "compose.tp2.yaml",
            "services:\n  vllm:\n    volumes:\n      - ./entrypoint.sh:/opt/../etc/e.sh\n",
            "compose.tp2.yaml:4: services.vllm.volumes[0]: '/opt/../etc/e.sh' is not normalised",
        ),
    ],
    ids=["malformed-yaml", "relative-container-path", "not-a-diff", "not-compose", "not-utf8", "dotdot-target"],
)
def test_bad_input_is_refused_and_nothing_is_written(
    handkept: HandKept, invoke: Invoke, rel: str, content: str | bytes, message: str
) -> None:
    write(handkept.root, rel, content)
    before = tree(handkept.root)
    run = invoke("import", str(handkept.root))
    assert run.exit_code == 2
    assert message in run.stderr
    assert "Traceback" not in run.stderr
    assert tree(handkept.root) == before


def test_anchors_merge_keys_and_long_syntax_are_resolved(tmp_path: Path, invoke: Invoke) -> None:
    root = tmp_path / "r"
    write(root, "patches/a.py", "a = 1\n")
    write(root, "patches/b.py", "b = 1\n")
    write(
        root,
        "compose.yaml",
        f"""\
x-base: &base
  image: vllm/vllm-openai-rocm@{VLLM_DIGEST}
  volumes: &mounts
    - ./patches/a.py:{SITE}/vllm/a.py:ro
services:
  vllm:
    <<: *base
  other:
    <<: *base
    image: vllm/vllm-openai-rocm:v2@{CADDY_DIGEST}
    volumes:
      - type: bind
        source: ./patches/b.py
        target: {SITE}/vllm/b.py
""",
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stderr
    lock = loads((root / "lockfile.toml").read_text())
    assert {str(p.file): str(p.target) for p in lock.patches} == {
        "patches/a.py": f"{SITE}/vllm/a.py",
        "patches/b.py": f"{SITE}/vllm/b.py",  # the service's own volumes win over the merged ones
    }
    assert {(i.name, str(i.digest), i.tag) for i in lock.images} == {
        ("vllm", VLLM_DIGEST, None),
        ("other", CADDY_DIGEST, "v2"),
    }


def test_entry_names_stay_unique_across_kinds(tmp_path: Path, invoke: Invoke) -> None:
    root = tmp_path / "r"
    write(root, "patches/compose.py", "x = 1\n")  # its name would be the compose file's
    write(root, "compose.yaml", f"services:\n  vllm:\n    volumes:\n      - ./patches/compose.py:{SITE}/vllm/c.py\n")
    run = invoke("import", str(root))
    assert run.exit_code == 0, run.stderr
    lock = loads((root / "lockfile.toml").read_text())
    assert [p.name for p in lock.patches] == ["compose"]
    assert [(a.name, str(a.file)) for a in lock.artifacts] == [("compose-2", "compose.yaml")]


def test_normalize_rebuilds_the_bases_and_writes_canonical_diffs(handkept: HandKept, invoke: Invoke) -> None:
    imported(handkept, invoke)
    run = invoke("import", str(handkept.root), "--normalize", "--format", "json")
    assert run.exit_code == 1  # the stale sampler diff cannot be normalized
    out = json.loads(run.stdout)["normalize"]
    assert out["normalized"] == ["kv-restore-fence", "fnuz-indexer"]
    assert out["modules"] == ["new-helper"]
    assert [n["patch"] for n in out["not_normalized"]] == ["sampler"]
    assert "does not reproduce patches/sampler.py" in out["not_normalized"][0]["why"]

    root = handkept.root
    lock = loads((root / "lockfile.toml").read_text())
    kv = lock.patch("kv-restore-fence")
    assert kv is not None and kv.base is not None and kv.diff is not None
    # Undoing the incremental diff (04) and then 01 gives the upstream file exactly.
    assert kv.base.sha256.hex == sha256_bytes(WORKER_BASE)
    assert (kv.base.upstream, str(kv.base.path), str(kv.base.commit)) == ("vllm", WORKER_PATH, BASE_COMMIT)
    expected = diffs.make(WORKER_BASE, WORKER, f"a/{WORKER_PATH}", f"b/{WORKER_PATH}")
    assert (root / "upstream/kv-restore-fence.diff").read_bytes() == expected
    fnuz = lock.patch("fnuz-indexer")
    assert fnuz is not None and fnuz.base is not None
    assert fnuz.base.sha256.hex == sha256_bytes(INDEXER_BASE)  # the hand-edited hunk counts were repaired
    assert str(fnuz.base.path) == INDEXER_PATH
    # Replaced hand-kept diffs are gone; the one still describing the stale sampler (and the module) stays.
    assert sorted(p.name for p in (root / "patches/diffs").iterdir()) == ["03-sampler-and-helper.patch"]
    assert [(str(d.file), d.patches) for d in lock.diffs] == [
        ("patches/diffs/03-sampler-and-helper.patch", ("new-helper", "sampler"))
    ]  # not replaced: it still holds the new module's whole file
    assert (root / "patches/new_helper.py").read_bytes() == HELPER

    check = invoke("check", "--format", "json", repo=root)
    findings = json.loads(check.stdout)["findings"]
    files = {f["file"] for f in findings if f["severity"] == "error"}
    assert "upstream/kv-restore-fence.diff" not in files and "upstream/fnuz-indexer.diff" not in files
    assert not any(f["code"] == "sums-drift" for f in findings)  # normalize writes SHA256SUMS with the lockfile
    assert {f["code"] for f in findings if f["severity"] == "error"} == {"diff-stale", "no-diff", "mount-missing"}


def test_import_and_normalize_in_one_command(handkept: HandKept, invoke: Invoke) -> None:
    run = invoke("import", str(handkept.root), "--normalize")
    assert run.exit_code == 1, run.stderr  # sampler's stale diff stays
    assert "import: wrote lockfile.toml" in run.stdout
    assert "normalize: 2 patch(es) now have a canonical diff under upstream/" in run.stdout
    assert "sampler: patches/diffs/03-sampler-and-helper.patch:" in run.stdout
    assert (handkept.root / "upstream/kv-restore-fence.diff").is_file()


def test_import_runs_as_a_real_command(tmp_path: Path) -> None:
    root = build(tmp_path / "r").root
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "import", "--dry-run", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "would write lockfile.toml" in proc.stdout
    assert "diff-stale" in proc.stdout
    assert not (root / "lockfile.toml").exists()


def test_import_reports_what_nothing_mounts_runs_or_pins(handkept: HandKept, invoke: Invoke) -> None:
    root = handkept.root
    write(root, "patches/old_overlay.py", "stale = True\n")  # not mounted by any profile
    write(root, "patches/unused_transform.py", "# never run\n")
    write(root, "patches/diffs/06-unmounted.patch", diffs.make(b"a\n", b"b\n", "a/vllm/x.py", "b/vllm/x.py"))
    readme = root / "patches/README.md"
    readme.write_text(readme.read_text() + "| `ghost.py` | vllm-project/vllm | 124154a | vllm/ghost.py | |\n")
    mount = "      - ./entrypoint.sh:/opt/entrypoint.sh:ro\n"
    (root / "compose.tp2.yaml").write_text(
        (root / "compose.tp2.yaml")
        .read_text()
        .replace(mount, mount + "      - ./patches/unused_transform.py:/opt/patches/unused_transform.py:ro\n")
        + "  sidecar:\n    image: busybox:1.36\n"
        + "    command: --model /root/.cache/huggingface/hub/models--org--other/snapshots/main\n"
    )
    _, report = imported(handkept, invoke)
    issues = {(i["kind"], i["file"], i["line"]) for i in report["issues"]}  # type: ignore[attr-defined]
    tp2 = "compose.tp2.yaml"
    assert ("not-mounted", "patches/old_overlay.py", None) in issues
    assert ("transformer-not-run", tp2, handkept.line_of(tp2, "unused_transform.py")) in issues
    assert ("diff-unmatched", "patches/diffs/06-unmounted.patch", 1) in issues
    assert ("provenance-unmatched", "patches/README.md", 8) in issues
    assert ("image-unpinned", tp2, handkept.line_of(tp2, "busybox")) in issues
    assert ("model-unpinned", tp2, handkept.line_of(tp2, "models--org--other")) in issues
    # The next commands are exact, for the repository as it was named.
    assert report["next"][:2] == [  # type: ignore[index]
        f"patchkit -C {root} check    # every defect above, with file and line, until it is fixed",
        f"patchkit import --normalize {root}    # one canonical diff per patch under upstream/, where possible",
    ]
    assert f"patchkit -C {root} image pin sidecar busybox:1.36    # pin it by digest" in report["next"]  # type: ignore[operator]
    lock = loads((root / "lockfile.toml").read_text())
    assert "sidecar" not in {i.name for i in lock.images}  # a tag is not a pin
    assert lock.model is not None and lock.model.repo == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert all(str(p.file) != "patches/old_overlay.py" for p in lock.patches)


ROPE_BASE = ROPE.replace(b"rope 4\n", b"rope 4 (upstream)\n")


def upstream_repo(tmp_path: Path, files: dict[str, bytes]) -> tuple[str, str]:
    """A real git upstream with ``files``; returns its file:// URL and the commit."""
    root = tmp_path / "vllm-mirror"
    for rel, data in files.items():
        write(root, rel, data)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "upstream")
    return root.as_uri(), git(root, "rev-parse", "HEAD").strip()


def state_commit(handkept: HandKept, commit: str) -> None:
    """The provenance table states ``commit`` for every overlay, and knows rope_fix.py too."""
    readme = handkept.root / "patches/README.md"
    text = readme.read_text().replace(BASE_COMMIT, commit).replace("| 124154a |", f"| {commit} |")
    rope = "vllm/model_executor/layers/rope.py"
    readme.write_text(text + f"| `rope_fix.py` | vllm-project/vllm | {commit} | {rope} | |\n")


def mirror(root: Path, url: str) -> None:
    """Point the imported upstream at a mirror, as a user with no access to github.com would."""
    lock = root / "lockfile.toml"
    lock.write_text(lock.read_text().replace('git = "https://github.com/vllm-project/vllm"', f'git = "{url}"'))


def test_normalize_fetch_reads_bases_from_upstream(handkept: HandKept, invoke: Invoke, tmp_path: Path) -> None:
    url, commit = upstream_repo(
        tmp_path,
        {
            WORKER_PATH: WORKER_BASE,
            INDEXER_PATH: INDEXER_BASE,
            "vllm/v1/sample/sampler.py": SAMPLER_BASE,
            "vllm/model_executor/layers/rope.py": ROPE_BASE,
        },
    )
    state_commit(handkept, commit)
    imported(handkept, invoke)
    root = handkept.root
    mirror(root, url)
    run = invoke("import", str(root), "--normalize", "--fetch", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    out = json.loads(run.stdout)["normalize"]
    # Verified against upstream: the rebuilt bases agree; the stale sampler diff and the
    # rope overlay without any diff are normalized against the upstream files.
    assert sorted(out["base_from_upstream"]) == ["fnuz-indexer", "kv-restore-fence", "rope-fix", "sampler"]
    assert out["not_normalized"] == []
    lock = loads((root / "lockfile.toml").read_text())
    # Upstream has no new_helper.py at that commit: a module, which needs no diff.
    assert out["not_upstream"] == [
        {"patch": "new-helper", "why": f"upstream 'vllm' has no vllm/v1/new_helper.py at {commit[:12]}: a new module"}
    ]
    assert out["found_upstream"] == [] and out["unknown"] == []
    # Every hand-kept diff replaced is gone, and so is the one that also held that module's whole file.
    assert lock.diffs == ()
    assert "patches/diffs/03-sampler-and-helper.patch" in out["removed"]
    assert not (root / "patches/diffs").exists() or not any((root / "patches/diffs").iterdir())
    helper = lock.patch("new-helper")
    assert helper is not None and helper.kind is PatchKind.MODULE
    sampler = lock.patch("sampler")
    assert sampler is not None and sampler.base is not None
    assert sampler.base.sha256.hex == sha256_bytes(SAMPLER_BASE) and str(sampler.base.commit) == commit
    expected = diffs.make(SAMPLER_BASE, SAMPLER, "a/vllm/v1/sample/sampler.py", "b/vllm/v1/sample/sampler.py")
    assert (root / "upstream/sampler.diff").read_bytes() == expected
    check = invoke("check", "--format", "json", repo=root)
    errors = {f["code"] for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"}
    assert errors == {"mount-missing"}  # the one defect normalize cannot fix


def test_normalize_fetch_refuses_a_base_the_diffs_do_not_rebuild(
    handkept: HandKept, invoke: Invoke, tmp_path: Path
) -> None:
    # Upstream's file differs from what the diffs rebuild, in a line no hunk touches.
    drifted = WORKER_BASE.replace(b"def restore_step 28\n", b"def restore_step 28 (upstream moved)\n")
    url, commit = upstream_repo(tmp_path, {WORKER_PATH: drifted, INDEXER_PATH: INDEXER_BASE})
    state_commit(handkept, commit)
    imported(handkept, invoke)
    mirror(handkept.root, url)
    run = invoke("import", str(handkept.root), "--normalize", "--fetch", "--format", "json")
    assert run.exit_code == 1
    failed = {n["patch"]: n["why"] for n in json.loads(run.stdout)["normalize"]["not_normalized"]}
    assert failed["kv-restore-fence"] == (
        f"its diffs rebuild a base that is not {WORKER_PATH} at {commit[:12]} in upstream 'vllm' "
        "(a diff is stale beyond its hunks, or the stated commit is wrong)"
    )
    assert failed["sampler"].startswith(f"upstream 'vllm' has no vllm/v1/sample/sampler.py at {commit[:12]}")
    assert (handkept.root / "patches/diffs/01-kv-restore-fence.patch").is_file()  # kept as it was


def test_a_mount_from_outside_the_repository_is_reported(handkept: HandKept, invoke: Invoke) -> None:
    compose = handkept.root / "compose.yaml"
    mount = "    - ./entrypoint.sh:/opt/entrypoint.sh:ro\n"
    compose.write_text(compose.read_text().replace(mount, mount + "    - ../secrets/tls.key:/opt/tls.key:ro\n"))
    line = handkept.line_of("compose.yaml", "tls.key")
    _, report = imported(handkept, invoke)
    assert ("mount-outside", "compose.yaml", line) in {
        (i["kind"], i["file"], i["line"])
        for i in report["issues"]  # type: ignore[attr-defined]
    }
    run = invoke("check", "--format", "json", repo=handkept.root)
    assert ("mount-outside", "compose.yaml", line) in {
        (f["code"], f["file"], f["line"]) for f in json.loads(run.stdout)["findings"]
    }
