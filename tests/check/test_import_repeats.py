"""``check`` repeats every problem ``import`` reports, while it holds, or the problem cannot hold after adoption.

Import's codes are read from its source (every code an ``issue``/``problem``
call or an issue tuple names), so a code import learns to report fails the
table below until someone decides how check repeats it. The repeated codes
new to check are then tried on repositories written the way the field
writes them: import reports the problem, check reports it at the same file
and line, and once the file is fixed (and re-pinned with ``patchkit lock``,
as an intended edit is) check no longer does.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest

from patchkit.core import diffs
from tests.conftest import Invoke
from tests.importing.test_patchers import FORMS
from tests.importing.test_queue_scripts import DIGEST, A, B, C, _repo

ROOT = Path(__file__).resolve().parents[2]
SITE = "/usr/local/lib/python3.12/dist-packages"

# import's code: the codes check reports the same problem under, while it holds.
REPEATED = {
    "base-short-commit": ("base-unknown",),  # the abbreviated commit shown as stated; no full base is known
    "base-unknown": ("base-unknown",),
    "build-edit-unanchored": ("build-edit-unanchored",),
    "build-missing": ("build-missing",),
    "build-step-unknown": ("build-step-unknown",),
    "build-unreadable": ("build-unreadable",),
    "copy-missing": ("copy-missing",),
    "copy-unresolved": ("copy-unresolved",),
    "diff-hunk-count": ("diff-invalid",),
    "diff-incremental": ("diff-incremental",),
    "diff-new-file": ("diff-new-file",),
    "diff-stale": ("diff-stale",),
    "diff-unmatched": ("diff-unmatched",),
    "image-invalid": ("image-invalid",),
    "image-unpinned": ("image-unpinned",),
    "image-unresolved": ("image-unresolved",),
    "kind-unknown": ("kind-unknown",),
    "model-conflict": ("model-conflict",),
    "model-unpinned": ("model-unpinned",),
    "module-maybe-upstream": ("module-maybe-upstream",),
    # a file at two targets: the second is no pinned target; a target given two files: the second is unpinned
    "mount-conflict": ("mount-target", "mount-unpinned", "orphan"),
    "mount-ignored": ("mount-ignored",),
    "mount-missing": ("mount-missing",),
    "mount-outside": ("mount-outside",),
    "mount-symlink": ("mount-symlink",),
    "no-diff": ("no-diff",),
    "not-mounted": ("orphan",),  # a file under patches/ or tuning/ the lockfile does not name
    "patcher-not-anchored": ("patcher-not-anchored",),
    "patcher-outside-image": ("patcher-outside-image",),
    "patcher-target-unknown": ("patcher-target-unknown",),
    "pin-conflict": ("pin-conflict",),
    "pin-no-repository": ("pin-no-repository",),
    "pin-unreadable": ("pin-unreadable",),
    "provenance-unmatched": ("provenance-unmatched",),
    "queue-apply-unknown": ("queue-apply-unknown",),
    "queue-commit-unknown": ("series-unpinned",),  # until the lockfile's series states its commit
    "queue-image-unpinned": ("queue-image-unpinned",),
    "queue-lock": ("queue-lock",),
    "queue-lock-drift": ("series-lock-drift",),
    # profiles that apply in different orders, or nothing states the order; a series file listing a missing patch;
    # a patch no series file or step applies (so not pinned); a step that cannot be read
    "queue-order": ("queue-order", "series-order", "orphan", "build-step-unknown"),
    "queue-patch-parse": ("series-parse",),
    "queue-profile": ("queue-profile",),
    "queue-strip": ("queue-strip",),
    # patches directly under patches/ (pinned as files, then orphans if dropped); a build applying one from outside
    "queue-upstream-unknown": ("orphan", "queue-upstream-unknown"),
    "queue-url-unknown": ("queue-url-unknown",),
    "ref-unassigned": ("ref-unassigned",),
    "sums-format": ("sums-format",),
    "sums-malformed": ("sums-drift",),
    "sums-mismatch": ("sums-drift",),
    "sums-missing": ("sums-missing",),
    "sums-not-present": ("sums-drift",),
    "sums-unlisted": ("sums-drift",),
    "transformer-not-run": ("transformer-not-run",),
}

# import's code: why check does not repeat it.
NOT_REPEATED = {
    "mount-generated": "no problem: a mount of SHA256SUMS, which patchkit writes from the lockfile; check checks "
    "the file itself (sums-drift)",
    "queue-profile-arg": "no problem: it says which build argument picks the profile; the profiles are recorded "
    "in the series, and there is nothing to fix",
}

# Codes check reports as import's own readers name them: check passes on what the Dockerfile reader
# (``check.build``), the patcher reader and the queue's ``-p`` and profile readers find.
FROM_IMPORTS_READERS = {"build-unreadable", "copy-missing", "copy-unresolved", "image-unresolved"}
FROM_IMPORTS_READERS |= {"patcher-not-anchored", "queue-strip", "queue-profile", "build-edit-unanchored"}
FROM_IMPORTS_READERS |= {"queue-upstream-unknown"}
_CODE = re.compile(r"[a-z]+(?:-[a-z0-9]+)+\Z")


def import_codes() -> dict[str, str]:
    """Every code import reports, with where it is first named: the first argument of an ``issue``, ``Issue`` or
    ``problem`` call, or the first item of an issue tuple ``(kind, file, line, message, fix)``."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "patchkit/importing").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            first: ast.expr | None = None
            if isinstance(node, ast.Call) and node.args:
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                first = node.args[0] if name in ("issue", "Issue", "problem") else None
            elif isinstance(node, ast.Tuple) and len(node.elts) >= 4:
                first = node.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and _CODE.match(first.value):
                found.setdefault(first.value, f"{path.name}:{node.lineno}")
    return found


