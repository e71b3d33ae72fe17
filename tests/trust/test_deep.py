"""``check --deep``: imports of overlays and modules against the pinned upstream tree (git and dir upstreams)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Invoke, git
from tests.test_rebase import Upstream, make_deploy
from tests.trust.test_broken import UTILS, WORKER

RENAMED = UTILS.replace(b"cdiv", b"ceil_div")
PATCHED = (
    WORKER.replace(b"import torch\n", b"import torch\n\nfrom vllm.utils import cdiv\nfrom vllm.utils import ceil_div\n")
    + b"\n\ndef fence(stream):\n    stream.synchronize()\n"
)
EXTRA = b"from vllm.worker import fence\n\nfrom .utils import round_up\nfrom .worker import Restorer, nope\n"


def add_module(invoke: Invoke, root: Path, tmp_path: Path) -> None:
    src = tmp_path / "edits" / "extra.py"
    src.write_bytes(EXTRA)
    r = invoke(
        "add", str(src), "--kind", "module", "--name", "extra",
        "--target", "/usr/lib/python3/dist-packages/vllm/extra.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr


def deep(invoke: Invoke, root: Path) -> tuple[int, list[tuple[str, str, int | None, str]]]:
    r = invoke("check", "--deep", "--format", "json", repo=root)
    doc = json.loads(r.stdout)
    found = [
        (f["severity"], f["file"], f["line"], f["message"]) for f in doc["findings"] if f["code"] == "import-unresolved"
    ]
    return r.exit_code, found


def test_deep_check_of_a_git_upstream(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/__init__.py": b"", "vllm/worker.py": WORKER, "vllm/utils.py": RENAMED})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    add_module(invoke, root, tmp_path)
    assert invoke("check", repo=root).exit_code == 0  # the offline check cannot see it
    code, found = deep(invoke, root)
    assert code == 1
    line = PATCHED.split(b"\n").index(b"from vllm.utils import cdiv") + 1
    assert found == [
        (
            "error", "patches/worker.py", line,
            f"from vllm.utils import cdiv: the pinned upstream 'vllm' ({c1[:12]}): vllm/utils.py defines no 'cdiv' "
            "(patch 'worker')",
        ),
        (
            "error", "patches/extra.py", 4,
            f"from .worker import nope: the pinned upstream 'vllm' ({c1[:12]}): vllm/worker.py defines no 'nope' "
            "(patch 'extra')",
        ),
    ]  # fmt: skip
    # ``fence`` is the overlay's own (laid over the tree); round_up and Restorer are upstream's.
    text = invoke("check", "--deep", repo=root)
    assert "patches/worker.py:" in text.stdout and "fix: import the name as the pinned upstream" in text.stdout


def test_deep_check_of_a_directory_upstream(invoke: Invoke, tmp_path: Path) -> None:
    tree = tmp_path / "site" / "vllm"
    tree.mkdir(parents=True)
    (tree / "__init__.py").write_bytes(b"from .utils import *\n")
    (tree / "utils.py").write_bytes(RENAMED)
    (tree / "worker.py").write_bytes(WORKER)
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    r = invoke("upstream", "add", "vllm", "--dir", str(tmp_path / "site"), repo=root)
    assert r.exit_code == 0, r.stderr
    edits = tmp_path / "edits"
    edits.mkdir()
    # Star re-exports are followed: ``from vllm import ceil_div`` resolves through vllm/__init__.py.
    patched = WORKER.replace(b"import torch\n", b"import torch\n\nfrom vllm import ceil_div, cdiv\n")
    (edits / "worker.py").write_bytes(patched)
    r = invoke(
        "add", str(edits / "worker.py"), "--name", "worker",
        "--target", "/usr/lib/python3/dist-packages/vllm/worker.py",
        "--upstream", "vllm", "--upstream-path", "vllm/worker.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    git(root, "init", "-q")
    code, found = deep(invoke, root)
    assert code == 1
    line = patched.split(b"\n").index(b"from vllm import ceil_div, cdiv") + 1
    assert [(s, f, ln) for s, f, ln, _ in found] == [("error", "patches/worker.py", line)]
    assert "from vllm import cdiv: " in found[0][3] and "vllm/__init__.py defines no 'cdiv'" in found[0][3]
    # Fixed: the deep check passes.
    (root / "patches/worker.py").write_bytes(patched.replace(b", cdiv", b""))
    assert invoke("lock", repo=root).exit_code == 0
    assert deep(invoke, root) == (0, [])
