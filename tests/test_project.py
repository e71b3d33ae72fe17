"""The project's own promises: the README's commands are the ones CI runs."""

from __future__ import annotations

import re

from conftest import REPO_ROOT


def _readme_commands() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)


def test_readme_has_the_two_setup_commands() -> None:
    main_job, tests = _readme_commands()
    assert main_job == "pip install -e . && patchkit check"
    assert tests == "pip install -e '.[test]' && python -m pytest"


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = _readme_commands()
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci
    assert ci[ci.index(tests) + 1] == "status=$?"
    assert '"$status" -eq 5' in "\n".join(ci)  # no tests collected is a failure


def test_lockfile_doc_example_is_canonical() -> None:
    """docs/lockfile.md's annotated example loads and, without its comments, is what patchkit writes."""
    from patchkit import lockfile

    doc = (REPO_ROOT / "docs" / "lockfile.md").read_text()
    example = re.search(r"```toml\n(.*?)```", doc.split("## Annotated example", 1)[1], re.S)
    assert example is not None
    text = example.group(1)
    assert text.startswith(lockfile.HEADER)
    body = "".join(line for line in text[len(lockfile.HEADER) :].splitlines(keepends=True) if not line.startswith("#"))
    assert lockfile.dumps(lockfile.loads(lockfile.HEADER + body)) == lockfile.HEADER + body
