"""When a grep checks an in-place edit, and what an edit of a computed path is.

A grep checks an edit when a miss fails the build: ``grep -q OLD f && sed -i
… f`` as the step's last command (or before ``|| exit 1``), ``if grep …; then
sed …; else exit 1; fi``, or a grep the script stops at (``set -e``, ``|| exit
1``). ``grep && sed; more``, ``if grep; then sed; fi`` and ``grep; sed`` (a
``RUN`` line runs ``/bin/sh -c`` without ``-e``) succeed with the text moved,
as dash and bash show. An edit of a path the build computes is reported as
unanchored when its words still tell the package file, else as unknown; a
computed path nothing points into a Python tree is no package file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.importing import queue
from patchkit.importing.shell import BuildReader
from tests.conftest import Invoke
from tests.importing.conftest import write

SITE = "/usr/local/lib/python3.12/site-packages"
DIGEST = "sha256:" + "7b" * 32
F = f"{SITE}/vllm/envs.py"
SED = f"sed -i 's/A = 1/A = 2/' {F}"
GREP = f"grep -q 'A = 1' {F}"

# A RUN line: (command, whether the edit is reported unchecked)
RUN_FORMS = {
    "and": (f"{GREP} && {SED}", False),
    "and-then-more": (f"{GREP} && {SED} && echo done", False),
    "and-then-semicolon": (f"{GREP} && {SED}; echo done", True),
    "set-e-and-then-semicolon": (f"set -e; {GREP} && {SED}; echo done", True),
    "and-last-after-more": (f"echo start; {GREP} && {SED}", False),
    "and-or-exit-then-more": (f"{GREP} && {SED} || exit 1; echo done", False),
    "and-or-group-exit-then-more": (f"{GREP} && {SED} || {{ echo moved; exit 1; }}; echo done", False),
    "and-or-true-last": (f"{GREP} && {SED} || true", True),
    "set-e-group-and-then-more": (f"set -e; {{ {GREP} && {SED}; }}; echo done", True),
    "set-e-group-in-and-list": (f"set -e; {{ {GREP}; {SED}; }} && echo done", True),
    "set-e-if-true-then-and": (f"set -e; if true; then {GREP} && {SED}; fi; echo done", True),
    "for-loop-and-last": (f"for i in 1; do {GREP} && {SED}; done", False),
    "for-loop-and-then-more": (f"for i in 1; do {GREP} && {SED}; done; echo done", True),
    "function-and-then-more": (f"fix() {{ {GREP} && {SED}; }}; fix; echo done", True),
    "function-and-last": (f"fix() {{ {GREP} && {SED}; }}; fix", False),
    "set-e-function-and-then-more": (f"set -e; fix() {{ {GREP} && {SED}; }}; fix; echo done", False),
    "semicolon": (f"{GREP}; {SED}", True),
    "or-true-then-sed": (f"{GREP} || true; {SED}", True),
    "or-exit": (f"{GREP} || exit 1; {SED}", False),
    "or-group-exit": (f"{GREP} || {{ echo moved; exit 1; }}; {SED}", False),
    "or-false": (f"{GREP} || false; {SED}", True),
    "set-e-or-false": (f"set -e; {GREP} || false; {SED}", False),
    "sed-after-or": (f"{GREP} || {SED}", True),
    "set-e-then-semicolon": (f"set -e; {GREP}; {SED}", False),
    "set-eu-o-pipefail": (f"set -euo pipefail; {GREP}; {SED}", False),
    "set-o-errexit": (f"set -o errexit; {GREP}; {SED}", False),
    "set-e-but-grep-or-true": (f"set -e; {GREP} || true; {SED}", True),
    "set-e-off-again": (f"set -e; set +e; {GREP}; {SED}", True),
    "if-grep-then": (f"if {GREP}; then {SED}; fi", True),
    "if-grep-then-more": (f"if {GREP}; then {SED}; fi; echo done", True),
    "if-grep-else-exit": (f"if {GREP}; then {SED}; else exit 1; fi; echo done", False),
    "if-grep-else-echo-exit": (f"if {GREP}; then {SED}; else echo moved; exit 1; fi; echo done", False),
    "if-grep-else-exit-0": (f"if {GREP}; then {SED}; else exit 0; fi", True),
    "if-grep-else-false-then-more": (f"if {GREP}; then {SED}; else false; fi; echo done", True),
    "if-grep-else-false-last": (f"if {GREP}; then {SED}; else false; fi", False),
    "set-e-if-grep-else-false": (f"set -e; if {GREP}; then {SED}; else false; fi; echo done", False),
    "if-grep-elif": (f"if {GREP}; then {SED}; elif true; then echo no; else exit 1; fi", True),
    "if-grep-else": (f"if {GREP}; then echo ok; else {SED}; fi", True),
    "if-other-condition": (f"if [ -f /x ]; then {SED}; fi", True),
    "if-not-grep": (f"if ! {GREP}; then {SED}; fi", True),
    "grep-v": (f"grep -qv 'A = 1' {F} && {SED}", True),
    "and-then-semicolon-second-sed": (f"{GREP} && {SED}; {SED.replace('A = 1', 'B = 1')}", True),
    "while-loop-body": (f"while false; do {SED}; done", True),
    "group-after-and": (f"{GREP} && {{ echo editing; {SED}; }}", False),
}


@pytest.mark.parametrize("form", sorted(RUN_FORMS))
def test_a_grep_checks_an_edit_only_when_the_edit_runs_after_it_found_the_text(tmp_path: Path, form: str) -> None:
    command, reported = RUN_FORMS[form]
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nRUN {command}\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], [])
    assert [(e.line, e.upstream) for e in reading.edits] == ([(2, "vllm/envs.py")] if reported else [])
    assert reading.unknowns == []


@pytest.mark.parametrize("shell", ["/bin/dash", "/bin/bash"])
def test_the_forms_read_as_unchecked_are_those_a_real_shell_passes_when_the_text_has_moved(
    tmp_path: Path, shell: str
) -> None:
    """The reading agrees with dash (what ``RUN`` runs as /bin/sh) and bash: an edit is reported exactly when
    the command, run on a file without the grep's text, still succeeds."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    moved = tmp_path / "envs.py"
    passed = {}
    for form, (command, _) in RUN_FORMS.items():
        moved.write_text("A = 0\n")
        run = subprocess.run(
            [shell, "-c", command.replace(F, str(moved))], cwd=tmp_path, capture_output=True, check=False, timeout=10
        )
        passed[form] = run.returncode == 0
    assert passed == {form: reported for form, (_, reported) in RUN_FORMS.items()}


