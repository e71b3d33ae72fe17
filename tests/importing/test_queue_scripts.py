"""``patchkit import`` of patch queues whose order and profiles live in build scripts and Containerfile loops.

The repositories are laid out as such queues are kept: ``git format-patch``
backports under ``patches/<upstream>/``, a JSON stack lock naming each
patch's sha256, and either a profile script (one bash array per ``case``
branch, a loop that applies the array) or a Containerfile that copies a
directory in and loops over its glob. Each class of spelling is tried in
several forms; every patch a loop applies must come out applied, in order,
with its profiles, and nothing that cannot be read is called "never applied".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core.hashing import sha256_bytes
from patchkit.importing.shell import BuildReader
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.series.queue import VLLM_NAMES, build_queue, clone_tree

DIGEST = "sha256:" + "4c" * 32
A, B, C = VLLM_NAMES  # mxfp4 backend, its env flag, the legacy scheduler


def _repo(tmp_path: Path, url: str = "https://github.com/vllm-project/vllm") -> tuple[Path, str, Path]:
    """The queue without its series files, a JSON stack lock pinning each patch, a Containerfile by digest."""
    q = build_queue(tmp_path)
    url = url or q.vllm.as_uri()
    root = q.root
    for s in ("patches/vllm/series", "patches/flashinfer/series"):
        (root / s).unlink()
    (root / "patches/flashinfer").rename(tmp_path / "fi-unused")
    lock = {
        "repository": "https://github.com/vllm-project/vllm",
        "upstreams": {"vllm": {"repo": url, "commit": q.vllm_c1}},
        "patches": [{"file": f"patches/vllm/{n}", "sha256": sha256_bytes(q.patches[n])} for n in VLLM_NAMES],
    }
    (root / "stack.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    return root, q.vllm_c1, q.vllm


PROFILE_SCRIPTS = {
    # One array per case branch on $PROFILE (with a default), applied by git apply in a loop.
    "case-on-env": (
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        'ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"\n'
        'case "${PROFILE:-tp1}" in\n'
        f"  tp1) PATCHES=({B} {A}) ;;\n"
        "  tp2|tp4)\n"
        "    PATCHES=(\n"
        f"      {B}   # the env flag first\n"
        f"      {A}\n"
        "    )\n"
        f"    PATCHES+=({C})\n"
        "    ;;\n"
        '  *) echo "unknown profile $PROFILE" >&2; exit 1 ;;\n'
        "esac\n"
        "cd /opt/vllm\n"
        'for p in "${PATCHES[@]}"; do\n'
        '  git apply "$ROOT/patches/vllm/$p"\n'
        "done\n"
    ),
    # The profile is the first argument; patch -p1 from stdin; a variable holds the directory.
    "case-on-arg": (
        "#!/bin/sh\nset -e\n"
        'HERE=$(dirname "$0")\n'
        "PDIR=$HERE/../patches/vllm\n"
        'case "$1" in\n'
        f'  tp1) set -- "$PDIR/{B}" "$PDIR/{A}" ;;\n'
        f'  tp2) set -- "$PDIR/{B}" "$PDIR/{A}" "$PDIR/{C}" ;;\n'
        "esac\n"
        'for p in "$@"; do\n'
        '  patch -p1 -d /opt/vllm < "$p"\n'
        "done\n"
    ),
    # A function applies its arguments; declare -a arrays; git -C; -p 1 as two words; a test settles a step.
    "function-and-if": (
        "#!/usr/bin/env bash\n"
        "ROOT=$(git rev-parse --show-toplevel)\n"
        "apply_all() {\n"
        '  for f in "$@"; do git -C /opt/vllm apply -p 1 --whitespace=nowarn "$ROOT/patches/vllm/$f"; done\n'
        "}\n"
        'MODE="${PROFILE:-tp1}"\n'
        'if [ "$MODE" = "tp1" ]; then :; fi\n'
        'case "$PROFILE" in\n'
        f"  tp1) declare -a PATCHES=({B} {A}) ;;\n"
        f"  tp2) declare -a PATCHES=({B} {A} {C}) ;;\n"
        "esac\n"
        'apply_all "${PATCHES[@]}"\n'
    ),
}


@pytest.mark.parametrize("form", sorted(PROFILE_SCRIPTS))
def test_a_profile_script_gives_the_order_and_one_profile_per_branch(tmp_path: Path, invoke: Invoke, form: str) -> None:
    root, commit, upstream = _repo(tmp_path)
    (root / "scripts").mkdir()
    (root / "scripts/apply-patches.sh").write_text(PROFILE_SCRIPTS[form])
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\nARG PROFILE=tp1\nCOPY . /src\n"
        "RUN git clone https://github.com/vllm-project/vllm /opt/vllm\n"
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    kinds = sorted({i["kind"] for i in issues})
    assert kinds == ["queue-profile-arg"], issues  # nothing "never applied", nothing unknown
    lock = loads((root / "lockfile.toml").read_text())
    (vllm,) = lock.series
    assert [Path(str(p.file)).name for p in vllm.patches] == [B, A, C]
    profiles = {"tp1": ("tp1", "tp2"), "tp2": ("tp2",)}
    if form == "case-on-env":
        profiles = {"tp1": ("tp1", "tp2", "tp4"), "tp2": ("tp2", "tp4")}
    assert [p.profiles for p in vllm.patches] == [profiles["tp1"], profiles["tp1"], profiles["tp2"]]
    assert vllm.strip == 1 and str(vllm.target) == "/opt/vllm" and str(vllm.commit) == commit
    # What the build does, apply does: the tp1 profile gives the tree the two patches give.
    tree = clone_tree(upstream, commit, tmp_path / "tree")
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout
    applied = invoke("apply", "--series", "vllm", "--profile", "tp1", "--to", str(tree), repo=root)
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    assert b"flashinfer-cutlass" in (tree / "vllm/model_executor/layers/quant/mxfp4.py").read_bytes()
    assert b"priority" not in (tree / "vllm/legacy/sched.py").read_bytes()


CONTAINERFILE_LOOPS = {
    "copy-dir-glob": (
        "COPY patches/vllm /tmp/patches-vllm\n"
        "RUN for p in /tmp/patches-vllm/*.patch; do \\\n"
        "      patch -p1 -d /usr/local/lib/python3.12/site-packages < $p; \\\n"
        "    done\n"
    ),
    "workdir-relative": (
        "WORKDIR /build\n"
        "COPY patches/vllm/ patches/\n"
        'RUN set -eux; for p in patches/*.patch; do patch --strip=1 --directory="$SITE" -i "$p"; done\n'
    ),
    "git-am-glob": (
        "COPY patches/vllm /tmp/q\n"
        "RUN cd /usr/local/lib/python3.12/site-packages && git am -3 --keep-cr /tmp/q/*.patch\n"
    ),
    "bind-mount": (
        "RUN --mount=type=bind,source=patches/vllm,target=/p \\\n"
        "    cd /usr/local/lib/python3.12/site-packages && \\\n"
        "    for f in /p/*.patch; do cat $f | patch -p1; done\n"
    ),
}


@pytest.mark.parametrize("form", sorted(CONTAINERFILE_LOOPS))
def test_a_containerfile_loop_over_a_staged_directory_applies_in_glob_order(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\n"
        "ARG SITE=/usr/local/lib/python3.12/site-packages\n" + CONTAINERFILE_LOOPS[form]
    )
    run = invoke("import", "--dry-run", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    assert issues == [], issues
    lock = loads(json.loads(run.stdout)["import"].get("lockfile", "") or _dry_lock(invoke, root))
    (vllm,) = lock.series
    assert [Path(str(p.file)).name for p in vllm.patches] == sorted(VLLM_NAMES)  # the glob's order: sorted
    assert all(p.profiles == () for p in vllm.patches)
    assert vllm.strip == 1 and str(vllm.target) == "/usr/local/lib/python3.12/site-packages"


def _dry_lock(invoke: Invoke, root: Path) -> str:
    assert invoke("import", str(root)).exit_code == 0
    return (root / "lockfile.toml").read_text()


UNREADABLE = {
    "command-substitution": ("for p in $(ls patches/vllm/*.patch | sort -r); do git apply $p; done\n", 1),
    "while-read": ("ls patches/vllm | while read -r p; do git apply patches/vllm/$p; done\n", 1),
    "xargs": ("find patches/vllm -name '*.patch' | sort | xargs -n1 git apply\n", 1),
    "unset-variable": ('for p in "${QUEUE[@]}"; do git apply "$p"; done\n', 1),
}


@pytest.mark.parametrize("form", sorted(UNREADABLE))
def test_a_loop_that_cannot_be_read_is_unknown_never_not_applied(tmp_path: Path, invoke: Invoke, form: str) -> None:
    root, _, _ = _repo(tmp_path)
    text, line = UNREADABLE[form]
    (root / "build.sh").write_text("#!/bin/bash\nset -e\n" + text)
    run = invoke("import", "--dry-run", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    assert not any("never applied" in i["message"] for i in issues), issues
    unknown = [i for i in issues if i["kind"] == "build-step-unknown"]
    assert [(i["file"], i["line"]) for i in unknown] == [("build.sh", 2 + line)], issues
    per_patch = [i for i in issues if i["kind"] == "queue-apply-unknown"]
    assert len(per_patch) == 3 and all(i["file"] == "build.sh" for i in per_patch), issues
    (order,) = [i for i in issues if i["kind"] == "queue-order"]
    assert order["message"].startswith("the order is unknown (build.sh:"), order
    assert len(issues) == 5, issues


def test_a_patch_no_step_applies_is_reported_and_a_stack_lock_pin_that_drifted_too(
    tmp_path: Path, invoke: Invoke
) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "apply.sh").write_text(f"#!/bin/sh\nfor p in {B} {A}; do git apply patches/vllm/$p; done\n")
    data = (root / "patches/vllm" / A).read_bytes()
    (root / "patches/vllm" / A).write_bytes(data.replace(b"Subject:", b"X-Note: rebased\nSubject:", 1))
    run = invoke("import", "--dry-run", str(root), "--format", "json")
    issues = [(i["kind"], i["file"], i["line"], i["message"]) for i in json.loads(run.stdout)["import"]["issues"]]
    assert ("queue-order", f"patches/vllm/{C}", None, f"patches/vllm/{C} is never applied (read: apply.sh)") in issues
    drift = [i for i in issues if i[0] == "queue-lock-drift"]
    assert len(drift) == 1 and drift[0][1] == "stack.lock.json" and A in drift[0][3], issues
    assert drift[0][2] == 1 + next(
        k for k, line in enumerate((root / "stack.lock.json").read_text().splitlines()) if sha256_bytes(data) in line
    )


def test_profiles_and_order_as_the_reader_sees_them(tmp_path: Path) -> None:
    """The reader on its own: a Containerfile runs the profile script with its ARG; both branches are read."""
    root = tmp_path
    (root / "patches/x").mkdir(parents=True)
    for n in ("a.patch", "b.patch", "c.patch"):
        (root / "patches/x" / n).write_text("")
    (root / "docker").mkdir()
    (root / "docker/apply.sh").write_text(
        '#!/bin/bash\ncase "$1" in\n  small) L=(b.patch) ;;\n  big) L=(a.patch b.patch c.patch) ;;\nesac\n'
        'for p in "${L[@]}"; do patch -p0 -d /srv < "/opt/q/$p"; done\n'
    )
    (root / "docker/Containerfile").write_text(
        "FROM scratch\nARG FLAVOR=small\nCOPY patches/x /opt/q\nCOPY docker/apply.sh /usr/local/bin/apply.sh\n"
        'RUN bash /usr/local/bin/apply.sh "$FLAVOR"\n'
    )
    reading = BuildReader(root).read(["docker/Containerfile"], ["docker/apply.sh"])
    got = [(a.repo, a.profile, a.strip, a.directory, a.file, a.line) for a in reading.applies]
    assert got == [
        ("patches/x/b.patch", "small", 0, "/srv", "docker/apply.sh", 6),
        ("patches/x/a.patch", "big", 0, "/srv", "docker/apply.sh", 6),
        ("patches/x/b.patch", "big", 0, "/srv", "docker/apply.sh", 6),
        ("patches/x/c.patch", "big", 0, "/srv", "docker/apply.sh", 6),
    ]
    assert reading.profile_variable == ("FLAVOR", "docker/apply.sh", 2)
    assert reading.unknowns == [] and reading.followed == {"docker/apply.sh"}


def test_in_a_compose_repository_the_patches_its_containerfile_applies_are_a_series(
    tmp_path: Path, invoke: Invoke
) -> None:
    """compose, then the Containerfile, then its loop: those files are a series, not hand-kept diffs."""
    from patchkit.core import diffs
    from tests.importing.test_relied_on import COMMIT, SUMS_MOUNTS, build

    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"])
    queue_dir = root / "patches/vllm-extra"
    queue_dir.mkdir()
    for k, name in enumerate(("0002-env.patch", "0001-sched.patch", "0003-cfg.patch")):
        body = diffs.make(b"a = 1\n", b"a = %d\n" % (k + 2), f"a/vllm/f{k}.py", f"b/vllm/f{k}.py")
        (queue_dir / name).write_bytes(f"Subject: [PATCH] change {k}\n\n".encode() + body)
    (root / "stack.lock.json").write_text(
        json.dumps({"upstreams": {"vllm-extra": {"repo": "https://github.com/vllm-project/vllm", "commit": COMMIT}}})
    )
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai@{DIGEST}\nCOPY patches/vllm-extra /tmp/patches-vllm\n"
        "RUN for p in /tmp/patches-vllm/*.patch; do \\\n"
        "      patch -p1 -d /usr/local/lib/python3.12/dist-packages < $p; done\n"
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)["import"]
    assert [i["kind"] for i in doc["issues"]] == ["mount-generated"], doc["issues"]
    assert doc["found"]["diffs"] == 3  # the hand-kept diffs of the overlays, not the queue
    lock = loads((root / "lockfile.toml").read_text())
    (series,) = lock.series
    assert [Path(str(p.file)).name for p in series.patches] == ["0001-sched.patch", "0002-env.patch", "0003-cfg.patch"]
    assert str(series.target) == "/usr/local/lib/python3.12/dist-packages" and str(series.commit) == COMMIT
    assert {str(a.file) for a in lock.artifacts} >= {"Containerfile", "stack.lock.json"}
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout


def test_check_reports_a_stack_lock_pin_a_later_patch_change_left_behind(tmp_path: Path, invoke: Invoke) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\nCOPY patches/vllm /q\n"
        "RUN for p in /q/*.patch; do git -C /opt/vllm apply $p; done\n"
    )
    assert invoke("import", str(root)).exit_code == 0
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout
    # The patch is rewritten (as a series rebase does) and re-pinned; the repository's own lock is not.
    patch = root / "patches/vllm" / C
    old = sha256_bytes(patch.read_bytes())
    patch.write_bytes(patch.read_bytes().replace(b"Subject:", b"X-Rebased: yes\nSubject:", 1))
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    errors = [
        (f["code"], f["file"], f["line"]) for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"
    ]
    line = 1 + next(k for k, t in enumerate((root / "stack.lock.json").read_text().splitlines()) if old in t)
    assert errors == [("series-lock-drift", "stack.lock.json", line)], check.stdout


def test_a_series_read_from_a_profile_script_rebases_and_keeps_its_profiles(tmp_path: Path, invoke: Invoke) -> None:
    from tests.series.queue import commit

    root, _, upstream = _repo(tmp_path, url="")
    (root / "scripts").mkdir()
    (root / "scripts/apply-patches.sh").write_text(PROFILE_SCRIPTS["case-on-env"])
    assert invoke("import", str(root)).exit_code == 0
    pins = {n: sha256_bytes((root / "patches/vllm" / n).read_bytes()) for n in VLLM_NAMES}
    c2 = commit(upstream, {"vllm/other.py": b"x = 1\n"}, "an unrelated change")
    run = invoke("rebase", "--series", "vllm", "--onto", "main", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    lock = loads((root / "lockfile.toml").read_text())
    (vllm,) = lock.series
    assert str(vllm.commit) == c2
    assert [(Path(str(p.file)).name, p.profiles) for p in vllm.patches] == [
        (B, ("tp1", "tp2", "tp4")),
        (A, ("tp1", "tp2", "tp4")),
        (C, ("tp2", "tp4")),
    ]
    assert invoke("sums", repo=root).exit_code == 0
    # The rebase rewrote the patches; the repository's own stack lock still pins the old bytes: each is reported.
    check = invoke("check", "--format", "json", repo=root)
    errors = [(f["code"], f["line"]) for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"]
    text = (root / "stack.lock.json").read_text().splitlines()
    lines = sorted(1 + next(k for k, t in enumerate(text) if pins[n] in t) for n in VLLM_NAMES)
    rewritten = [n for n in VLLM_NAMES if sha256_bytes((root / "patches/vllm" / n).read_bytes()) != pins[n]]
    assert len(rewritten) == 3
    # And it still states the old base commit, which the build would check out: reported at its line.
    base = 1 + next(k for k, t in enumerate(text) if '"commit"' in t)
    drift = [("upstream-pin-drift", base)]
    assert errors == [("series-lock-drift", line) for line in lines] + drift, check.stdout


def test_in_a_compose_repository_patch_files_an_unreadable_step_may_apply_are_unknown_not_unmatched(
    tmp_path: Path, invoke: Invoke
) -> None:
    from patchkit.core import diffs
    from tests.importing.test_relied_on import SUMS_MOUNTS, build

    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"])
    (root / "patches/extra").mkdir()
    body = diffs.make(b"a = 1\n", b"a = 2\n", "a/vllm/f.py", "b/vllm/f.py")
    (root / "patches/extra/0001-f.patch").write_bytes(body)
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai@{DIGEST}\nCOPY patches/extra /q\n"
        "RUN for p in $(ls /q/*.patch | sort); do patch -p1 < $p; done\n"
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = [(i["kind"], i["severity"], i["file"], i["line"]) for i in json.loads(run.stdout)["import"]["issues"]]
    assert sorted(issues) == [
        ("build-step-unknown", "note", "Containerfile", 3),
        ("mount-generated", "note", "compose.yaml", 11),
        ("queue-apply-unknown", "note", "Containerfile", 3),
    ], issues
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout


def _queue(root: Path, containerfile: str) -> None:
    (root / "patches/x").mkdir(parents=True)
    for n in ("a.patch", "b.patch"):
        (root / "patches/x" / n).write_text("")
    (root / "Containerfile").write_text(containerfile)


def test_a_here_document_run_is_read_as_the_script_it_is(tmp_path: Path) -> None:
    """``RUN <<EOF`` runs its body: the loop in it applies the patches; its lines are the file's lines."""
    _queue(
        tmp_path,
        "FROM scratch\ncopy patches/x /q\nRUN <<EOF\nset -e\nfor p in /q/*.patch; do\n"
        "  git -C /opt/x apply -p1 $p\ndone\nEOF\nRUN bash -e <<'SH'\npatch -p1 -d /opt/x < /q/a.patch\nSH\n",
    )
    reading = BuildReader(tmp_path).read(["Containerfile"], [])
    got = [(a.repo, a.tool, a.directory, a.line) for a in reading.applies]
    assert got == [
        ("patches/x/a.patch", "git apply", "/opt/x", 6),
        ("patches/x/b.patch", "git apply", "/opt/x", 6),
        ("patches/x/a.patch", "patch", "/opt/x", 10),
    ]
    assert reading.unknowns == []


