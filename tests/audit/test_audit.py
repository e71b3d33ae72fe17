"""``patchkit audit``: the report's content, its escaping, and the HTML page in a real headless browser."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.core import diffs
from tests.audit.conftest import GitHubStandIn, Tracked
from tests.conftest import Invoke, copy_shipped, snapshot

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_shipped_deployment_offline(tmp_path: Path, invoke: Invoke) -> None:
    root = copy_shipped(tmp_path / "shipped")
    before = snapshot(root)
    r = invoke("audit", "--format", "json", repo=root)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["deployment"] == "deepseek-v4-flash-mi300x"
    assert [i["name"] for i in doc["images"]] == ["caddy", "vllm"]
    assert doc["model"]["value"] == "7872f01b1d1fe23eabc4c98b48bffcef5a386062"
    patches = {p["name"]: p for p in doc["patches"]}
    assert set(patches) == {
        "kv-restore-fence", "dsv4-indexer-fnuz", "aiter-dsv4-blockscale-gemm",  # diff-only against vLLM and AITER
        "runtime-guard", "aiter-merge-dir", "aiter-private-merge",  # ours: committed in patches/
    }  # fmt: skip
    fence = patches["kv-restore-fence"]
    parsed = diffs.parse((root / "upstream/kv-restore-fence.diff").read_bytes())[0]
    assert (fence["added"], fence["removed"]) == (parsed.added, parsed.removed)
    assert fence["diff"] == (root / "upstream/kv-restore-fence.diff").read_text()
    assert fence["base"]["link"] == "https://pypi.org/project/vllm/0.26.0/"
    assert [r["ref"] for r in fence["refs"]] == ["vllm-project/vllm#47282", "vllm-project/vllm#47291"]
    assert fence["standing"] == "unchecked"
    # An empty cache: the hashes are verified, the materialized file cannot be.
    assert [v["status"] for v in fence["verification"]] == ["ok", "unverified"]
    assert doc["summary"]["patches_by_kind"] == {"overlay": 3, "module": 2, "transformer": 1}
    assert doc["summary"]["check_ok"] is True
    assert snapshot(root) == before  # the report is written only where asked

    out = tmp_path / "report.md"
    r = invoke("audit", "-o", str(out), repo=root)  # the format follows the suffix
    assert r.exit_code == 0
    md = out.read_text()
    assert md.startswith("## Audit of `deepseek-v4-flash-mi300x`")
    assert "#### `kv-restore-fence` (overlay)" in md and "```diff\n--- a/vllm/v1/kv_offload" in md
    assert "[vllm-project/vllm#47291](https://github.com/vllm-project/vllm/issues/47291): **never checked**" in md


def test_report_escapes_everything(deploy: Path, invoke: Invoke, tmp_path: Path) -> None:
    (deploy / "patches" / "evil.py").write_bytes(b"x = '</td></tr></table><img src=http://127.0.0.1:9/x>'\n")
    r = invoke(
        "add", str(deploy / "patches" / "evil.py"), "--target", "/opt/evil.py",
        "--reason", "<script>alert(1)</script> & more", repo=deploy,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    html = invoke("audit", repo=deploy).stdout
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html
    assert "&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;img src=http://127.0.0.1:9/x&gt;" in html


def test_drop_candidate_in_the_report(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.pull("vllm-project/vllm", 47291, merged=True, merge_commit=tracked.fix, title="Fence KV restores")
    github.issue("vllm-project/vllm", 47282)
    assert invoke("refs", "--refresh", repo=tracked.root).exit_code == 0
    sent = len(github.requests)
    md = invoke("audit", "--format", "markdown", repo=tracked.root).stdout
    assert "**Drop candidates:** `kv-restore-fence`" in md
    assert f"**merged; in the pinned vllm {tracked.pinned[:12]}** (checked just now)" in md
    # A file:// upstream has no web page to link; the base age comes from the cached clone.
    assert f"Base: vllm {tracked.pinned[:12]} vllm/v1/kv_offload/cpu/gpu_worker.py — at the pinned vllm commit" in md
    assert len(github.requests) == sent  # the audit is offline


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[bytes]:
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions",
        # Nothing leaves this machine, whatever the browser itself would like to contact.
        "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
        f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, timeout=90, check=False, env={**os.environ, "TZ": "UTC"})


def _page_requests(netlog: Path) -> list[str]:
    """URLs the page asked for: requests with an initiator (the browser's own have 'not an origin')."""
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [
        e["params"]["url"]
        for e in log["events"]
        if e["type"] == start and "url" in e.get("params", {}) and e["params"].get("initiator") != "not an origin"
    ]


@pytest.mark.slow
def test_html_report_in_a_headless_browser(
    tracked: Tracked, github: GitHubStandIn, invoke: Invoke, tmp_path: Path
) -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    github.pull("vllm-project/vllm", 47291, merged=True, merge_commit=tracked.fix, title="Fence KV restores")
    github.issue("vllm-project/vllm", 47282, title="KV restore races compute")
    assert invoke("refs", "--refresh", repo=tracked.root).exit_code == 0
    report = tmp_path / "report.html"
    r = invoke("audit", "-o", str(report), repo=tracked.root)
    assert r.exit_code == 0, r.stderr

    shot, netlog = tmp_path / "report.png", tmp_path / "net.json"
    run = _chromium(
        f"--log-net-log={netlog}", f"--screenshot={shot}", "--window-size=1280,2400", report.as_uri(),
        profile=tmp_path / "profile",
    )  # fmt: skip
    assert shot.is_file(), run.stderr.decode(errors="replace")[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert _page_requests(netlog) == []

    dom = _chromium("--dump-dom", report.as_uri(), profile=tmp_path / "profile").stdout.decode()
    for name in ("kv-restore-fence", "fp8_fnuz"):
        assert f'<section class="patch" id="p-{name}">' in dom
    assert "drop-candidate" in dom and "Fence KV restores" in dom

    # The network check is not vacuous: a page that loads an image is caught.
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><img src="http://127.0.0.1:9/pixel.png">')
    _chromium(f"--log-net-log={netlog}", "--dump-dom", control.as_uri(), profile=tmp_path / "profile")
    assert _page_requests(netlog) == ["http://127.0.0.1:9/pixel.png"]