def test_the_source_reading_finds_import_codes_in_every_form_they_are_written() -> None:
    found = import_codes()
    assert {"diff-unmatched", "queue-profile", "copy-missing", "patcher-not-anchored"} <= found.keys()
    from patchkit.importing.adopt import NOTES

    assert found.keys() >= NOTES  # import's own list of notes names only codes it reports


def test_every_import_code_is_repeated_by_check_or_says_why_it_cannot_hold() -> None:
    found = import_codes()
    unmapped = {c: where for c, where in found.items() if c not in REPEATED and c not in NOT_REPEATED}
    assert unmapped == {}, "decide how check repeats each (REPEATED) or why it cannot hold (NOT_REPEATED)"
    assert sorted(REPEATED.keys() & NOT_REPEATED.keys()) == []
    assert sorted((REPEATED.keys() | NOT_REPEATED.keys()) - found.keys()) == []  # no entry for a code import lost


def test_every_check_code_a_repeat_uses_is_documented_and_reported_by_check() -> None:
    table = (ROOT / "docs/lockfile.md").read_text() + (ROOT / "docs/series.md").read_text()
    documented = set(re.findall(r"^\| `([a-z0-9-]+)`(?:, `([a-z0-9-]+)`)?", table, re.MULTILINE))
    documented_codes = {c for pair in documented for c in pair if c}
    check_source = "\n".join(p.read_text() for p in (ROOT / "patchkit").rglob("*.py") if "importing" not in p.parts)
    for codes in REPEATED.values():
        for code in codes:
            assert code in documented_codes, code
            assert f'"{code}"' in check_source or code in FROM_IMPORTS_READERS, code


def test_the_mapping_is_in_the_docs() -> None:
    text = (ROOT / "docs/import.md").read_text()
    section = text.split("## What `patchkit check` reports on an imported repository", 1)[1].split("\n## ", 1)[0]
    assert [c for c in {**REPEATED, **NOT_REPEATED} if f"`{c}`" not in section] == []


