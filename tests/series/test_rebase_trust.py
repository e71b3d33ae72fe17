"""A series rebase runs the trusted-rebase checks per patch: broken files stop it, interdiffs show what changed."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchkit.core.hashing import sha256_bytes
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.series.queue import MXFP4_V1, Queue, backport, clone_tree, commit, git

UTIL_V1 = b'''"""Paths the runtime uses."""

import os
import sys
from pathlib import Path


def cache():
    return os.environ.get("CACHE", "/tmp")


def argv0():
    return sys.argv[0]


def home():
    return str(Path.home())
'''

# The backport adds a function that reads the environment through ``os``.
UTIL_PATCHED = (
    UTIL_V1
    + b"""

def tmpdir():
    return os.environ.get("TMPDIR", "/tmp")
"""
)

# Upstream stopped using ``os`` and dropped its import, far from the lines the patch adds.
UTIL_V2 = UTIL_V1.replace(b"import os\n", b"").replace(
    b'    return os.environ.get("CACHE", "/tmp")\n', b'    return str(Path("/tmp"))\n'
)

SERVE_V1 = b"from pkg import util\n\n\ndef main():\n    return util.home()\n"
SERVE_PATCHED = SERVE_V1.replace(b"util.home()", b"util.tmpdir()")

PATCHES = ("pkg-0001-tmpdir.patch", "pkg-0002-serve-tmpdir.patch")


@dataclass
class Pkg:
    root: Path
    upstream: Path
    c1: str


@pytest.fixture
def pkg(tmp_path: Path, invoke: Invoke) -> Pkg:
    """An upstream ``pkg`` and a deployment carrying a two-patch series over it, exported with format-patch."""
    up = tmp_path / "up" / "pkg"
    up.mkdir(parents=True)
    git(up, "init", "-q", "-b", "main")
    c1 = commit(up, {"pkg/__init__.py": b"", "pkg/util.py": UTIL_V1, "pkg/serve.py": SERVE_V1}, "Release 1.0")
    root = tmp_path / "deploy"
    out = root / "patches" / "pkg"
    made = {
        PATCHES[0]: backport(up, c1, {"pkg/util.py": UTIL_PATCHED}, "util: tmpdir() (#12)", out, PATCHES[0]),
        PATCHES[1]: backport(
            up, c1, {"pkg/serve.py": SERVE_PATCHED}, "serve: run from the temporary directory (#13)", out, PATCHES[1]
        ),
    }
    listing = "".join(n + "\n" for n in PATCHES).encode()
    (out / "series").write_bytes(listing)
    entries = "".join(
        f'\n[[series.pkg.patches]]\nname = "{n.removesuffix(".patch")}"\nfile = "patches/pkg/{n}"\n'
        f'sha256 = "{sha256_bytes(data)}"\nreason = "backport"\n'
        for n, data in made.items()
    )
    (root / "lockfile.toml").write_text(
        'schema = 1\n\n[deployment]\nname = "pkg"\n\n'
        f'[upstreams.pkg]\ngit = "{up.as_uri()}"\ncommit = "{c1}"\n\n'
        f'[series.pkg]\ncommit = "{c1}"\ntarget = "/usr/lib/python3/dist-packages"\n'
        f'series_file = "patches/pkg/series"\nseries_sha256 = "{sha256_bytes(listing)}"\n' + entries
    )
    run = invoke("lock", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    return Pkg(root, up, c1)


def _repo_files(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".patchkit" not in p.parts)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


WORK = ".patchkit/series-rebase/work/pkg-0001-tmpdir/pkg/util.py"


def test_a_clean_merge_that_drops_a_used_import_is_broken_and_stops(pkg: Pkg, invoke: Invoke, tmp_path: Path) -> None:
    c2 = commit(pkg.upstream, {"pkg/util.py": UTIL_V2}, "Release 1.1: pathlib only")
    before = _repo_files(pkg.root)
    run = invoke("rebase", "--series", "pkg", "--onto", c2, repo=pkg.root)
    assert run.exit_code == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[1].split() == ["pkg-0001-tmpdir", "broken"]
    assert lines[2].startswith("    broken: pkg/util.py:20: name 'os' is used but not defined")
    assert lines[3].split() == ["pkg-0002-serve-tmpdir", "waiting"]
    assert f"  fix {WORK}" in lines
    assert "  or: patchkit rebase --continue --accept-broken pkg-0001-tmpdir --reason TEXT" in lines
    # The merged file waits as it merged (text-clean, no markers); the repository is untouched.
    merged = (pkg.root / WORK).read_bytes()
    assert b"import os" not in merged and b'    return os.environ.get("TMPDIR", "/tmp")\n' in merged
    assert _repo_files(pkg.root) == before
    status = invoke("status", repo=pkg.root)
    assert status.stdout.splitlines()[:2] == [
        f"rebase of series pkg in progress onto {c2[:12]}: waits on pkg-0001-tmpdir",
        f"  {WORK} (broken: fix it there; --continue checks it again)",
    ]

    # Continuing without a fix checks the file again (whole, as a resolution) and stops again.
    again = invoke("rebase", "--continue", "--format", "json", repo=pkg.root)
    assert again.exit_code == 1
    doc = json.loads(again.stdout)
    assert doc["committed"] is False
    assert [(p["name"], p["outcome"]) for p in doc["patches"]] == [("pkg-0001-tmpdir", "broken")]
    (problem,) = doc["patches"][0]["problems"]["pkg/util.py"]
    assert (problem["kind"], problem["line"], problem["name"]) == ("undefined-name", 20, "os")

    (pkg.root / WORK).write_bytes(merged.replace(b"import sys\n", b"import os\nimport sys\n"))
    done = invoke("rebase", "--continue", "--format", "json", repo=pkg.root)
    assert done.exit_code == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["committed"] is True
    assert [(p["name"], p["outcome"], p["problems"]) for p in doc["patches"]] == [
        ("pkg-0001-tmpdir", "clean", {}),
        ("pkg-0002-serve-tmpdir", "clean", {}),
    ]
    # The fix is part of the patch now: git applies it to the new commit and the file imports os again.
    tree = clone_tree(pkg.upstream, c2, tmp_path / "c2")
    for name in PATCHES:
        subprocess.run(["git", "apply", str(pkg.root / "patches/pkg" / name)], cwd=tree, check=True)
    assert b"import os\nimport sys\n" in (tree / "pkg/util.py").read_bytes()
    assert invoke("check", repo=pkg.root).exit_code == 0


def test_accept_broken_commits_the_patch_with_the_reason(pkg: Pkg, invoke: Invoke, tmp_path: Path) -> None:
    c2 = commit(pkg.upstream, {"pkg/util.py": UTIL_V2}, "Release 1.1: pathlib only")
    summary = pkg.root / "rebase.md"
    run = invoke(
        "rebase", "--series", "pkg", "--onto", c2, "--accept-broken", "pkg-0001-tmpdir",
        "--reason", "os comes back in 1.2", "--summary", str(summary), "--format", "json", repo=pkg.root,
    )  # fmt: skip
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert doc["committed"] is True
    first = doc["patches"][0]
    assert (first["outcome"], first["accepted_broken"]) == ("broken", "os comes back in 1.2")
    text = summary.read_text()
    assert "- `pkg-0001-tmpdir`: **accepted as broken**: os comes back in 1.2\n" in text
    assert "  - `pkg/util.py:20`: name 'os' is used but not defined" in text
    lock = loads((pkg.root / "lockfile.toml").read_text())
    assert str(lock.series[0].commit) == c2
    assert not (pkg.root / ".patchkit/series-rebase").exists()


def test_accept_broken_of_a_patch_that_is_not_broken_is_refused(pkg: Pkg, invoke: Invoke) -> None:
    before = _repo_files(pkg.root)
    c2 = commit(pkg.upstream, {"README": b"pkg\n"}, "docs")
    clean = invoke(
        "rebase", "--series", "pkg", "--onto", c2, "--accept-broken", "pkg-0001-tmpdir", "--reason", "x", repo=pkg.root
    )
    assert clean.exit_code == 2
    assert "--accept-broken: not a broken patch: pkg-0001-tmpdir" in clean.stderr
    unknown = invoke(
        "rebase", "--series", "pkg", "--onto", c2, "--accept-broken", "nope", "--reason", "x", repo=pkg.root
    )
    assert unknown.exit_code == 2
    assert "series 'pkg' has no patch nope" in unknown.stderr
    assert _repo_files(pkg.root) == before
    assert not (pkg.root / ".patchkit/series-rebase").exists()
    # Accepting another patch does not let the broken one through.
    c3 = commit(pkg.upstream, {"pkg/util.py": UTIL_V2}, "Release 1.1: pathlib only")
    run = invoke(
        "rebase", "--series", "pkg", "--onto", c3, "--accept-broken", "pkg-0002-serve-tmpdir",
        "--reason", "x", repo=pkg.root,
    )  # fmt: skip
    assert run.exit_code == 1
    assert run.stdout.splitlines()[1].split() == ["pkg-0001-tmpdir", "broken"]
    assert _repo_files(pkg.root) == before


def test_a_clean_series_rebase_has_no_problem_and_no_interdiff(pkg: Pkg, invoke: Invoke) -> None:
    c2 = commit(pkg.upstream, {"pkg/util.py": b"# header\n" + UTIL_V1}, "Release 1.1")
    run = invoke("rebase", "--series", "pkg", "--onto", c2, "--format", "json", repo=pkg.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert [(p["outcome"], p["problems"], p["interdiffs"]) for p in doc["patches"]] == [
        ("clean", {}, {}),
        ("clean", {}, {}),
    ]


def test_the_interdiff_of_a_resolved_patch_shows_exactly_the_changed_hunk_lines(
    queue: Queue, invoke: Invoke, tmp_path: Path
) -> None:
    c2 = commit(
        queue.vllm,
        {"vllm/model_executor/layers/quant/mxfp4.py": MXFP4_V1.replace(b'"triton"', b'"marlin"')},
        "Release 0.27.0",
    )
    assert invoke("rebase", "--series", "vllm", "--onto", c2, repo=queue.root).exit_code == 1
    work = queue.root / (
        ".patchkit/series-rebase/work/vllm-48303-mxfp4-flashinfer-cutlass/vllm/model_executor/layers/quant/mxfp4.py"
    )
    # The resolution keeps the patch's check but returns another backend name.
    resolved = MXFP4_V1.replace(
        b'    return "triton"\n',
        b'    if device.has_flashinfer:\n        return "flashinfer-cutlass-v2"\n    return "marlin"\n',
    )
    work.write_bytes(resolved)
    summary = tmp_path / "summary.md"
    done = invoke("rebase", "--continue", "--summary", str(summary), repo=queue.root)
    assert done.exit_code == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("    interdiff vllm/model_executor/layers/quant/mxfp4.py: 1 hunk -> 1; 1 stretch changed")
    assert lines[at + 1 : at + 5] == [
        "      @@ old -6,6 +6,8 / new -6,6 +6,8 @@",
        "       +    if device.has_flashinfer:",
        '      -+        return "flashinfer-cutlass"',
        '      ++        return "flashinfer-cutlass-v2"',
    ]
    assert not lines[at + 5].startswith("      ")
    # Files whose hunks only moved (tests, requirements) get no interdiff.
    assert [ln for ln in lines if "interdiff " in ln] == [lines[at]]
    text = summary.read_text()
    assert (
        "- `vllm-48303-mxfp4-flashinfer-cutlass` `vllm/model_executor/layers/quant/mxfp4.py`: "
        "1 hunk -> 1; 1 stretch changed\n" in text
    )
    assert '  -+        return "flashinfer-cutlass"\n  ++        return "flashinfer-cutlass-v2"\n' in text


def test_the_interdiff_of_a_partly_upstreamed_patch_shows_the_lines_that_went(queue: Queue, invoke: Invoke) -> None:
    from tests.series.queue import REQS_PATCHED

    c2 = commit(queue.vllm, {"requirements/cuda.txt": REQS_PATCHED}, "bump")
    run = invoke("rebase", "--series", "vllm", "--onto", c2, "--format", "json", repo=queue.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    first = json.loads(run.stdout)["patches"][0]
    assert first["outcome"] == "partially-upstreamed"
    assert list(first["interdiffs"]) == ["requirements/cuda.txt"]
    found = first["interdiffs"]["requirements/cuda.txt"]
    assert (found["old_hunks"], found["new_hunks"], found["shrank"]) == (1, 0, True)
    assert found["lines"] == [
        "1 hunk -> 0: the patch shrank (part of it went upstream, or was lost)",
        "@@ old -1,2 +1,3 / new - @@",
        "-+flashinfer-python==0.5.2",
    ]


def test_accept_broken_at_continue_commits_the_stopped_patch(pkg: Pkg, invoke: Invoke) -> None:
    c2 = commit(pkg.upstream, {"pkg/util.py": UTIL_V2}, "Release 1.1: pathlib only")
    assert invoke("rebase", "--series", "pkg", "--onto", c2, repo=pkg.root).exit_code == 1
    no_reason = invoke("rebase", "--continue", "--accept-broken", "pkg-0001-tmpdir", repo=pkg.root)
    assert no_reason.exit_code == 2
    assert "--accept-broken needs --reason TEXT" in no_reason.stderr
    run = invoke(
        "rebase", "--continue", "--accept-broken", "pkg-0001-tmpdir", "--reason", "fixed in the next backport",
        repo=pkg.root,
    )  # fmt: skip
    assert run.exit_code == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[1].split() == ["pkg-0001-tmpdir", "broken"]
    assert "    accepted as broken: fixed in the next backport" in lines
    assert lines[lines.index("    accepted as broken: fixed in the next backport") + 1].split()[:2] == [
        "pkg-0002-serve-tmpdir",
        "clean",
    ]
    # Committed as merged: the regenerated patch carries the file without the import.
    tree_patch = (pkg.root / "patches/pkg" / PATCHES[0]).read_bytes()
    assert b'+    return os.environ.get("TMPDIR", "/tmp")\n' in tree_patch
    assert not (pkg.root / ".patchkit/series-rebase").exists()
    accepted = loads((pkg.root / "lockfile.toml").read_text()).series[0].patches[0].accepted
    assert accepted is not None
    assert (accepted.reason, accepted.problems) == ("fixed in the next backport", ("undefined-name os",))


def _accepted_notes(invoke: Invoke, root: Path) -> tuple[int, list[str]]:
    r = invoke("check", "--format", "json", repo=root)
    return r.exit_code, [f["message"] for f in json.loads(r.stdout)["findings"] if f["code"] == "accepted-broken"]


def test_an_accepted_broken_patch_is_recorded_noted_while_it_holds_and_dropped_once_fixed(
    pkg: Pkg, invoke: Invoke, tmp_path: Path
) -> None:
    c2 = commit(pkg.upstream, {"pkg/util.py": UTIL_V2}, "Release 1.1: pathlib only")
    run = invoke(
        "rebase", "--series", "pkg", "--onto", c2, "--accept-broken", "pkg-0001-tmpdir",
        "--reason", "os comes back in 1.2", repo=pkg.root,
    )  # fmt: skip
    assert run.exit_code == 0, run.stdout + run.stderr
    first, second = loads((pkg.root / "lockfile.toml").read_text()).series[0].patches
    assert first.accepted is not None and second.accepted is None
    assert (first.accepted.reason, first.accepted.problems) == ("os comes back in 1.2", ("undefined-name os",))
    written = (pkg.root / "lockfile.toml").read_text()
    assert (
        '[series.pkg.patches.accepted]\nreason = "os comes back in 1.2"\nproblems = [\n    "undefined-name os",\n]\n'
        in (written)
    )
    note = (
        "'pkg-0001-tmpdir' of series 'pkg' was committed broken (rebase --accept-broken: os comes back in 1.2); "
        "still: undefined-name os"
    )
    assert _accepted_notes(invoke, pkg.root) == (0, [note])
    assert f"note: series.pkg.patches[pkg-0001-tmpdir].accepted: {note}" in invoke("check", repo=pkg.root).stdout

    # The patch fixed (it imports os again), re-pinned: the problem is gone, and so is the note.
    merged = UTIL_V2 + UTIL_PATCHED[len(UTIL_V1) :]
    fixed = merged.replace(b"import sys\n", b"import os\nimport sys\n")
    made = backport(pkg.upstream, c2, {"pkg/util.py": fixed}, "util: tmpdir() (#12)", tmp_path / "fix", "v2.patch")
    (pkg.root / "patches/pkg" / PATCHES[0]).write_bytes(made)
    assert invoke("lock", repo=pkg.root).exit_code == 0
    assert _accepted_notes(invoke, pkg.root) == (0, [])
    # The record stays as the decision made.
    assert loads((pkg.root / "lockfile.toml").read_text()).series[0].patches[0].accepted is not None


def test_an_accepted_broken_patch_is_noted_as_accepted_when_the_upstream_cannot_be_read(
    pkg: Pkg, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c2 = commit(pkg.upstream, {"pkg/util.py": UTIL_V2}, "Release 1.1: pathlib only")
    run = invoke(
        "rebase", "--series", "pkg", "--onto", c2, "--accept-broken", "pkg-0001-tmpdir", "--reason", "later",
        repo=pkg.root,
    )  # fmt: skip
    assert run.exit_code == 0, run.stdout + run.stderr
    # Neither the upstream repository nor a cached copy of it: the files cannot be read offline.
    pkg.upstream.rename(tmp_path / "elsewhere")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "empty-cache"))
    assert _accepted_notes(invoke, pkg.root) == (
        0,
        ["'pkg-0001-tmpdir' of series 'pkg' was committed broken (rebase --accept-broken: later); "
         "accepted: undefined-name os"],
    )  # fmt: skip
