"""The progress comment read as a maintainer reads it (docs/github.md, "The progress
comment"): what it says first in every state — who acts next and how — then what the model is
doing, the Cells by their descriptions, the comments it heard, each validator once per place
it ran, and numbers written for people."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import accept, record_unknown, succeed

from rio_ci.core.events import OutputPiece, ValidatorResult
from rio_ci.core.state import first_meaningful_line, validate_cell
from rio_ci.forge.issues import goal_for
from rio_ci.reports import progress
from rio_ci.reports.live import describe
from rio_ci.reports.next_step import Waiting
from rio_ci.reports.pull_request import pull_request_body
from rio_ci.reports.timeline import read_timeline
from rio_ci.session.session import Session
from tests.kit import PEP723, cmd_cell, code_cell, note_cell

PULL = "https://github.com/o/r/pull/12"
MakeSession = Callable[..., Session]


@pytest.fixture
def issue_session(make_session: MakeSession) -> Session:
    """A Session started from issue #34, with a plan note and a described test run."""
    session = make_session(
        goal=goal_for(34, "Login fails for `@admin` <b>", "body"),
        validators=[["pytest", "-q"]],
        tokens=2_000_000,
        cost_usd=10.0,
    )
    accept(
        session,
        lambda p: p.add(
            note_cell("Plan: 1) reproduce the KeyError 2) fix routes.py 3) run the tests"),
            {**cmd_cell("pytest", "-q"), "description": "reproduce the failing login test"},
        ),
    )
    return session


def comment(
    session: Session,
    outcome: str | None = None,
    *,
    pull_request: str | None = None,
    **waiting: Any,
) -> str:
    proj = session.refresh()
    return progress.render(
        proj,
        status=progress.status_of(proj, outcome),
        run_url=None,
        generation=1,
        operation="op",
        pull_request=pull_request,
        timeline=read_timeline(session),
        waiting=Waiting(outcome, **waiting),
    )


def first_lines(body: str) -> tuple[str, str]:
    """The heading and the first paragraph under it: what a maintainer reads first."""
    shown = [line for line in body.splitlines() if line and not line.startswith("<!--")]
    return shown[0], shown[1]


def test_while_a_job_runs_the_comment_says_rio_ci_is_at_work(issue_session: Session) -> None:
    body = comment(issue_session)
    heading, first = first_lines(body)
    # The issue's number and title (untrusted: no mention, no HTML, no code span).
    assert heading.startswith("### rio-ci: running · #34 Login fails for ")
    assert "<b>" not in heading and "@admin" not in heading and "\\`" in heading
    assert first.startswith("**Next: rio-ci** is at work (job 1, 1 round so far).")
    assert "`/rio stop` ends the run" in first
    # What the model is doing now comes next: its newest plain note.
    assert body.index("The model's latest note") < body.index("#### Cells")
    assert "> Plan: 1) reproduce the KeyError" in body


@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        ("waiting", "the model waits for a comment or a check"),
        ("deadline", "this job's time budget ran out with work left"),
        ("interrupted", "this job was cut off"),
    ],
)
def test_when_nothing_runs_the_comment_says_a_comment_continues(
    issue_session: Session, outcome: str, why: str
) -> None:
    record_unknown(issue_session, 2)  # the queue is paused: it still says nothing runs
    heading, first = first_lines(comment(issue_session, outcome))
    assert "paused" not in heading
    assert first.startswith(f"**Next: you.** Nothing is running: {why}")
    assert first.endswith("Comment here to continue, `/rio stop` to end.")


def test_a_waiting_timer_says_when_and_whether_its_sweep_is_installed(
    issue_session: Session,
) -> None:
    due = time.time() + 3600
    issue_session.set_timer("t1", due, {"why": "CI"})
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(due))
    _, installed = first_lines(comment(issue_session, "waiting", sweep=True))
    assert installed.startswith(f"**Next: a Timer** at {when}")
    assert "`rio-sweep.yml`, installed" in installed
    _, missing = first_lines(comment(issue_session, "waiting", sweep=False))
    assert missing.startswith(f"**Next: you.** A Timer is due at {when}")
    assert "nothing will wake it: `rio-sweep.yml` is not installed" in missing
    assert "Comment here to continue" in missing


def test_waiting_for_ci_names_the_workflow_and_the_branch(issue_session: Session) -> None:
    _, first = first_lines(comment(issue_session, "waiting", ci="ci.yml"))
    assert first.startswith("**Next: CI.** `ci.yml` runs on `rio/issue-34`")


def conclude(session: Session) -> int:
    """A success conclusion, its validator, the run's end, then the pull-request gate's run of
    the same validator: the note's id."""
    succeed(session, 2)
    receipt = accept(
        session, lambda p: p.add(note_cell("fixed", role="conclusion", result="success"))
    )
    note_id = receipt.cell_ids[0]
    validator = ValidatorResult(
        note_id=note_id,
        index=0,
        argv=["pytest", "-q"],
        result={"type": "success", "exit_code": 0},
        stdout="",
        stderr="",
        truncated=False,
    )
    session.record_validator(validator)
    assert session.conclude_success(note_id, [])
    session.record_validator({**validator, "result": {"type": "error", "exit_code": 1}})
    return note_id


