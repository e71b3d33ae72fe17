"""Build files that would make import's static reading run for ever: each import ends in seconds, and says so.

``patchkit import`` reads every Dockerfile and shell script of a hand-kept
repository (never running them). Each case adds one hostile build file to
the hand-kept fixture: variables that double at each line (a billion laughs
in ``ARG``/``ENV`` and in shell variables and arrays), loops and function
calls that multiply, a continued instruction of 100,000 lines, a word of a
million characters (shlex builds a word in time that grows as its square).
Each ran for minutes or for ever before it was
bounded; now ``import --dry-run`` ends within the test's deadline, never
exit 4, and the report names the file where it stopped reading.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from patchkit.importing import dockerfile, shell
from tests.adversarial.conftest import patchkit
from tests.importing.conftest import build

FROM = "FROM vllm/vllm-openai-rocm@sha256:" + "e6" * 32 + "\n"
LIST = " ".join(f"p{i}" for i in range(100))

# name -> (file, text, what the report says about it)
BOMBS: dict[str, tuple[str, str, str]] = {
    "ARG doubling": (
        "Dockerfile",
        FROM + "".join(f"ARG A{i}=${{A{i - 1}}}${{A{i - 1}}}\n" for i in range(1, 60)) + "RUN echo $A59\n",
        "expand to more than",
    ),
    "ENV doubling": (
        "Dockerfile",
        FROM + "ENV A0=xx\n" + "".join(f"ENV A{i}=${{A{i - 1}}}${{A{i - 1}}}\n" for i in range(1, 60)),
        "expand to more than",
    ),
    "shell variable doubling": ("build.sh", "#!/bin/bash\nA=ab\n" + 'A="$A$A"\n' * 60 + 'git apply "$A"\n', "build.sh"),
    "shell array doubling": (
        "build.sh",
        "#!/bin/bash\nA=(a b)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 60 + 'for p in "${A[@]}"; do git apply "$p"; done\n',
        "build.sh",
    ),
    "nested loops": (
        "build.sh",
        "#!/bin/bash\n" + "".join(f"for a{i} in {LIST}; do\n" for i in range(6)) + "git apply x.patch\n" + "done\n" * 6,
        "ran 10000 commands",
    ),
    "calls that multiply": (
        "build.sh",
        "#!/bin/bash\nf0() { git apply x.patch; }\n"
        + "".join(f"f{i}() {{ " + f"f{i - 1}; " * 100 + "}\n" for i in range(1, 7))
        + "f6\n",
        "ran 10000 commands",
    ),
    "long continuation": ("Dockerfile", FROM + "RUN true " + "\\\n x" * 100_000 + "\n", "Dockerfile"),
    "a word of a million characters": ("Dockerfile", FROM + "RUN echo " + "a" * 1_000_000 + "\n", "Dockerfile:1"),
    "a long word under the size limit": ("build.sh", "#!/bin/sh\necho '" + "a " * 60_000 + "'\n", "more than 65536"),
}


@pytest.mark.parametrize("case", list(BOMBS))
def test_import_of_a_hostile_build_file_ends_in_seconds(case: str, tmp_path: Path) -> None:
    rel, text, said = BOMBS[case]
    root = tmp_path / "deploy"
    build(root)
    (root / rel).write_text(text)
    began = time.monotonic()
    done = patchkit("import", "--dry-run", cwd=root, timeout=60)
    took = time.monotonic() - began
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    assert took < 30, f"{case}: import took {took:.1f} s"
    assert said in done.stdout


def test_reading_a_build_file_stays_short_in_the_library(tmp_path: Path) -> None:
    """The bounds themselves: a value, a word and the steps of one build's reading."""
    (tmp_path / "build.sh").write_text("#!/bin/bash\nA=ab\n" + 'A="$A$A"\n' * 40 + 'git apply "$A"\n')
    began = time.monotonic()
    reading = shell.BuildReader(tmp_path).read([], ["build.sh"])
    assert time.monotonic() - began < 10
    assert any(u.file == "build.sh" and "$A is not set" in u.reason for u in reading.unknowns)

    env = {"A": "x" * (dockerfile.MAX_VALUE // 2 + 1)}
    with pytest.raises(dockerfile.TooLarge):
        dockerfile.expand("$A$A", env)
    assert dockerfile.expand("$A", env) == env["A"]

    toks, bad = shell.tokens("echo " + "a" * (shell.MAX_WORD + 1) + "\necho ok\n")
    assert bad == [(1, f"a word of more than {shell.MAX_WORD} characters is not read")]
    assert [t.text for t in toks] == ["echo", "ok", "\n", "\n"]


def test_a_build_file_over_the_size_limit_is_said_and_not_read(tmp_path: Path) -> None:
    (tmp_path / "build.sh").write_text("#!/bin/sh\n" + "echo hi\n" * (dockerfile.MAX_BUILD_FILE // 8))
    reading = shell.BuildReader(tmp_path).read([], ["build.sh"])
    assert [(u.line, u.reason) for u in reading.unknowns if u.file == "build.sh"] == [
        (1, f"over {dockerfile.MAX_BUILD_FILE >> 10} KiB: not read as a build file")
    ]
    got = dockerfile.read(tmp_path, "Dockerfile", FROM + "RUN echo hi\n" * (dockerfile.MAX_BUILD_FILE // 10))
    assert [p[:3] for p in got.problems] == [
        ("build-unreadable", 1, f"over {dockerfile.MAX_BUILD_FILE >> 10} KiB: not read")
    ]