@pytest.mark.parametrize(
    ("containerfile", "line", "reason"),
    [
        ("FROM scratch\nRUN patch -p1 -d /opt/x <<EOF\n--- a/f\n+++ b/f\nEOF\n", 2, "patch reads a patch from"),
        ("FROM scratch\nCOPY patches/x /q\nRUN <<EOF\nfor p in /q/*.patch; do git apply $p; done\n", 3, "not closed"),
        ('FROM scratch\nRUN for p in /q/*.patch; do \\\n  git apply "$p; done\n', 2, "does not tokenise"),
    ],
)
def test_a_build_step_that_cannot_be_read_is_one_unknown_at_its_line(
    tmp_path: Path, containerfile: str, line: int, reason: str
) -> None:
    _queue(tmp_path, containerfile)
    reading = BuildReader(tmp_path).read(["Containerfile"], [])
    assert reading.applies == []
    (unknown,) = reading.unknowns
    assert (unknown.file, unknown.line) == ("Containerfile", line) and reason in unknown.reason, unknown


@pytest.mark.parametrize(
    ("name", "lock"),
    [
        (
            "stack.lock.json",
            {"repository": "https://github.com/o/x", "base_commit": "c" * 40, "release_commit": "d" * 40},
        ),
        ("stack.lock.json", {"upstreams": {"x": {"git": "https://github.com/o/other", "commit": "c" * 40}}}),
        ("deps-lock.toml", {"x": {"repo": "https://github.com/o/x", "rev": "c" * 40}}),
    ],
)
def test_the_queue_takes_its_upstream_pins_by_meaning(tmp_path: Path, name: str, lock: dict[str, object]) -> None:
    import tomli_w

    from patchkit.importing.queue import recognise

    _queue(tmp_path, "FROM scratch\nCOPY patches/x /q\nRUN for p in /q/*.patch; do git -C /o apply $p; done\n")
    data = json.dumps(lock) if name.endswith(".json") else tomli_w.dumps(lock)
    (tmp_path / name).write_text(data)
    found = recognise(tmp_path)
    (up,) = found.upstreams
    assert (up.name, str(up.commit), up.git) == ("x", "c" * 40, next(v for v in _strings(lock) if "github" in v))
    assert not [i for i in found.issues if i[0] in ("queue-commit-unknown", "queue-url-unknown", "queue-lock")]


