"""Merged files that would fail at import time are ``broken``: real git upstreams, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Invoke, snapshot
from tests.rebase.test_overlays import Upstream, make_deploy, outcomes, rebase_json

# An upstream file whose module-level logger upstream moves to its own helper, far from the patch.
WORKER = b"""import logging

import torch

logger = logging.getLogger(__name__)


def offload(blocks):
    return [b.cpu() for b in blocks]


def count(blocks):
    return len(blocks)


class Restorer:
    def __init__(self, stream):
        self.stream = stream

    def restore(self, blocks):
        for b in blocks:
            self.copy(b)
        return len(blocks)

    def copy(self, block):
        block.to("cuda", non_blocking=True)
"""
# The patch logs through the stdlib module it imports.
PATCHED = WORKER.replace(
    b"    def restore(self, blocks):\n",
    b'    def restore(self, blocks):\n        logging.debug("restoring %d blocks", len(blocks))\n',
)
# Upstream drops ``import logging`` and uses its own logger helper instead.
NO_LOGGING = WORKER.replace(b"import logging\n\n", b"").replace(
    b"logger = logging.getLogger(__name__)\n",
    b"from vllm.logger import init_logger\n\nlogger = init_logger(__name__)\n",
)
LOGGER = b"import logging\n\n\ndef init_logger(name):\n    return logging.getLogger(name)\n"

UTILS = b"def cdiv(a, b):\n    return -(a // -b)\n\n\ndef round_up(x, n):\n    return cdiv(x, n) * n\n"
RENAMED = UTILS.replace(b"cdiv", b"ceil_div")


def test_clean_merge_that_drops_a_used_import_is_broken(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/logger.py": LOGGER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"vllm/worker.py": NO_LOGGING})
    before = snapshot(root)
    summary = tmp_path / "summary.md"
    code, doc = rebase_json(invoke, root, "--onto", c2, "--summary", str(summary))
    assert code == 1 and outcomes(doc) == {"worker": "broken"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    merged = (root / ".patchkit/rebase/broken/worker/worker.py").read_bytes()
    use = merged.split(b"\n").index(b'        logging.debug("restoring %d blocks", len(blocks))') + 1
    assert [(p["kind"], p["name"], p["line"]) for p in entry["problems"]] == [("undefined-name", "logging", use)]
    assert doc["work_files"] == [".patchkit/rebase/broken/worker/worker.py"]
    assert doc["committed"] is False and doc["blocked"] == ["worker"]
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == before
    text = summary.read_text()
    assert "| `worker` | broken | line " in text and "undefined-name `logging`" in text

    # The plain text says where and what.
    invoke("rebase", "--abort", repo=root)
    r = invoke("rebase", "--onto", c2, repo=root)
    assert r.exit_code == 1
    assert f"broken: vllm/worker.py:{use}: name 'logging' is used but not defined" in r.stdout
    assert "resolve .patchkit/rebase/broken/worker/worker.py" in r.stdout

    # --continue re-checks the file as it stands: still broken, refused, nothing written.
    refused = invoke("rebase", "--continue", repo=root)
    assert refused.exit_code == 1
    assert f".patchkit/rebase/broken/worker/worker.py:{use}: name 'logging' is used" in refused.stderr
    assert "--accept-broken worker --reason" in refused.stderr
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == before

    # Fixed in the work area: committed, and check passes.
    fixed = merged.replace(b"        logging.debug(", b"        logger.debug(")
    (root / ".patchkit/rebase/broken/worker/worker.py").write_bytes(fixed)
    done = invoke("rebase", "--continue", repo=root)
    assert done.exit_code == 0, done.stderr
    assert (root / "patches/worker.py").read_bytes() == fixed
    assert invoke("check", repo=root).exit_code == 0


def test_accept_broken_commits_with_the_reason_in_the_summary(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/logger.py": LOGGER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"vllm/worker.py": NO_LOGGING})
    missing = invoke("rebase", "--onto", c2, "--accept-broken", "worker", repo=root)
    assert missing.exit_code == 2 and "--accept-broken needs --reason" in missing.stderr
    wrong = invoke("rebase", "--onto", c2, "--accept-broken", "nope", "--reason", "x", repo=root)
    assert wrong.exit_code == 2 and "not a broken patch: nope (not in this rebase)" in wrong.stderr
    summary = tmp_path / "summary.md"
    code, doc = rebase_json(
        invoke, root, "--onto", c2, "--accept-broken", "worker", "--reason", "logging is injected by sitecustomize",
        "--summary", str(summary),
    )  # fmt: skip
    assert code == 0 and doc["committed"] is True and outcomes(doc) == {"worker": "broken"}
    assert doc["accepted_broken"] == {"worker": "logging is injected by sitecustomize"}
    assert b'logging.debug("restoring' in (root / "patches/worker.py").read_bytes()
    text = summary.read_text()
    assert "- `worker`: **accepted as broken**: logging is injected by sitecustomize" in text
    assert "name 'logging' is used but not defined" in text


def test_renamed_name_no_longer_resolves(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/utils.py": UTILS, "vllm/__init__.py": b""})
    patched = PATCHED.replace(
        b"import torch\n", b"import torch\n\nfrom vllm.utils import cdiv\nfrom .utils import round_up\n"
    )
    patched = patched.replace(b"        return len(blocks)\n", b"        return cdiv(len(blocks), 2)\n")
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": patched})
    # Upstream renames cdiv; worker.py itself is untouched upstream (outcome would be "unchanged").
    c2 = upstream.commit({"vllm/utils.py": RENAMED})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"worker": "broken"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    line = patched.split(b"\n").index(b"from vllm.utils import cdiv") + 1
    assert [(p["kind"], p["name"], p["line"]) for p in entry["problems"]] == [("unresolved-import", "cdiv", line)]
    assert (
        "from vllm.utils import cdiv: the new upstream's vllm/utils.py defines no 'cdiv'"
        in (entry["problems"][0]["message"])
    )
    # The relative import of a name that survives (round_up) resolves: no problem for it.
    invoke("rebase", "--abort", repo=root)

    # Upstream renames round_up too: the relative import is caught the same way.
    c3 = upstream.commit({"vllm/utils.py": RENAMED.replace(b"round_up", b"align")})
    code, doc = rebase_json(invoke, root, "--onto", c3)
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert [(p["name"], p["line"]) for p in entry["problems"]] == [("cdiv", line), ("round_up", line + 1)]
    assert "from .utils import round_up" in entry["problems"][1]["message"]


def test_module_gone_upstream_and_a_compiled_module(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/utils.py": UTILS})
    patched = PATCHED.replace(b"import torch\n", b"import torch\n\nimport vllm._C\nfrom vllm.utils import cdiv\n")
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": patched})
    c2 = upstream.move("vllm/utils.py", "vllm/math_utils.py")
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"worker": "broken"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    got = [(p["kind"], p["name"]) for p in entry["problems"]]
    # vllm._C has no Python source in either tree (a compiled extension): said, not blocking.
    assert got == [("unknown", "vllm._C"), ("unresolved-import", "vllm.utils")]
    assert (
        "module vllm.utils is gone from the new upstream (the old one had vllm/utils.py)"
        in (entry["problems"][1]["message"])
    )


def test_resolved_conflict_is_checked_at_continue(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    theirs = WORKER.replace(
        b"    def restore(self, blocks):\n",
        b"    def restore(self, blocks):\n        torch.cuda.current_stream().synchronize()\n",
    )
    c2 = upstream.commit({"vllm/worker.py": theirs})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"worker": "conflict"}
    work = root / ".patchkit/rebase/conflicts/worker/worker.py"
    before = snapshot(root)

    # A resolution with a syntax error: refused, with the line.
    bad = theirs.replace(b"        torch.cuda.current_stream().synchronize()\n", b"        torch.cuda.(\n")
    work.write_bytes(bad)
    line = bad.split(b"\n").index(b"        torch.cuda.(") + 1
    refused = invoke("rebase", "--continue", repo=root)
    assert refused.exit_code == 1
    assert f".patchkit/rebase/conflicts/worker/worker.py:{line}: does not parse: invalid syntax" in refused.stderr
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == {
        k: v for k, v in before.items() if not k.startswith(".patchkit/")
    }

    # A resolution that uses a name neither side defines: refused.
    undefined = theirs.replace(b"torch.cuda.current_stream().synchronize()", b"stream_fence(self.stream)")
    work.write_bytes(undefined)
    refused = invoke("rebase", "--continue", repo=root)
    assert refused.exit_code == 1 and "name 'stream_fence' is used but not defined" in refused.stderr
    assert not (root / "patches/worker.py").read_bytes().count(b"stream_fence")

    good = theirs.replace(b"torch.cuda.current_stream().synchronize()", b"self.stream.synchronize()")
    work.write_bytes(good)
    done = invoke("rebase", "--continue", "--format", "json", repo=root)
    assert done.exit_code == 0, done.stderr
    assert (root / "patches/worker.py").read_bytes() == good
    assert json.loads(done.stdout)


def test_clean_merge_stays_clean_without_flags(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/logger.py": LOGGER, "vllm/utils.py": UTILS})
    patched = PATCHED.replace(b"import torch\n", b"import torch\n\nfrom vllm.utils import cdiv\n")
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": patched})
    # Upstream keeps ``import logging`` but changes a function far from the patch, and adds to utils.
    c2 = upstream.commit(
        {
            "vllm/worker.py": WORKER.replace(
                b"    return len(blocks)\n\n\nclass", b"    return sum(1 for _ in blocks)\n\n\nclass"
            ),
            "vllm/utils.py": UTILS + b"\n\ndef floor_div(a, b):\n    return a // b\n",
        }
    )
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and outcomes(doc) == {"worker": "clean"}
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert entry["problems"] == [] and entry["review"] == []
    assert doc["committed"] is True


def test_status_and_accepting_at_continue(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER, "vllm/logger.py": LOGGER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"vllm/worker.py": NO_LOGGING})
    assert invoke("rebase", "--onto", c2, repo=root).exit_code == 1
    st = invoke("status", repo=root)
    assert "worker: .patchkit/rebase/broken/worker/worker.py (broken: fix it there; --continue checks it again)" in (
        st.stdout
    )
    summary = tmp_path / "summary.md"
    done = invoke(
        "rebase", "--continue", "--accept-broken", "worker", "--reason", "sitecustomize provides logging",
        "--summary", str(summary), repo=root,
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    assert "**accepted as broken**: sitecustomize provides logging" in summary.read_text()
    assert not (root / ".patchkit/rebase").exists()
