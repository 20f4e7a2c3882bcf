"""GitHub's rate-limit answers are waited out, as its pages say, within the step's time
budget (docs/github.md "Requests, rate limits and storage"): ``retry-after``, else
``x-ratelimit-reset`` when ``x-ratelimit-remaining`` is 0, else a minute and more. The waits
go through an injected ``sleep``: no test here waits on the clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakes.github_api import FakeGitHub

from rio_ci.commands.bench.github_jobs import Site
from rio_ci.core.errors import ForgeError
from rio_ci.forge.github import GitHubForge
from rio_ci.forge.github_limits import Patience, Refusal, refusal

MARKER = "<!-- rio:progress -->"
PROGRESS = "<!-- rio-ci:progress -->"


def test_each_rate_limit_answer_says_how_long_to_wait() -> None:
    now = 1_700_000_000.0
    assert Refusal(429, retry_after="7").seconds(now, 0) == 7
    assert Refusal(403, remaining="0", reset=str(int(now) + 30)).seconds(now, 0) == 31
    assert Refusal(403, remaining="0", reset=str(int(now) - 5)).seconds(now, 0) == 1
    # a secondary limit that names no time: a minute, then longer on each repeat
    assert [Refusal(403).seconds(now, n) for n in range(3)] == [60, 120, 240]


def test_only_a_rate_limit_is_taken_for_one() -> None:
    permission = {"x-ratelimit-remaining": "4999", "x-accepted-github-permissions": "issues=read"}
    assert refusal(403, permission, "Resource not accessible by integration") is None
    assert refusal(404, {"retry-after": "5"}, "") is None
    assert refusal(429, {}, "") == Refusal(429)
    assert refusal(403, {"Retry-After": "5"}, "") == Refusal(403, retry_after="5")
    assert refusal(403, {}, "You have exceeded a secondary rate limit.") == Refusal(403)
    assert refusal(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "9"}, "") == (
        Refusal(403, remaining="0", reset="9")
    )


def test_patience_waits_within_its_budget_and_gives_up_beyond_it() -> None:
    slept: list[float] = []
    patience = Patience(100, sleep=slept.append, monotonic=lambda: 0.0, tries=2)
    assert patience.wait(Refusal(429, retry_after="7"), 0, "a read") is None
    assert "time budget" in (patience.wait(Refusal(429, retry_after="101"), 0, "a read") or "")
    assert "after 2 waits" in (patience.wait(Refusal(429, retry_after="1"), 2, "a read") or "")
    assert "does not wait" in (Patience(None).wait(Refusal(429), 0, "a read") or "")
    assert slept == [7]


def forge_for(gh: FakeGitHub, slept: list[float], seconds: float = 600) -> GitHubForge:
    return GitHubForge(
        gh.repo,
        gh.token,
        gh.api_url,
        throttle=False,
        retries=0,
        patience=Patience(seconds, sleep=slept.append),
    )


def test_a_write_refused_for_a_rate_limit_is_made_once_the_wait_is_over(gh: FakeGitHub) -> None:
    number = gh.add_issue("goal")
    gh.limit_rate(
        rf"/repos/{gh.repo}/issues/{number}/comments",
        method="POST",
        times=2,
        status=429,
        retry_after=7,
    )
    slept: list[float] = []

    made = forge_for(gh, slept).upsert_comment(number, MARKER, f"{MARKER}\nrunning")

    assert slept == [7, 7]
    assert [c["id"] for c in gh.comments_on(number)] == [made]
    assert len([r for r in gh.requests if r.method == "POST"]) == 3  # two refused, one made


def test_a_read_over_the_primary_limit_waits_until_the_reset(gh: FakeGitHub) -> None:
    gh.add_artifact("rio-session-1", b"zip")
    gh.limit_rate(rf"/repos/{gh.repo}/actions/artifacts", times=1, reset_in=30)
    slept: list[float] = []

    (listed,) = forge_for(gh, slept).artifacts("rio-session-1")

    assert listed.name == "rio-session-1"
    (waited,) = slept
    # Until the reset second is over: 30 s from when GitHub answered, less the moment this
    # process took to read the answer (on a loaded machine, up to a second or two).
    assert 28 < waited <= 31.5


def test_the_artifacts_download_waits_too_and_a_refusal_is_not_a_rate_limit(
    gh: FakeGitHub, tmp_path: Path
) -> None:
    artifact_id = gh.add_artifact("rio-session-1", b"zip bytes")
    gh.limit_rate(rf"/repos/{gh.repo}/actions/artifacts/{artifact_id}/zip", times=1, retry_after=3)
    slept: list[float] = []
    forge = forge_for(gh, slept)

    assert forge.download_artifact(artifact_id, tmp_path / "a.zip").read_bytes() == b"zip bytes"
    gh.tokens[gh.token].permissions = {"actions": "read"}  # no issues: read
    with pytest.raises(ForgeError) as refused:
        forge.issue(gh.add_issue("goal"))

    assert slept == [3] and refused.value.status == 403


def test_a_wait_past_the_steps_budget_gives_up_saying_so(gh: FakeGitHub) -> None:
    number = gh.add_issue("goal")
    gh.limit_rate(
        rf"/repos/{gh.repo}/issues/{number}/comments", method="POST", times=1, retry_after=500
    )
    slept: list[float] = []

    with pytest.raises(ForgeError, match="would pass this step's time budget") as caught:
        forge_for(gh, slept, seconds=60).upsert_comment(number, MARKER, f"{MARKER}\nrunning")

    assert slept == [] and caught.value.status == 403
    assert "rate limited (HTTP 403, retry-after 500 s)" in str(caught.value)


# --- whole jobs --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.people(alice="write")
def test_rate_limits_on_reads_and_writes_are_waited_out_and_the_jobs_succeed(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    comments = rf"/repos/{gh.repo}/issues/1/comments"
    gh.limit_rate(comments, method="POST", times=2, status=429, retry_after=5)
    gh.limit_rate(rf"/repos/{gh.repo}/issues/comments/\d+", method="PATCH", times=1, retry_after=2)
    gh.limit_rate(rf"/repos/{gh.repo}/actions/artifacts", times=1, reset_in=20)
    slept: list[float] = []
    site = Site(tmp_path, gh, sleep=slept.append)

    issue, _ = site.label()
    site.comment(issue, "go on")

    assert [(r["step"], r["status"]) for r in site.results] == [
        ("run", "waiting"),
        ("finish", "waiting"),
        ("prune", "pruned"),
        ("run", "waiting"),
        ("finish", "waiting"),
        ("prune", "pruned"),
    ]
    assert sorted(slept)[:3] == [2, 5, 5] and 20 < sorted(slept)[3] <= 21.5 and len(slept) == 4
    (progress,) = [c for c in gh.comments_on(issue) if PROGRESS in c["body"]]
    assert '"generation": 2' in progress["body"]  # the second job's finish wrote it
    assert "GitHub's rate limit (HTTP 429, retry-after 5 s)" in "".join(site.logs)


@pytest.mark.slow
@pytest.mark.people(alice="write")
def test_a_write_that_cannot_wait_in_the_budget_is_left_to_the_next_job(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    comments = rf"/repos/{gh.repo}/issues/1/comments"
    gh.limit_rate(comments, method="POST", times=2, retry_after=1000)  # run step, then finish
    slept: list[float] = []
    site = Site(tmp_path, gh, sleep=slept.append)

    issue, _ = site.label()
    unwritten = [c for c in gh.comments_on(issue) if PROGRESS in c["body"]]
    site.comment(issue, "go on")

    assert unwritten == [] and slept == []
    assert [r["status"] for r in site.results if r["step"] != "prune"] == ["waiting"] * 4
    said = [line for line in site.logs[0].splitlines() if line.startswith("::warning::")]
    assert len(said) == 2  # the run step's write and the finish step's
    assert all(
        "rate limited" in line and "the next job for the issue writes it" in line for line in said
    )
    (progress,) = [c for c in gh.comments_on(issue) if PROGRESS in c["body"]]
    assert '"generation": 2' in progress["body"]


def test_the_wait_is_bounded_by_the_clock_of_the_step(gh: FakeGitHub) -> None:
    """Waits spend the budget: a second wait that no longer fits gives up."""
    number = gh.add_issue("goal")
    gh.limit_rate(rf"/repos/{gh.repo}/issues/{number}", times=2, retry_after=40)
    now = [time.monotonic()]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    forge = GitHubForge(
        gh.repo,
        gh.token,
        gh.api_url,
        throttle=False,
        retries=0,
        patience=Patience(60, sleep=sleep, monotonic=lambda: now[0]),
    )
    with pytest.raises(ForgeError, match="time budget"):
        forge.issue(number)
    assert slept == [40]