SCRIPTS = {
    "newline": (f"#!/bin/sh\n{GREP}\n{SED}\n", True),
    "set-e-at-top": (f"#!/bin/bash\nset -e\n{GREP}\n{SED}\n", False),
    "set-euo-pipefail-at-top": (f"#!/bin/bash\nset -euo pipefail\n{GREP}\n{SED}\n", False),
    "shebang-e": (f"#!/bin/bash -e\n{GREP}\n{SED}\n", False),
    "or-exit-line": (f"#!/bin/sh\n{GREP} || exit 1\necho patching\n{SED}\n", False),
    "and-across-lines": (f"#!/bin/sh\n{GREP} &&\n  {SED}\n", False),
    "set-positional-dash-e": (f"#!/bin/sh\nset -- -e\n{GREP}\n{SED}\n", True),
}


@pytest.mark.parametrize("form", sorted(SCRIPTS))
def test_a_script_s_grep_checks_its_edit_as_the_shell_runs_it(tmp_path: Path, form: str) -> None:
    text, reported = SCRIPTS[form]
    write(tmp_path, "docker/fix.sh", text)
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nCOPY docker/fix.sh /tmp/\nRUN /tmp/fix.sh\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], ["docker/fix.sh"])
    line = text.rstrip("\n").count("\n") + 1
    assert [(e.file, e.line) for e in reading.edits] == ([("docker/fix.sh", line)] if reported else [])


