"""An accepted broken merge stays visible: ``rebase --accept-broken`` records what it accepted, ``check`` notes it
while the file still has it and drops it once fixed.

Real git upstreams and the real CLI: upstream drops an import the patch's new
line relies on (an undefined name), or renames a function the patch imports
(an unresolved import); each class is accepted, noted, fixed and gone. The
offline reading of each kind of problem is tried on its own in its spellings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.check.accepted import holding
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.rebase.test_overlays import Upstream, make_deploy
from tests.trust.test_broken import LOGGER, NO_LOGGING, RENAMED, UTILS, WORKER
from tests.trust.test_broken import PATCHED as LOGS

CDIV = WORKER.replace(b"import torch\n", b"import torch\n\nfrom vllm.utils import cdiv\n") + (
    b"\n\ndef blocks_for(n, size):\n    return cdiv(n, size)\n"
)


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


def _accepted(invoke: Invoke, root: Path) -> tuple[int, list[str]]:
    r = invoke("check", "--format", "json", repo=root)
    doc = json.loads(r.stdout)
    return r.exit_code, [f["message"] for f in doc["findings"] if f["code"] == "accepted-broken"]


CASES = {
    # Upstream drops ``import logging``; the patch's new line still logs through it.
    "undefined-name": (
        {"vllm/worker.py": WORKER, "vllm/logger.py": LOGGER},
        LOGS,
        {"vllm/worker.py": NO_LOGGING},
        "undefined-name logging",
        (b"import torch\n", b"import logging\n\nimport torch\n"),
    ),
    # Upstream renames cdiv; the patch imports the old name.
    "unresolved-import": (
        {"vllm/__init__.py": b"", "vllm/worker.py": WORKER, "vllm/utils.py": UTILS},
        CDIV,
        {"vllm/utils.py": RENAMED},
        "unresolved-import cdiv",
        (b"import cdiv\n", b"import ceil_div as cdiv\n"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_accepted_broken_merge_is_recorded_noted_while_it_holds_and_dropped_once_fixed(
    invoke: Invoke, tmp_path: Path, upstream: Upstream, case: str
) -> None:
    first, patched, second, problem, fix = CASES[case]
    c1 = upstream.commit(first)
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": patched})
    assert _accepted(invoke, root) == (0, [])
    c2 = upstream.commit(second)
    r = invoke("rebase", "--onto", c2, "--accept-broken", "worker", "--reason", "fixed at start", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr

    (patch,) = loads((root / "lockfile.toml").read_text()).patches
    assert patch.accepted is not None
    assert (patch.accepted.reason, patch.accepted.problems) == ("fixed at start", (problem,))
    note = f"'worker' was committed broken (rebase --accept-broken: fixed at start); still: {problem}"
    assert _accepted(invoke, root) == (0, [note])
    text = invoke("check", repo=root).stdout
    assert f"note: patches[worker].accepted: {note}" in text

    # An edit that leaves the problem in place keeps the note.
    path = root / "patches/worker.py"
    path.write_bytes(path.read_bytes() + b"\n# still broken\n")
    assert invoke("lock", repo=root).exit_code == 0
    assert _accepted(invoke, root) == (0, [note])

    # Fixed: the note goes; the record of the decision stays in the lockfile.
    path.write_bytes(path.read_bytes().replace(*fix))
    assert invoke("lock", repo=root).exit_code == 0
    assert _accepted(invoke, root) == (0, [])
    (patch,) = loads((root / "lockfile.toml").read_text()).patches
    assert patch.accepted is not None and patch.accepted.reason == "fixed at start"


def test_a_clean_rebase_of_the_accepted_patch_keeps_the_record(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    first, patched, second, problem, _ = CASES["undefined-name"]
    c1 = upstream.commit(first)
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": patched})
    c2 = upstream.commit(second)
    assert invoke("rebase", "--onto", c2, "--accept-broken", "worker", "--reason", "r", repo=root).exit_code == 0
    c3 = upstream.commit({"vllm/logger.py": LOGGER + b"\n# 1.2\n"})
    r = invoke("rebase", "--onto", c3, repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    (patch,) = loads((root / "lockfile.toml").read_text()).patches
    assert patch.accepted is not None and patch.accepted.problems == (problem,)
    assert len(_accepted(invoke, root)[1]) == 1


READINGS = {
    # (problem recorded, file that still has it, file that no longer does)
    "undefined": ("undefined-name logging", b"def f():\n    logging.debug('x')\n", b"import logging\nlogging.x\n"),
    "from-name": ("unresolved-import cdiv", b"from vllm.utils import cdiv\n", b"from vllm.utils import ceil_div\n"),
    "module": ("unresolved-import vllm.old", b"import vllm.old\n", b"import vllm.new\n"),
    "from-module": ("unresolved-import vllm.old", b"from vllm.old import x\n", b"from vllm.new import x\n"),
    "relative": ("unresolved-import vllm.v1.old", b"from .old import x\n", b"from .new import x\n"),
    "syntax": ("syntax", b"def f(:\n", b"def f():\n    pass\n"),
}


@pytest.mark.parametrize("form", sorted(READINGS))
def test_each_kind_of_accepted_problem_is_read_again_offline(form: str) -> None:
    problem, broken, fixed = READINGS[form]
    assert holding((problem,), broken) == [problem]
    assert holding((problem,), fixed) == []


def test_a_file_that_does_not_parse_keeps_every_problem_and_an_unknown_kind_is_kept() -> None:
    problems = ("undefined-name logging", "unresolved-import cdiv")
    assert holding(problems, b"def f(:\n") == list(problems)
    assert holding(("something-new x",), b"x = 1\n") == ["something-new x"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('problems = ["Undefined-Name x"]', "is not '<kind> <name>'"),
        ('problems = ["undefined-name a b"]', "is not '<kind> <name>'"),
        ("problems = [1]", "is not '<kind> <name>'"),
        ("problems = 'x'", "must be an array of strings"),
        ('reason = 1\nproblems = ["syntax"]', "reason"),
    ],
)
def test_a_bad_accepted_record_is_refused_with_its_field(
    invoke: Invoke, tmp_path: Path, upstream: Upstream, value: str, message: str
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": LOGS})
    lock = root / "lockfile.toml"
    head = "" if value.startswith("reason") else 'reason = "r"\n'
    lock.write_text(lock.read_text() + "\n[patches.accepted]\n" + head + value + "\n")
    r = invoke("check", repo=root)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "accepted" in r.stderr and message in r.stderr and "Traceback" not in r.stderr