def _strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    return [node] if isinstance(node, str) else []


def test_a_short_commit_in_a_lock_is_reported_not_taken(tmp_path: Path) -> None:
    from patchkit.importing.queue import recognise

    _queue(tmp_path, "FROM scratch\nCOPY patches/x /q\nRUN for p in /q/*.patch; do git -C /o apply $p; done\n")
    (tmp_path / "stack.lock.json").write_text(json.dumps({"x": {"repo": "o/x", "commit": "abc1234"}}))
    found = recognise(tmp_path)
    assert ("queue-lock", "stack.lock.json", None, "x.commit 'abc1234' is not a full commit") in [
        i[:4] for i in found.issues
    ]
    assert found.upstreams[0].commit is None


@pytest.mark.parametrize(
    ("copy", "applied_from"),
    [
        ("ADD ./patches/x/a.patch /opt", "/opt/a.patch"),  # a directory every image has, no trailing slash
        ("COPY patches/x/a.patch /tmp", "/tmp/a.patch"),
        ("WORKDIR /src\nCOPY patches/x/a.patch .", "/src/a.patch"),
        ("WORKDIR /src\nCOPY patches/x/a.patch /src", "/src/a.patch"),  # the directory WORKDIR made
        ("COPY patches/x/b.patch /q/\nCOPY patches/x/a.patch /q", "/q/a.patch"),  # one a COPY filled
    ],
)
def test_a_patch_copied_into_a_directory_of_the_image_is_the_repository_file(
    tmp_path: Path, copy: str, applied_from: str
) -> None:
    """Docker puts a file copied to an existing directory inside it: the step applies the repository's patch."""
    _queue(tmp_path, f"FROM scratch\n{copy}\nRUN cd /opt/x && patch -p1 < {applied_from}\n")
    reading = BuildReader(tmp_path).read(["Containerfile"], [])
    assert [(a.repo, a.tool) for a in reading.applies] == [("patches/x/a.patch", "patch")]
    assert reading.unknowns == []


