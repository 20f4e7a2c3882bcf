"""``rio-ci show`` (docs/cli.md): clipped output says how much is left out and how to read
it, validators and times are listed, and a run that has not ended says what comes next."""

from __future__ import annotations

import json
import re

from conftest import accept, end_execution, record_unknown, start_execution, succeed

from rio_ci.commands.show import SHOWN_LINES, render_text, summary
from rio_ci.session.session import Session
from tests.kit import cmd_cell, run_cli


def test_clipped_output_is_marked_with_the_bytes_left_out_and_the_command(
    session: Session,
) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")))
    text = "".join(f"line {i:03d}\n" for i in range(SHOWN_LINES * 4))
    succeed(session, 1, output=text)
    shown = render_text(session)
    lines = text.strip().split("\n")
    assert lines[-SHOWN_LINES] in shown and lines[-SHOWN_LINES - 1] not in shown
    left = len(text.strip().encode()) - len("\n".join(lines[-SHOWN_LINES:]).encode())
    db = str(session.path)
    command = f"rio-ci output {db} 1 --human"
    assert f"[… {left} bytes not shown: {command}]" in shown
    # The command it names prints all of it.
    done = run_cli(*command.split()[1:])
    assert done.returncode == 0 and done.stdout == text


def test_output_shown_whole_has_no_marker(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, 1, output="one line\n")
    shown = render_text(session)
    assert "stdout: one line" in shown and "bytes not shown" not in shown


def test_a_paused_queue_and_an_unresolved_execution_say_what_comes_next(
    session: Session,
) -> None:
    accept(session, lambda p: p.add(cmd_cell("false"), cmd_cell("true")))
    start_execution(session, 1)
    end_execution(session, 1, {"type": "error", "exit_code": 1})
    shown = render_text(session)
    assert re.search(
        r"^next: the queue waits for the model's next patch .*rio-ci run ", shown, re.M
    )
    assert "took " in shown and "started " in shown  # the Execution's times
    accept(session, lambda p: p.add(cmd_cell("sleep", "1")))
    record_unknown(session, 3)
    shown = render_text(session)
    assert re.search(
        r"^next: the model must investigate the UnknownExecution of cell\(s\) 3", shown, re.M
    )
    assert "cut off (its end is unknown)" in shown


def test_validators_are_listed_in_text_and_json(make_session: type) -> None:
    session: Session = make_session(validators=[["true"]])  # type: ignore[operator]
    accept(
        session,
        lambda p: p.add({"kind": "note", "role": "conclusion", "result": "success", "text": "ok"}),
    )
    session.record_validator(
        {
            "note_id": 1,
            "index": 0,
            "argv": ["true"],
            "result": {"type": "success", "exit_code": 0},
            "stdout": "",
            "stderr": "",
            "truncated": False,
        }
    )
    assert "validators:\n  true → success (at the conclusion, note 1" in render_text(session)
    (validator,) = json.loads(json.dumps(summary(session)))["validators"]
    assert validator["argv"] == ["true"] and validator["result"]["type"] == "success"
