"""``check`` repeats what import could not read in a hand-kept build, while it holds, and drops it once fixed.

The repositories are patch queues written the way the field writes them
(tests/importing/test_queue_scripts.py): ``git format-patch`` backports under
``patches/vllm/``, a JSON stack lock, and a build script or Containerfile
that applies them; and patcher scripts a Containerfile runs
(tests/importing/test_patchers.py). Each class of problem is tried in each
spelling import knows: import reports it, check reports the same thing at the
same place, and after the file is fixed (and re-pinned with ``patchkit lock``,
as an intended edit is) check no longer does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.check.build_steps import build_steps, imported
from tests.check.memory import sha, state_of
from tests.conftest import Invoke
from tests.importing.test_patchers import FORMS, UNKNOWN
from tests.importing.test_queue_scripts import DIGEST, UNREADABLE, A, B, C, _repo

CODES = {"build-step-unknown", "queue-apply-unknown", "queue-strip", "patcher-target-unknown", "patcher-not-anchored"}
CODES |= {"transformer-not-run", "patcher-outside-image"}
READABLE = f"#!/bin/bash\nset -e\nfor p in {B} {A} {C}; do git apply -p1 patches/vllm/$p; done\n"


def _imported(root: Path, invoke: Invoke) -> list[tuple[str, str, str, int | None]]:
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert invoke("sums", repo=root).exit_code == 0
    return sorted(
        (i["kind"], i["severity"], i["file"], i["line"])
        for i in json.loads(run.stdout)["import"]["issues"]
        if i["kind"] in CODES
    )


def _checked(root: Path, invoke: Invoke) -> tuple[int, list[tuple[str, str, str, int | None]]]:
    run = invoke("check", "--format", "json", repo=root)
    found = json.loads(run.stdout)["findings"]
    return run.exit_code, sorted((f["code"], f["severity"], f["file"], f["line"]) for f in found if f["code"] in CODES)


def _fixed(root: Path, invoke: Invoke, rel: str, text: str) -> tuple[int, list[tuple[str, str, str, int | None]]]:
    (root / rel).write_text(text)
    relock = invoke("lock", repo=root)
    assert relock.exit_code == 0, relock.stdout + relock.stderr
    return _checked(root, invoke)


@pytest.mark.parametrize("form", sorted(UNREADABLE))
def test_an_unreadable_apply_step_stays_a_note_until_it_is_written_readably(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    root, _, _ = _repo(tmp_path)
    text, line = UNREADABLE[form]
    (root / "build.sh").write_text("#!/bin/bash\nset -e\n" + text)
    said = _imported(root, invoke)
    step = ("build-step-unknown", "note", "build.sh", 2 + line)
    assert said == [step] + [("queue-apply-unknown", "note", "build.sh", 2 + line)] * 3
    code, found = _checked(root, invoke)
    assert (code, found) == (0, said)  # notes: the check passes, and says it again
    assert _fixed(root, invoke, "build.sh", READABLE) == (0, [])


def test_a_step_still_unreadable_after_an_edit_is_still_reported_at_its_new_line(
    tmp_path: Path, invoke: Invoke
) -> None:
    root, _, _ = _repo(tmp_path)
    text, _ = UNREADABLE["xargs"]
    (root / "build.sh").write_text("#!/bin/bash\nset -e\n" + text)
    _imported(root, invoke)
    code, found = _fixed(root, invoke, "build.sh", "#!/bin/bash\nset -e\ncd /opt/vllm\n\n" + text)
    assert code == 0 and ("build-step-unknown", "note", "build.sh", 5) in found


STRIPS = {
    # Two -p levels for one series: which one the series records is a guess.
    "mixed-levels": (
        f"#!/bin/sh\nset -e\ngit apply -p1 patches/vllm/{B}\ngit apply -p2 patches/vllm/{A}\n"
        f"git apply -p1 patches/vllm/{C}\n",
        [("queue-strip", "error", "patches/vllm", None)],
    ),
    # patch(1) without -p strips every directory: the series records -p1.
    "patch-without-p": (
        f'#!/bin/sh\nset -e\nfor p in {B} {A} {C}; do\n  patch -d /opt/vllm < "patches/vllm/$p"\ndone\n',
        [("queue-strip", "error", "build.sh", 4)],
    ),
}


@pytest.mark.parametrize("form", sorted(STRIPS))
def test_a_series_applied_with_unclear_strip_levels_is_reported_until_one_level_is_used(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    root, _, _ = _repo(tmp_path)
    text, want = STRIPS[form]
    (root / "build.sh").write_text(text)
    assert _imported(root, invoke) == want
    code, found = _checked(root, invoke)
    assert (code, found) == (1, want)
    assert _fixed(root, invoke, "build.sh", READABLE) == (0, [])


ANCHORED = FORMS["path-parent"][0]


def _patcher_repo(tmp_path: Path, text: str) -> Path:
    root, _, _ = _repo(tmp_path)
    (root / "patchers").mkdir()
    (root / "patchers/fix.py").write_text(text)
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\nCOPY patches/vllm /tmp/q\n"
        "RUN for p in /tmp/q/*.patch; do patch -p1 -d /usr/local/lib/python3.12/site-packages < $p; done\n"
        "COPY patchers/ /opt/patchers/\nRUN python3 /opt/patchers/fix.py\n"
    )
    return root


@pytest.mark.parametrize("form", sorted(UNKNOWN))
def test_a_patcher_target_built_at_run_time_stays_a_note_until_the_path_is_readable(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    head, name = UNKNOWN[form]
    text = head + f"s = open({name}).read()\nassert OLD in s\nopen({name}, 'w').write(s.replace(OLD, NEW))\n"
    root = _patcher_repo(tmp_path, text)
    lines = head.count("\n")
    want = [("patcher-target-unknown", "note", "patchers/fix.py", n) for n in (lines + 1, lines + 3)]
    assert _imported(root, invoke) == want
    assert _checked(root, invoke) == (0, want)
    assert _fixed(root, invoke, "patchers/fix.py", ANCHORED) == (0, [])


def test_a_patcher_that_replaces_unchecked_text_fails_check_until_it_checks_its_anchor(
    tmp_path: Path, invoke: Invoke
) -> None:
    unchecked = ANCHORED.replace('assert OLD in src, "anchor moved"\n', "")
    root = _patcher_repo(tmp_path, unchecked)
    want = [("patcher-not-anchored", "error", "patchers/fix.py", None)]
    assert _imported(root, invoke) == want
    assert _checked(root, invoke) == (1, want)
    assert _fixed(root, invoke, "patchers/fix.py", ANCHORED) == (0, [])


UNANCHORED = b"import vllm, pathlib\np = pathlib.Path(vllm.__file__).parent / 'envs.py'\n"
UNANCHORED += b"p.write_text(p.read_text().replace('a', 'b'))\n"
TRANSFORMER = f"""\
schema = 1