@pytest.mark.parametrize(
    "quoted",
    [
        "body='{\n  \"a\": 1\n}'",  # a single-quoted JSON body over lines
        'msg="first\nsecond"',
        'out=$(curl -s \\\n  -d \'{\n    "k": "v"\n  }\')',  # inside a command substitution
        "n=\"$(\n  awk '\n    { print }\n  ' f\n)\"",
        "echo 'it''s' \"a\n# not a comment\nb\"",
    ],
)
def test_a_quoted_string_over_several_lines_is_read_as_the_shell_reads_it(tmp_path: Path, quoted: str) -> None:
    """A quote open at the end of a line continues on the next: the script is read whole, and the patch the
    script applies after it is applied at its own line, with nothing called unreadable."""
    (tmp_path / "patches/x").mkdir(parents=True)
    (tmp_path / "patches/x/a.patch").write_text("")
    script = f"#!/bin/bash\nset -e\n{quoted}\ngit -C /opt/x apply patches/x/a.patch\n"
    (tmp_path / "apply.sh").write_text(script)
    reading = BuildReader(tmp_path).read([], ["apply.sh"])
    assert reading.unknowns == []
    line = script.split("\n").index("git -C /opt/x apply patches/x/a.patch") + 1
    assert [(a.repo, a.line) for a in reading.applies] == [("patches/x/a.patch", line)]


