"""import, check, sums, normalize, rebase, remove and audit on a repository kept by hand the way real ones are.

Every finding and outcome is asserted exactly: no false finding, nothing
missed, no patch of the tree left out of a rebase without a word.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchkit.core import diffs
from patchkit.core.hashing import sha256_bytes
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke, snapshot
from tests.importing.real import (
    EAGLE_PATH,
    MOE,
    MOE_OVERLAY,
    MOE_PATH,
    OFFLOAD,
    OFFLOAD_OVERLAY,
    OFFLOAD_PATH,
    REASONING,
    REASONING_OVERLAY,
    ROUTING,
    ROUTING_OVERLAY,
    ROUTING_PATH,
    SAMPLER,
    SAMPLER_OVERLAY,
    SERVING,
    SERVING_PATH,
    VENDORED_PATH,
    WORKER,
    WORKER_FENCE,
    WORKER_OVERLAY,
    WORKER_PATH,
    RealRepo,
    advance,
    build,
    sub,
)

SITE = "/usr/local/lib/python3.12/dist-packages"


@pytest.fixture
def real(tmp_path: Path) -> RealRepo:
    return build(tmp_path)


def imported(real: RealRepo, invoke: Invoke) -> dict[str, object]:
    run = invoke("import", str(real.root), "--format", "json")
    assert run.exit_code == 0, run.stderr
    report: dict[str, object] = json.loads(run.stdout)["import"]
    return report


def hunk_lines(real: RealRepo, rel: str) -> list[int]:
    return [i for i, line in enumerate((real.root / rel).read_text().splitlines(), start=1) if line.startswith("@@")]


def test_import_reports_exactly_the_defects_of_a_real_repository(real: RealRepo, invoke: Invoke) -> None:
    report = imported(real, invoke)
    issues = sorted((i["kind"], i["file"], i["line"]) for i in report["issues"])  # type: ignore[attr-defined]
    moe = hunk_lines(real, "patches/diffs/08-moe.patch")
    assert issues == sorted(
        [
            # gitignored: a directory compose creates and the secret each host copies in; notes, not defects
            ("mount-ignored", "compose.yaml", real.line_of("compose.yaml", "./run:")),
            ("mount-ignored", "compose.yaml", real.line_of("compose.yaml", "secret.yaml:")),
            # the table says upstream has the file, the diff says it is new
            ("diff-new-file", "patches/diffs/07-reasoning.patch", 1),
            # no row names these, their diffs add them whole, vllm's tree: only upstream can tell (as check says)
            ("module-maybe-upstream", "patches/diffs/09-kv-offload.patch", 1),
            ("module-maybe-upstream", "patches/diffs/10-eagle-tree.patch", 1),
            # both bad hunks, the second twice (its counts, and its start after the first)
            ("diff-hunk-count", "patches/diffs/08-moe.patch", moe[0]),
            ("diff-hunk-count", "patches/diffs/08-moe.patch", moe[1]),
            ("diff-hunk-count", "patches/diffs/08-moe.patch", moe[1]),
            # stacked on 01 with its line numbers two short: incremental, not stale
            ("diff-incremental", "patches/diffs/02-dma-fallback.patch", 1),
            # both diffs of the sampler are stale, each on its own
            ("diff-stale", "patches/diffs/03-sampler-greedy.patch", 3),
            ("diff-stale", "patches/diffs/04-sampler-topk.patch", 3),
            ("diff-incremental", "patches/diffs/04-sampler-topk.patch", 1),
            # every line sha256sum accepts lists its file; the non-canonical ones once each
            *(("sums-format", "SHA256SUMS", n) for n in (1, 2, 3, 4, 5)),
            ("sums-not-present", "SHA256SUMS", 12),
        ]
    )
    notes = {i["kind"] for i in report["issues"] if i["severity"] == "note"}  # type: ignore[attr-defined]
    assert notes == {"mount-ignored", "sums-format", "module-maybe-upstream"}  # as check reports them: not wrong
    messages = {(i["kind"], i["line"]): i["message"] for i in report["issues"]}  # type: ignore[attr-defined]
    assert messages[("sums-format", 4)] == (
        "lists patches/protocol.py in a form patchkit does not write (BSD form 'SHA256 (name) = hex')"
    )
    assert "patches/README.md:12 states it is vllm/reasoning/parser.py upstream" in messages[("diff-new-file", 1)]
    maybe = next(i for i in report["issues"] if i["file"] == "patches/diffs/09-kv-offload.patch")  # type: ignore[attr-defined]
    assert maybe["message"].startswith(  # the same note check gives
        f"adds module 'kv-offload' (patches/kv_offload.py) as a new file (--- /dev/null) and no provenance row "
        f"names it, but it is mounted as {OFFLOAD_PATH} in the tree of upstream 'vllm'"
    )
    assert maybe["fix"].startswith("patchkit import --normalize --fetch decides")

    lock = loads((real.root / "lockfile.toml").read_text())
    patches = {p.name: p for p in lock.patches}
    assert {n: p.kind.value for n, p in patches.items()} == {
        "kv-restore-fence": "overlay",
        "sampler-greedy": "overlay",
        "serving": "overlay",
        "protocol": "overlay",
        "reasoning": "overlay",  # its diff says /dev/null; the provenance says upstream has it
        "moe": "overlay",
        "routing": "overlay",
        "fp8-utils": "module",  # "new module" in the table: no diff needed, no no-diff
        # No row names them and their diffs add them whole: modules until an upstream says otherwise (--fetch).
        "kv-offload": "module",
        "eagle-tree": "module",
    }
    origins = {
        n: (p.origin.repository, p.origin.commit, str(p.origin.path))
        for n, p in patches.items()
        if p.origin is not None
    }
    v, t = real.vllm_commit, real.triton_commit
    assert origins == {
        "kv-restore-fence": ("vllm-project/vllm", v, WORKER_PATH),
        "sampler-greedy": ("vllm-project/vllm", v, "vllm/v1/sample/sampler.py"),
        "serving": ("vllm-project/vllm", v, SERVING_PATH),
        "protocol": ("vllm-project/vllm", v, "vllm/entrypoints/openai/protocol.py"),
        "reasoning": ("vllm-project/vllm", v, "vllm/reasoning/parser.py"),
        "moe": ("vllm-project/vllm", v, MOE_PATH),
        "routing": ("triton-lang/triton", t, ROUTING_PATH),  # the commit after '@', not the PR head
    }
    # The follow-up row and its PR link add to the same overlay; the PR number is the row's project's.
    assert [str(r) for r in patches["kv-restore-fence"].refs] == [
        "vllm-project/vllm#47282",
        "vllm-project/vllm#47291",
        "vllm-project/vllm#47400",
    ]
    assert [str(r) for r in patches["routing"].refs] == ["triton-lang/triton#7001"]
    assert [str(r) for r in patches["serving"].refs] == ["vllm-project/vllm#48001"]
    assert [(u.name, str(u.commit)) for u in lock.upstreams] == [("triton", t), ("vllm", v)]
    # A diff against the other project's path is matched through the stated upstream path.
    assert {str(d.file): d.patches for d in lock.diffs}["patches/diffs/06-routing.patch"] == ("routing",)


def test_check_after_import_finds_the_same_defects_and_no_false_one(real: RealRepo, invoke: Invoke) -> None:
    imported(real, invoke)
    run = invoke("check", "--format", "json", repo=real.root)
    assert run.exit_code == 1
    found = json.loads(run.stdout)["findings"]
    lock_text = (real.root / "lockfile.toml").read_text().splitlines()
    reasoning = lock_text.index('name = "reasoning"') + 1
    moe = hunk_lines(real, "patches/diffs/08-moe.patch")
    errors = sorted(((f["code"], f["file"], f["line"]) for f in found if f["severity"] == "error"), key=str)
    not_listed = [
        "compose.yaml",
        "lockfile.toml",
        "patches/README.md",
        *(f"patches/diffs/{d}" for d in sorted(p.name for p in (real.root / "patches/diffs").iterdir())),
    ]
    assert errors == sorted(
        [
            ("diff-incremental", "patches/diffs/02-dma-fallback.patch", 1),
            ("diff-incremental", "patches/diffs/04-sampler-topk.patch", 1),
            ("diff-stale", "patches/diffs/03-sampler-greedy.patch", 3),
            ("diff-stale", "patches/diffs/04-sampler-topk.patch", 3),
            ("diff-invalid", "patches/diffs/08-moe.patch", moe[0]),
            ("diff-invalid", "patches/diffs/08-moe.patch", moe[1]),
            ("diff-invalid", "patches/diffs/08-moe.patch", moe[1]),
            ("diff-new-file", "lockfile.toml", reasoning),
            ("sums-drift", "SHA256SUMS", 12),  # patches/old_fix.py, which does not exist
            *(("sums-drift", "SHA256SUMS", None) for _ in not_listed),
        ],
        key=str,
    )
    assert sorted(f["message"] for f in found if f["code"] == "sums-drift" and f["line"] is None) == sorted(
        f"does not list {rel}" for rel in not_listed
    )
    notes = sorted((f["code"], f["file"], f["line"]) for f in found if f["severity"] == "note")
    assert "base-unknown" not in {c for c, _, _ in notes}
    assert notes == sorted(
        [
            ("mount-ignored", "compose.yaml", real.line_of("compose.yaml", "./run:")),
            ("mount-ignored", "compose.yaml", real.line_of("compose.yaml", "secret.yaml:")),
            *(("sums-format", "SHA256SUMS", n) for n in (1, 2, 3, 4, 5)),
            # modules only a /dev/null diff made modules, in vllm's tree: only upstream can tell
            ("module-maybe-upstream", "patches/diffs/09-kv-offload.patch", 1),
            ("module-maybe-upstream", "patches/diffs/10-eagle-tree.patch", 1),
            # a full commit is stated for every overlay: known, just not pinned in [base] yet
            *(
                ("base-unpinned", "lockfile.toml", lock_text.index(f'name = "{n}"') + 1)
                for n in ("kv-restore-fence", "sampler-greedy", "serving", "protocol", "reasoning", "moe", "routing")
            ),
        ]
    )
    maybe = next(f for f in found if f["code"] == "module-maybe-upstream" and "kv-offload" in f["file"])
    assert (maybe["message"], maybe["fix"]) == (
        "adds module 'kv-offload' (patches/kv_offload.py) as a new file (--- /dev/null) and no provenance row names "
        f"it, but it is mounted as {OFFLOAD_PATH} in the tree of upstream 'vllm': it may be an upstream file, "
        "which would make it an overlay whose diff hides what it changes",
        f"patchkit import --normalize --fetch decides (it asks upstream 'vllm' for {OFFLOAD_PATH} at its "
        "pinned commit)",
    )
    # The stacked diffs of gpu_worker.py, the two-file diff, the routing diff, the repaired moe diff undo exactly.
    assert "5 diffs verified" in invoke("check", repo=real.root).stdout


def test_sums_names_every_entry_it_drops(real: RealRepo, invoke: Invoke) -> None:
    imported(real, invoke)
    run = invoke("sums", repo=real.root)
    assert run.exit_code == 0, run.stderr
    assert run.stdout.splitlines() == [
        "SHA256SUMS patches/old_fix.py: listed -> dropped (the lockfile does not pin it)",
        "wrote SHA256SUMS",
    ]
    gnu = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=real.root, capture_output=True, check=False)
    assert gnu.returncode == 0, gnu.stdout
    assert invoke("sums", repo=real.root).stdout == "SHA256SUMS is up to date\n"  # nothing more to drop


def test_rebase_right_after_import_changes_nothing_and_names_the_command(real: RealRepo, invoke: Invoke) -> None:
    imported(real, invoke)
    before = snapshot(real.root)
    source = f"git:{real.vllm_url}@{advance(real.vllm_url, {WORKER_PATH: WORKER_FENCE})}"
    run = invoke("rebase", "--upstream", "vllm", "--source", source, "--format", "json", repo=real.root)
    assert run.exit_code == 1, run.stdout + run.stderr
    assert snapshot(real.root) == before  # no pin moved, SHA256SUMS untouched
    doc = json.loads(run.stdout)
    assert doc["patches"] == [] and doc["committed"] is False
    assert doc["nothing_moved"] == "no patch is based on upstream 'vllm'; 10 in its tree skipped (see above)"
    skipped = {s["name"]: s["fix"] for s in doc["skipped"]}
    assert skipped == {
        "kv-restore-fence": "patchkit import --normalize",  # stacked diffs with an offset rebuild the base
        "serving": "patchkit import --normalize",
        "protocol": "patchkit import --normalize",
        "moe": "patchkit import --normalize",
        "sampler-greedy": "patchkit import --normalize --fetch",  # both diffs stale
        "reasoning": "patchkit import --normalize --fetch",  # its only diff adds the whole file
        "routing": "patchkit import --normalize, then patchkit rebase --upstream triton --onto REV",
        "fp8-utils": None,
        # modules only because a diff adds them whole: upstream may have them
        "kv-offload": "patchkit import --normalize --fetch",
        "eagle-tree": "patchkit import --normalize --fetch",
    }
    clash = invoke("rebase", "--upstream", "vllm", "--source", source, "--onto", "main", repo=real.root)
    assert clash.exit_code == 2 and "--onto main disagrees with --source" in clash.stderr
    text = invoke("rebase", "--upstream", "vllm", "--source", source, repo=real.root)
    assert text.exit_code == 1
    assert "nothing in the repository changed: no patch is based on upstream 'vllm'" in text.stdout
    assert "  10 skipped" in text.stdout
    assert snapshot(real.root) == before


def test_normalize_then_rebase_moves_every_patch_of_the_tree_or_says_why_not(
    real: RealRepo, invoke: Invoke, tmp_path: Path
) -> None:
    imported(real, invoke)
    run = invoke("import", str(real.root), "--normalize", "--format", "json")
    assert run.exit_code == 1  # the stale sampler and the /dev/null reasoning diff need --fetch
    out = json.loads(run.stdout)["normalize"]
    assert out["normalized"] == ["kv-restore-fence", "serving", "protocol", "moe", "routing"]
    assert [n["patch"] for n in out["not_normalized"]] == ["sampler-greedy", "reasoning"]
    # Deleted only the diffs it replaced: not the stale ones, not the one it could not use.
    assert out["removed"] == [
        "patches/diffs/01-kv-restore-fence.patch",
        "patches/diffs/02-dma-fallback.patch",
        "patches/diffs/05-responses-api.patch",
        "patches/diffs/06-routing.patch",
        "patches/diffs/08-moe.patch",
    ]
    assert sorted(p.name for p in (real.root / "patches/diffs").iterdir()) == [
        "03-sampler-greedy.patch",
        "04-sampler-topk.patch",
        "07-reasoning.patch",
        "09-kv-offload.patch",  # the whole file of what may be an upstream file: only --fetch can tell
        "10-eagle-tree.patch",
        "11-fp8-utils.patch",  # a new module's whole file: nothing replaces it
    ]
    assert out["sums_dropped"] == ["patches/old_fix.py"]
    lock = loads((real.root / "lockfile.toml").read_text())
    fence = lock.patch("kv-restore-fence")
    assert fence is not None and fence.base is not None
    assert fence.base.sha256.hex == sha256_bytes(WORKER)  # undone through the shifted stacked diff
    assert (real.root / "upstream/kv-restore-fence.diff").read_bytes() == diffs.make(
        WORKER, WORKER_OVERLAY, f"a/{WORKER_PATH}", f"b/{WORKER_PATH}"
    )

    # The new vllm: took the fence hunk whole, one of the two lines of the serving hunk, moved moe elsewhere,
    # and ships a newer copy of triton's routing.py.
    new = advance(
        real.vllm_url,
        {
            WORKER_PATH: WORKER_FENCE,
            SERVING_PATH: sub(SERVING, "serve 8", "serve 8 stream"),
            MOE_PATH: sub(MOE, "moe 20", "moe 20 upstream"),
            VENDORED_PATH: sub(ROUTING, "route 15", "route 15 new"),
        },
    )
    summary = tmp_path / "summary.md"
    source = f"git:{real.vllm_url}@{new}"
    sums = real.root / "SHA256SUMS"
    sums.write_bytes(sums.read_bytes() + f"{'0' * 64}  docs/runbook.md\n".encode())  # added by hand since
    run = invoke(
        "rebase",
        "--upstream",
        "vllm",
        "--source",
        source,
        "--summary",
        str(summary),
        "--format",
        "json",
        repo=real.root,
    )
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert doc["sums_dropped"] == ["docs/runbook.md"]  # SHA256SUMS is rewritten: what it loses is said
    assert {p["name"]: (p["outcome"], p["hunks_upstreamed"]) for p in doc["patches"]} == {
        "kv-restore-fence": ("partially-upstreamed", ["@@ -3,6 +3,9 @@"]),  # the whole fence hunk, named
        "serving": ("clean", []),  # upstream took part of a hunk only
        "protocol": ("unchanged", []),
        "moe": ("clean", []),
    }
    assert {s["name"]: s["reason"] for s in doc["skipped"]} == {
        "sampler-greedy": "no base pinned, and its hand-kept diffs are stale (patches/diffs/03-sampler-greedy.patch:3, "
        "patches/diffs/04-sampler-topk.patch:3) (--fetch reads it from upstream at the stated commit)",
        "reasoning": "no base pinned and no diff that rebuilds it "
        "(--fetch reads it from upstream at the stated commit)",
        "routing": f"based on upstream 'triton', which vllm ships inside its tree ({SITE}/vllm/): "
        "move it onto the triton version the new vllm ships",
        "fp8-utils": "a module: no upstream file to merge it with",
        **{
            name: "a module only because its hand-kept diff adds it whole (--- /dev/null): "
            f"upstream 'vllm' may have {path}, which would make it an overlay to rebase"
            for name, path in (("kv-offload", OFFLOAD_PATH), ("eagle-tree", EAGLE_PATH))
        },
    }
    md = summary.read_text()
    assert "### Not rebased" in md
    for name in ("sampler-greedy", "reasoning", "routing", "fp8-utils"):
        assert f"- `{name}`: " in md
    assert "fix: `patchkit rebase --upstream triton --onto REV`" in md
    lock = loads((real.root / "lockfile.toml").read_text())
    vllm = lock.upstream("vllm")
    assert vllm is not None and (vllm.git, str(vllm.commit)) == (real.vllm_url, new)  # the URL --source named
    assert (real.root / "patches/moe.py").read_bytes() == sub(MOE_OVERLAY, "moe 20", "moe 20 upstream")

    # The vendored file moves with its own upstream, read from the URL and commit given.
    triton_new = advance(real.triton_url, {ROUTING_PATH: sub(ROUTING, "route 15", "route 15 new")})
    source = f"git:{real.triton_url}@{triton_new}"
    run = invoke("rebase", "--upstream", "triton", "--source", source, "--format", "json", repo=real.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert [(p["name"], p["outcome"]) for p in json.loads(run.stdout)["patches"]] == [("routing", "clean")]
    assert (real.root / "patches/routing.py").read_bytes() == sub(ROUTING_OVERLAY, "route 15", "route 15 new")


def test_normalize_fetch_replaces_the_stale_and_the_dev_null_diffs(real: RealRepo, invoke: Invoke) -> None:
    imported(real, invoke)
    real.mirror()
    run = invoke("import", str(real.root), "--normalize", "--fetch", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    out = json.loads(run.stdout)["normalize"]
    assert out["not_normalized"] == [] and out["unknown"] == []
    # Upstream decides what the /dev/null diffs could not: kv_offload.py is vllm's file, eagle_tree.py is new.
    assert out["found_upstream"] == [
        {
            "patch": "kv-offload",
            "kind": "diff-new-file",
            "file": "patches/diffs/09-kv-offload.patch",
            "line": 1,
            "message": "adds patches/kv_offload.py as a new file (--- /dev/null), but upstream 'vllm' has "
            f"{OFFLOAD_PATH} at {real.vllm_commit[:12]}: an overlay, now based on that file (upstream/kv-offload.diff)",
        }
    ]
    assert out["not_upstream"] == [
        {"patch": "eagle-tree", "why": f"upstream 'vllm' has no {EAGLE_PATH} at {real.vllm_commit[:12]}: a new module"}
    ]
    assert {"patches/diffs/09-kv-offload.patch", "patches/diffs/10-eagle-tree.patch"} <= set(out["removed"])
    assert out["removed_unneeded"] == ["patches/diffs/10-eagle-tree.patch"]  # replaced by nothing: a module needs none
    # The table calls fp8_utils.py new: upstream is not asked, and its whole-file diff stays.
    assert sorted(p.name for p in (real.root / "patches/diffs").iterdir()) == ["11-fp8-utils.patch"]
    lock = loads((real.root / "lockfile.toml").read_text())
    assert [(str(d.file), d.patches) for d in lock.diffs] == [("patches/diffs/11-fp8-utils.patch", ("fp8-utils",))]
    for name, base, overlay, path in (
        ("sampler-greedy", SAMPLER, SAMPLER_OVERLAY, "vllm/v1/sample/sampler.py"),
        ("reasoning", REASONING, REASONING_OVERLAY, "vllm/reasoning/parser.py"),
        ("kv-offload", OFFLOAD, OFFLOAD_OVERLAY, OFFLOAD_PATH),
    ):
        p = lock.patch(name)
        assert p is not None and p.base is not None and p.base.sha256.hex == sha256_bytes(base)
        want = diffs.make(base, overlay, f"a/{path}", f"b/{path}")
        assert (real.root / f"upstream/{name}.diff").read_bytes() == want
    assert {p.name: p.kind.value for p in lock.patches if p.name in ("kv-offload", "eagle-tree", "fp8-utils")} == {
        "kv-offload": "overlay",
        "eagle-tree": "module",
        "fp8-utils": "module",  # the table calls it new: upstream is not asked
    }
    kv = lock.patch("kv-offload")
    assert kv is not None and kv.base is not None and str(kv.base.commit) == real.vllm_commit
    found = json.loads(invoke("check", "--format", "json", repo=real.root).stdout)["findings"]
    assert [(f["code"], f["severity"]) for f in found] == [("mount-ignored", "note"), ("mount-ignored", "note")]


def test_remove_leaves_no_dangling_reference_in_diffs(real: RealRepo, invoke: Invoke) -> None:
    imported(real, invoke)
    assert invoke("remove", "serving", repo=real.root).exit_code == 0  # shares 05 with protocol
    assert invoke("remove", "kv-restore-fence", repo=real.root).exit_code == 0  # 01 and 02 are its alone
    lock = loads((real.root / "lockfile.toml").read_text())
    hand = {str(d.file): d.patches for d in lock.diffs}
    assert hand["patches/diffs/05-responses-api.patch"] == ("protocol",)
    assert "patches/diffs/01-kv-restore-fence.patch" not in hand and "patches/diffs/02-dma-fallback.patch" not in hand
    assert not (real.root / "patches/diffs/01-kv-restore-fence.patch").exists()
    assert not (real.root / "patches/diffs/02-dma-fallback.patch").exists()
    named = {n for d in lock.diffs for n in d.patches}
    assert named <= {p.name for p in lock.patches}
    run = invoke("check", "--format", "json", repo=real.root)
    assert run.exit_code == 1, run.stderr  # the repository's defects, not a lockfile it cannot read
    on_05 = [(f["code"], f["line"]) for f in json.loads(run.stdout)["findings"] if "05-responses" in f["file"]]
    # Only the part describing the removed file, which the hand-kept diff still holds (as its mount and table row).
    assert on_05 == [("diff-unmatched", 3)]


def test_audit_never_verifies_a_stale_overlay_nor_calls_an_overlay_new(real: RealRepo, invoke: Invoke) -> None:
    imported(real, invoke)
    run = invoke("audit", "--format", "json", repo=real.root)
    doc = json.loads(run.stdout)
    sections = {p["name"]: p for p in doc["patches"]}
    assert {n: s["status"] for n, s in sections.items()} == {
        "kv-restore-fence": "failed",  # its diffs undo, but 02 is incremental, which check fails on
        "sampler-greedy": "failed",  # both diffs stale
        "serving": "unverified",
        "protocol": "unverified",
        "reasoning": "failed",  # a /dev/null diff of an upstream file
        "moe": "failed",  # malformed hunks
        "routing": "unverified",
        "fp8-utils": "ok",
        # modules only by their /dev/null diffs: they may be upstream files, so not verified
        "kv-offload": "unverified",
        "eagle-tree": "unverified",
    }
    sampler = sections["sampler-greedy"]
    assert [(v["file"], v["status"]) for v in sampler["verification"] if v["file"].startswith("patches/diffs/")] == [
        ("patches/diffs/03-sampler-greedy.patch", "failed"),
        ("patches/diffs/04-sampler-topk.patch", "failed"),
    ]
    kv = [(v["file"], v["status"], v["detail"]) for v in sections["kv-offload"]["verification"]]
    assert kv[-1][:2] == ("patches/diffs/09-kv-offload.patch", "unverified")
    assert kv[-1][2].startswith("adds module 'kv-offload' (patches/kv_offload.py) as a new file (--- /dev/null)")
    # A modified upstream file is shown through its hand-kept diffs, never as a whole new file.
    fence = sections["kv-restore-fence"]
    assert "/dev/null" not in fence["diff"]
    assert fence["diff"].startswith(f"--- a/{WORKER_PATH}\n+++ b/patches/gpu_worker.py\n@@ ")
    assert (fence["added"], fence["removed"]) == (4, 1)  # 01's three fence lines, 02's changed line
    # Only the part of the two-file diff that is this overlay's.
    assert (sections["serving"]["added"], sections["serving"]["removed"]) == (2, 2)
    assert "proto" not in sections["serving"]["diff"]
    assert (sections["protocol"]["added"], sections["protocol"]["removed"]) == (1, 1)
    assert sections["reasoning"]["diff"] == ""  # its diff adds the whole file: nothing against upstream to show
    html = invoke("audit", repo=real.root).stdout
    assert "hand-kept diff, base not pinned" in html
    assert html.count("new file:") == 3  # the three modules


def test_a_conflicted_rebase_keeps_its_skipped_list_through_continue(
    real: RealRepo, invoke: Invoke, tmp_path: Path
) -> None:
    imported(real, invoke)
    assert invoke("import", str(real.root), "--normalize").exit_code == 1
    new = advance(real.vllm_url, {MOE_PATH: sub(MOE, "moe 5", "moe 5 upstream")})  # the line moe.py changes
    source = f"git:{real.vllm_url}@{new}"
    run = invoke("rebase", "--upstream", "vllm", "--source", source, "--format", "json", repo=real.root)
    assert run.exit_code == 1
    doc = json.loads(run.stdout)
    assert doc["blocked"] == ["moe"]
    (work,) = doc["work_files"]
    (real.root / work).write_bytes(sub(MOE_OVERLAY, "moe 5 a", "moe 5 upstream a"))  # resolved by hand
    summary = tmp_path / "summary.md"
    run = invoke("rebase", "--continue", "--summary", str(summary), repo=real.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    md = summary.read_text()
    not_rebased = md.split("### Not rebased", 1)[1].split("\n### ", 1)[0]
    assert not_rebased.count("\n- `") == 6
    assert "\n- `moe`: " in md.split("### What changed in each patch", 1)[1]  # the resolution changed the patch
    assert "- `routing`: based on upstream 'triton'" in md


def test_sums_lines_naming_files_outside_the_repository_are_not_read(real: RealRepo, invoke: Invoke) -> None:
    outside = real.root.parent / "outside.txt"
    outside.write_text("not the repository's\n")
    sums = real.root / "SHA256SUMS"
    lines = f"{sha256_bytes(outside.read_bytes())}  ../outside.txt\n{'0' * 64}  /etc/hostname\n"
    sums.write_bytes(sums.read_bytes() + lines.encode())
    report = imported(real, invoke)
    issues = report["issues"]
    found = [(i["kind"], i["line"], i["message"]) for i in issues if i["file"] == "SHA256SUMS" and i["line"] > 12]  # type: ignore[attr-defined]
    assert found == [
        ("sums-not-present", 13, "lists ../outside.txt, which is outside the repository"),
        ("sums-not-present", 14, "lists /etc/hostname, which is outside the repository"),
    ]


def test_normalize_fetch_says_unknown_for_a_module_when_no_commit_is_pinned(real: RealRepo, invoke: Invoke) -> None:
    # The moe row states a later commit than the others: import pins no commit for vllm.
    later = advance(real.vllm_url, {MOE_PATH: sub(MOE, "moe 20", "moe 20 later")})
    readme = real.root / "patches/README.md"
    text = readme.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `moe.py`"))
    readme.write_text(text.replace(row, row.replace(real.vllm_commit, later)))
    imported(real, invoke)
    real.mirror()
    lock = loads((real.root / "lockfile.toml").read_text())
    vllm = lock.upstream("vllm")
    assert vllm is not None and vllm.commit is None
    run = invoke("import", str(real.root), "--normalize", "--fetch", "--format", "json")
    assert run.exit_code == 1, run.stdout + run.stderr
    out = json.loads(run.stdout)["normalize"]
    fix = (
        "pin upstream 'vllm' at the commit the image ships ([upstreams.vllm] commit in lockfile.toml), "
        "then patchkit import --normalize --fetch"
    )
    assert out["unknown"] == [
        {
            "patch": name,
            "why": f"whether upstream 'vllm' has {path} is unknown: it pins no commit "
            "(imported: the base commit differs between patches or is not stated)",
            "fix": fix,
        }
        for name, path in (("kv-offload", OFFLOAD_PATH), ("eagle-tree", EAGLE_PATH))
    ]
    assert out["found_upstream"] == [] and out["not_upstream"] == []  # never a guess
    lock = loads((real.root / "lockfile.toml").read_text())
    assert {n: lock.patch(n).kind.value for n in ("kv-offload", "eagle-tree")} == {  # type: ignore[union-attr]
        "kv-offload": "module",
        "eagle-tree": "module",
    }
    assert (real.root / "patches/diffs/09-kv-offload.patch").exists()
    assert (real.root / "patches/diffs/10-eagle-tree.patch").exists()
    text_run = invoke("import", str(real.root), "--normalize", "--fetch")
    assert f"  kv-offload: whether upstream 'vllm' has {OFFLOAD_PATH} is unknown" in text_run.stdout
    assert f"    fix: {fix}" in text_run.stdout