def test_done_says_review_the_pull_request_and_lists_each_validator_once(
    issue_session: Session,
) -> None:
    note_id = conclude(issue_session)
    body = comment(issue_session, pull_request=PULL)
    heading, first = first_lines(body)
    assert heading.startswith("### rio-ci: succeeded · #34")
    assert first == (
        f"**Next: you.** Review [#12]({PULL}); comment here or review the pull request to ask "
        "for changes."
    )
    table = body.split("#### Validators", 1)[1].strip().splitlines()
    assert table[0] == f"| validator | at the conclusion (note {note_id}) | pull-request gate |"
    rows = [line for line in table[2:] if line.startswith("| `")]
    assert rows == ["| `pytest -q` | success | error (exit 1) |"]


def test_a_failed_run_says_why_and_what_to_do(issue_session: Session) -> None:
    issue_session.end_in_failure("stopped by a maintainer (/rio stop)")
    heading, first = first_lines(comment(issue_session))
    assert heading.startswith("### rio-ci: failed · #34")
    assert first.startswith("**Next: you.** The run failed: stopped by a maintainer")
    assert "Comment here to start a follow-up Session" in first


def test_a_job_that_could_not_start_says_what_to_do() -> None:
    body = progress.render_problem(
        ".github/rio.yml: unknown key(s) validator",
        run_url=None,
        what_to_do="Fix .github/rio.yml, then comment here.",
    )
    heading, first = first_lines(body)
    assert heading == "### rio-ci: error"
    assert first == (
        "**Next: you.** rio-ci stopped: .github/rio.yml: unknown key(s) validator. "
        "Fix .github/rio.yml, then comment here."
    )


def test_numbers_are_written_for_people(issue_session: Session) -> None:
    usage = comment(issue_session).rstrip().splitlines()[-1]
    assert usage.startswith("Usage: 0 of 100 rounds · ")
    assert "0 of 2,000,000 tokens" in usage and "$0.00 of $10.00" in usage


def test_cells_are_named_by_their_description_or_what_they_run(
    issue_session: Session,
) -> None:
    script = "import time\nfrom os import (\n    path,\n)\n\n# wait\ntime.sleep(30)\n"
    accept(issue_session, lambda p: p.add(code_cell(script)))
    body = comment(issue_session)
    rows = {line.split(" | ")[0]: line for line in body.splitlines() if line.startswith("| ")}
    assert "reproduce the failing login test `cmd pytest -q`" in rows["| 2"]
    assert "`code time.sleep(30)`" in rows["| 3"] and "import" not in rows["| 3"]
    assert first_meaningful_line(PEP723 + script) == "time.sleep(30)"


def test_a_description_is_a_few_words_on_one_line() -> None:
    base = {"id": 1, "previous_id": None, **cmd_cell("true")}
    assert validate_cell({**base, "description": "run the tests"}) is None
    for bad in ("", "  ", "two\nlines", "x" * 81, 3):
        assert validate_cell({**base, "description": bad}) is not None, bad
    assert validate_cell({**note_cell("n"), "id": 1, "previous_id": None, "description": "x"})
    assert describe({**base, "description": "run the tests"}) == "run the tests · cmd true"


def test_an_interrupted_cell_shows_its_last_output_lines(issue_session: Session) -> None:
    issue_session.authorize_launch(2, "token")
    lines = "".join(f"collected line {n}\n" for n in range(1, 9))
    issue_session.record_output(2, [OutputPiece("stdout", text=lines)])
    record_unknown(issue_session, 2)
    body = comment(issue_session, "interrupted")
    section = body.split("#### UnknownExecutions", 1)[1].split("####", 1)[0]
    assert "reproduce the failing login test" in section
    assert "Its last output lines before the cut-off" in section
    assert "collected line 8" in section and "collected line 4" in section
    assert "collected line 3" not in section  # the last five


def test_comments_received_are_listed_with_the_round_that_read_them(
    issue_session: Session,
) -> None:
    url = "https://github.com/o/r/issues/34#issuecomment-7"
    issue_session.receive(
        "comment:7", "comment", {"author": "alice", "body": "use .get", "url": url}
    )
    body = comment(issue_session)
    assert f"| `alice` | [comment]({url}) | not read yet |" in body
    issue_session.prepare_turn()
    body = comment(issue_session)
    assert f"| `alice` | [comment]({url}) | round 2 (job 1) |" in body


def test_the_pull_request_names_each_validator_once_and_the_cells_by_description(
    issue_session: Session,
) -> None:
    conclude(issue_session)
    body = pull_request_body(
        34, "s", read_timeline(issue_session), diffstat=" a | 1 +", comment_url=None
    )
    verified = body.split("### How it was verified", 1)[1].split("\n\n", 2)[1]
    assert verified.splitlines() == [
        "- `pytest -q`: success at the conclusion; error (exit 1) at the pull-request gate"
    ]
    assert "- cell 2: reproduce the failing login test · cmd pytest -q (success)" in body


def test_a_refused_provider_request_says_what_to_check(issue_session: Session) -> None:
    issue_session.end_in_failure("model error: 401 invalid x-api-key")
    _, first = first_lines(comment(issue_session))
    assert first.startswith("**Next: you.** The run failed: model error: 401 invalid x-api-key.")
    assert "check the key (the action's `anthropic-api-key`), the `model` input" in first