def test_a_quote_never_closed_is_one_unknown_at_the_line_it_opens(tmp_path: Path) -> None:
    (tmp_path / "apply.sh").write_text("#!/bin/bash\necho ok\necho 'open\nmore\nmore\n")
    reading = BuildReader(tmp_path).read([], ["apply.sh"])
    assert [(u.line, "No closing quotation" in u.reason) for u in reading.unknowns] == [(3, True)]


def test_an_ansi_c_quoted_string_with_an_escaped_quote_opens_nothing(tmp_path: Path) -> None:
    (tmp_path / "patches/x").mkdir(parents=True)
    (tmp_path / "patches/x/a.patch").write_text("")
    (tmp_path / "apply.sh").write_text("#!/bin/bash\nIFS=$'\\n\\t'; echo $'don\\'t'\ngit apply patches/x/a.patch\n")
    reading = BuildReader(tmp_path).read([], ["apply.sh"])
    assert [(a.repo, a.line) for a in reading.applies] == [("patches/x/a.patch", 3)]


@pytest.mark.parametrize(
    ("step", "unknown"),
    [
        ("cat <<USAGE\nusage: apply.sh PROFILE\nUSAGE", False),  # usage text
        ("    cat << 'EOF'\nhelp\nEOF", False),
        ('cat > "$OUT" <<EOF\n{"k": 1}\nEOF', False),  # a file written
        ("tee /etc/x.conf <<-EOF\n\tk=v\n\tEOF", False),
        ("cat <<EOF | patch -p1 -d /opt/x\n--- a/f\nEOF", True),  # piped into patch: unknown
        ("python3 - <<PY\nprint(1)\nPY", False),  # a program's body: read as the program it is
        ("python3 > /tmp/c.json <<'PY'\nprint('{}')\nPY", False),
        ("python3 tool.py <<EOF\ninput\nEOF", True),  # a script's input: not read
        ("patch -p1 -d /opt/x <<EOF\n--- a/f\nEOF", True),
    ],
)
def test_a_here_document_only_printed_or_written_leaves_nothing_unknown(
    tmp_path: Path, step: str, unknown: bool
) -> None:
    (tmp_path / "patches/x").mkdir(parents=True)
    (tmp_path / "patches/x/a.patch").write_text("")
    script = f"#!/bin/bash\n{step}\ngit apply patches/x/a.patch\n"
    (tmp_path / "apply.sh").write_text(script)
    reading = BuildReader(tmp_path).read([], ["apply.sh"])
    assert [u.line for u in reading.unknowns if "here-document" in u.reason] == ([2] if unknown else [])
    assert unknown or reading.unknowns == []
    assert [a.repo for a in reading.applies] == ["patches/x/a.patch"]


