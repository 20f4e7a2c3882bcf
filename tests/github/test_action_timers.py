"""docs/github.md "Timers and retention": the artifact outlives every Timer, a Timer past the
retention horizon is refused, the sweep is switched on when a Timer waits, and a dispatched
job that finds no Session clears the next wake."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest
from action_job import WAIT, Repository, dispatched, labeled, messages, script
from fakes.github_api import FakeGitHub

from tests.kit import add, code_cell, note_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write"), pytest.mark.workflows("rio.yml")]
DAY = 86_400
MARKER = "<!-- rio-ci:progress -->"


def set_timer(name: str, days: float) -> list[dict[str, object]]:
    return [
        add(
            code_cell(
                f"import time\nfrom rio_ci.api import timer\n"
                f"timer({name!r}, time.time() + {days} * 86400, {{'why': {name!r}}})\n"
            )
        )
    ]


def test_a_timer_past_the_retention_horizon_is_refused_and_the_artifact_outlives_the_rest(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(
        tmp_path, gh, files={".github/rio.yml": "retention_days: 5\n"}, budget_minutes=0.2
    )
    _, job = repo.labeled_issue(
        script(
            set_timer("far", 6),  # the artifact would be gone (5 days) before it fires
            [add(note_cell("that one was refused; a nearer one"))],
            set_timer("near", 2),
            [add(note_cell("waiting for the Timer"))],
        ),
        title="Watch",
    )

    assert job.outputs["status"] == "waiting", job.logs
    events = repo.events(job)
    (refused,) = messages(events, "timer_refused")
    assert refused["payload"]["id"] == "far"
    assert "retention of 5 days" in refused["payload"]["reason"]
    assert [e["id"] for e in events if e["kind"] == "timer_cancelled"] == ["far"]
    turns = [e for e in events if e["kind"] == "turn_prepared"]
    assert any(refused["id"] in t["delivered"] for t in turns)  # the model was told
    wake = float(job.outputs["next-wake"])
    assert 1.9 * DAY < wake - time.time() < 2.1 * DAY
    assert job.outputs["retention-days"] == "5"
    artifact = gh.artifacts[job.artifact_id or 0]
    expires = datetime.datetime.fromisoformat(artifact["expires_at"].replace("Z", "+00:00"))
    created = datetime.datetime.fromisoformat(artifact["created_at"].replace("Z", "+00:00"))
    assert (expires - created).days == 5
    assert json.loads((job.artifact_dir / "manifest.json").read_text())["next_wake"] == wake


@pytest.mark.parametrize(
    ("state", "sent"),
    [("disabled_inactivity", True), ("disabled_manually", True), ("active", False), (None, False)],
)
def test_a_waiting_timer_switches_the_sweep_on_after_the_progress_comment(
    tmp_path: Path, gh: FakeGitHub, state: str | None, sent: bool
) -> None:
    if state is not None:
        gh.add_workflow("rio-sweep.yml", state)
    repo = Repository(tmp_path, gh, budget_minutes=0.1)
    issue, job = repo.labeled_issue(
        script(set_timer("look", 1), [add(note_cell("waiting for the Timer"))]), title="Watch"
    )

    assert job.outputs["status"] == "waiting", job.logs
    dispatches = gh.repository_dispatches
    assert dispatches == ([{"event_type": "rio-timer", "client_payload": {}}] if sent else [])
    paths = [(r.method, r.path) for r in gh.requests]
    if sent:
        final_comment = max(
            i for i, (m, p) in enumerate(paths) if m in ("POST", "PATCH") and "/comments" in p
        )
        assert final_comment < paths.index(("POST", f"/repos/{gh.repo}/dispatches"))
    (comment,) = repo.progress_comments(issue)
    assert '"next_wake": ' + job.outputs["next-wake"] in comment["body"]
    assert gh.workflow_changes == []  # the rio job never switches workflows itself
    # no sweep at all: the Timer would wait for the next event, and the summary says so
    missing = "rio-sweep.yml is not installed: this Session's Timer fires only at its next event"
    assert (missing in job.summary) == (state is None)
    # The comment says first when the Timer is due and whether anything will wake it.
    said = [line for line in comment["body"].splitlines() if line.startswith("**Next")]
    if state is None:
        assert said[0].startswith("**Next: you.** A Timer is due at ")
        assert "nothing will wake it: `rio-sweep.yml` is not installed" in said[0]
    else:
        assert said[0].startswith("**Next: a Timer** at ") and "installed" in said[0]


def test_a_dispatched_job_that_finds_no_session_clears_the_next_wake(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Watch", labels=("rio",))
    meta = {
        "status": "waiting",
        "generation": 3,
        "operation": "x:1",
        "next_wake": time.time() - 60,
        "ended": False,
    }
    gh.add_comment(
        issue,
        f"{MARKER}\n<!-- rio-ci:meta {json.dumps(meta)} -->\n### waiting\n",
        user=gh.bot,
        association="NONE",
    )  # its artifacts have expired meanwhile

    job = repo.job("workflow_dispatch", dispatched(issue))
    sweep = repo.job("schedule", {"schedule": "*/15 * * * *"})

    assert job.run.result["status"] == "ignored"
    (comment,) = repo.progress_comments(issue)
    assert '"next_wake": null' in comment["body"] and "gone" in comment["body"]
    assert sweep.run.result == {"status": "swept", "dispatched": []}
    assert gh.dispatches == []


def test_a_session_whose_artifacts_all_expired_is_gone_and_a_label_starts_anew(
    repo: Repository, gh: FakeGitHub
) -> None:
    """GitHub keeps listing an artifact past its retention, marked expired: that is a
    Session gone (docs/github.md), not a damaged one that blocks the issue."""
    issue, first = repo.labeled_issue(script(WAIT))
    for data in gh.artifacts.values():
        data["expired"] = True
    repo.set_script(script(WAIT))

    resumed = repo.job("workflow_dispatch", dispatched(issue))
    again = repo.job("issues", labeled(issue))

    assert resumed.run.result["status"] == "ignored", resumed.logs
    assert "expired (artifact retention)" in resumed.run.stderr
    assert "refused" not in resumed.logs
    assert again.outputs["status"] == "waiting", again.logs
    (created,) = [e for e in repo.events(again) if e["kind"] == "session_created"]
    assert created["session_id"] != first.outputs["session"]


@pytest.mark.parametrize("configured", [None, 10])
def test_the_runners_retention_bounds_timers_and_the_upload_and_the_config_cannot_raise_it(
    tmp_path: Path, gh: FakeGitHub, configured: int | None
) -> None:
    """GITHUB_RETENTION_DAYS is the repository's artifact retention (docs/github.md): a Timer
    past it is refused even when .github/rio.yml asks for more, and the upload asks for it."""
    gh.set_retention(4)  # lowered in the repository's settings
    files = {".github/rio.yml": f"retention_days: {configured}\n"} if configured else {}
    repo = Repository(tmp_path, gh, files=files, budget_minutes=0.2)
    _, job = repo.labeled_issue(
        script(
            set_timer("far", 3.5),  # inside the configured 10 days, past the repository's 4
            [add(note_cell("that one was refused; a nearer one"))],
            set_timer("near", 1),
            [add(note_cell("waiting for the Timer"))],
        ),
        title="Watch",
    )

    assert job.outputs["status"] == "waiting", job.logs
    (refused,) = messages(repo.events(job), "timer_refused")
    assert refused["payload"]["id"] == "far"
    assert "retention of 4 days" in refused["payload"]["reason"]
    assert "GITHUB_RETENTION_DAYS" in refused["payload"]["reason"]
    assert job.outputs["retention-days"] == "4"


def test_a_config_may_lower_the_runners_retention(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.set_retention(30)
    repo = Repository(tmp_path, gh, files={".github/rio.yml": "retention_days: 6\n"})
    _, job = repo.labeled_issue(script(WAIT))

    assert job.outputs["retention-days"] == "6", job.logs


def test_a_retention_that_is_not_a_number_of_days_is_a_clear_error(
    repo: Repository, gh: FakeGitHub
) -> None:
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["GITHUB_RETENTION_DAYS"] = "ninety"

    step = repo.step(job)

    assert step.code != 0
    assert "GITHUB_RETENTION_DAYS must be a whole number of days" in step.stdout
    assert "Traceback" not in step.stdout + step.stderr
    assert gh.comments_on(issue) == []
