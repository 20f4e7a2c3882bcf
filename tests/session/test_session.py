"""The Session façade through the CLI contract (docs/models.md, docs/sessions.md, docs/cli.md):
Turns keep a fixed snapshot, the Inbox deduplicates and pushes back, limits persist, and bad
input or a file that is not ours is refused with the documented exit code and nothing
changed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import end_run, journal_rows, sha256

from rio_ci.session.session import Session
from rio_ci.store.at_rest import SCHEMA_VERSION
from tests.kit import Patch, note_cell, run_cli


@pytest.fixture
def new(rio: Any, tmp_path: Path) -> Any:
    """``new(*limit_assignments)``: a Session at tmp_path/s.db created by the CLI."""

    def create(*limits: str) -> Path:
        args = [a for item in limits for a in ("--limit", item)]
        code, out, _ = rio("new", "s.db", "--goal", "test goal", *args)
        assert code == 0, out
        assert out == {"session": out["session"], "db": str(tmp_path / "s.db")}
        return tmp_path / "s.db"

    return create


def events(db: Path) -> list[dict[str, Any]]:
    """Every committed event, read from outside without starting a rio-ci process."""
    return journal_rows(db)


def accept_turn(rio: Any, turn: dict[str, Any]) -> dict[str, Any]:
    code, receipt, _ = rio(
        "step",
        "s.db",
        turn["turn_id"],
        "-",
        input=Patch(turn["state"]).add(note_cell("ok")).build(),
    )
    assert code == 0, receipt
    return dict(receipt)


# --- Turns ---------------------------------------------------------------------------------


def test_a_turn_keeps_its_state_and_later_messages_wait(rio: Any, new: Any) -> None:
    db = new()
    first = rio("turn", "s.db")
    assert first.code == 0
    assert set(first.out) == {"turn_id", "state", "delivered"}
    assert rio("turn", "s.db").out == first.out
    code, ack, _ = rio("receive", "s.db", "m1", "comment", '{"body": "hello"}')
    assert code == 0 and ack["id"] == "m1"
    again = rio("turn", "s.db").out
    assert again == first.out
    assert again["state"]["runtime"]["inbox"] == [] and again["delivered"] == []
    # `state` shows what a new Turn would see, without preparing one
    before = events(db)
    assert [m["id"] for m in rio("state", "s.db").out["runtime"]["inbox"]] == ["m1"]
    assert events(db) == before
    accept_turn(rio, first.out)
    second = rio("turn", "s.db").out
    assert second["turn_id"] != first.out["turn_id"]
    assert second["delivered"] == ["m1"]
    assert second["state"]["runtime"]["inbox"] == [
        {"id": "m1", "kind": "comment", "payload": {"body": "hello"}, "seq": ack["seq"]}
    ]
    accept_turn(rio, second)
    assert rio("state", "s.db").out["runtime"]["inbox"] == []  # consumed, once
    assert rio("turn", "s.db").out["delivered"] == []


# --- the Inbox -----------------------------------------------------------------------------


def test_the_same_message_twice_is_one_message(rio: Any, new: Any) -> None:
    db = new()
    first = rio("receive", "s.db", "m1", "comment", '{"body": "hi", "n": 1}')
    assert first.code == 0
    before = events(db)
    again = rio("receive", "s.db", "m1", "comment", '{"n": 1, "body": "hi"}')
    assert (again.code, again.out) == (0, first.out)
    assert events(db) == before


@pytest.mark.parametrize(
    "kind, payload",
    [
        ("comment", '{"body": "changed"}'),
        ("check", '{"body": "hi"}'),
        ("comment", "true"),
    ],
)
def test_the_same_id_with_other_content_is_rejected(
    rio: Any, new: Any, kind: str, payload: str
) -> None:
    db = new()
    first = '{"body": "hi"}' if payload != "true" else "1"
    assert rio("receive", "s.db", "m1", "comment", first).code == 0
    before = events(db)
    code, out, _ = rio("receive", "s.db", "m1", kind, payload)
    assert code == 3 and "different content" in out["error"]
    assert events(db) == before


@pytest.mark.parametrize("message_id", ["execution:1", "control:4", "timer:t", "idle:2"])
def test_reserved_ids_are_rejected(rio: Any, new: Any, message_id: str) -> None:
    db = new()
    before = events(db)
    code, out, _ = rio("receive", "s.db", message_id, "comment", "{}")
    assert code == 3 and "reserved" in out["error"]
    assert events(db) == before


@pytest.mark.parametrize("kind", ["execution", "timer", "control_rejected", "invalid_idle"])
def test_harness_kinds_cannot_be_spoofed_from_outside(rio: Any, new: Any, kind: str) -> None:
    db = new()
    before = events(db)
    code, out, _ = rio("receive", "s.db", "m1", kind, '{"type": "success"}')
    assert code == 3 and "reserved" in out["error"]
    assert events(db) == before


@pytest.mark.parametrize(
    "args",
    [
        ("m1", "Comment", "{}"),
        ("m1", "", "{}"),
        ("", "comment", "{}"),
        ("m1", "comment", '"\\ud800"'),
        ("m\udcff", "comment", "{}"),
    ],
)
def test_bad_message_ids_kinds_and_text_are_rejected(
    rio: Any, new: Any, args: tuple[str, ...]
) -> None:
    db = new()
    before = events(db)
    code, out, _ = rio("receive", "s.db", *args)
    # an argument that is not UTF-8 is a usage error, before anything is opened
    assert code == (2 if "\udcff" in args[0] else 3) and out["error"]
    assert events(db) == before


def test_a_payload_over_output_bytes_is_rejected(rio: Any, new: Any) -> None:
    db = new("output_bytes=100")
    before = events(db)
    code, out, _ = rio("receive", "s.db", "big", "comment", json.dumps("a" * 99))  # 101 bytes
    assert code == 3 and "output_bytes=100" in out["error"]
    assert events(db) == before
    assert rio("receive", "s.db", "fits", "comment", json.dumps("a" * 98)).code == 0


def test_a_full_inbox_pushes_back_and_loses_nothing(rio: Any, new: Any) -> None:
    db = new("inbox_messages=2")
    acks = [rio("receive", "s.db", f"m{i}", "comment", f'{{"n": {i}}}') for i in (1, 2)]
    assert [a.code for a in acks] == [0, 0]
    before = events(db)
    code, out, _ = rio("receive", "s.db", "m3", "comment", '{"n": 3}')
    assert code == 3 and "retry later" in out["error"]
    assert events(db) == before
    assert rio("receive", "s.db", "m1", "comment", '{"n": 1}').out == acks[0].out
    turn = rio("turn", "s.db").out
    assert turn["delivered"] == ["m1", "m2"]
    assert rio("receive", "s.db", "m3", "comment", '{"n": 3}').code == 3  # not consumed yet
    accept_turn(rio, turn)
    assert rio("receive", "s.db", "m3", "comment", '{"n": 3}').code == 0
    received = [
        e["message"]["id"] for e in rio("events", "s.db").lines if e["kind"] == "message_received"
    ]
    assert received == ["m1", "m2", "m3"]


# --- an ended run --------------------------------------------------------------------------


def test_an_ended_run_accepts_no_messages_turns_or_patches(rio: Any, new: Any) -> None:
    db = new()
    open_turn = rio("turn", "s.db").out
    session = Session.open(db)
    end_run(session, "test ended it")
    session.close()
    before = events(db)
    code, out, _ = rio("receive", "s.db", "m1", "comment", "{}")
    assert code == 1 and "ended" in out["error"]
    code, out, _ = rio("turn", "s.db")
    assert code == 1 and "ended" in out["error"]
    code, out, _ = rio(
        "step", "s.db", open_turn["turn_id"], "-", input=Patch(open_turn["state"]).build()
    )
    assert code == 1 and "ended" in out["error"]
    assert events(db) == before


# --- new and limits ------------------------------------------------------------------------


def test_new_never_overwrites(rio: Any, new: Any) -> None:
    db = new()
    digest = sha256(db)
    code, out, _ = rio("new", "s.db", "--goal", "another")
    assert code == 1 and "already exists" in out["error"]
    assert sha256(db) == digest


def test_limits_are_persisted(rio: Any, new: Any) -> None:
    db = new("rounds=5", "cost_usd=2.5", "pending_cells=3")
    created = rio("events", "s.db").lines[0]
    assert created["kind"] == "session_created"
    limits = created["limits"]
    assert (limits["rounds"], limits["cost_usd"], limits["pending_cells"]) == (5, 2.5, 3)
    assert limits["tokens"] == 2_000_000  # the rest keep their defaults
    session = Session.open(db)
    assert session.limits.to_dict() == limits
    session.close()


@pytest.mark.parametrize(
    "assignment",
    [
        "rounds=0",
        "nope=1",
        "rounds=x",
        "rounds=1.5",
        "rounds",
        "cost_usd=nan",
        "cost_usd=-1",
        "execution_seconds=0",
    ],
)
def test_bad_limits_are_usage_errors_and_create_nothing(
    rio: Any, tmp_path: Path, assignment: str
) -> None:
    code, out, _ = rio("new", "s.db", "--goal", "g", "--limit", assignment)
    assert code == 2 and out["error"]
    assert list(tmp_path.iterdir()) == []


# --- malformed input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["{not json", "", "[1,", "[" * 5000 + "]" * 5000, "[" * 990 + "]" * 990, "[" * 101 + "]" * 101],
    ids=["broken", "empty", "truncated", "5000 deep", "990 deep", "101 deep"],
)
def test_malformed_json_is_a_usage_error(rio: Any, new: Any, text: str) -> None:
    db = new()
    turn = rio("turn", "s.db").out
    before = events(db)
    code, out, _ = rio("step", "s.db", turn["turn_id"], "-", input=text)
    assert code == 2 and "PATCH" in out["error"]
    code, out, _ = rio("receive", "s.db", "m1", "comment", text)
    assert code == 2 and "PAYLOAD_JSON" in out["error"]
    code, out, _ = rio("step", "s.db", turn["turn_id"], "missing-file.json")
    assert code == 2 and out["error"]
    assert events(db) == before


@pytest.mark.parametrize("patch", [{"a": 1}, 5, "x", None, {"patch": 5}, []])
def test_a_patch_that_is_not_a_list_is_rejected(rio: Any, new: Any, patch: Any) -> None:
    db = new()
    turn = rio("turn", "s.db").out
    before = events(db)
    code, out, _ = rio("step", "s.db", turn["turn_id"], "-", input=json.dumps(patch))
    assert code == 3 and out["rejected"]
    after = events(db)
    assert after[:-1] == before and after[-1]["kind"] == "patch_rejected"
    assert rio("turn", "s.db").out == turn


def test_a_patch_with_a_lone_surrogate_is_rejected_and_recorded(rio: Any, new: Any) -> None:
    db = new()
    turn = rio("turn", "s.db").out
    before = events(db)
    text = json.dumps(Patch(turn["state"]).add(note_cell("\ud800")).build())
    code, out, _ = rio("step", "s.db", turn["turn_id"], "-", input=text)
    assert code == 3 and "surrogate" in out["rejected"]
    after = events(db)
    assert after[:-1] == before and after[-1]["kind"] == "patch_rejected"
    assert rio("turn", "s.db").out == turn


# --- files that are not (our) Sessions -----------------------------------------------------


def other_tables(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    conn.close()


def newer_schema(path: Path) -> None:
    Session.create(path, "from the future").close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


FOREIGN = {
    "text": lambda p: p.write_text("just some text, long enough to look like a header\n" * 3),
    "empty": lambda p: p.write_bytes(b""),
    "other tables": other_tables,
    "newer schema": newer_schema,
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
@pytest.mark.parametrize(
    "command",
    [
        ["state"],
        ["turn"],
        ["receive", "m1", "comment", "{}"],
        ["step", "turn-1-x", "-"],
    ],
)
def test_a_file_that_is_not_our_session_is_refused_untouched(
    rio: Any, tmp_path: Path, kind: str, command: list[str]
) -> None:
    path = tmp_path / "s.db"
    FOREIGN[kind](path)
    digest, names = sha256(path), sorted(p.name for p in tmp_path.iterdir())
    result = rio(command[0], "s.db", *command[1:], input="[]")
    code, out, err = result
    assert code == 4, out
    assert len(result.stdout.splitlines()) == 1 and err == ""
    assert set(out) == {"error"} and "s.db" in out["error"]
    assert sha256(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    if kind == "newer schema":  # one line naming both versions
        assert "written by a newer rio-ci (Session format 99; this rio-ci" in out["error"]
        assert f"reads up to {SCHEMA_VERSION}): upgrade rio-ci" in out["error"]


def test_a_missing_session_file_is_a_storage_error(rio: Any, tmp_path: Path) -> None:
    code, out, _ = rio("state", "nope.db")
    assert code == 4 and "no such Session" in out["error"]
    assert list(tmp_path.iterdir()) == []


def test_a_session_whose_first_state_fills_the_context_is_refused(tmp_path: Path) -> None:
    """A goal (with limits and validators) that alone fills ``context_bytes`` would leave
    every Turn over the budget and every patch rejected: ``new`` refuses it, creating
    nothing (exit 2), instead of a Session that can never work."""
    db = tmp_path / "s.db"
    done = run_cli("new", str(db), "--goal", "g" * 5000, "--limit", "context_bytes=3000")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no Turn could be shown" in json.loads(done.stdout)["error"]
    assert not db.exists() and list(tmp_path.iterdir()) == []
    assert (
        run_cli("new", str(db), "--goal", "g" * 500, "--limit", "context_bytes=3000").returncode
        == 0
    )
