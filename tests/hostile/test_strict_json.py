"""Strict JSON in and out: NaN, Infinity, -Infinity and numbers that overflow to
infinity are refused everywhere a user hands rio-ci JSON or a number, with one-line errors;
everything rio-ci prints is strict JSON; and receiving the same message twice is harmless."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rio_ci.core.admission import Rejection
from rio_ci.core.inbox import message_problem, timer_problem
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.store import sessionfile
from rio_ci.untrusted import jsonio
from tests.hostile.support import one_error, rio, strict

NOT_JSON = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "9" * 5000]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    Session.create(path, "strict JSON", Settings(cwd=str(tmp_path))).close()
    return path


def committed(db: Path) -> int:
    session = Session.open(db)
    try:
        return session.proj.last_seq
    finally:
        session.close()


@pytest.mark.parametrize("number", NOT_JSON)
def test_receive_refuses_numbers_json_has_not(db: Path, number: str) -> None:
    before = committed(db)
    done = rio("receive", str(db), "m1", "comment", f'{{"value": {number}}}', cwd=db.parent)
    assert "PAYLOAD_JSON is not valid JSON" in one_error(done, 2)
    assert committed(db) == before


@pytest.mark.parametrize("number", NOT_JSON)
def test_step_refuses_numbers_json_has_not_from_a_file_and_stdin(db: Path, number: str) -> None:
    turn = json.loads(rio("turn", str(db), cwd=db.parent).stdout)["turn_id"]
    patch = f'[{{"op": "test", "path": "/revision", "value": {number}}}]'
    (db.parent / "patch.json").write_text(patch)
    before = committed(db)
    for source, stdin in ((str(db.parent / "patch.json"), None), ("-", patch.encode())):
        done = rio("step", str(db), turn, source, input=stdin, cwd=db.parent)
        assert "PATCH is not valid JSON" in one_error(done, 2)
    assert committed(db) == before


def test_a_patch_with_nan_from_a_model_is_rejected_and_stored_as_a_digest(db: Path) -> None:
    session = Session.open(db)
    turn = session.prepare_turn()["turn_id"]
    result = session.step(turn, [{"op": "test", "path": "/revision", "value": float("nan")}])
    assert isinstance(result, Rejection) and "NaN or Infinity" in result.reason
    (rejected,) = [e for e in session.events() if e["kind"] == "patch_rejected"]
    assert set(rejected) >= {"digest", "size", "reason"} and "patch" not in rejected
    session.close()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "-1"])
def test_limits_and_durations_must_be_finite(db: Path, value: str) -> None:
    cwd = db.parent
    for args in (
        ["new", str(cwd / "t.db"), "--goal", "g", "--limit", f"cost_usd={value}"],
        ["work", str(db), "--timeout", value],
        ["run", str(db), "--deadline", value, "--model", "scripted:none.yaml"],
    ):
        one_error(rio(*args, cwd=cwd), 2)
    assert not (cwd / "t.db").exists()


def test_a_price_too_large_to_be_a_number_is_refused(db: Path) -> None:
    done = rio(
        "run", str(db), "--model", "scripted:none.yaml", "--price", "9" * 400 + "/1", cwd=db.parent
    )
    assert "too large" in one_error(done, 2)


def test_a_timer_payload_must_be_strict_json(db: Path) -> None:
    for payload in ("NaN", '{"at": Infinity}', "1e400"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rio_ci.run.confinement.bridge",
                str(db),
                "timer",
                "t1",
                "100",
                payload,
                "",
            ],
            capture_output=True,
            check=False,
        )
        assert "Timer payload is not valid JSON" in one_error(done, 1)
    assert committed(db) == 1


def test_the_same_message_received_twice_is_one_message(db: Path) -> None:
    payload = '{"ratio": 0.1, "big": 123456789012345678901234567890, "neg": -0.0}'
    first = rio("receive", str(db), "m1", "comment", payload, cwd=db.parent)
    again = rio("receive", str(db), "m1", "comment", payload, cwd=db.parent)
    assert first.returncode == again.returncode == 0
    assert strict(first.stdout.decode()) == strict(again.stdout.decode())


def test_one_decoder_reads_what_a_user_hands_in_and_what_rio_ci_stored() -> None:
    """Both refuse NaN and Infinity; only a user's input is bounded in depth (a row rio-ci
    wrote, a Timer payload from a Cell, may be deeper), and a stored number too large for a
    float is still read as infinity (rio-ci never writes one)."""
    for text in ("NaN", "[Infinity]", '{"x": -Infinity}'):
        with pytest.raises(ValueError, match="is not a JSON number"):
            sessionfile.DECODER.decode(text)
        with pytest.raises(jsonio.NotJSON, match="is not a JSON number"):
            jsonio.loads(text)
    deep = "[" * 150 + "]" * 150
    assert sessionfile.DECODER.decode(deep)
    with pytest.raises(jsonio.NotJSON, match="nested more than 100 levels"):
        jsonio.loads(deep)
    assert sessionfile.DECODER.decode("1e400") == math.inf
    with pytest.raises(jsonio.NotJSON, match="too large for a JSON number"):
        jsonio.loads("1e400")


def test_a_message_or_a_timer_that_cannot_be_stored_as_it_is_is_refused() -> None:
    for problem in (
        message_problem("m\ud800", "comment", {}),
        message_problem("m", "comment", {"body": "\udfff"}),
        timer_problem("t\ud800", 1, None),
        timer_problem("t", 1, ["\ud800"]),
    ):
        assert problem == "a string holds a lone surrogate (\\ud800-\\udfff), which is not text"
    for problem in (
        message_problem("m", "comment", {"x": math.nan}),
        timer_problem("t", 1, [-math.inf]),
    ):
        assert problem == "a number is NaN or Infinity, which is not JSON"
    assert message_problem("m", "comment", {"x": 1.5}) is None
    assert timer_problem("t", 1, {"x": 1.5}) is None


def plant(db: Path, data: str) -> None:
    """Write an event holding NaN the way no rio-ci ever would (a damaged or forged file)."""
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO events VALUES ((SELECT max(seq) + 1 FROM events), "
        "'message_received', 0, 'x', ?)",
        (data,),
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("command", [["state"], ["events"], ["show", "--json"], ["turn"], ["work"]])
def test_nothing_printed_is_ever_not_json(db: Path, command: list[str]) -> None:
    plant(db, '{"message": {"id": "x", "kind": "comment", "payload": NaN}}')
    done = rio(command[0], str(db), *command[1:], cwd=db.parent)
    assert "not strict JSON" in one_error(done, 4)


def test_every_line_events_prints_is_strict_json(db: Path) -> None:
    rio("receive", str(db), "m1", "comment", '{"x": 1.5e300, "y": "\\u001b[2J"}', cwd=db.parent)
    lines: list[Any] = [
        strict(line) for line in rio("events", str(db), cwd=db.parent).stdout.decode().splitlines()
    ]
    assert [e["kind"] for e in lines] == ["session_created", "message_received"]
