"""The progress comment's picture and pace (docs/github.md): a Mermaid chart whose labels
cannot break out of their block, bounded for long Sessions, and rewrites between rounds at
most every 15 seconds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import accept, end_execution, record_unknown, start_execution, succeed

from rio_ci.core.events import OutputPiece
from rio_ci.core.timeline import JOB_MARK, fold_timeline
from rio_ci.github.comment import Pacer
from rio_ci.model.scripted import ScriptedModel
from rio_ci.reports import diagram, progress
from rio_ci.reports.timeline import descriptions, read_timeline
from rio_ci.rounds.loop import RoundLoop
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests import mermaid
from tests.kit import add, cmd_cell
from tests.round_loop_kit import DONE

# What a model or an issue could put in an argv to escape the chart or the comment.
HOSTILE = (
    "x\n```\n%%{init: {'theme': 'dark'}}%%\nsection evil\n"
    "click i0 call alert(1)\nowned :crit, z9, 1, 2 # ; <script>alert(1)</script> `@admin`"
)


@pytest.fixture(scope="module")
def mermaid_parser() -> Path:
    """The real Mermaid parser, installed on first use (npm: about 10 s once per machine, so
    it is setup, not part of the test's own time)."""
    return mermaid.parser_dir()


@pytest.mark.usefixtures("mermaid_parser")
def test_hostile_labels_stay_inside_the_chart_and_long_sessions_are_bounded(
    session: Session,
) -> None:
    batches, size = 4, 16  # more rows than the chart draws, in rounds of admissible size
    for batch in range(batches):
        accept(session, lambda p: [p.add(cmd_cell("echo", HOSTILE, str(i))) for i in range(size)])
        for cell_id in range(batch * size + 1, (batch + 1) * size + 1):
            succeed(session, cell_id)
    timeline = read_timeline(session)
    every = diagram.rows(timeline, descriptions(timeline))
    assert len(every) == batches * (size + 1) > diagram.MAX_ITEMS  # each round, each Execution
    text = diagram.block(timeline, descriptions(timeline))
    assert f"{len(every) - diagram.MAX_ITEMS} earlier ones are left out" in text
    (chart,) = mermaid.blocks(text)
    assert "%%" not in chart and "<" not in chart and "`" not in chart and "#" not in chart
    parsed = mermaid.parse(chart)
    assert parsed.get("type") == "gantt", parsed
    # Exactly the rows drawn, all in the one job: nothing the argv said became a task, a
    # section or a directive.
    assert len(parsed["tasks"]) == diagram.MAX_ITEMS
    assert {t["section"] for t in parsed["tasks"]} == {diagram.section_title(timeline, 1)}
    assert not any(t["crit"] or t["milestone"] for t in parsed["tasks"])
    assert all(t["start"] < t["end"] for t in parsed["tasks"])
    assert [t["task"] for t in parsed["tasks"]] == [
        diagram.label(row.label) for row in every[-diagram.MAX_ITEMS :]
    ]
    # The comment's table is bounded too, and says so.
    body = progress.render(
        session.refresh(),
        status="running",
        run_url=None,
        generation=1,
        operation="op",
        timeline=timeline,
    )
    rows = [line for line in body.splitlines() if re.match(r"\| [0-9]+ \|", line)]
    assert len(rows) == progress.CELL_ROWS < len(timeline.runs)
    assert f"The last {progress.CELL_ROWS} of {len(timeline.runs)} Executions" in body


def test_the_comment_keeps_hostile_cell_text_in_its_cell(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("echo", HOSTILE)))
    record_unknown(session, 1)
    proj = session.refresh()
    body = progress.render(
        proj,
        status="running",
        run_url=None,
        generation=1,
        operation="op",
        timeline=read_timeline(session),
    )
    (row,) = [line for line in body.splitlines() if line.startswith("| 1 |")]
    assert row.count(" | ") == 4  # five columns: the argv's pipes are escaped
    assert "<script>" not in body and "`@admin`" not in body
    assert "**Unresolved**" in body  # an UnknownExecution nobody resolved yet says so
    (chart,) = mermaid.blocks(body)  # the argv's fence did not end anything
    assert chart.startswith("---\nconfig:\n") and "\n---\ngantt\n" in chart


@pytest.mark.parametrize("offset", range(10))
def test_recent_output_cut_anywhere_cannot_close_its_fence(session: Session, offset: int) -> None:
    """The block keeps the last 1,500 characters of output. Wherever that cut falls in a
    line of backticks, no line inside can close the fence: the text is cut, then fenced
    (escaping first, then cutting, could leave a bare line of backticks)."""
    accept(session, lambda p: p.add(cmd_cell("true")))
    start_execution(session, 1)
    words = "\n@admin </details> escaped\n"
    after = words + "y" * (1500 - offset - len(words))  # the cut: offset before its end
    output = "x" * 100 + "\n" + "`````" + after
    end_execution(session, 1, {"type": "success", "exit_code": 0}, output=output)
    body = progress.render(
        session.refresh(),
        status="running",
        run_url=None,
        generation=1,
        operation="op",
        timeline=read_timeline(session),
    )
    block = body.split("```text\n", 1)[1]
    inside, _, rest = block.partition("\n```\n")
    assert "@admin </details> escaped" in inside
    assert not [line for line in inside.splitlines() if line.startswith("``")]
    assert "@admin" not in rest


