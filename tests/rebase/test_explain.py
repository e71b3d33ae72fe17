"""A patch that cannot move is explained by the upstream commits (and PRs) that touched its lines."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import Invoke

from patchkit.core.values import Sha256, UpstreamPath
from patchkit.lockfile.model import Base
from patchkit.rebase import explain
from patchkit.rebase.merge import Outcome, rebase_file
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy, rebase_json


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


FENCE = b"        for b in blocks:\n"
PATCHED = WORKER.replace(FENCE, b"        self.stream.synchronize()\n" + FENCE)


def _history(upstream: Upstream) -> tuple[str, dict[str, str]]:
    """A base commit, then commits that touch the patch's lines (with PRs) and some that do not."""
    c1 = upstream.commit({"vllm/worker.py": WORKER}, "Initial worker")
    other = WORKER.replace(b'block.to("cuda", non_blocking=True)', b'block.to("cuda", non_blocking=False)')
    shas = {"copy": upstream.commit({"vllm/worker.py": other}, "[ROCm] Blocking copy (#11111)")}
    synced = other.replace(FENCE, b"        torch.cuda.current_stream().synchronize()\n" + FENCE)
    shas["sync"] = upstream.commit({"vllm/worker.py": synced}, "[Core] Sync before restore (#22222)")
    shas["docs"] = upstream.commit({"docs/README.md": b"docs\n"}, "[Docs] Worker (#44444)")
    again = synced.replace(b"torch.cuda.current_stream().synchronize()", b"torch.cuda.synchronize()")
    shas["again"] = upstream.commit({"vllm/worker.py": again}, "[Core] Simpler sync (#33333)")
    offload = again.replace(b"return [b.cpu() for b in blocks]", b"return [b.to('cpu') for b in blocks]")
    shas["offload"] = upstream.commit({"vllm/worker.py": offload}, "[Perf] Offload with to() (#55555)")
    return c1, shas