CLONE_FORMS = [
    # a Containerfile: clone, cd, checkout and apply in one RUN line; another upstream cloned before it
    (
        "Containerfile",
        "FROM scratch\nCOPY patches/x /q/\n"
        "RUN git clone https://github.com/o/other.git && cd other && git checkout " + "d" * 40 + "\n"
        "RUN git clone https://github.com/o/x.git /opt/x && cd /opt/x && git checkout {sha} && \\\n"
        "    for p in /q/*.patch; do patch -p1 < $p; done\n",
    ),
    # a script: the commit in a variable, fetched shallow, then checked out
    (
        "build.sh",
        "#!/bin/bash\nset -e\nX_SHA={sha}\ngit clone https://github.com/o/x.git x\ncd x\n"
        "git fetch --depth=1 origin $X_SHA\ngit checkout -q ${{X_SHA}}\n"
        "for p in ../patches/x/*.patch; do git apply $p; done\n",
    ),
    # git -C DIR checkout, and ARG for the commit
    (
        "Containerfile",
        "FROM scratch\nARG X_REF={sha}\nCOPY patches/x /q/\n"
        "RUN git clone https://github.com/o/x /src/x && git -C /src/x checkout --detach $X_REF && \\\n"
        "    git -C /src/x apply /q/a.patch /q/b.patch\n",
    ),
]


