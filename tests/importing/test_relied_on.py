"""What a hand-kept repository relies on stays true after ``patchkit import``.

A compose-mounted ``SHA256SUMS`` (a startup validator reads it), diffs with
text after the header's file name (as ``diff -u``, svn and people write
them), a multi-file diff whose ``/dev/null`` part fell behind its module,
and diffs the repository's own tests, Makefile, scripts and Containerfile
read. The upstream files are small stand-ins written for these tests.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchkit.core import diffs
from patchkit.core.hashing import sha256_bytes
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke

SITE = "/usr/local/lib/python3.12/dist-packages"
COMMIT = "77469c9a1e0b7c2d3f4a5b6c7d8e9f0a1b2c3d4e"


def numbered(prefix: str, n: int) -> bytes:
    return b"".join(b"%s %d\n" % (prefix.encode(), i) for i in range(1, n + 1))


SCHED_BASE = numbered("def schedule_step", 40)
SCHED = SCHED_BASE.replace(b"def schedule_step 10\n", b"def schedule_step 10\n    fence()\n")
POOL_BASE = numbered("block", 30)
POOL = POOL_BASE.replace(b"block 7\n", b"block 7 pinned\n")
ROPE_BASE = numbered("rope", 25)
ROPE = ROPE_BASE.replace(b"rope 20\n", b"rope 20 scaled\n")
HELPER = numbered("helper", 12)
OVERLAYS = {  # name: (upstream path, base, overlay)
    "scheduler": ("vllm/core/scheduler.py", SCHED_BASE, SCHED),
    "block_pool": ("vllm/v1/core/block_pool.py", POOL_BASE, POOL),
    "rope": ("vllm/model_executor/layers/rope.py", ROPE_BASE, ROPE),
}
# Text after the name on the header lines, as each tool writes it: (--- suffix, +++ suffix).
HEADER_TEXT = {
    "scheduler": ("\t2024-01-01 00:00:00.000000000 +0000", " (at 77469c9)"),
    "block_pool": (" (revision 1234)", " (working copy)"),
    "rope": ("\t(revision 88)", "\t2024-05-02 10:11:12 +0200"),
}


def write(root: Path, rel: str, data: bytes | str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def build(root: Path, *, sums_mount: str, helper_part: bytes = HELPER, readers: bool = True) -> Path:
    """The repository: three overlays, a module, their diffs, a mounted SHA256SUMS, and what reads the diffs."""
    volumes = [f"      - ./patches/{n}.py:{SITE}/{p}:ro" for n, (p, _, _) in OVERLAYS.items()]
    volumes += [
        f"      - ./patches/kv_helper.py:{SITE}/vllm/v1/kv_helper.py:ro",
        "      - ./entrypoint.sh:/opt/entrypoint.sh:ro",
    ]
    volumes.append(sums_mount)
    write(
        root,
        "compose.yaml",
        f"services:\n  vllm:\n    image: vllm/vllm-openai@sha256:{'ab' * 32}\n"
        '    entrypoint: ["/bin/sh", "/opt/entrypoint.sh"]\n    volumes:\n' + "\n".join(volumes) + "\n",
    )
    write(
        root,
        "entrypoint.sh",
        '#!/bin/sh\nset -eu\n(cd /opt/deploy && sha256sum -c --strict SHA256SUMS)\nexec vllm serve "$@"\n',
    )
    rows = "".join(f"| `{n}.py` | vllm-project/vllm | {COMMIT} | {p} |\n" for n, (p, _, _) in OVERLAYS.items())
    rows += "| `kv_helper.py` | new module, not upstream | | |\n"
    write(root, "patches/README.md", "| Overlay | Upstream | Commit | Path |\n|---|---|---|---|\n" + rows)
    for n, (p, base, new) in OVERLAYS.items():
        write(root, f"patches/{n}.py", new)
        old_text, new_text = HEADER_TEXT[n]
        d = diffs.make(base, new, f"a/{p}", f"b/{p}")
        d = d.replace(f"--- a/{p}\n".encode(), f"--- a/{p}{old_text}\n".encode(), 1)
        d = d.replace(f"+++ b/{p}\n".encode(), f"+++ b/{p}{new_text}\n".encode(), 1)
        if n != "block_pool":
            write(root, f"patches/diffs/{n}.diff", d)
    write(root, "patches/kv_helper.py", HELPER)
    # One diff of two files: the block pool against upstream, and the module added whole.
    p = OVERLAYS["block_pool"][0]
    two = diffs.make(POOL_BASE, POOL, f"a/{p}", f"b/{p}").replace(
        f"+++ b/{p}\n".encode(), f"+++ b/{p} (working copy)\n".encode()
    ) + diffs.make(b"", helper_part, "/dev/null", "b/vllm/v1/kv_helper.py")
    write(root, "patches/diffs/kv.patch", two)
    if readers:
        write(
            root,
            "tests/core/test_diffs.py",
            "DIFF = 'patches/diffs/scheduler.diff'\n\n\ndef test_it():\n    assert DIFF\n",
        )
        write(root, "Makefile", "check:\n\tgit apply --check --reverse kv.patch\n")
    listed = [f"patches/{n}.py" for n in OVERLAYS] + ["patches/kv_helper.py", "entrypoint.sh"]
    write(root, "SHA256SUMS", "".join(f"{sha256_bytes((root / r).read_bytes())}  {r}\n" for r in listed))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


SUMS_MOUNTS = {
    "short": "      - ./SHA256SUMS:/opt/deploy/SHA256SUMS:ro",
    "quoted-rw": '      - "./SHA256SUMS:/app/SHA256SUMS"',
    "long": "      - type: bind\n        source: ./SHA256SUMS\n"
    "        target: /opt/deploy/SHA256SUMS\n        read_only: true",
}


@pytest.mark.parametrize("form", sorted(SUMS_MOUNTS))
def test_a_mounted_sha256sums_is_not_pinned_and_every_command_works_after_import(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS[form])
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = [(i["kind"], i["severity"]) for i in json.loads(run.stdout)["import"]["issues"]]
    assert issues == [("mount-generated", "note")], run.stdout
    lock = loads((root / "lockfile.toml").read_text())
    assert "SHA256SUMS" not in {str(a.file) for a in lock.artifacts}
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert check.exit_code == 0, check.stdout
    codes = {f["code"] for f in json.loads(check.stdout)["findings"]}
    assert "mount-unpinned" not in codes
    for args in (("status",), ("lock",), ("diff",), ("refs",), ("audit", "--output", str(tmp_path / "audit.md"))):
        got = invoke(*args, repo=root)
        assert got.exit_code in (0, 1), (args, got.stdout, got.stderr)
        assert "lockfile.toml:" not in got.stderr, (args, got.stderr)
    # The diffs whose headers carry text after the name describe their overlays: normalize replaces them all.
    norm = invoke("import", "--normalize", str(root), "--format", "json")
    assert norm.exit_code == 0, norm.stdout
    assert sorted(json.loads(norm.stdout)["normalize"]["normalized"]) == ["block-pool", "rope", "scheduler"]


def test_text_after_the_header_name_matches_the_overlay(tmp_path: Path, invoke: Invoke) -> None:
    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"])
    run = invoke("import", "--dry-run", str(root), "--format", "json")
    kinds = {i["kind"] for i in json.loads(run.stdout)["import"]["issues"]}
    assert not kinds & {"diff-unmatched", "no-diff", "diff-stale"}, run.stdout
    assert json.loads(run.stdout)["import"]["found"]["diffs"] == 3


STALE_BODIES = {
    "truncated": (HELPER[: HELPER.index(b"helper 10\n")], "it adds a file of 9 lines, but the file has 12 lines"),
    "line-changed": (HELPER.replace(b"helper 4\n", b"helper four\n"), "(they differ from line 4)"),
    "no-final-newline": (HELPER[:-1], "they differ from line 12"),
}


@pytest.mark.parametrize("form", sorted(STALE_BODIES))
def test_a_stale_new_file_part_of_a_multi_file_diff_is_reported(tmp_path: Path, invoke: Invoke, form: str) -> None:
    body, words = STALE_BODIES[form]
    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"], helper_part=body)
    line = 1 + next(
        k for k, t in enumerate((root / "patches/diffs/kv.patch").read_text().splitlines()) if t == "--- /dev/null"
    )
    run = invoke("import", str(root), "--format", "json")
    stale = [i for i in json.loads(run.stdout)["import"]["issues"] if i["kind"] == "diff-stale"]
    assert [(i["file"], i["line"]) for i in stale] == [("patches/diffs/kv.patch", line)], run.stdout
    assert words in stale[0]["message"]
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    errors = [
        (f["code"], f["file"], f["line"]) for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"
    ]
    assert errors == [("diff-stale", "patches/diffs/kv.patch", line)], check.stdout


READERS = {  # a file of the repository that names patches/diffs/rope.diff, and the line it does on
    "script": ("scripts/verify.sh", "#!/bin/sh\nset -e\ngit apply --check ./patches/diffs/rope.diff\n", 3),
    "containerfile": ("Containerfile", "FROM scratch\nCOPY patches/diffs/rope.diff /tmp/\n", 2),
    "test-by-name": ("tests/test_rope.py", "from pathlib import Path\nD = Path(__file__).parent / 'rope.diff'\n", 2),
    "makefile": ("Makefile", "DIFFS := patches/diffs\ncheck:\n\tpatch -p1 --dry-run < $(DIFFS)/rope.diff\n", 3),
    "workflow": (
        ".github/workflows/ci.yml",
        "jobs:\n  t:\n    steps:\n      - run: git apply patches/diffs/rope.diff\n",
        4,
    ),
}


@pytest.mark.parametrize("form", sorted(READERS))
def test_normalize_keeps_a_diff_the_repository_reads(tmp_path: Path, invoke: Invoke, form: str) -> None:
    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"], readers=False)
    reader, text, line = READERS[form]
    write(root, reader, text)
    # Names that only contain the diff's name are not references to it.
    write(root, "scripts/backup.sh", "#!/bin/sh\ncp x scheduler.diff.bak\ncp y old-scheduler.diff\n")
    assert invoke("import", str(root)).exit_code == 0
    norm = invoke("import", "--normalize", str(root), "--format", "json")
    assert norm.exit_code == 0, norm.stdout
    doc = json.loads(norm.stdout)["normalize"]
    assert sorted(doc["normalized"]) == ["block-pool", "rope", "scheduler"]
    assert doc["kept_referenced"] == [{"diff": "patches/diffs/rope.diff", "referenced_at": f"{reader}:{line}"}]
    assert doc["removed"] == ["patches/diffs/scheduler.diff"]
    assert (root / "patches/diffs/rope.diff").is_file() and not (root / "patches/diffs/scheduler.diff").exists()
    assert (root / "patches/diffs/kv.patch").is_file()  # it holds a module's whole file
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout


def test_delete_referenced_deletes_what_normalize_replaced(tmp_path: Path, invoke: Invoke) -> None:
    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"])
    assert invoke("import", str(root)).exit_code == 0
    norm = invoke("import", "--normalize", "--delete-referenced", str(root), "--format", "json")
    doc = json.loads(norm.stdout)["normalize"]
    assert doc["kept_referenced"] == []
    assert sorted(doc["removed"]) == ["patches/diffs/rope.diff", "patches/diffs/scheduler.diff"]
    assert not (root / "patches/diffs/scheduler.diff").exists()