def test_a_conflict_names_the_commits_and_prs_that_touched_its_lines(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1, shas = _history(upstream)
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    summary = tmp_path / "summary.md"
    code, doc = rebase_json(invoke, root, "--onto", shas["offload"], "--summary", str(summary))
    assert code == 1
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert entry["outcome"] == "conflict"
    changes = entry["upstream_changes"]
    assert [(c["commit"], c["pr"]) for c in changes["commits"]] == [(shas["again"], 33333), (shas["sync"], 22222)]
    assert changes["to"] == shas["offload"] and changes["more_commits"] == 0
    md = summary.read_text()
    assert "#33333" in md and "#22222" in md
    assert not any(f"#{n}" in md for n in (11111, 44444, 55555))
    invoke("rebase", "--abort", repo=root)
    text = invoke("rebase", "--onto", shas["offload"], repo=root)
    assert f"upstream {shas['again'][:12]} [Core] Simpler sync (#33333)" in text.stdout
    assert "#11111" not in text.stdout and "#55555" not in text.stdout


def test_the_commits_are_found_across_an_upstream_rename(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1, _ = _history(upstream)
    upstream.move("vllm/worker.py", "vllm/v1/worker.py")
    moved = (upstream.path / "vllm/v1/worker.py").read_bytes()
    last = upstream.commit(
        {"vllm/v1/worker.py": moved.replace(b"torch.cuda.synchronize()", b"torch.accelerator.synchronize()")},
        "[HW] Accelerator-neutral sync (#66666)",
    )
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    code, doc = rebase_json(invoke, root, "--onto", last)
    assert code == 1
    (entry,) = doc["patches"]  # type: ignore[misc]
    assert entry["new_path"] == "vllm/v1/worker.py" and entry["outcome"] == "conflict"
    prs = [c["pr"] for c in entry["upstream_changes"]["commits"]]
    assert prs[0] == 66666 and 33333 in prs and 22222 in prs and 11111 not in prs


def test_a_clean_rebase_explains_nothing(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    c2 = upstream.commit({"docs/x.md": b"x\n"}, "Docs (#1)")
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0 and doc["patches"][0]["upstream_changes"] is None  # type: ignore[index]


def test_the_list_is_capped_and_the_rest_counted(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    data = WORKER
    for i in range(explain.MAX_COMMITS + 3):
        data = WORKER.replace(FENCE, f"        torch.cuda.synchronize({i})\n".encode() + FENCE)
        last = upstream.commit({"vllm/worker.py": data}, f"Sync {i} (#{1000 + i})")
    code, doc = rebase_json(invoke, root, "--onto", last)
    changes = doc["patches"][0]["upstream_changes"]  # type: ignore[index]
    assert code == 1 and len(changes["commits"]) == explain.MAX_COMMITS and changes["more_commits"] == 3
    assert changes["commits"][0]["pr"] == 1000 + explain.MAX_COMMITS + 2


def test_a_wheel_or_an_image_says_the_version_range() -> None:
    theirs = WORKER.replace(FENCE, b"        torch.cuda.synchronize()\n" + FENCE)
    merge = rebase_file(WORKER, PATCHED, theirs, path="vllm/worker.py")
    assert merge.outcome is Outcome.CONFLICT
    result = SimpleNamespace(name="worker", outcome=merge.outcome, merge=merge)
    base = Base(upstream="vllm", path=UpstreamPath("vllm/worker.py"), sha256=Sha256("0" * 64), version="0.26.0")
    for kind in ("wheel", "image"):
        new = SimpleNamespace(pin=SimpleNamespace(kind=kind, version="0.27.0"))
        up = SimpleNamespace(source=kind, version="0.26.0", wheel_version="0.26.0")
        found = explain.causes(up, new, {"worker": base}, [result], {"worker": (WORKER, PATCHED, theirs, "x")})
        cause = found["worker"]
        assert cause.versions == ("0.26.0", "0.27.0") and not cause.commits
        assert cause.lines() == ["upstream changed it between 0.26.0 and 0.27.0 (no history in a wheel or an image)"]
        assert json.dumps(cause.as_dict())


def test_pr_numbers_and_github_links() -> None:
    assert explain.pr_number("[Core] Fix (#12345)") == 12345
    assert explain.pr_number('Revert "[Core] Fix (#12345)" (#12400)') == 12400
    assert explain.pr_number("no pull request") is None
    assert explain.github_repo("https://github.com/vllm-project/vllm.git") == "vllm-project/vllm"
    assert explain.github_repo("git@github.com:vllm-project/vllm") == "vllm-project/vllm"
    assert explain.github_repo("https://gitlab.com/a/b") is None
    touch = explain.Touch("a" * 40, "[Core] Fix | pipes (#12345)", 12345)
    cause = explain.Cause("p", "b" * 40, "c" * 40, (touch,), github="vllm-project/vllm")
    assert cause.markdown() == "upstream changes: `aaaaaaaaaaaa` [Core] Fix \\| pipes (vllm-project/vllm#12345)"
    elsewhere = explain.Cause("p", "b" * 40, "c" * 40, (touch,))
    assert elsewhere.markdown().endswith("pipes (`#12345`)")  # not a link to the deployment's own issue 12345


def test_the_summary_written_at_continue_still_names_the_commits(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1, shas = _history(upstream)
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    code, doc = rebase_json(invoke, root, "--onto", shas["offload"])
    assert code == 1
    work = root / doc["work_files"][0]  # type: ignore[index]
    work.write_bytes((upstream.path / "vllm/worker.py").read_bytes())
    summary = tmp_path / "summary.md"
    done = invoke("rebase", "--continue", "--summary", str(summary), repo=root)
    assert done.exit_code == 0, done.stderr
    assert "#33333" in summary.read_text() and "#22222" in summary.read_text()


def test_a_damaged_explanation_in_the_saved_state_is_left_out(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    c1, shas = _history(upstream)
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": PATCHED})
    code, doc = rebase_json(invoke, root, "--onto", shas["offload"])
    assert code == 1
    state = root / ".patchkit" / "rebase" / "state.json"
    saved = json.loads(state.read_text())
    saved["causes"]["worker"]["commits"] = [{"commit": "../../etc", "subject": 1, "pr": "x"}]
    state.write_text(json.dumps(saved))
    (root / doc["work_files"][0]).write_bytes(PATCHED)  # type: ignore[index]
    summary = tmp_path / "summary.md"
    done = invoke("rebase", "--continue", "--summary", str(summary), repo=root)
    assert done.exit_code == 0, done.stderr
    assert "../../etc" not in summary.read_text() and "upstream changes" not in summary.read_text()
