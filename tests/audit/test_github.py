"""The GitHub adapter against the local stand-in: states, ETags, rate limits, timeouts."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from patchkit.core.values import Reference
from patchkit.errors import ExternalFailure
from patchkit.lockfile.model import RefState
from patchkit.net.github import AnswerStatus, GitHubTracker, RateLimited, web_url
from tests.audit.conftest import RESET_EPOCH, GitHubStandIn

PR = Reference("vllm-project/vllm#47291")
ISSUE = Reference("vllm-project/vllm#47282")
HEAD = "5dc644f774842432f9749ea68e04f9fd1014e6e1"
MERGE = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"


def test_open_pull_request_gives_head_and_no_merge_commit(github: GitHubStandIn) -> None:
    github.pull("vllm-project/vllm", 47291, head=HEAD, title="[ROCm] Fence KV restores")
    answer = GitHubTracker(github.url).fetch(PR, None)
    assert answer.status is AnswerStatus.FOUND and answer.state is not None
    s = answer.state
    assert (s.state, s.kind, s.title, str(s.head_commit)) == ("open", "pull", "[ROCm] Fence KV restores", HEAD)
    # GitHub's test-merge commit of an open PR is not a merge.
    assert s.merge_commit is None and s.merged_at is None
    assert s.etag and s.etag.startswith('W/"')
    # First the issues endpoint (it answers for PRs too), then the pull request itself.
    assert github.paths() == ["/repos/vllm-project/vllm/issues/47291", "/repos/vllm-project/vllm/pulls/47291"]
    headers = github.requests[0][1]
    assert headers["Accept"] == "application/vnd.github+json" and "Authorization" not in headers


def test_merged_closed_and_issue_states(github: GitHubStandIn) -> None:
    github.pull("vllm-project/vllm", 47291, merged=True, merge_commit=MERGE, head=HEAD)
    github.pull("vllm-project/vllm", 5, state="closed")
    github.issue("vllm-project/vllm", 47282, state="closed", title="KV restore races compute")
    tracker = GitHubTracker(github.url)
    merged = tracker.fetch(PR, None).state
    assert merged is not None and merged.state == "merged"
    assert str(merged.merge_commit) == MERGE and merged.merged_at == "2025-08-01T10:00:00Z"
    closed = tracker.fetch(Reference("vllm-project/vllm#5"), None).state
    assert closed is not None and (closed.state, closed.merge_commit) == ("closed", None)
    issue = tracker.fetch(ISSUE, None).state
    assert issue is not None and (issue.state, issue.kind, issue.title) == (
        "closed",
        "issue",
        "KV restore races compute",
    )
    assert tracker.rate is not None and tracker.rate.remaining == 60 - 5


def test_commit_reference(github: GitHubStandIn) -> None:
    github.commit("vllm-project/vllm", MERGE)
    answer = GitHubTracker(github.url).fetch(Reference(f"https://github.com/vllm-project/vllm/commit/{MERGE}"), None)
    assert answer.state is not None
    assert (answer.state.kind, answer.state.state, answer.state.title) == ("commit", "merged", "Fix the race")
    assert str(answer.state.merge_commit) == MERGE


def test_recorded_etag_gives_not_modified_without_spending_the_limit(github: GitHubStandIn) -> None:
    github.pull("vllm-project/vllm", 47291, head=HEAD)
    tracker = GitHubTracker(github.url)
    first = tracker.fetch(PR, None).state
    assert first is not None
    spent = github.remaining
    again = tracker.fetch(PR, RefState(PR, "open", kind="pull", etag=first.etag, head_commit=first.head_commit))
    assert again.status is AnswerStatus.NOT_MODIFIED
    # A known pull request goes straight to /pulls/N, with the validator.
    path, headers = github.requests[-1]
    assert path == "/repos/vllm-project/vllm/pulls/47291" and headers["If-None-Match"] == first.etag
    assert github.remaining == spent


def test_not_found(github: GitHubStandIn) -> None:
    answer = GitHubTracker(github.url).fetch(Reference("vllm-project/vllm#99999999"), None)
    assert answer.status is AnswerStatus.NOT_FOUND and answer.state is None


def test_rate_limit_reported_and_respected(github: GitHubStandIn) -> None:
    github.pull("vllm-project/vllm", 47291)
    github.remaining = 0
    tracker = GitHubTracker(github.url)
    with pytest.raises(RateLimited) as e:
        tracker.fetch(PR, None)
    assert e.value.retry_at == dt.datetime.fromtimestamp(RESET_EPOCH, dt.UTC)
    assert "rate limit is used up until 2030-03-17 17:46:40 UTC" in e.value.message
    assert "GITHUB_TOKEN" in (e.value.hint or "")
    assert e.value.exit_code == 3
    sent = len(github.requests)
    # The tracker knows the limit is used up: it does not send another request before the reset.
    with pytest.raises(RateLimited):
        tracker.fetch(ISSUE, None)
    assert len(github.requests) == sent


def test_token_is_sent(github: GitHubStandIn) -> None:
    github.pull("vllm-project/vllm", 47291)
    GitHubTracker(github.url, token="ghp_test").fetch(PR, None)
    assert github.requests[0][1]["Authorization"] == "Bearer ghp_test"


def test_slow_answer_times_out(github: GitHubStandIn) -> None:
    github.pull("vllm-project/vllm", 47291)
    github.delay["/repos/vllm-project/vllm/issues/47291"] = 1.5
    start = time.monotonic()
    with pytest.raises(ExternalFailure, match=r"did not answer within 0\.3 s"):
        GitHubTracker(github.url, timeout=0.3).fetch(PR, None)
    assert time.monotonic() - start < 1.4


def test_unreachable_api() -> None:
    with pytest.raises(ExternalFailure, match=r"cannot reach http://127\.0\.0\.1:9"):
        GitHubTracker("http://127.0.0.1:9", timeout=2).fetch(PR, None)


def test_web_url() -> None:
    assert web_url(PR) == "https://github.com/vllm-project/vllm/issues/47291"
    commit = Reference(f"https://github.com/vllm-project/vllm/commit/{MERGE}")
    assert web_url(commit) == commit.text


def test_the_command_line_reads_the_environment_not_the_adapter(
    github: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchkit.cli.common import github_tracker

    github.pull("vllm-project/vllm", 47291)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_from_env")
    tracker = github_tracker()
    assert tracker.api_url == github.url
    tracker.fetch(PR, None)
    assert github.requests[0][1]["Authorization"] == "Bearer ghp_from_env"
    # The adapter itself is handed everything: no token given, none sent, whatever the environment says.
    GitHubTracker(github.url).fetch(PR, None)
    assert "Authorization" not in github.requests[-1][1]
    monkeypatch.delenv("GITHUB_API_URL")
    assert github_tracker().api_url == "https://api.github.com"