@pytest.mark.parametrize(("name", "text"), CLONE_FORMS, ids=["containerfile", "script", "arg"])
def test_the_commit_a_build_checks_out_after_cloning_the_upstream_is_the_series_commit(
    tmp_path: Path, name: str, text: str
) -> None:
    from patchkit.importing.queue import recognise

    _queue(tmp_path, "FROM scratch\n")
    (tmp_path / name).write_text(text.format(sha="c" * 40))
    found = recognise(tmp_path)
    (up,) = found.upstreams
    assert (up.name, str(up.commit), up.git) == (
        "x",
        "c" * 40,
        "https://github.com/o/x" + (".git" if "x.git" in text else ""),
    )
    assert not [i for i in found.issues if i[0] in ("queue-commit-unknown", "queue-url-unknown")]


@pytest.mark.parametrize(
    "checkout",
    [
        "git checkout main",  # a branch: it moves
        "git checkout " + "c" * 12,  # abbreviated
        "git checkout " + "c" * 40 + " && git checkout " + "e" * 40,  # two commits: which one holds is not read
        "git checkout $UNSET",
        "",
    ],
)
def test_a_checkout_that_names_no_one_full_commit_leaves_the_commit_unknown(tmp_path: Path, checkout: str) -> None:
    from patchkit.importing.queue import recognise

    _queue(tmp_path, "FROM scratch\n")
    run = (
        f"git clone https://github.com/o/x.git /opt/x && cd /opt/x && {checkout} && "
        if checkout
        else "git clone https://github.com/o/x.git /opt/x && cd /opt/x && "
    )
    (tmp_path / "Containerfile").write_text(f"FROM scratch\nCOPY patches/x /q/\nRUN {run}git apply /q/a.patch\n")
    found = recognise(tmp_path)
    (up,) = found.upstreams
    assert up.commit is None
    assert [i[0] for i in found.issues if i[0] == "queue-commit-unknown"] == ["queue-commit-unknown"]