def test_the_pacer_rewrites_at_most_every_15_seconds() -> None:
    now = [100.0]
    written: list[float] = []
    pacer = Pacer(lambda: written.append(now[0]), clock=lambda: now[0])
    moments = [100.0, 110.0, 114.9, 115.0, 120.0, 129.9, 130.0, 200.0]
    told = []
    for moment in moments:
        now[0] = moment
        told.append(pacer())
    # The job's first write was at 100: the next one at 15 s or more after the one before.
    assert written == [115.0, 130.0, 200.0]
    assert told == [moment in written for moment in moments]


@pytest.mark.slow
def test_the_round_loop_calls_back_after_each_round_and_marks_its_job(tmp_path: Path) -> None:
    """The seam the GitHub job paces its progress rewrites with: called after each round is
    committed; the job's name is in the Session's timeline."""
    db = tmp_path / "s.db"
    Session.create(db, "goal", Settings(cwd=str(tmp_path))).close()
    rounds = [[add(cmd_cell("true"))]] * 2
    rounds.append([add(DONE)])
    script = tmp_path / "model.yaml"
    script.write_text(yaml.safe_dump(rounds))
    owner = Owner(str(db))
    seen: list[int] = []
    try:
        loop = RoundLoop(
            owner,
            ScriptedModel(script),
            between_rounds=lambda: seen.append(owner.session.refresh().accepted_turns),
            job_label="job under test",
        )
        assert loop.run().status == "succeeded"
        timeline = read_timeline(owner.session)
    finally:
        owner.close()
    # Called before the first round, after each one, and while Cells run (the GitHub job
    # listens for comments then too): every round was seen committed, in order.
    assert set(range(1, len(rounds) + 1)) <= set(seen) and seen == sorted(seen)
    assert [job.label for job in timeline.jobs] == ["job under test"]


def shifted(session: Session, after_mark: str, hours: float) -> list[dict[str, Any]]:
    """The Session's events, those from the job mark ``after_mark`` on moved ``hours`` later
    (a later job, hours after the first)."""
    events, later = [], False
    for event in session.events():
        later = later or (event["kind"] == "watermark" and event["value"] == after_mark)
        events.append({**event, "at": event["at"] + hours * 3600} if later else event)
    return events


@pytest.mark.slow  # the real Mermaid parser: a node process
@pytest.mark.usefixtures("mermaid_parser")
def test_each_job_is_drawn_from_its_own_start_and_the_gap_is_named(session: Session) -> None:
    """Two jobs three hours apart, the first cut off mid-Cell and the second finding it
    unfinished: each section starts at 0, its title names the gap, the UnknownExecution's bar
    ends at its own job's last event, and the axis's few ticks count seconds since the start."""
    session.set_watermark(JOB_MARK, "run 1")
    accept(session, lambda p: p.add(cmd_cell("sleep", "100")))
    start_execution(session, 1)
    session.receive("comment:9", "comment", {"author": "alice", "body": "hi", "url": ""})
    session.set_watermark(JOB_MARK, "run 2")
    record_unknown(session, 1)  # the second job's recovery
    accept(session, lambda p: p.add({**cmd_cell("true"), "description": "check again"}))
    succeed(session, 2)
    timeline = fold_timeline(shifted(session, "run 2", 3))
    first, second = timeline.jobs
    assert diagram.section_title(timeline, 2) == "job 2, 3 h 0 min later"
    (chart,) = mermaid.blocks(diagram.block(timeline, descriptions(timeline)))
    parsed = mermaid.parse(chart)
    assert parsed["axisFormat"] == "%S.%L" and parsed["tickInterval"].endswith("millisecond")
    by_section: dict[str, list[dict[str, Any]]] = {}
    for task in parsed["tasks"]:
        by_section.setdefault(task["section"], []).append(task)
    one, two = by_section.values()
    assert min(t["start"] for t in one) >= 0 and min(t["start"] for t in two) >= 0
    span = max(t["end"] for t in parsed["tasks"])
    longest = max(job.ended_at - job.started_at for job in (first, second))
    assert span <= 1000 * longest + 2  # no 3-hour gap (a milestone is drawn 1 ms wide)
    (unknown,) = [t for t in one if t["crit"]]
    assert abs(unknown["end"] - round((first.ended_at - first.started_at) * 1000)) <= 1
    assert any("check again" in t["task"] for t in two)
    assert "the axis counts seconds since then" in diagram.block(timeline, descriptions(timeline))


@pytest.mark.parametrize("span", [0.004, 0.3, 1.9, 7, 59, 61, 600, 3599, 3601, 6 * 3600])
def test_the_axis_has_few_short_ticks_that_no_time_zone_shifts(span: float) -> None:
    axis = diagram.axis_of(span)
    assert axis.format in ("%S", "%S.%L")  # seconds: the one field no time zone offset moves
    assert span / axis.scale < 60  # so the widest job never wraps past 59
    count, unit = re.fullmatch(r"([0-9]+)(millisecond|second)", axis.tick).groups()  # type: ignore[union-attr]
    size = int(count) / (1000 if unit == "millisecond" else 1)
    assert span / axis.scale / size <= diagram.MAX_TICKS


def test_a_job_ends_at_its_last_event_output_included(session: Session) -> None:
    """A job cut off while its Cell printed ends at the last output it committed, though
    the Timeline's fold reads no output."""
    session.set_watermark(JOB_MARK, "run 1")
    accept(session, lambda p: p.add(cmd_cell("sleep", "100")))
    start_execution(session, 1)
    session.record_output(1, [OutputPiece("stdout", text="still working\n")])
    session.set_watermark(JOB_MARK, "run 2")
    record_unknown(session, 1)
    (output,) = [e for e in session.events() if e["kind"] == "output"]
    timeline = read_timeline(session, session.refresh().last_seq)
    assert timeline.jobs[0].ended_at == output["at"]
