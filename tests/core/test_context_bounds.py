"""What the model sees is bounded (docs/models.md, docs/sessions.md "Limits"): each stream keeps
its first and last half of ``output_bytes`` with a marker of what was elided, and the State
sent never exceeds ``context_bytes``: the oldest finished outputs are masked with a pointer to
``rio_ci.api.output`` / ``rio-ci output``, which still return the full retained text.

Runs are real ``rio-ci run`` subprocesses against the strict ``FakeAnthropic``; every
assertion about what the model saw is made on the requests the fake received.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rio_ci.core.json_value import encoded_size
from rio_ci.core.limits import Limits
from rio_ci.core.view import masked_marker
from tests.kit import cmd_cell, events, run_cli
from tests.round_loop_kit import DONE, WatchedFake, kinds, patch
from tests.run_cli import new_session, status

# Every test runs real rio-ci runs (Owners, Workers, the SDK): slow as a module, as
# tests/conftest.py marks test_round_loop.py.
pytestmark = pytest.mark.slow

PY = sys.executable
LINE = "r{k:02d} line {i:05d} " + "x" * 44  # 60 bytes with its newline


def printed(k: int, lines: int) -> str:
    return "".join(LINE.format(k=k, i=i) + "\n" for i in range(lines))


def printer(k: int, lines: int) -> dict[str, object]:
    """A cmd Cell printing ``printed(k, lines)``."""
    source = (
        f"import sys\nfor i in range({lines}):\n"
        f"    sys.stdout.write({LINE!r}.format(k={k}, i=i) + '\\n')\n"
    )
    return cmd_cell(PY, "-c", source)


def test_a_200kb_output_shows_its_first_and_last_lines(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    lines = 200_000 // 60 + 1
    text = printed(1, lines)
    first, last = text.splitlines()[0], text.splitlines()[-1]
    with WatchedFake(db) as fake:
        fake.reply_patch(patch(0, 1, printer(1, lines)))
        fake.reply_patch(patch(1, 2, DONE))
        outcome = fake.run_here()
        seen = fake.requests[1]
    assert outcome.status == "succeeded", outcome
    assert len(text.encode()) > 200_000
    facts = seen.state()["runtime"]["cells"]["1"]
    shown = facts["stdout"]
    limit = Limits().output_bytes
    elided = len(text.encode()) - limit
    assert shown.startswith(first + "\n") and shown.endswith(last + "\n")
    assert f"[… {elided} bytes elided …]" in shown and facts["truncated"] is True
    assert text.startswith(shown.split("\n[… ")[0])  # the head, exactly
    assert text.endswith(shown.split(" bytes elided …]\n")[1])  # the tail, exactly
    assert first in seen.user_text and last in seen.user_text  # raw text, not JSON
    assert run_cli("output", str(db), "1", "--human").stdout == shown  # what is kept is shown


def test_twelve_rounds_of_60kb_outputs_never_exceed_the_context_budget(tmp_path: Path) -> None:
    db = new_session(tmp_path, "output_bytes=64000")  # each 60 KB output is kept whole
    context = Limits().context_bytes
    rounds = 12
    reader = (
        "import pathlib\nfrom rio_ci.api import output\n"
        "pathlib.Path('first.txt').write_text(output(1))\n"
        "pathlib.Path('second.txt').write_text(output(2, 'stdout'))\n"
    )
    with WatchedFake(db) as fake:
        for k in range(1, rounds + 1):
            fake.reply_patch(patch(k - 1, k, printer(k, 1000)))
        fake.reply_patch(patch(rounds, rounds + 1, cmd_cell(PY, "-c", reader)))
        fake.reply_patch(patch(rounds + 1, rounds + 2, DONE))
        done = fake.run(timeout=240)
        requests = fake.requests
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr[-2000:]
    assert len(requests) == rounds + 2
    masked_in_some_request = False
    for number, sent in enumerate(requests, start=1):
        state = sent.state()
        assert encoded_size(state) <= context, f"request {number}"
        assert len(state["cells"]) == number - 1  # nothing dropped: every Cell is listed
        outputs = {
            int(k): v["stdout"] for k, v in state["runtime"]["cells"].items() if int(k) <= rounds
        }
        masked = sorted(k for k, text in outputs.items() if text != printed(k, 1000))
        for k in masked:
            size = len(printed(k, 1000).encode())
            # (the fake reads fenced text back with a final newline)
            assert outputs[k].removesuffix("\n") == masked_marker(k, "stdout", size)
            assert f"rio_ci.api.output({k}, 'stdout')" in outputs[k]
            assert f"rio-ci output DB {k} --stream stdout" in outputs[k]
        assert masked == list(range(1, len(masked) + 1))  # the oldest first
        if outputs:
            assert max(outputs) not in masked  # the newest output is shown in full
        masked_in_some_request |= bool(masked)
    assert masked_in_some_request
    # Nothing is lost: the Journal keeps each full output, read back by the CLI and by a Cell.
    for k in (1, 2, rounds):
        got = json.loads(run_cli("output", str(db), str(k)).stdout)
        assert got == {"cell_id": k, "stream": "stdout", "text": printed(k, 1000)}
    assert (tmp_path / "first.txt").read_text() == printed(1, 1000)
    assert (tmp_path / "second.txt").read_text() == printed(2, 1000)
    assert [e["result"]["type"] for e in kinds(events(db), "execution_finished")] == ["success"] * (
        rounds + 1
    )


def test_a_message_too_large_for_the_context_is_delivered_cut_and_says_so(tmp_path: Path) -> None:
    """docs/models.md: the State never exceeds ``context_bytes``; over a limit, explicit
    truncation, never silent. With odd limits (``output_bytes`` near ``context_bytes``) one
    message alone may not fit: it is delivered with its payload cut and its full size."""
    db = new_session(tmp_path, "context_bytes=20000", "output_bytes=16000")
    (step := tmp_path / "note.json").write_text(
        json.dumps({"patch": patch(0, 1, {"kind": "note", "text": "n" * 9000})})
    )
    turn = json.loads(run_cli("turn", str(db)).stdout)
    assert run_cli("step", str(db), turn["turn_id"], str(step)).returncode == 0
    body = "y" * 15000
    assert run_cli("receive", str(db), "big", "comment", json.dumps({"b": body})).returncode == 0

    turn = json.loads(run_cli("turn", str(db)).stdout)

    assert turn["delivered"] == ["big"]
    assert encoded_size(turn["state"]) <= 20000
    (shown,) = turn["state"]["runtime"]["inbox"]
    payload = shown["payload"]
    assert payload["truncated"] is True and payload["payload_bytes"] == len(json.dumps({"b": body}))
    assert payload["head"].startswith('{"b": "yyy') and len(payload["head"]) < len(body)
    # The whole message stays in the Journal.
    (received,) = [e for e in events(db) if e["kind"] == "message_received"]
    assert received["message"]["payload"] == {"b": body}