# Where check reports a problem import reports on a patch's file: at the patch's entry in the lockfile.
AT_THE_PATCH_ENTRY = {"no-diff", "base-unknown", "base-short-commit", "kind-unknown", "diff-new-file"}


def _adopted(kind: str, tmp_path: Path) -> Path:
    """An adopted fixture of each shape: compose bind-mounts, a real-world compose repository, a Dockerfile-copied
    overlay tree with a KEY=VALUE lock, a patch queue applied by a step import cannot read."""
    from tests.importing import conftest as handkept
    from tests.importing import dockerbuilt, real
    from tests.importing.test_queue_scripts import UNREADABLE

    if kind == "compose":
        return handkept.build(tmp_path / "deploy").root
    if kind == "real":
        return real.build(tmp_path).root
    if kind == "dockerfile":
        return dockerbuilt.make(tmp_path / "deploy", dockerbuilt.LAYOUTS[0])
    root = _repo(tmp_path)[0]
    (root / "build.sh").write_text("#!/bin/bash\nset -e\n" + UNREADABLE["xargs"][0])
    return root


@pytest.mark.parametrize("kind", ["compose", "real", "dockerfile", "queue"])
def test_right_after_import_check_reports_every_problem_import_reported(
    tmp_path: Path, invoke: Invoke, kind: str
) -> None:
    """Nothing is fixed yet (not even SHA256SUMS): each import problem is a check finding under its mapped code, at
    import's place, or at the patch's lockfile entry, or in SHA256SUMS for what it lists."""
    root = _adopted(kind, tmp_path)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    found = json.loads(invoke("check", "--format", "json", repo=root).stdout)["findings"]
    assert issues
    for i in (i for i in issues if i["kind"] not in NOT_REPEATED):
        same = [(f["file"], f["line"]) for f in found if f["code"] in REPEATED[i["kind"]]]
        places = {(i["file"], i["line"])}
        places |= {p for p in same if p[0] == "lockfile.toml"} if i["kind"] in AT_THE_PATCH_ENTRY else set()
        places |= {p for p in same if p[0] == "SHA256SUMS"} if i["kind"].startswith("sums-") else set()
        if i["kind"] == "queue-order":  # the order is unknown because of the unreadable step, which is said
            places |= {p for p in same if p[0] == "build.sh"}
        assert places & set(same), i


# -- the repeats new to check, each on a repository written as the field writes them

Said = list[tuple[str, str, int | None]]


def _imported(root: Path, invoke: Invoke, code: str) -> Said:
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert invoke("sums", repo=root).exit_code == 0
    return [(i["kind"], i["file"], i["line"]) for i in json.loads(run.stdout)["import"]["issues"] if i["kind"] == code]


def _checked(root: Path, invoke: Invoke, *codes: str) -> tuple[int, Said]:
    run = invoke("check", "--format", "json", repo=root)
    assert run.exit_code in (0, 1), run.stdout + run.stderr
    found = json.loads(run.stdout)["findings"]
    return run.exit_code, [(f["code"], f["file"], f["line"]) for f in found if f["code"] in codes]