# A script: (its text, the line of the edit reported unchecked or None, how RUN runs it)
SCRIPT_STATUS = {
    "and-then-line": (f"#!/bin/sh\n{GREP} && {SED}\necho done\n", 2, "/tmp/fix.sh"),
    "set-e-and-then-line": (f"#!/bin/sh\nset -e\n{GREP} && {SED}\necho done\n", 3, "/tmp/fix.sh"),
    "and-last-line": (f"#!/bin/sh\necho start\n{GREP} && {SED}\n", None, "/tmp/fix.sh"),
    "and-last-line-run-then-more": (f"#!/bin/sh\n{GREP} && {SED}\n", 2, "/tmp/fix.sh; echo done"),
    "and-last-line-run-or-true": (f"#!/bin/sh\n{GREP} && {SED}\n", 2, "/tmp/fix.sh || true"),
    "and-last-line-run-and-more": (f"#!/bin/sh\n{GREP} && {SED}\n", None, "/tmp/fix.sh && echo done"),
    "if-then-fi": (f"#!/bin/sh\nif {GREP}; then\n  {SED}\nfi\n", 3, "/tmp/fix.sh"),
    "set-e-grep-run-then-more": (f"#!/bin/sh\nset -e\n{GREP}\n{SED}\n", 4, "/tmp/fix.sh; echo done"),
    "or-exit-run-or-true": (f"#!/bin/sh\n{GREP} || exit 1\n{SED}\n", 3, "/tmp/fix.sh || true"),
    "or-exit-run-and-more": (f"#!/bin/sh\n{GREP} || exit 1\n{SED}\n", None, "/tmp/fix.sh && echo done"),
    "set-e-run-by-set-e-then-more": (f"#!/bin/sh\nset -e\n{GREP}\n{SED}\n", None, "set -e; /tmp/fix.sh; echo done"),
    "if-else-exit": (
        f"#!/bin/sh\nif {GREP}; then\n  {SED}\nelse\n  echo moved >&2\n  exit 1\nfi\necho done\n",
        None,
        "/tmp/fix.sh",
    ),
}


@pytest.mark.parametrize("form", sorted(SCRIPT_STATUS))
def test_a_script_s_and_list_checks_its_edit_only_when_the_build_fails_on_its_status(tmp_path: Path, form: str) -> None:
    """``grep && sed`` fails the build only as the script's last command, and a grep the script stops at
    only when the RUN line fails on the script's status."""
    text, line, run = SCRIPT_STATUS[form]
    write(tmp_path, "docker/fix.sh", text)
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nCOPY docker/fix.sh /tmp/\nRUN {run}\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], ["docker/fix.sh"])
    assert [(e.file, e.line) for e in reading.edits] == ([("docker/fix.sh", line)] if line else [])


def test_a_grep_in_another_run_line_checks_nothing(tmp_path: Path) -> None:
    """Each RUN line is its own shell: a grep in one does not stop the sed in the next."""
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nRUN {GREP}\nRUN {SED}\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], [])
    assert [e.line for e in reading.edits] == [3]


def test_a_shell_with_e_makes_a_plain_grep_a_check(tmp_path: Path) -> None:
    write(
        tmp_path,
        "Dockerfile",
        f'FROM rocm/vllm@{DIGEST}\nSHELL ["/bin/bash", "-eo", "pipefail", "-c"]\nRUN {GREP}; {SED}\n',
    )
    assert BuildReader(tmp_path).read(["Dockerfile"], []).edits == []


@pytest.mark.parametrize(("run", "reported"), [("bash -e /tmp/fix.sh", False), ("bash /tmp/fix.sh", True)])
def test_a_script_run_by_a_shell_with_e_stops_at_a_failing_grep(tmp_path: Path, run: str, reported: bool) -> None:
    """``bash -e x.sh`` runs it under set -e; ``bash x.sh`` does not read its ``#!/bin/bash -e`` line."""
    write(tmp_path, "docker/fix.sh", f"#!/bin/bash -e\n{GREP}\n{SED}\n")
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nCOPY docker/fix.sh /tmp/\nRUN {run}\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], ["docker/fix.sh"])
    assert [e.line for e in reading.edits] == ([3] if reported else [])


PY_DIR = "$(python -c 'import vllm,os;print(os.path.dirname(vllm.__file__))')"
COMPUTED = {
    # command -> (unanchored upstream files, unknown notes)
    "python-dirname-of-package": (f"sed -i s/a/b/ {PY_DIR}/config.py", ["vllm/config.py"], 0),
    "python-dirname-quoted": (f'sed -i s/a/b/ "{PY_DIR}/v1/x.py"', ["vllm/v1/x.py"], 0),
    "backticks": (
        "sed -i s/a/b/ `python3 -c 'import vllm, os; print(os.path.dirname(vllm.__file__))'`/envs.py",
        ["vllm/envs.py"],
        0,
    ),
    "site-packages-computed": (
        "sed -i s/a/b/ $(python3 -c 'import site; print(site.getsitepackages()[0])')/vllm/envs.py",
        ["vllm/envs.py"],
        0,
    ),
    "literal-site-packages-after-variable": (
        'sed -i s/a/b/ "$PREFIX/lib/python3.12/site-packages/vllm/envs.py"',
        ["vllm/envs.py"],
        0,
    ),
    "unset-variable": ('sed -i s/a/b/ "$VLLM_DIR/vllm/x.py"', [], 1),
    "pip-show": ("sed -i s/a/b/ $(pip show vllm | awk '/Location/ {print $2}')/vllm/x.py", [], 1),
    "loop-over-find": (f"for f in $(find {SITE}/vllm -name '*.py'); do sed -i s/a/b/ \"$f\"; done", [], 1),
    "guarded-computed": (f"grep -q a {PY_DIR}/config.py && sed -i s/a/b/ {PY_DIR}/config.py", [], 0),
    "computed-config-file": ('sed -i s/a/b/ "$CONF_DIR/nginx.conf"', [], 0),
    "computed-etc": ("sed -i s/a/b/ $(ls /etc/apt/sources.list.d/*.list)", [], 0),
    "etc-file": ("sed -i 's/deb/deb-src/' /etc/apt/sources.list", [], 0),
    "repository-config": ("sed -i s/a/b/ /app/config.yaml", [], 0),
}


