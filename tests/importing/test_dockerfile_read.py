"""Reading a Dockerfile as the build would: what ends up where in the image, and the images it starts from."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.importing import dockerfile

SITE = "/usr/local/lib/python3.12/site-packages"
DIGEST = "sha256:" + "ab" * 32


def _tree(root: Path, *rels: str) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")


def _copied(root: Path, text: str, rel: str = "Dockerfile", **kw: object) -> dict[str, str]:
    build = dockerfile.read(root, rel, text, **kw)  # type: ignore[arg-type]
    assert not build.problems, build.problems
    return {c.target: c.rel for c in build.copied}


@pytest.mark.parametrize(
    "copy",
    [
        f"COPY overlay/vllm/ {SITE}/vllm/",
        f"COPY overlay/vllm {SITE}/vllm",
        f"COPY --chown=1000:1000 overlay/vllm/ {SITE}/vllm/",
        f"COPY --link --chmod=0644 --chown=app overlay/vllm/ {SITE}/vllm/",
        f'COPY ["overlay/vllm/", "{SITE}/vllm/"]',
        f"ADD overlay/vllm/ {SITE}/vllm/",
        f"COPY overlay/vllm/ \\\n     {SITE}/vllm/",
        "ARG SITE=" + SITE + "\nCOPY overlay/vllm/ ${SITE}/vllm/",
        "ENV PY_SITE " + SITE + "\nCOPY overlay/vllm/ $PY_SITE/vllm/",
        "COPY overlay/vllm/ ${PY_SITE:-" + SITE + "}/vllm/",
        f"WORKDIR {SITE}\nCOPY overlay/vllm/ vllm/",
        "WORKDIR /usr/local/lib\nWORKDIR python3.12/site-packages\nCOPY overlay/vllm ./vllm",
    ],
)
def test_every_copy_spelling_puts_the_tree_at_the_same_paths(tmp_path: Path, copy: str) -> None:
    _tree(tmp_path, "overlay/vllm/a.py", "overlay/vllm/sub/b.py")
    got = _copied(tmp_path, f"FROM base@{DIGEST}\n{copy}\n")
    assert got == {f"{SITE}/vllm/a.py": "overlay/vllm/a.py", f"{SITE}/vllm/sub/b.py": "overlay/vllm/sub/b.py"}


def test_single_files_globs_and_directories_as_destinations(tmp_path: Path) -> None:
    _tree(tmp_path, "p/x.py", "p/y.py", "p/z.txt")
    text = f"FROM base@{DIGEST}\nCOPY p/x.py {SITE}/vllm/renamed.py\nCOPY p/*.py {SITE}/vllm/ops/\n"
    assert _copied(tmp_path, text) == {
        f"{SITE}/vllm/renamed.py": "p/x.py",
        f"{SITE}/vllm/ops/x.py": "p/x.py",
        f"{SITE}/vllm/ops/y.py": "p/y.py",
    }


def test_stages_carry_what_they_copied_and_other_images_carry_nothing(tmp_path: Path) -> None:
    _tree(tmp_path, "overlay/a.py", "overlay/b.py")
    text = f"""\
