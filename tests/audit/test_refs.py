"""``patchkit refs`` and ``check --online``: what is recorded, drop candidates, moved heads, failures."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from patchkit.core.values import Reference, Revision
from patchkit.lockfile.model import RefState
from patchkit.lockfile.reader import loads
from patchkit.tracking.refs import Landing, PatchStanding, age, assess
from tests.audit.conftest import GitHubStandIn, Tracked
from tests.conftest import Invoke, snapshot

PR = "vllm-project/vllm#47291"
ISSUE = "vllm-project/vllm#47282"
HEAD = "5dc644f774842432f9749ea68e04f9fd1014e6e1"


def _states(t: Tracked) -> dict[str, object]:
    lock = loads((t.root / "lockfile.toml").read_text())
    return {s.ref.text: s for s in lock.refs}


def test_refresh_records_states_and_sums(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.pull("vllm-project/vllm", 47291, head=HEAD, title="[ROCm] Fence KV restores")
    github.issue("vllm-project/vllm", 47282, title="KV restore races compute")
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert r.exit_code == 0, r.stderr
    assert "wrote lockfile.toml" in r.stdout and "GitHub API: 57 of 60 requests left" in r.stdout
    states = _states(tracked)
    pr, issue = states[PR], states[ISSUE]
    assert (pr.state, pr.kind, str(pr.head_commit), pr.title) == ("open", "pull", HEAD, "[ROCm] Fence KV restores")
    assert (issue.state, issue.kind) == ("open", "issue")
    checked = dt.datetime.fromisoformat(pr.checked_at.replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.UTC) - checked).total_seconds()) < 60
    # Recorded through the same transaction as every write: check still passes (lockfile canonical, sums match).
    assert invoke("check", repo=tracked.root).exit_code == 0

    # Unchanged answers: conditional requests, 304s, no rate limit spent, nothing written.
    before, remaining = snapshot(tracked.root), github.remaining
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert r.exit_code == 0, r.stderr
    assert "recorded states are up to date" in r.stdout and "[not-modified]" in r.stdout
    assert snapshot(tracked.root) == before and github.remaining == remaining
    assert all("If-None-Match" in h for _, h in github.requests[-2:])


def test_offline_shows_recorded_state_and_age(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.pull("vllm-project/vllm", 47291, head=HEAD)
    github.issue("vllm-project/vllm", 47282)
    assert invoke("refs", "--refresh", repo=tracked.root).exit_code == 0
    sent = len(github.requests)
    r = invoke("refs", "--format", "json", repo=tracked.root)
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    (fence,) = [p for p in doc["patches"] if p["patch"] == "kv-restore-fence"]
    assert fence["standing"] == "waiting-upstream"
    assert {x["ref"]: x["age"] for x in fence["refs"]} == {ISSUE: "just now", PR: "just now"}
    assert len(github.requests) == sent  # offline: not one request


def test_age() -> None:
    now = dt.datetime(2025, 8, 10, 12, tzinfo=dt.UTC)
    assert age("2025-08-04T09:15:00Z", now) == "6 days ago"
    assert age("2025-08-10T11:00:00Z", now) == "1 hour ago"
    assert age(None, now) is None and age("yesterday", now) is None


def test_merged_fix_in_the_pin_is_a_drop_candidate(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.pull("vllm-project/vllm", 47291, merged=True, merge_commit=tracked.fix, head=HEAD)
    github.issue("vllm-project/vllm", 47282, state="closed")
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert r.exit_code == 0, r.stderr
    assert f"{PR}: merged; in the pinned vllm {tracked.pinned[:12]}" in r.stdout
    assert "drop candidates: kv-restore-fence" in r.stdout
    assert str(_states(tracked)[PR].merge_commit) == tracked.fix

    # check --online reports it (a note: nothing is broken), with the line of the reference.
    before = snapshot(tracked.root)
    r = invoke("check", "--online", "--format", "json", repo=tracked.root)
    assert r.exit_code == 0, r.stdout
    (drop,) = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "drop-candidate"]
    assert drop["severity"] == "note" and drop["field"] == "patches[kv-restore-fence].refs[1]"
    lines = (tracked.root / "lockfile.toml").read_text().splitlines()
    assert lines[drop["line"] - 1] == "refs = [" and f'"{PR}",' in lines[drop["line"] + 1]
    assert snapshot(tracked.root) == before  # check never records


def test_merged_after_the_pin_is_not_a_drop_candidate(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.pull("vllm-project/vllm", 47291, merged=True, merge_commit=tracked.later)
    github.issue("vllm-project/vllm", 47282)
    r = invoke("refs", "--refresh", "--format", "json", repo=tracked.root)
    assert r.exit_code == 0, r.stderr
    (fence,) = [p for p in json.loads(r.stdout)["patches"] if p["patch"] == "kv-restore-fence"]
    assert fence["standing"] == "merged-after-pin" and not fence["drop_candidate"]
    pr = next(x for x in fence["refs"] if x["ref"] == PR)
    assert pr["landing"] == Landing.AFTER_PIN.value


def test_head_moved_is_reported(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.pull("vllm-project/vllm", 47291, head=HEAD)
    github.issue("vllm-project/vllm", 47282)
    assert invoke("refs", "--refresh", repo=tracked.root).exit_code == 0
    pushed = "6" * 40
    github.pull("vllm-project/vllm", 47291, head=pushed)  # a force-push: new head, new ETag
    r = invoke("check", "--online", repo=tracked.root)
    assert r.exit_code == 0
    assert f"the head of {PR} moved from {HEAD[:12]} to {pushed[:12]}" in r.stdout
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert f"head moved: {PR} {HEAD[:12]} -> {pushed[:12]}" in r.stdout
    assert str(_states(tracked)[PR].head_commit) == pushed


def test_reference_not_found(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.issue("vllm-project/vllm", 47282)  # no #47291: 404
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert r.exit_code == 1
    assert f"not found: {PR} does not exist upstream" in r.stdout
    assert _states(tracked)[PR].state == "unknown"
    r = invoke("check", "--online", "--format", "json", repo=tracked.root)
    assert r.exit_code == 1
    assert [f["code"] for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"] == ["ref-not-found"]


def test_rate_limited_keeps_what_was_learned(tracked: Tracked, github: GitHubStandIn, invoke: Invoke) -> None:
    github.issue("vllm-project/vllm", 47282)
    github.pull("vllm-project/vllm", 47291)
    github.remaining = 1  # enough for the issue (asked first, sorted), not for the pull request
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert r.exit_code == 3
    assert "rate limit is used up until 2030-03-17 17:46:40 UTC" in r.stderr and "GITHUB_TOKEN" in r.stderr
    assert "Traceback" not in r.stderr
    states = _states(tracked)
    assert states[ISSUE].state == "open" and PR not in states
    assert invoke("check", repo=tracked.root).exit_code == 0
    # check --online cannot complete: exit 3, not a pass.
    assert invoke("check", "--online", repo=tracked.root).exit_code == 3


def test_unreachable_github_fails_only_when_asked(
    tracked: Tracked, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")
    before = snapshot(tracked.root)
    assert invoke("refs", repo=tracked.root).exit_code == 0  # offline: fine
    r = invoke("refs", "--refresh", repo=tracked.root)
    assert r.exit_code == 3 and "cannot reach http://127.0.0.1:9" in r.stderr
    assert snapshot(tracked.root) == before


def test_merged_without_a_git_upstream_is_containment_unknown(tracked: Tracked) -> None:
    lock = loads((tracked.root / "lockfile.toml").read_text())
    lock = dataclasses.replace(lock, refs=(RefState(Reference(PR), "merged", merge_commit=Revision(tracked.fix)),))
    (fence,) = [p for p in assess(lock, None, dt.datetime.now(dt.UTC)) if p.patch == "kv-restore-fence"]
    assert fence.standing is PatchStanding.MERGED_UNKNOWN and not fence.drop_candidate
