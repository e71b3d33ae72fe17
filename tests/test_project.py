"""The project's own promises: the README's commands are the ones CI runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, copy_shipped


def _readme_commands() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)


def test_readme_setup_commands_use_a_venv_and_the_lock() -> None:
    """Both commands work on a PEP 668 Python: nothing is installed into the interpreter itself."""
    main_job, tests = _readme_commands()
    for command in (main_job, tests):
        assert command.startswith("python3 -m venv ")
        installs = [part.strip() for part in command.split("&&") if " install " in part]
        assert installs and all(part.startswith(".venv/bin/pip install ") for part in installs), command
    assert main_job.endswith(".venv/bin/patchkit check")
    assert "--clear" in tests  # a new environment every run
    assert "--require-hashes -r requirements.lock" in tests
    assert tests.endswith(".venv/bin/python -m pytest")


def test_ci_runs_the_readme_commands() -> None:
    main_job, tests = _readme_commands()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    lines = ci.splitlines()
    assert tests in lines
    assert lines[lines.index(tests) + 1] == "status=$?"
    assert '"$1" -eq 5' in ci  # no tests collected is a failure
    assert main_job in ci


def test_ci_runs_the_whole_suite_on_debians_python_too() -> None:
    """After the first run, the same suite from the same lock in a new venv of /usr/bin/python3, checked alike."""
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    second = ci[ci.index("/usr/bin/python3 -m venv") :]
    for step in (
        '/bin/pip" install -q --require-hashes -r requirements.lock',
        '/bin/pip" install -q --no-deps --no-build-isolation -e .',
        '/bin/python" -m pytest\nstatus=$?\nset -e\npytest_status "$status"',
    ):
        assert step in second, step
    assert ci.count('pytest_status "$status"') == 2  # both runs fail CI on a failure or on no tests


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_lock_pins_every_declared_dependency_with_hashes() -> None:
    """requirements.lock is current: every dependency pyproject.toml declares is pinned, with hashes."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["test"]
    text = (REPO_ROOT / "requirements.lock").read_text()
    pinned: dict[str, set[str]] = {}  # name -> the extras pinned with it
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2]):
        head = entry.split(" ", 1)[0]
        name, _, version = head.partition("==")
        assert version and "--hash=sha256:" in entry, f"not pinned with a hash: {head}"
        bare, _, extras = name.partition("[")
        pinned[_canonical(bare)] = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
    for requirement in declared:
        match = re.match(r"([A-Za-z0-9._-]+)(?:\[([^\]]*)\])?", requirement)
        assert match is not None
        name = _canonical(match.group(1))
        assert name in pinned, f"{requirement} is declared but requirements.lock lacks it"
        # pip's hash-checking mode accepts a request for an extra only when the extra itself is pinned.
        wanted = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
        assert wanted <= pinned[name], f"{requirement}: the lock pins it without its extras (uv --no-strip-extras)"
    # The same for what a dependency requests: pytest-cov asks for coverage[toml].
    assert "toml" in pinned["coverage"], "requirements.lock pins coverage without the toml extra pytest-cov requests"


def test_lockfile_doc_example_is_canonical() -> None:
    """docs/lockfile.md's annotated example loads and, without its comments, is what patchkit writes."""
    from patchkit.lockfile.model import HEADER
    from patchkit.lockfile.reader import loads
    from patchkit.lockfile.writer import dumps

    doc = (REPO_ROOT / "docs" / "lockfile.md").read_text()
    example = re.search(r"```toml\n(.*?)```", doc.split("## Annotated example", 1)[1], re.S)
    assert example is not None
    text = example.group(1)
    assert text.startswith(HEADER)
    body = "".join(line for line in text[len(HEADER) :].splitlines(keepends=True) if not line.startswith("#"))
    assert dumps(loads(HEADER + body)) == HEADER + body


@pytest.mark.slow
def test_the_installed_wheel_validates_compose_against_the_schema(tmp_path: Path) -> None:
    """A user's install (the built wheel, not this checkout) carries the Compose schema and validates with it."""
    source = tmp_path / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, tracked):
        if (REPO_ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, source / rel)
    dist, site = tmp_path / "dist", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)], check=True)
    (wheel,) = dist.glob("patchkit-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    assert (site / "patchkit" / "py.typed").is_file()  # PEP 561: users' type checkers read its annotations

    deployment = copy_shipped(tmp_path / "far" / "away" / "deploy")  # no ../shared beside it
    broken = (REPO_ROOT / "compose.yaml").read_text().replace("restart: ", "restrat: ", 1)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import json, patchkit, patchkit.emit.validate as emit; "
        "assert patchkit.__file__.startswith(sys.argv[1]), patchkit.__file__; "
        "print(json.dumps(emit.validate(sys.stdin.read(), emit.compose_schema())))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe, str(site)], input=broken, capture_output=True, text=True, cwd=deployment,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [p for p in json.loads(run.stdout) if p.startswith("compose schema: services/vllm:")], run.stdout

    cli = "import sys; sys.path.insert(0, sys.argv.pop(1)); from patchkit.cli import main; main()"
    emitted = subprocess.run(
        [sys.executable, "-c", cli, str(site), "emit", "--check"], capture_output=True, text=True, cwd=deployment,
        check=False,
    )  # fmt: skip
    assert emitted.returncode == 0, emitted.stderr
    assert emitted.stdout == "emit --check: ok\n" and "skipped" not in emitted.stderr


_GLOBAL_WITH_VALUE = {"-C", "--repo", "--cache-dir"}


def _documented_commands(text: str) -> list[str]:
    """Every ``patchkit …`` a page shows: inline code, and lines of its fenced examples."""
    found = re.findall(r"`(patchkit [^`]+)`", text)
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
        found += re.findall(r"^(?:\$ )?(patchkit .+?)(?:\s+#.*)?$", block, re.M)
    return found


def _unknown_in(command: str) -> list[str]:
    """What ``command`` names that the CLI does not have: a command, or an option of that command."""
    import click

    from patchkit.cli import cli

    tokens = re.findall(r"[^\s\[\]()|…]+", command.replace("\\|", "|"))[1:]
    node: click.Command = cli
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _GLOBAL_WITH_VALUE:
            i += 2
        elif token in ("-v", "--verbose"):
            i += 1
        elif isinstance(node, click.Group) and not token.startswith("-"):
            sub = node.get_command(click.Context(node), token)
            if sub is None:
                return [f"no command {token!r}"]
            node, i = sub, i + 1
        else:
            break
    if isinstance(node, click.Group):
        return []
    options = {o for p in node.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
    flags = {t.split("=")[0].rstrip(",.;:") for t in tokens[i:] if re.match(r"--?[A-Za-z]", t)}
    return [f"{node.name} has no option {flag}" for flag in sorted(flags - options)]


def test_every_documented_command_form_exists() -> None:
    """The README and docs/ show only commands and options the CLI has, in the places they are shown."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    wrong = [
        f"{page.name}: `{command}`: {problem}"
        for page in pages
        for command in _documented_commands(page.read_text())
        for problem in _unknown_in(command)
    ]
    assert sum(len(_documented_commands(page.read_text())) for page in pages) > 100
    assert wrong == []
