"""Patcher scripts read name by name within each function, as Python binds them.

A script that patches several upstream files often has one function per file,
each with its own ``path``, ``src`` and ``n``: the same names, other files and
other anchors. Read across the whole script, the last ``path`` assigned would
be every function's target, and a count checked in one function would seem
assigned from another's edit. Each function's names are its own; a module
name read inside a function is the module's; a name assigned twice in one
scope is, at each use, the assignment before it.
"""

from __future__ import annotations

import pytest

from patchkit.importing import patchers

HEAD = "import re\nimport sys\nfrom pathlib import Path\n\nimport vllm\n\nROOT = Path(vllm.__file__).parent\n\n\n"
SCHED = "vllm/v1/core/sched/scheduler.py"
ENVS = "vllm/envs.py"

CHECKED = (
    "    src = path.read_text()\n"
    "    if {old!r} not in src:\n"
    "        sys.exit('{name}: anchor moved')\n"
    "    path.write_text(src.replace({old!r}, 'x = 2'))\n"
)
SUBN = (
    "    src = path.read_text()\n"
    "    src, n = re.subn(r{old!r}, 'x = 2', src)\n"
    "    if n != 1:\n"
    "        raise SystemExit('{name}: ' + str(n))\n"
    "    path.write_text(src)\n"
)
UNCHECKED = "    src = path.read_text()\n    path.write_text(src.replace({old!r}, 'x = 2'))\n"


def _two(first: str, second: str) -> str:
    return (
        HEAD
        + "def sched():\n    path = ROOT / 'v1' / 'core' / 'sched' / 'scheduler.py'\n"
        + first.format(old="a = 1", name="sched")
        + "\n\ndef envs():\n    path = ROOT / 'envs.py'\n"
        + second.format(old="b = 1", name="envs")
        + "\n\nsched()\nenvs()\n"
    )


@pytest.mark.parametrize("form", ["if-not-in", "subn-count"])
def test_the_same_names_in_two_functions_are_two_targets_each_anchored(form: str) -> None:
    body = CHECKED if form == "if-not-in" else SUBN
    got = patchers.read(_two(body, body).encode())
    assert got is not None
    assert (sorted(t for t, _ in got.targets), got.unknown, got.anchored) == ([ENVS, SCHED], [], True)
    assert patchers.issues(got, "x.py") == []


@pytest.mark.parametrize("order", ["unchecked-first", "unchecked-second"])
def test_one_function_unchecked_is_not_anchored_whatever_the_other_checks(order: str) -> None:
    text = _two(UNCHECKED, SUBN) if order == "unchecked-first" else _two(SUBN, UNCHECKED)
    got = patchers.read(text.encode())
    assert got is not None and sorted(t for t, _ in got.targets) == [ENVS, SCHED]
    assert [k for k, *_ in patchers.issues(got, "x.py")] == ["patcher-not-anchored"]


def test_a_name_assigned_twice_in_one_scope_is_the_assignment_before_each_use() -> None:
    text = (
        HEAD
        + "path = ROOT / 'envs.py'\nsrc = path.read_text()\nassert 'a = 1' in src\n"
        + "path.write_text(src.replace('a = 1', 'a = 2'))\n"
        + "path = ROOT / 'v1/core/sched/scheduler.py'\nsrc = path.read_text()\nassert 'b = 1' in src\n"
        + "path.write_text(src.replace('b = 1', 'b = 2'))\n"
    )
    got = patchers.read(text.encode())
    assert got is not None
    assert (got.targets, got.unknown, got.anchored) == ([(ENVS, 11), (SCHED, 15)], [], True)


def test_a_parameter_of_one_function_is_not_a_name_of_another() -> None:
    """``patch(path)`` is called with the scheduler; ``path`` in ``main`` is a run-time argument, said so."""
    text = (
        HEAD
        + "def patch(path):\n"
        + CHECKED.format(old="a = 1", name="patch")
        + "\n\ndef main():\n    path = Path(sys.argv[1])\n"
        + CHECKED.format(old="b = 1", name="main")
        + "\n\npatch(ROOT / 'v1/core/sched/scheduler.py')\nmain()\n"
    )
    got = patchers.read(text.encode())
    assert got is not None and [t for t, _ in got.targets] == [SCHED] and got.anchored
    assert [why for _, why in got.unknown] == [
        "the file it opens is built as 'path', read at run time from sys.argv[1]"
    ] * 2


def test_a_module_name_a_function_reads_without_binding_it_is_the_modules() -> None:
    text = (
        HEAD + "path = ROOT / 'envs.py'\n\n\ndef main():\n" + CHECKED.format(old="a = 1", name="main") + "\n\nmain()\n"
    )
    got = patchers.read(text.encode())
    assert got is not None and ([t for t, _ in got.targets], got.anchored) == ([ENVS], True)


def test_a_global_statement_makes_the_functions_name_the_modules() -> None:
    text = (
        HEAD
        + "path = None\n\n\ndef find():\n    global path\n    path = ROOT / 'envs.py'\n\n\ndef main():\n"
        + CHECKED.format(old="a = 1", name="main")
        + "\n\nfind()\nmain()\n"
    )
    got = patchers.read(text.encode())
    assert got is not None and ([t for t, _ in got.targets], got.anchored) == ([ENVS], True)
