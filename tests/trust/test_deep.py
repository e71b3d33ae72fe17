"""``check --deep``: imports of overlays and modules against the pinned upstream tree (git and dir upstreams)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Invoke, git
from tests.rebase.test_overlays import Upstream, make_deploy
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


def _notes(invoke: Invoke, root: Path, *args: str) -> tuple[int, list[tuple[str, str, int | None, str]]]:
    r = invoke("check", *args, "--format", "json", repo=root)
    doc = json.loads(r.stdout)
    found = [(f["code"], f["file"], f["line"], f["message"]) for f in doc["findings"] if f["severity"] != "error"]
    return r.exit_code, [f for f in found if f[0] in ("undefined-name", "import-unresolved")]


def test_an_accepted_broken_merge_stays_visible(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    from tests.trust.test_broken import LOGGER, NO_LOGGING
    from tests.trust.test_broken import PATCHED as LOGS
    from tests.trust.test_broken import WORKER as LOGGED

    c1 = upstream.commit({"vllm/__init__.py": b"", "vllm/worker.py": LOGGED, "vllm/logger.py": LOGGER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": LOGS})
    assert _notes(invoke, root) == (0, [])  # the patch defines what it uses
    c2 = upstream.commit({"vllm/worker.py": NO_LOGGING})
    r = invoke("rebase", "--onto", c2, "--accept-broken", "worker", "--reason", "injected at start", repo=root)
    assert r.exit_code == 0, r.stderr
    merged = (root / "patches/worker.py").read_bytes()
    use = merged.split(b"\n").index(b'        logging.debug("restoring %d blocks", len(blocks))') + 1
    want = [
        (
            "undefined-name", "patches/worker.py", use,
            f"name 'logging' is undefined (its upstream file defines it): a NameError when line {use} runs "
            "(patch 'worker')",
        )
    ]  # fmt: skip
    assert _notes(invoke, root) == (0, want)  # offline: against the pinned base, rebuilt from the diff
    assert _notes(invoke, root, "--deep") == (0, want)  # said once, not once per check


def test_each_file_is_checked_only_against_the_upstream_that_ships_it(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    # Two upstreams installed side by side in dist-packages: vLLM (git) and AITER (a directory).
    c1 = upstream.commit({"vllm/__init__.py": b"", "vllm/worker.py": WORKER, "vllm/utils.py": UTILS})
    patched = WORKER.replace(b"import torch\n", b"import torch\n\nfrom vllm.utils import cdiv\n")
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": patched})
    add_module(invoke, root, tmp_path)  # vllm/extra.py: a module in vLLM's package
    site = tmp_path / "aiter-site" / "aiter"
    site.mkdir(parents=True)
    (site / "__init__.py").write_bytes(b"")
    gemm = b"import math\n\n\ndef gemm(a):\n    return math.ceil(a)\n"
    (site / "gemm.py").write_bytes(gemm)
    assert invoke("upstream", "add", "aiter", "--dir", str(tmp_path / "aiter-site"), repo=root).exit_code == 0
    edited = tmp_path / "edits" / "gemm.py"
    edited.write_bytes(gemm.replace(b"math.ceil(a)", b"math.ceil(a) + 0"))
    r = invoke(
        "add", str(edited), "--name", "gemm", "--target", "/usr/lib/python3/dist-packages/aiter/gemm.py",
        "--upstream", "aiter", "--upstream-path", "aiter/gemm.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    _, found = _notes(invoke, root, "--deep")
    # Before, every vLLM file was also read in AITER's tree: "its base is not available … imports not checked".
    assert found == []
    _, errors = deep(invoke, root)
    assert [(f, m.split(":")[0]) for _, f, _, m in errors] == [
        ("patches/extra.py", "from vllm.worker import fence"),  # this overlay has no fence
        ("patches/extra.py", "from .worker import nope"),
    ]


def test_a_module_names_what_it_leaves_undefined(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/__init__.py": b"", "vllm/worker.py": WORKER, "vllm/utils.py": UTILS})
    root = make_deploy(invoke, tmp_path, upstream, c1, {})
    src = tmp_path / "edits" / "extra.py"
    src.write_bytes(b"def f():\n    return helper()\n")
    r = invoke("add", str(src), "--kind", "module", "--name", "extra",
               "--target", "/usr/lib/python3/dist-packages/vllm/extra.py", repo=root)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    code, found = _notes(invoke, root)
    assert code == 0 and [(c, f, ln) for c, f, ln, _ in found] == [("undefined-name", "patches/extra.py", 2)]
    assert "name 'helper' is undefined (nothing in the module defines it)" in found[0][3]