FROM python:3.12 AS stage
WORKDIR /src
COPY overlay/ ./tree/
FROM stage AS second
FROM base@{DIGEST}
COPY --from=stage /src/tree/a.py {SITE}/vllm/a.py
COPY --from=1 /src/tree/ {SITE}/vllm/again/
COPY --from=rocm/aiter:v1 /opt/aiter {SITE}/aiter
"""
    assert _copied(tmp_path, text) == {
        f"{SITE}/vllm/a.py": "overlay/a.py",
        f"{SITE}/vllm/again/a.py": "overlay/a.py",
        f"{SITE}/vllm/again/b.py": "overlay/b.py",
    }


def test_only_the_final_stage_or_the_compose_target_is_the_image(tmp_path: Path) -> None:
    _tree(tmp_path, "a.py", "b.py")
    text = f"FROM base@{DIGEST} AS dev\nCOPY a.py {SITE}/vllm/a.py\n"
    text += f"FROM base@{DIGEST} AS prod\nCOPY b.py {SITE}/vllm/b.py\n"
    assert _copied(tmp_path, text) == {f"{SITE}/vllm/b.py": "b.py"}
    assert _copied(tmp_path, text, target="dev") == {f"{SITE}/vllm/a.py": "a.py"}


def test_build_arguments_override_defaults_and_stage_args_see_globals(tmp_path: Path) -> None:
    _tree(tmp_path, "a.py")
    text = "ARG BASE=base:tag\nARG SITE=/nowhere\nFROM ${BASE}\nARG SITE\nCOPY a.py ${SITE}/vllm/a.py\n"
    build = dockerfile.read(tmp_path, "Dockerfile", text, args={"BASE": f"base@{DIGEST}", "SITE": SITE})
    assert {c.target for c in build.copied} == {f"{SITE}/vllm/a.py"}
    assert [(b.ref, b.digest) for b in build.bases] == [(f"base@{DIGEST}", DIGEST)]
    plain = dockerfile.read(tmp_path, "Dockerfile", text)
    assert [(b.ref, b.digest, b.tag) for b in plain.bases] == [("base:tag", None, "tag")]
    assert {c.target for c in plain.copied} == {"/nowhere/vllm/a.py"}  # the global default, re-declared


def test_the_context_is_the_dockerfiles_directory_when_that_is_where_its_sources_are(tmp_path: Path) -> None:
    _tree(tmp_path, "docker/overlay/a.py")
    text = f"FROM base@{DIGEST}\nCOPY overlay/a.py {SITE}/vllm/a.py\n"
    assert _copied(tmp_path, text, rel="docker/Dockerfile") == {f"{SITE}/vllm/a.py": "docker/overlay/a.py"}


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"FROM base@{DIGEST}\nCOPY overlay/$NOPE/a.py {SITE}/vllm/a.py\n", "copy-unresolved"),
        (f"FROM base@{DIGEST}\nCOPY overlay/missing.py {SITE}/vllm/a.py\n", "copy-missing"),
        ("FROM ${NOPE}\n", "image-unresolved"),
        (f"FROM base@{DIGEST}\nWORKDIR $NOPE\n", "copy-unresolved"),
    ],
)
def test_what_cannot_be_resolved_is_reported_with_its_line(tmp_path: Path, text: str, kind: str) -> None:
    build = dockerfile.read(tmp_path, "Dockerfile", text)
    assert [(k, line) for k, line, _, _ in build.problems] == [(kind, text.count("\n"))]
    assert build.copied == []


def test_symlinks_and_bytecode_are_not_copied_as_patches(tmp_path: Path) -> None:
    _tree(tmp_path, "overlay/a.py", "overlay/__pycache__/a.cpython-312.pyc")
    (tmp_path / "overlay/passwd.py").symlink_to("/etc/passwd")
    assert _copied(tmp_path, f"FROM base@{DIGEST}\nCOPY overlay/ {SITE}/vllm/\n") == {
        f"{SITE}/vllm/a.py": "overlay/a.py"
    }


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("Dockerfile", True),
        ("Containerfile", True),
        ("Dockerfile.rocm", True),
        ("Containerfile-mi300x", True),
        ("vllm.Dockerfile", True),
        ("Dockerfile.md", False),  # notes about it
        ("Dockerfile.dockerignore", False),  # its ignore file
        ("dockerfile-notes.txt", False),
        ("README.md", False),
    ],
)
def test_dockerfiles_are_found_by_name_in_the_usual_places(tmp_path: Path, name: str, found: bool) -> None:
    for place in ("", "docker/", "deploy/", "build/", "elsewhere/"):
        (tmp_path / place).mkdir(exist_ok=True)
        (tmp_path / place / name).write_text("FROM x\n")
    want = [f"{p}{name}" for p in ("", "build/", "deploy/", "docker/")] if found else []
    assert sorted(dockerfile.find(tmp_path)) == sorted(want)


class TestTheFormsRealDockerfilesUse:
    """The one reader of Dockerfile syntax, on the forms the field writes and on what docker refuses."""

    def test_a_multi_stage_build_with_a_global_arg_and_defaults(self, tmp_path: Path) -> None:
        _tree(tmp_path, "src/vllm/a.py", "src/vllm/b.py")
        text = (
            "# syntax=docker/dockerfile:1\n"
            "ARG BASE=scratch\n"
            "ARG PY=3.12\n"
            "FROM ${BASE} AS builder\n"
            "WORKDIR /build\n"
            "COPY src/ ./src/\n"
            f"FROM rocm/vllm@{DIGEST} AS runtime\n"
            "ARG PY\n"
            "ENV SITE=/usr/local/lib/python${PY}/${KIND:-site-packages}\n"
            "COPY --from=builder --chown=1000:1000 /build/src/vllm/ ${SITE}/vllm/\n"
        )
        build = dockerfile.read(tmp_path, "Dockerfile", text)
        assert build.problems == []
        assert {c.target: c.rel for c in build.copied} == {
            f"{SITE}/vllm/a.py": "src/vllm/a.py",
            f"{SITE}/vllm/b.py": "src/vllm/b.py",
        }
        assert [(b.stage, b.final, b.digest) for b in build.bases] == [("runtime", True, DIGEST)]

    def test_continuations_join_as_docker_joins_them_and_comments_between_are_dropped(self) -> None:
        text = "RUN echo a\\\n# a comment inside\n\nb \\\n   && echo c\nCOPY x \\\n  # indented comment\n  /y/\n"
        got = [(i.line, i.word, i.args) for i in dockerfile.instructions(text)]
        assert got == [(1, "RUN", "echo ab    && echo c"), (6, "COPY", "x   /y/")]

    def test_lowercase_instructions_flags_and_the_exec_form(self) -> None:
        text = 'from base AS one\nrun --mount=type=bind,src=.,dst=/s --network=none ["bash", "-c", "make"]\n'
        first, second = dockerfile.instructions(text)
        assert (first.word, first.args) == ("FROM", "base AS one")
        assert second.word == "RUN" and second.exec_form() == ["bash", "-c", "make"]
        assert second.options() == (
            [("mount", "type=bind,src=.,dst=/s"), ("network", "none")],
            '["bash", "-c", "make"]',
        )
        assert dockerfile.Instruction(1, "RUN", "[not json").exec_form() is None  # docker runs it as shell

    def test_the_escape_directive_changes_the_continuation_character(self, tmp_path: Path) -> None:
        _tree(tmp_path, "a.py")
        text = f"# escape=`\nFROM base@{DIGEST}\nCOPY a`\n.py C:\\app\\`\n  {SITE}/vllm/\n"
        parsed = dockerfile.parse(text)
        assert parsed.escape == "`" and [i.args for i in parsed.instructions][1] == f"a.py C:\\app\\  {SITE}/vllm/"
        assert dockerfile.parse("#escape=\\\nFROM x\n").escape == "\\"
        late = dockerfile.parse("FROM x\n# escape=`\nRUN a`\n")  # a directive only counts at the top
        assert late.escape == "\\" and late.instructions[1].args == "a`"

    def test_here_documents_are_bodies_not_instructions(self, tmp_path: Path) -> None:
        _tree(tmp_path, "a.py")
        text = (
            f"FROM base@{DIGEST}\n"
            "RUN <<EOF\nFROM evil\nCOPY a.py /nowhere/\nEOF\n"
            f"COPY <<-'CONF' {SITE}/vllm/conf.py\n\tx = 1\n\tCONF\n"
            "run python3 <<PY >/tmp/out\nprint(1)\nPY\n"
            f"COPY a.py {SITE}/vllm/a.py\n"
        )
        parsed = dockerfile.parse(text)
        assert [(i.line, i.word) for i in parsed.instructions] == [
            (1, "FROM"),
            (2, "RUN"),
            (6, "COPY"),
            (9, "RUN"),
            (12, "COPY"),
        ]
        run, conf = parsed.instructions[1].heredocs[0], parsed.instructions[2].heredocs[0]
        assert (run.name, run.body, run.line, run.quoted) == ("EOF", "FROM evil\nCOPY a.py /nowhere/\n", 3, False)
        assert (conf.name, conf.body, conf.quoted) == ("CONF", "x = 1\n", True)
        build = dockerfile.read(tmp_path, "Dockerfile", text)
        assert build.problems == [] and [b.written for b in build.bases] == [f"base@{DIGEST}"]
        assert {c.target: c.rel for c in build.copied} == {f"{SITE}/vllm/a.py": "a.py"}  # inline files are no patches

    def test_quotes_and_variables_in_words_as_the_builder_replaces_them(self) -> None:
        env = {"A": "x", "E": ""}
        cases = {
            '"$A y"': "x y",
            "'$A'": "$A",
            "\\$A": "$A",
            "${A}b": "xb",
            "${E:-d}": "d",
            "${E-d}": "",
            "${A:+set}": "set",
            "${NOPE:-${A}}": "x",
        }
        assert {w: dockerfile.expand(w, env) for w in cases} == cases
        assert dockerfile.expand("$NOPE/x", env) is None
        ins = dockerfile.Instruction(1, "ENV", 'A="x y" B=$A')
        assert dockerfile.assignments(ins, {}) == [("A", "x y", '"x y"'), ("B", None, "$A")]
        assert dockerfile.assignments(dockerfile.Instruction(1, "ENV", "K  a b"), {}) == [("K", "a b", "a b")]

    @pytest.mark.parametrize(
        ("text", "line", "says"),
        [
            (f"FROM base@{DIGEST}\nRUN <<EOF\necho never closed\n", 2, "<<EOF is not closed"),
            (f"FROM base@{DIGEST}\nCOPY <<A <<B /x/\nbody\nA\n", 2, "<<B is not closed"),
            (f'FROM base@{DIGEST}\nCOPY "a.py {SITE}/vllm/\n', 2, "double quote is not closed"),
            (f"FROM base@{DIGEST}\nENV A='x\n", 2, "single quote is not closed"),
            (f"# escape=/\nFROM base@{DIGEST}\n", 1, "backslash or a backtick"),
            (f"FROM base@{DIGEST}\nCOPY {'${A:-' * 1200}a.py{'}' * 1200} /x/\n", 2, "nested too deeply"),
        ],
    )
    def test_what_docker_refuses_is_one_clear_problem(self, tmp_path: Path, text: str, line: int, says: str) -> None:
        _tree(tmp_path, "a.py")
        build = dockerfile.read(tmp_path, "Dockerfile", text)
        (problem,) = build.problems
        assert problem[:2] == ("build-unreadable", line) and says in problem[2], problem
        assert build.copied == []

    def test_random_text_never_ends_the_readers_with_an_exception(self, tmp_path: Path) -> None:
        """Seeded: fragments of Dockerfile and shell syntax in any order give problems and unknowns, never a crash."""
        import random

        from patchkit.importing.shell import BuildReader

        atoms = (
            *("FROM ", "from ", "RUN ", "COPY ", "ADD ", "ARG ", "ENV ", "WORKDIR ", "AS b", "--from=", "--chown=1"),
            *("<<EOF", "<<-'X'", "EOF", "X", "\\", "`", "\n", " ", "\t", '"', "'", "${", "}", "$A", ":-", ":?"),
            *("=", "[", "]", '["a", "b"]', "# escape=`", "#", "a.py", "/t/", "*.py", "patch -p1 <", "git apply "),
            *("for p in /t/*; do ", "; done", "\ufeff", "\r\n", "$(x)", "--mount=type=bind,src=.,dst=/t"),
        )
        _tree(tmp_path, "a.py", "patches/p.patch")
        rng = random.Random(33)
        for _ in range(300):
            text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 60)))
            (tmp_path / "Containerfile").write_text(text)
            dockerfile.read(tmp_path, "Containerfile", text)
            BuildReader(tmp_path).read(["Containerfile"], [])


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("COPY p/x.patch /opt", "/opt/x.patch"),  # a directory every image has
        ("ADD ./p/x.patch /tmp", "/tmp/x.patch"),
        ("WORKDIR /work\nCOPY p/x.patch .", "/work/x.patch"),  # '.' is the working directory
        ("WORKDIR /work\nCOPY p/x.patch /work", "/work/x.patch"),  # WORKDIR made it
        ("COPY p/y.py /stage/\nCOPY p/x.patch /stage", "/stage/x.patch"),  # the build filled it
        ("COPY p/x.patch /opt/fix.patch", "/opt/fix.patch"),  # a file name stays one
    ],
)
def test_a_single_file_copied_to_a_directory_the_image_has_goes_into_it(tmp_path: Path, text: str, at: str) -> None:
    # Docker writes a file to DEST/<name> when DEST is a directory of the image, trailing slash or not.
    _tree(tmp_path, "p/x.patch", "p/y.py")
    got = _copied(tmp_path, f"FROM base@{DIGEST}\n{text}\n")
    assert got[at] == "p/x.patch"
    assert "/opt" not in got and "/tmp" not in got and "/work" not in got and "/stage" not in got


def test_a_module_copied_to_a_package_directory_goes_into_it(tmp_path: Path) -> None:
    """``COPY fix.py …/site-packages/vllm/ops``: the base image has the package's directory, so the module goes into
    it (no module is named ``ops``), as ``RUN cp`` of a module is read."""
    _tree(tmp_path, "p/y.py", "p/x.patch")
    text = f"FROM base@{DIGEST}\nCOPY p/y.py {SITE}/vllm/ops\nCOPY p/x.patch {SITE}/vllm/fix.patch\n"
    assert _copied(tmp_path, text) == {f"{SITE}/vllm/ops/y.py": "p/y.py", f"{SITE}/vllm/fix.patch": "p/x.patch"}