def _relock(root: Path, invoke: Invoke) -> None:
    run = invoke("lock", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr


def _compose(root: Path, *volumes: str, image: str = f"vllm/vllm-openai@sha256:{'ab' * 32}") -> str:
    text = f"services:\n  vllm:\n    image: {image}\n    volumes:\n" + "".join(f"      - {v}\n" for v in volumes)
    (root / "patches").mkdir(parents=True, exist_ok=True)
    (root / "compose.yaml").write_text(text)
    return text


BASE = b"".join(b"line %d\n" % i for i in range(1, 13))
FIXED = BASE.replace(b"line 6\n", b"line 6 fixed\n")


def test_a_part_of_a_multi_file_diff_describing_no_mounted_file_fails_check_until_the_part_is_dropped(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    _compose(root, f"./patches/sched.py:{SITE}/vllm/core/sched.py:ro")
    (root / "patches/sched.py").write_bytes(FIXED)
    ours = diffs.make(BASE, FIXED, "a/vllm/core/sched.py", "b/vllm/core/sched.py")
    gone = diffs.make(b"a = 1\n", b"a = 2\n", "a/vllm/core/renamed.py", "b/vllm/core/renamed.py")
    (root / "patches/diffs").mkdir()
    (root / "patches/diffs/01-sched.patch").write_bytes(b"Scheduler fix and its helper\n\n" + ours + gone)
    line = 2 + ours.count(b"\n") + 1  # the second part's --- line, after the two lines of preamble
    said = _imported(root, invoke, "diff-unmatched")
    assert said == [("diff-unmatched", "patches/diffs/01-sched.patch", line)]
    assert _checked(root, invoke, "diff-unmatched") == (1, said)
    (root / "patches/diffs/01-sched.patch").write_bytes(b"Scheduler fix\n\n" + ours)
    assert _checked(root, invoke, "diff-unmatched", "diff-stale", "diff-invalid")[1] == []
    assert ("hash-mismatch", "lockfile.toml") in [c[:2] for c in _checked(root, invoke, "hash-mismatch")[1]]
    _relock(root, invoke)  # as hash-mismatch's fix says: lock re-pins the hand-kept diff
    assert _checked(root, invoke, "diff-unmatched", "hash-mismatch", "diff-stale") == (0, [])


def test_a_compose_image_with_a_digest_that_is_none_fails_check_until_a_digest_is_written(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    text = _compose(root, image="vllm/vllm-openai:v0.9@sha256:0d1e")
    said = _imported(root, invoke, "image-invalid")
    assert said == [("image-invalid", "compose.yaml", 3)]
    assert _checked(root, invoke, "image-invalid") == (1, said)
    (root / "compose.yaml").write_text(text.replace("sha256:0d1e", f"sha256:{'0d' * 32}"))
    _relock(root, invoke)
    assert _checked(root, invoke, "image-invalid", "image-unpinned") == (0, [])


def test_a_mount_through_a_symlinked_directory_fails_check_until_the_files_are_committed_in_place(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    _compose(root, f"./shared/current/sched.py:{SITE}/vllm/core/sched.py:ro")
    (root / "shared/v2").mkdir(parents=True)
    (root / "shared/v2/sched.py").write_bytes(FIXED)
    os.symlink("v2", root / "shared/current")
    said = _imported(root, invoke, "mount-symlink")
    assert said == [("mount-symlink", "compose.yaml", 5)]
    assert _checked(root, invoke, "mount-symlink") == (1, said)
    (root / "shared/current").unlink()
    (root / "shared/v2").rename(root / "shared/current")
    # Committed in place: no link any more, and the file import could not pin is now said to be unpinned.
    assert _checked(root, invoke, "mount-symlink", "mount-unpinned") == (1, [("mount-unpinned", "compose.yaml", 5)])


def test_a_symlink_inside_a_mounted_directory_fails_check_until_it_is_gone(tmp_path: Path, invoke: Invoke) -> None:
    root = tmp_path / "deploy"
    _compose(root, "./config:/etc/vllm:ro")
    (root / "config").mkdir()
    (root / "config/serve.yaml").write_text("port: 8000\n")
    os.symlink("/etc/hostname", root / "config/host")
    said = _imported(root, invoke, "mount-symlink")
    assert said == [("mount-symlink", "compose.yaml", 5)]
    assert _checked(root, invoke, "mount-symlink") == (1, said)
    (root / "config/host").unlink()
    assert _checked(root, invoke, "mount-symlink") == (0, [])


def test_a_directory_another_profile_mounts_elsewhere_fails_check_until_the_profiles_agree(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    _compose(root, f"./patches/sched:{SITE}/vllm/core/sched:ro")
    (root / "patches/sched").mkdir()
    (root / "patches/sched/policy.py").write_text("POLICY = 'fcfs'\n")
    tp2 = f"services:\n  vllm:\n    image: vllm/vllm-openai@sha256:{'ab' * 32}\n    volumes:\n"
    (root / "compose.tp2.yaml").write_text(tp2 + f"      - ./patches/sched:{SITE}/vllm/sched:ro\n")
    said = _imported(root, invoke, "mount-conflict")
    assert said == [("mount-conflict", "compose.tp2.yaml", 5)]
    assert _checked(root, invoke, "mount-target") == (1, [("mount-target", "compose.tp2.yaml", 5)])
    (root / "compose.tp2.yaml").write_text(tp2 + f"      - ./patches/sched:{SITE}/vllm/core/sched:ro\n")
    _relock(root, invoke)
    assert _checked(root, invoke, "mount-target", "mount-unpinned")[1] == []  # (no-diff and base-unknown stay)


def _queue(tmp_path: Path) -> Path:
    root, _, _ = _repo(tmp_path)
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\nCOPY patches/vllm /tmp/q\n"
        "RUN for p in /tmp/q/*.patch; do patch -p1 -d /opt/vllm < $p; done\n"
    )
    return root


def test_a_profile_list_naming_no_patch_file_fails_check_until_the_name_is_fixed(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    names = sorted(p.name for p in (root / "patches/vllm").glob("*.patch"))
    (root / "profiles").mkdir()
    (root / "profiles/tp1.txt").write_text("\n".join([*names[:2], "0007-dropped-upstream.patch"]) + "\n")
    said = _imported(root, invoke, "queue-profile")
    assert said == [("queue-profile", "profiles/tp1.txt", None)]
    assert _checked(root, invoke, "queue-profile") == (1, said)
    (root / "profiles/tp1.txt").write_text("\n".join(names[:2]) + "\n")
    _relock(root, invoke)
    assert _checked(root, invoke, "queue-profile") == (0, [])


def test_a_stack_lock_pinning_an_abbreviated_commit_fails_check_until_it_pins_the_full_commit(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    lock = json.loads((root / "stack.lock.json").read_text())
    full = lock["upstreams"]["vllm"]["commit"]
    lock["upstreams"]["vllm"]["commit"] = full[:10]
    (root / "stack.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    said = _imported(root, invoke, "queue-lock")
    assert said == [("queue-lock", "stack.lock.json", None)]
    assert _checked(root, invoke, "queue-lock") == (1, said)
    # The import left the series without a commit: check says so too, until the lockfile states it.
    assert [f[:2] for f in _checked(root, invoke, "series-unpinned")[1]] == [("series-unpinned", "lockfile.toml")]
    lock["upstreams"]["vllm"]["commit"] = full
    (root / "stack.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    _relock(root, invoke)
    assert _checked(root, invoke, "queue-lock")[1] == []


def test_a_top_level_lock_that_does_not_parse_fails_check_until_it_parses(tmp_path: Path, invoke: Invoke) -> None:
    root = _queue(tmp_path)
    (root / "images.lock.json").write_text('{"images": {"vllm": "vllm/vllm-openai-rocm"\n')
    said = _imported(root, invoke, "queue-lock")
    assert said == [("queue-lock", "images.lock.json", None)]
    assert _checked(root, invoke, "queue-lock") == (1, said)
    (root / "images.lock.json").write_text(f'{{"images": {{"vllm": "vllm/vllm-openai-rocm@{DIGEST}"}}}}\n')
    assert _checked(root, invoke, "queue-lock")[1] == []


def test_a_queue_whose_upstream_states_no_repository_fails_check_until_the_lockfile_names_one(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    lock = json.loads((root / "stack.lock.json").read_text())
    del lock["upstreams"]["vllm"]["repo"], lock["repository"]
    (root / "stack.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    said = _imported(root, invoke, "queue-url-unknown")
    assert said == [("queue-url-unknown", "patches/vllm", None)]
    assert _checked(root, invoke, "queue-url-unknown") == (1, said)
    text = (root / "lockfile.toml").read_text()
    (root / "lockfile.toml").write_text(
        text.replace("[upstreams.vllm]\n", '[upstreams.vllm]\ngit = "https://github.com/vllm-project/vllm"\n')
    )
    assert _checked(root, invoke, "queue-url-unknown")[1] == []


def test_a_stack_lock_pin_of_a_patch_that_is_gone_fails_check_until_the_pin_is_removed(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    text = (root / "stack.lock.json").read_text()
    lock = json.loads(text)
    lock["patches"].append({"file": "patches/vllm/0009-reverted.patch", "sha256": "ab" * 32})
    (root / "stack.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    line = (root / "stack.lock.json").read_text().splitlines().index(f'      "sha256": "{"ab" * 32}"') + 1
    said = _imported(root, invoke, "queue-lock-drift")
    assert said == [("queue-lock-drift", "stack.lock.json", line)]
    assert _checked(root, invoke, "series-lock-drift") == (1, [("series-lock-drift", "stack.lock.json", line)])
    (root / "stack.lock.json").write_text(text)
    _relock(root, invoke)
    assert _checked(root, invoke, "series-lock-drift") == (0, [])


def test_a_patcher_run_from_outside_the_image_keeps_its_anchor_finding_until_it_checks_its_anchor(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    anchored = FORMS["path-parent"][0]
    (root / "patchers").mkdir()
    (root / "patchers/fix_mla.py").write_text(anchored.replace('assert OLD in src, "anchor moved"\n', ""))
    (root / "build.sh").write_text("#!/bin/sh\nset -e\npython3 patchers/fix_mla.py\ndocker build -t x .\n")
    said = _imported(root, invoke, "patcher-not-anchored")
    assert said == [("patcher-not-anchored", "patchers/fix_mla.py", None)]
    assert _checked(root, invoke, "patcher-not-anchored") == (1, said)
    (root / "patchers/fix_mla.py").write_text(anchored)
    assert _checked(root, invoke, "patcher-not-anchored")[1] == []
    assert _checked(root, invoke, "patcher-outside-image")[1] == [("patcher-outside-image", "build.sh", 3)]


def test_profiles_applying_a_series_in_different_orders_fail_check_until_they_agree(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    (root / "Containerfile").unlink()
    script = (
        '#!/bin/bash\nset -e\ncase "$PROFILE" in\n'
        f"  tp1) PATCHES=({B} {A}) ;;\n  tp2) PATCHES=({A} {B} {C}) ;;\nesac\n"
        'for p in "${PATCHES[@]}"; do git apply -p1 "patches/vllm/$p"; done\n'
    )
    (root / "build.sh").write_text(script)
    said = _imported(root, invoke, "queue-order")
    assert said == [("queue-order", "build.sh", None)]
    assert _checked(root, invoke, "queue-order") == (1, said)
    (root / "build.sh").write_text(script.replace(f"tp2) PATCHES=({A} {B} {C})", f"tp2) PATCHES=({B} {A} {C})"))
    _relock(root, invoke)
    assert _checked(root, invoke, "queue-order") == (0, [])


def test_a_series_whose_order_nothing_states_fails_check_until_a_series_file_states_it(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = _queue(tmp_path)
    (root / "Containerfile").write_text(f"FROM vllm/vllm-openai-rocm@{DIGEST}\nCOPY patches/vllm /tmp/q\n")
    said = _imported(root, invoke, "queue-order")
    assert said == [("queue-order", "patches/vllm", None)]
    assert _checked(root, invoke, "queue-order") == (1, said)
    (root / "patches/vllm/series").write_text("".join(f"{n}\n" for n in (B, A, C)))
    assert _checked(root, invoke, "queue-order")[1] == []


def test_another_directory_mounted_where_a_pinned_one_is_fails_check_until_the_profiles_agree(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    _compose(root, "./config/tp1:/etc/vllm:ro")
    for profile in ("tp1", "tp2"):
        (root / "config" / profile).mkdir(parents=True)
        (root / "config" / profile / "serve.yaml").write_text(f"profile: {profile}\n")
    (root / "config/tp2/limits.yaml").write_text("max_model_len: 8192\n")  # lands nowhere pinned: import pins it
    tp2 = f"services:\n  vllm:\n    image: vllm/vllm-openai@sha256:{'ab' * 32}\n    volumes:\n"
    (root / "compose.tp2.yaml").write_text(tp2 + "      - ./config/tp2:/etc/vllm:ro\n")
    said = _imported(root, invoke, "mount-conflict")
    assert said == [("mount-conflict", "compose.tp2.yaml", 5)]
    assert _checked(root, invoke, "mount-unpinned") == (1, [("mount-unpinned", "compose.tp2.yaml", 5)])
    (root / "compose.tp2.yaml").write_text(tp2 + "      - ./config/tp1:/etc/vllm:ro\n")  # the same files
    _relock(root, invoke)
    assert _checked(root, invoke, "mount-unpinned", "mount-target") == (0, [])


@pytest.mark.parametrize(
    "volumes",
    [
        ("./scripts/run.sh:/app/run.sh:ro", "./scripts:/app/scripts:ro"),  # alone first, then in its directory
        ("./scripts:/app/scripts:ro", "./scripts/run.sh:/app/run.sh:ro"),  # the directory first
        ("./scripts/run.sh:/app/run.sh:ro", "./scripts/run.sh:/opt/bin/run.sh:ro"),  # one file at two paths
    ],
)
def test_a_file_one_service_mounts_at_two_paths_is_no_conflict(
    tmp_path: Path, invoke: Invoke, volumes: tuple[str, str]
) -> None:
    """One container with a script at two paths holds the same file twice: nothing disagrees, and check says
    nothing of either mount; the file is pinned once."""
    root = tmp_path / "deploy"
    _compose(root, *volumes)
    (root / "scripts").mkdir()
    (root / "scripts/run.sh").write_text("#!/bin/sh\nexec vllm serve\n")
    (root / "scripts/gen.py").write_text("print('config')\n")
    assert _imported(root, invoke, "mount-conflict") == []
    code, said = _checked(root, invoke, "mount-target", "mount-unpinned", "orphan")
    assert (code, said) == (0, [])


def test_a_package_file_one_service_mounts_at_two_package_paths_is_still_a_conflict(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    _compose(root, f"./patches/sched.py:{SITE}/vllm/core/sched.py:ro", f"./patches/sched.py:{SITE}/vllm/sched.py:ro")
    (root / "patches/sched.py").write_text("POLICY = 'fcfs'\n")
    assert _imported(root, invoke, "mount-conflict") == [("mount-conflict", "compose.yaml", 6)]
    assert _checked(root, invoke, "mount-target") == (1, [("mount-target", "compose.yaml", 6)])


def test_the_image_name_a_built_service_is_tagged_with_is_no_unpinned_image(tmp_path: Path, invoke: Invoke) -> None:
    """``build:`` with ``image: NAME:latest`` names what the build makes: there is no digest to pin in advance, and
    the image it starts FROM is what is pinned, or reported at the Dockerfile's line until it is."""
    root = tmp_path / "deploy"
    text = (
        "services:\n  vllm:\n    build:\n      context: .\n      dockerfile: Dockerfile.vllm\n"
        "    image: vllm-server:latest\n  proxy:\n    image: caddy:2\n"
    )
    (root / "patches").mkdir(parents=True)
    (root / "compose.yaml").write_text(text)
    (root / "Dockerfile.vllm").write_text('FROM vllm/vllm-openai:v0.9.0\nCMD ["serve"]\n')
    said = _imported(root, invoke, "image-unpinned")
    assert said == [("image-unpinned", "compose.yaml", 8), ("image-unpinned", "Dockerfile.vllm", 1)]
    assert _checked(root, invoke, "image-unpinned") == (1, said)