@pytest.mark.parametrize("form", sorted(COMPUTED))
def test_an_edit_of_a_computed_path_is_reported_as_exactly_as_its_words_allow(tmp_path: Path, form: str) -> None:
    command, upstreams, notes = COMPUTED[form]
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nRUN {command}\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], [])
    assert [e.upstream for e in reading.edits] == upstreams
    assert [(u.file, u.line) for u in reading.computed] == [("Dockerfile", 2)] * notes
    assert reading.unknowns == []  # no patch application is made unknown by an edit
    issues = queue.edit_issues(reading)
    assert sorted(i[0] for i in issues) == sorted(
        ["build-edit-unanchored"] * len(upstreams) + ["build-step-unknown"] * notes
    )


def test_an_unknown_edit_path_says_why_and_where(tmp_path: Path) -> None:
    write(tmp_path, "Dockerfile", f'FROM rocm/vllm@{DIGEST}\nRUN sed -i s/a/b/ "$VLLM_DIR/vllm/x.py"\n')
    ((kind, file, line, message, _),) = queue.edit_issues(BuildReader(tmp_path).read(["Dockerfile"], []))
    assert (kind, file, line) == ("build-step-unknown", "Dockerfile", 2)
    assert message.endswith(
        "edits a file whose path is computed at build time: $VLLM_DIR/vllm/x.py ($VLLM_DIR is not set by anything read)"
    )


BUILD = f"""\
FROM rocm/vllm:v0.11.0@{DIGEST}
ENV SITE={SITE}
RUN {GREP} && {SED}
RUN {GREP}; {SED}
RUN set -e; {GREP}; {SED}
RUN if {GREP}; then {SED}; fi
RUN sed -i s/a/b/ {PY_DIR}/config.py
RUN sed -i s/a/b/ "$VLLM_DIR/vllm/x.py"
RUN sed -i 's/deb/deb-src/' /etc/apt/sources.list
RUN {GREP} && {SED}; echo done
"""


def test_import_and_check_report_the_same_unchecked_and_unknown_edits(tmp_path: Path, invoke: Invoke) -> None:
    root = tmp_path / "deploy"
    write(root, "Dockerfile", BUILD)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    want = [
        ("build-edit-unanchored", "Dockerfile", 4),
        ("build-edit-unanchored", "Dockerfile", 6),
        ("build-edit-unanchored", "Dockerfile", 7),
        ("build-edit-unanchored", "Dockerfile", 10),
        ("build-step-unknown", "Dockerfile", 8),
    ]
    assert sorted((i["kind"], i["file"], i["line"]) for i in issues if i["kind"].startswith("build")) == want
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    found = json.loads(check.stdout)["findings"]
    assert sorted((f["code"], f["file"], f["line"]) for f in found if f["code"].startswith("build")) == want
    assert {f["severity"] for f in found if f["code"] == "build-step-unknown"} == {"note"}


def test_a_failure_branch_that_exits_ends_nothing_the_reading_reads(tmp_path: Path) -> None:
    """``git apply a.patch || exit 1`` exits only when the apply fails: the patches after it are applied too."""
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    for n in ("0001-a", "0002-b"):
        write(tmp_path, f"patches/vllm/{n}.patch", patch)
    write(
        tmp_path,
        "build.sh",
        '#!/bin/sh\nD="$(dirname "$0")"\ngit apply "$D/patches/vllm/0001-a.patch" || exit 1\n'
        'git apply "$D/patches/vllm/0002-b.patch" || { echo failed; exit 1; }\n',
    )
    reading = BuildReader(tmp_path).read([], ["build.sh"])
    assert [(a.repo, a.line) for a in reading.applies] == [
        ("patches/vllm/0001-a.patch", 3),
        ("patches/vllm/0002-b.patch", 4),
    ]
    assert reading.unknowns == []