@pytest.mark.parametrize(
    ("script", "commit"),
    [
        # the fork and the commit in variables, as build scripts keep them at their top
        (
            "X_FORK=https://github.com/o/x.git\nX_SHA={sha}\ngit clone $X_FORK x\ncd x\n"
            "git fetch --depth=1 origin $X_SHA\ngit checkout -q $X_SHA\n",
            "c" * 40,
        ),
        ('X_FORK="https://github.com/o/x.git"\ngit clone "${{X_FORK}}" -b main --depth 1\ncd x\n', None),
        ("git clone -b main --depth 1 https://github.com/o/x.git\ncd x\n", None),  # options that take a value
    ],
)
def test_a_clone_url_in_a_variable_or_after_options_is_the_series_url(
    tmp_path: Path, script: str, commit: str | None
) -> None:
    from patchkit.importing.queue import recognise

    _queue(tmp_path, "FROM scratch\n")
    (tmp_path / "build.sh").write_text(
        "#!/bin/bash\nset -e\n" + script.format(sha="c" * 40) + "for p in ../patches/x/*.patch; do git apply $p; done\n"
    )
    found = recognise(tmp_path)
    (up,) = found.upstreams
    assert (up.git, up.commit and str(up.commit)) == ("https://github.com/o/x.git", commit)
    assert not [i for i in found.issues if i[0] == "queue-url-unknown"]


def test_a_python_here_document_is_read_as_the_inline_program_it_runs(tmp_path: Path) -> None:
    """``python3 - <<'PY'`` runs its body: an edit of a package file in it is an inline patcher, at its line."""
    body = (
        "import vllm, pathlib\np = pathlib.Path(vllm.__file__).parent / 'envs.py'\n"
        "p.write_text(p.read_text().replace('a = 1', 'a = 2'))"
    )
    tabbed = body.replace("\n", "\n\t")
    script = f"#!/bin/bash\necho start\npython3 - <<'PY'\n{body}\nPY\npython3 >/tmp/log <<-EOF\n\t{tabbed}\n\tEOF\n"
    (tmp_path / "fix.sh").write_text(script)
    reading = BuildReader(tmp_path).read([], ["fix.sh"])
    assert reading.unknowns == []
    assert [(f, line) for f, line, _ in reading.inline] == [("fix.sh", 3), ("fix.sh", 8)]
    assert reading.inline[0][2] == reading.inline[1][2] == body


def test_a_python_here_document_inside_a_command_substitution_stays_unknown(tmp_path: Path) -> None:
    """``out=$(python3 - <<PY …)``: what the substitution runs is not read, so its body is not either; said."""
    (tmp_path / "fix.sh").write_text("#!/bin/bash\nout=$(python3 - <<'PY'\nprint(1)\nPY\n)\n")
    reading = BuildReader(tmp_path).read([], ["fix.sh"])
    assert [(u.line, "here-document" in u.reason) for u in reading.unknowns] == [(2, True)]


def test_a_python_here_document_of_several_kib_is_read_whole(tmp_path: Path) -> None:
    """A real inline patcher runs to several KiB: its body, one ``-c`` word to the shell reader, is read, not cut."""
    edits = "".join(f"p.write_text(p.read_text().replace('a{i} = 1', 'a{i} = 2'))\n" for i in range(150))
    body = "import vllm, pathlib\np = pathlib.Path(vllm.__file__).parent / 'envs.py'\n" + edits.rstrip("\n")
    assert len(body) > 8 << 10
    (tmp_path / "fix.sh").write_text(f"#!/bin/bash\npython3 - <<'PY'\n{body}\nPY\n")
    reading = BuildReader(tmp_path).read([], ["fix.sh"])
    assert reading.unknowns == []
    assert [(f, line, code) for f, line, code in reading.inline] == [("fix.sh", 2, body)]
