"""The audit's one verdict per patch: the table and the section agree, and a patch fails only on its own files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import Invoke, git
from tests.importing.conftest import build


def _adopted(tmp_path: Path, invoke: Invoke) -> Path:
    """A hand-kept repository as ``patchkit import`` adopts it: multi-file diffs, a chain of two, a stale part."""
    root = build(tmp_path / "deploy").root
    git(root, "init", "-q")
    r = invoke("import", str(root), repo=root)
    assert r.exit_code in (0, 1), r.stderr
    return root


def test_table_and_sections_give_one_true_verdict(tmp_path: Path, invoke: Invoke) -> None:
    root = _adopted(tmp_path, invoke)
    r = invoke("audit", "--format", "json", repo=root)
    assert r.exit_code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    patches = {p["name"]: p for p in doc["patches"]}
    verdicts = {n: p["status"] for n, p in patches.items()}
    assert verdicts == {
        "kv-restore-fence": "failed",  # its own second diff is against the earlier overlay (diff-incremental)
        "fnuz-indexer": "failed",  # its own diff's hunk counts are wrong
        "sampler": "failed",  # its part of the shared diff 03 no longer reproduces it
        "new-helper": "unverified",  # shares diff 03 with the stale sampler part: not its failure
        "rope-fix": "unverified",  # no diff at all (+0 -0): nothing to verify, not a failure
        "transform-moe": "ok",
    }
    for name, p in patches.items():
        rows = {v["status"] for v in p["verification"]}
        assert (p["status"] == "failed") == ("failed" in rows), name
        own = {p["file"], p["diff_file"]} | {v["file"].split(":")[0] for v in p["verification"]}
        for v in p["verification"]:
            if v["status"] == "failed":
                # The evidence is about this patch's own file, never a neighbour's.
                named = re.findall(r"patches/[\w./-]+\.py", v["detail"] or "")
                assert set(named) <= own, (name, v)
    helper = patches["new-helper"]
    assert not any("sampler.py" in (f["message"] or "") for f in helper["findings"])
    assert not any(f["code"] == "module-maybe-upstream" for f in patches["sampler"]["findings"])

    md = invoke("audit", "--format", "markdown", repo=root).stdout
    for name in patches:
        row = next(line for line in md.splitlines() if line.startswith(f"| `{name}` |"))
        section = md.split(f"#### `{name}` (")[1].split("#### `")[0]
        section_rows = [line for line in section.splitlines() if line.startswith("- ") and "`" in line]
        assert ("❌ failed" in row) == any(line.startswith("- ❌") for line in section_rows), name
    html = invoke("audit", "--format", "html", repo=root).stdout
    helper_html = html.split('id="p-new-helper"')[1].split("</section>")[0]
    assert "check failed" not in helper_html and "b-failed" not in helper_html
