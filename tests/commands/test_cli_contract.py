"""docs/cli.md as a script sees it: every command takes ``--human`` and prints the same result
readably; errors stay one JSON line with the same exit status; ``show`` lists every Execution
the Journal holds; ``output`` says why a Cell that never launched has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import accept, record_unknown, succeed

from rio_ci.cli import COMMANDS, build_parser
from rio_ci.commands.human import render
from rio_ci.commands.show import executions, summary
from rio_ci.core.projection import DEPARTED_KEPT
from rio_ci.core.reducer import short_cell
from rio_ci.reports.live import describe
from rio_ci.session.session import Session
from tests.kit import CliResult, Patch, cmd_cell, note_cell, run_cli
from tests.run_cli import write_script

# The fewest arguments each command parses with (every command must be listed here).
MINIMAL: dict[str, list[str]] = {
    "new": ["s.db", "--goal", "g"],
    "turn": ["s.db"],
    "step": ["s.db", "turn-1", "p.json"],
    "receive": ["s.db", "m1", "comment", "{}"],
    "work": ["s.db"],
    "run": ["s.db"],
    "state": ["s.db"],
    "events": ["s.db"],
    "show": ["s.db"],
    "output": ["s.db", "1"],
    "demo": [],
    "bench": [],
    "eval": ["cases", "--model", "scripted:oracle"],
    "action": [],
}


def test_every_command_accepts_human() -> None:
    assert set(MINIMAL) == set(COMMANDS)
    parser = build_parser()
    for name, args in MINIMAL.items():
        assert parser.parse_args([name, *args]).human is False, name
        assert parser.parse_args([name, *args, "--human"]).human is True, name


def test_bench_and_eval_human_means_their_text_and_excludes_json(rio: Any) -> None:
    parser = build_parser()
    for name in ("bench", "eval", "show"):
        args = parser.parse_args([name, *MINIMAL[name], "--human"])
        assert args.json is False, name
        code, out, _ = rio(name, *MINIMAL[name], "--human", "--json")
        assert code == 2 and "not allowed with" in out["error"], name


def test_the_renderer_is_indented_key_value_lines_with_control_characters_escaped() -> None:
    value = {
        "id": "m1",
        "ok": True,
        "none": None,
        "n": 3,
        "empty": "",
        "list": [],
        "cells": [{"id": 1, "argv": ["a", "b"]}, 7],
        "text": "one\n\x1b[2Jtwo\n",
        "nested": {"deep": {"x": 1.5}},
    }
    assert render(value) == "\n".join(
        [
            "id: m1",
            "ok: true",
            "none: null",
            "n: 3",
            'empty: ""',
            "list: []",
            "cells:",
            "  - id: 1",
            "    argv:",
            "      - a",
            "      - b",
            "  - 7",
            "text: |",
            "    one",
            "    \\x1b[2Jtwo",
            "nested:",
            "  deep:",
            "    x: 1.5",
        ]
    )
    assert render(value) == render(json.loads(json.dumps(value)))  # deterministic


def human_keys(stdout: str) -> list[str]:
    """The top-level keys of a rendering: lines at column 0 up to their colon."""
    return [
        line.split(":", 1)[0] for line in stdout.splitlines() if line and not line.startswith(" ")
    ]


def test_plumbing_commands_print_the_same_result_readably(rio: Any, tmp_path: Path) -> None:
    created = rio("new", "s.db", "--goal", "readable", "--human")
    assert created.code == 0 and created.out is None  # not JSON
    session_id = rio("events", "s.db").lines[0]["session_id"]
    assert created.stdout.splitlines() == [f"session: {session_id}", f"db: {tmp_path / 's.db'}"]
    state = rio("state", "s.db").out
    shown = rio("state", "s.db", "--human")
    assert shown.code == 0 and human_keys(shown.stdout) == list(state)
    assert "goal: readable" in shown.stdout.splitlines()

    turn = rio("turn", "s.db").out
    again = rio("turn", "s.db", "--human")  # the same open Turn, rendered
    assert again.code == 0 and f"turn_id: {turn['turn_id']}" in again.stdout.splitlines()
    patch = Patch(turn["state"]).add(note_cell("look")).build()
    stepped = rio("step", "s.db", turn["turn_id"], "-", "--human", input=patch)
    assert stepped.code == 0 and human_keys(stepped.stdout) == [
        "turn_id",
        "revision",
        "cell_ids",
        "event",
    ]
    assert "revision: 1" in stepped.stdout.splitlines()

    received = rio(
        "receive", "s.db", "m1", "comment", json.dumps({"body": "hi\n\x1b[2Jthere"}), "--human"
    )
    assert received.code == 0 and human_keys(received.stdout) == ["id", "seq"]
    state = rio("state", "s.db", "--human").stdout
    assert "\x1b" not in state and "\\x1b[2Jthere" in state

    events = rio("events", "s.db").lines
    blocks = rio("events", "s.db", "--human").stdout.rstrip("\n").split("\n\n")
    assert [block.splitlines()[:2] for block in blocks] == [
        [f"seq: {e['seq']}", f"kind: {e['kind']}"] for e in events
    ]


def test_owner_commands_print_their_status_readably(rio: Any, tmp_path: Path) -> None:
    assert rio("new", "s.db", "--goal", "g", "--cwd", tmp_path).code == 0
    status = rio("work", "s.db").out
    shown = rio("work", "s.db", "--human")
    assert shown.code == 0 and human_keys(shown.stdout) == list(status)
    assert "ended: null" in shown.stdout.splitlines()
    script = write_script(
        tmp_path,
        [
            [
                {
                    "op": "add",
                    "path": "/cells/-",
                    "value": {
                        "kind": "note",
                        "role": "conclusion",
                        "result": "success",
                        "text": "nothing to do",
                    },
                }
            ]
        ],
    )
    done = rio("run", "s.db", "--model", f"scripted:{script}", "--human")
    assert done.code == 0, done.stdout + done.err
    assert "status: succeeded" in done.stdout.splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ["state", "missing.db"],
        ["events", "missing.db"],
        ["show", "missing.db"],
        ["work", "missing.db"],
        ["output", "s.db", "9"],
        ["turn", "s.db", "--after", "x"],
        ["step", "s.db", "nosuch", "-"],
        ["receive", "s.db", "execution:1", "comment", "{}"],
    ],
)
def test_errors_stay_one_json_line_with_human(rio: Any, args: list[str]) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    plain: CliResult = rio(*args, input="[]")
    human: CliResult = rio(*args, "--human", input="[]")
    assert plain.code != 0 and (human.code, human.stdout) == (plain.code, plain.stdout)
    assert len(human.stdout.splitlines()) == 1
    assert set(human.out) <= {"error", "rejected"}


# --- step: a rejection is {"rejected": reason}, whatever rejected it --------------------------


def test_every_rejection_by_step_prints_only_the_reason(rio: Any) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    patch = Patch(turn["state"]).add(note_cell("a")).build()
    bad = Patch(turn["state"]).op(op="replace", path="/goal", value="mine").build()
    unknown = rio("step", "s.db", "nosuch", "-", input=patch)
    refused = rio("step", "s.db", turn["turn_id"], "-", input=bad)
    assert rio("step", "s.db", turn["turn_id"], "-", input=patch).code == 0
    conflict = rio(
        "step", "s.db", turn["turn_id"], "-", input=Patch(turn["state"]).add(note_cell("b")).build()
    )
    for done, words in (
        (unknown, "unknown Turn"),
        (refused, "belongs to the harness"),
        (conflict, "conflict"),
    ):
        assert done.code == 3 and list(done.out) == ["rejected"], done.stdout
        assert words in done.out["rejected"]


# --- show: every Execution the Journal holds ---------------------------------------------------


def test_show_lists_executions_of_replaced_and_removed_cells(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("echo", "one")).add(cmd_cell("deploy")))
    succeed(session, 1, output="one\n")
    record_unknown(session, 2)
    comment = session.receive("c1", "comment", {"body": "the deploy did not happen"})["seq"]
    resolved = accept(
        session,
        lambda p: p.add(
            note_cell(
                "no deploy",
                role="resolution",
                target_cell_id=2,
                evidence_refs=[f"session:event:{comment}"],
            )
        ),
    ).cell_ids[0]
    accept(session, lambda p: p.replace(0, cmd_cell("echo", "two")).remove(1))  # 1, 2 leave
    state = session.state()
    assert {"1", "2"}.isdisjoint(state["runtime"]["cells"])  # the State drops them: right
    finished = {
        e["cell_id"]: e["result"] for e in session.events() if e["kind"] == "execution_finished"
    }
    assert set(finished) == {1, 2}
    shown = run_cli("show", session.path, "--json").out
    assert {k: v["result"] for k, v in shown["executions"].items() if v["phase"] == "finished"} == {
        str(k): r for k, r in finished.items()
    }
    assert shown["executions"]["2"]["resolved_by"] == resolved
    assert shown["executions"]["1"]["resolved_by"] is None
    assert list(shown["executions"]) == sorted(shown["executions"], key=int)
    text = run_cli("show", session.path).stdout
    history = text.split("no longer in context", 1)[1]
    assert "[1] cmd echo one" in history and "[2] cmd deploy" in history
    assert (
        f"UnknownExecution [worker_lost_before_result_commit], resolved by cell {resolved}"
        in history
    )


def test_show_leaves_out_what_was_committed_after_its_projection(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, 1)
    accept(session, lambda p: p.remove(0))
    proj = session.refresh()
    other = Session.open(session.path)
    try:
        accept(other, lambda p: p.add(cmd_cell("true")))
        succeed(other, 2)
        accept(other, lambda p: p.remove(0))
    finally:
        other.close()
    assert list(executions(session, proj)) == ["1"]  # the Journal has 2, the snapshot not
    assert list(executions(session, session.refresh())) == ["1", "2"]


def test_show_reads_the_last_departed_executions_from_the_projection(session: Session) -> None:
    """``show`` lists the last DEPARTED_KEPT Executions of Cells that left the context, from
    the projection (so its time does not grow with the Journal), counts the earlier ones, and
    a replay after the derived data is deleted shows exactly the same."""
    rounds = DEPARTED_KEPT + 5
    accept(session, lambda p: p.add(cmd_cell("echo", "1")))
    succeed(session, 1, output="1\n")
    for n in range(2, rounds + 1):
        accept(session, lambda p, n=n: p.replace(0, cmd_cell("echo", str(n))))
        succeed(session, n, output=f"{n}\n")
    shown = run_cli("show", session.path, "--json").out
    # the head (Cell `rounds`) and the last DEPARTED_KEPT replaced versions before it
    assert list(shown["executions"]) == [str(n) for n in range(5, rounds + 1)]
    assert shown["executions_not_listed"] == 4
    text = run_cli("show", session.path).stdout
    assert "(4 earlier ones not listed;" in text and "[5] cmd echo 5" in text
    assert "[4] cmd echo 4" not in text
    session.journal.drop_derived()
    replayed = Session.open(session.path)
    try:
        assert summary(replayed) == summary(session)
        assert replayed.proj.departed == session.refresh().departed
    finally:
        replayed.close()
    assert run_cli("show", session.path, "--json").out == shown


def test_a_departed_cell_keeps_what_its_summary_line_shows() -> None:
    source = "# /// script\n# ///\n\n" + "x = 1  # " + "long " * 80 + "\nprint(x)\n"
    argv = ["python", "-c", "print('" + "y" * 400 + "')"]
    for cell in (
        {"id": 1, "kind": "code", "runtime": "python", "source": source},
        {"id": 2, "kind": "cmd", "argv": argv},
    ):
        short = short_cell(cell)
        assert describe(short) == describe(cell)
        assert len(json.dumps(short)) < 400 < len(json.dumps(cell))


# --- output: a Cell that never launched --------------------------------------------------------


def test_output_of_a_cell_cancelled_before_launch_says_so(rio: Any, tmp_path: Path) -> None:
    assert rio("new", "s.db", "--goal", "g", "--cwd", tmp_path).code == 0
    turn = rio("turn", "s.db").out
    patch = (
        Patch(turn["state"])
        .add(cmd_cell("echo", "never"))
        .add(note_cell("stop it", role="cancel", target_cell_id=1))
        .build()
    )
    assert rio("step", "s.db", turn["turn_id"], "-", input=patch).code == 0
    queued = rio("output", "s.db", "1")
    assert queued.code == 1 and "queued and has not been launched" in queued.out["error"]
    assert rio("work", "s.db").code == 0
    result = rio("state", "s.db").out["runtime"]["cells"]["1"]["result"]
    assert result["type"] == "cancelled"
    done = rio("output", "s.db", "1")
    assert done.code == 1
    assert done.out["error"] == (
        f"cell 1 was cancelled before it was launched ({result['reason']}): it has no output"
    )
    assert rio("output", "s.db", "2").out["error"] == "cell 2 has no Execution in s.db"