[deployment]
name = "d"

[[patches]]
name = "fix"
kind = "transformer"
file = "patches/fix.py"
sha256 = "{sha(UNANCHORED)}"
target = "/opt/fix.py"
"""
DOCKERFILE = b"FROM x\n"
BUILD_ARTIFACT = f"""
[[artifacts]]
name = "dockerfile"
file = "Dockerfile"
sha256 = "{sha(DOCKERFILE)}"
note = "image build"
"""


def test_a_deployment_patchkit_built_itself_has_its_transformers_read_but_not_its_build() -> None:
    """Its transformers are patcher scripts like any other: an unchecked replace is an error there too; its build
    files are patchkit's own and are not read for hand-kept apply steps."""
    state = state_of(TRANSFORMER, {"patches/fix.py": UNANCHORED})
    assert not imported(state.lock)
    assert [(f.code, f.file, f.severity) for f in build_steps(state)] == [
        ("patcher-not-anchored", "patches/fix.py", "error")
    ]
    adopted = state_of(TRANSFORMER + BUILD_ARTIFACT, {"patches/fix.py": UNANCHORED, "Dockerfile": DOCKERFILE})
    assert imported(adopted.lock)
    assert [(f.code, f.file, f.severity) for f in build_steps(adopted)] == [
        ("patcher-not-anchored", "patches/fix.py", "error")
    ]


def test_the_shipped_transformer_form_is_no_finding_in_a_deployment_patchkit_built() -> None:
    shipped = (Path(__file__).resolve().parents[2] / "patches/transformers/10-aiter-private-merge.py").read_bytes()
    lock = TRANSFORMER.replace(sha(UNANCHORED), sha(shipped))
    assert build_steps(state_of(lock, {"patches/fix.py": shipped})) == []
    unchecked = shipped.replace(b"    if len(old) != 1 or new:\n        return None\n", b"")
    assert unchecked != shipped
    lock = TRANSFORMER.replace(sha(UNANCHORED), sha(unchecked))
    assert [f.code for f in build_steps(state_of(lock, {"patches/fix.py": unchecked}))] == ["patcher-not-anchored"]


def test_the_shipped_deployment_has_none_of_these_findings(invoke: Invoke) -> None:
    root = Path(__file__).resolve().parents[2]
    run = invoke("check", "--format", "json", repo=root)
    assert not any(f["code"] in CODES for f in json.loads(run.stdout)["findings"]), run.stdout


def test_in_a_compose_repository_a_patch_file_an_unreadable_step_may_apply_stays_unknown_until_read(
    tmp_path: Path, invoke: Invoke
) -> None:
    from patchkit.core import diffs
    from tests.importing.test_relied_on import SUMS_MOUNTS, build

    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"])
    (root / "patches/extra").mkdir()
    (root / "patches/extra/0001-f.patch").write_bytes(diffs.make(b"a = 1\n", b"a = 2\n", "a/vllm/f.py", "b/vllm/f.py"))
    containerfile = f"FROM vllm/vllm-openai@{DIGEST}\nCOPY patches/extra /q\n"
    (root / "Containerfile").write_text(
        containerfile + "RUN for p in $(ls /q/*.patch | sort); do patch -p1 < $p; done\n"
    )
    want = [("build-step-unknown", "note", "Containerfile", 3), ("queue-apply-unknown", "note", "Containerfile", 3)]
    assert _imported(root, invoke) == want
    assert _checked(root, invoke) == (0, want)
    # Written as a loop over the directory's glob, the step is read: nothing unknown is left.
    fixed = containerfile + "RUN for p in /q/*.patch; do patch -p1 -d /usr/lib/python3/dist-packages < $p; done\n"
    assert _fixed(root, invoke, "Containerfile", fixed) == (0, [])


def test_a_build_script_that_cannot_be_read_safely_is_said_never_a_crash(tmp_path: Path, invoke: Invoke) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "build.sh").write_text(READABLE)
    _imported(root, invoke)
    outside = tmp_path / "outside.sh"
    outside.write_text("#!/bin/sh\n")
    (root / "apply.sh").symlink_to(outside)
    run = invoke("check", "--format", "json", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    (found,) = [f for f in json.loads(run.stdout)["findings"] if f["code"] in CODES]
    assert (found["code"], found["severity"], found["file"]) == ("build-step-unknown", "note", "apply.sh")
    assert "is a symlink" in found["message"] and "no build file is read" in found["message"]


# A transformer mounted where nothing runs it, then each way of running it: named by the mounted entrypoint,
# by the compose command, or by the entrypoint's glob loop over its directory.
RUNS_IT = {
    "entrypoint-names-it": ("entrypoint.sh", "python3 /opt/elsewhere/60-stray.py || exit 1\n"),
    "entrypoint-loops-over-its-directory": ("entrypoint.sh", "for t in /opt/elsewhere/*.py; do python3 $t; done\n"),
    "compose-command-names-it": ("compose.yaml", None),
}


@pytest.mark.parametrize("how", sorted(RUNS_IT))
def test_a_mounted_transformer_nothing_runs_fails_check_until_something_runs_it(
    tmp_path: Path, invoke: Invoke, how: str
) -> None:
    from tests.importing.test_patchers_deployed import SHIPPED, _deployment

    root = _deployment(tmp_path / "deploy", {"10-aiter-private-merge.py": SHIPPED.read_text()}, not_run="60-stray.py")
    said = _imported(root, invoke)
    assert said == [("transformer-not-run", "error", "compose.yaml", 8)]
    assert _checked(root, invoke) == (1, said)
    rel, line = RUNS_IT[how]
    text = (root / rel).read_text()
    if line is None:  # the compose command runs it before the entrypoint
        text = text.replace("    volumes:\n", '    command: ["python3", "/opt/elsewhere/60-stray.py"]\n    volumes:\n')
    else:
        text = text.replace("exec vllm", line + "exec vllm")
    assert _fixed(root, invoke, rel, text) == (0, [])


def test_a_transformer_directory_mounted_where_nothing_runs_it_is_reported_at_the_mount(
    tmp_path: Path, invoke: Invoke
) -> None:
    from tests.importing.test_patchers_deployed import ENTRYPOINT, SHIPPED, _deployment

    root = _deployment(tmp_path / "deploy", {"10-aiter-private-merge.py": SHIPPED.read_text()})
    compose = (root / "compose.yaml").read_text()
    (root / "compose.yaml").write_text(
        compose.replace(
            "./patches/transformers/10-aiter-private-merge.py:/opt/deploy/transformers/10-aiter-private-merge.py",
            "./patches/transformers:/opt/other",
        )
    )
    said = _imported(root, invoke)
    assert said == [("transformer-not-run", "error", "compose.yaml", 7)]
    assert _checked(root, invoke) == (1, said)
    fixed = ENTRYPOINT.replace("/opt/deploy/transformers", "/opt/other")
    assert _fixed(root, invoke, "entrypoint.sh", fixed) == (0, [])


def test_a_patcher_a_queues_build_runs_from_outside_the_image_is_reported_until_it_runs_inside(
    tmp_path: Path, invoke: Invoke
) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "patchers").mkdir()
    (root / "patchers/fix_mla.py").write_text(FORMS["path-parent"][0])
    containerfile = (
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\nCOPY patches/vllm /tmp/q\n"
        "RUN for p in /tmp/q/*.patch; do patch -p1 -d /usr/local/lib/python3.12/site-packages < $p; done\n"
    )
    (root / "Containerfile").write_text(containerfile)
    host = "#!/bin/sh\nset -e\npython3 patchers/fix_mla.py\ndocker build -t x .\n"
    (root / "build.sh").write_text(host)
    said = _imported(root, invoke)
    assert said == [("patcher-outside-image", "error", "build.sh", 3)]
    assert _checked(root, invoke) == (1, said)
    # Run in the image instead, where it has a path: nothing is outside any more.
    (root / "Containerfile").write_text(
        containerfile + "COPY patchers/ /opt/patchers/\nRUN python3 /opt/patchers/fix_mla.py\n"
    )
    assert _fixed(root, invoke, "build.sh", host.replace("python3 patchers/fix_mla.py\n", "")) == (0, [])
