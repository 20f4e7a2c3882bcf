"""``rio-ci run``: the round loop and its durable-execution properties (docs/models.md,
docs/sessions.md invalid idle, docs/cli.md).

Every test runs against a real Session file: the real CLI in a subprocess, or (where only the
rounds matter) the same round loop in this process (``WatchedFake.run_here``). Claude rounds
use the real ``anthropic`` SDK against the strict ``FakeAnthropic`` on 127.0.0.1;
``WatchedFake`` also notes when each request arrived and how many attempts the Journal held
at that moment. What the model was shown is read back from the request with
``ReceivedRequest.state()`` / ``user_text``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kit import add, cli_env, cmd_cell, events, note_cell, run_cli, spawn_cli, until
from tests.round_loop_kit import (
    DONE,
    ECHO,
    KEY,
    MODEL,
    WatchedFake,
    cost,
    kinds,
    patch,
    pid_alive,
    timer_cell,
    turn_text,
    usage,
)
from tests.run_cli import interrupt, new_session, status, write_script


def conclusion(result: str) -> dict[str, Any]:
    return add(note_cell(result, role="conclusion", result=result))


def timer_deadline(db: Path) -> float:
    (timer,) = kinds(events(db), "timer_set")
    deadline: float = timer["deadline"]
    return deadline


@pytest.fixture
def session_db(tmp_path: Path) -> Path:
    return new_session(tmp_path)


@pytest.fixture
def fake(session_db: Path) -> Iterator[WatchedFake]:
    with WatchedFake(session_db) as server:
        yield server


# --- the run's outcomes -------------------------------------------------------------------


def test_run_reaches_success_and_prints_the_status_last(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    script = write_script(tmp_path, [[add(cmd_cell("echo", "hello"))], [conclusion("success")]])
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 0, done.stderr
    last = status(done.stdout)
    assert {"status", "next_wake"} <= set(last)
    assert last["status"] == "succeeded" and last["next_wake"] is None
    evs = events(db)
    assert kinds(evs, "run_ended")[0]["result"] == "success"
    (finished,) = kinds(evs, "execution_finished")
    assert finished["result"]["type"] == "success"
    assert "hello" in "".join(e["text"] for e in kinds(evs, "output"))
    # A terminal run is never revived: a second run reports the ending and asks nothing.
    again = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(again.stdout)["status"] == "succeeded"
    assert len(events(db)) == len(evs)


def test_failure_conclusion_fails_the_run_with_exit_1(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    script = write_script(tmp_path, [[conclusion("failure")]])
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 1
    assert status(done.stdout)["status"] == "failed"
    assert kinds(events(db), "run_ended")[0]["result"] == "failure"


def test_bad_model_spec_is_a_usage_error(session_db: Path) -> None:
    done = run_cli("run", str(session_db), "--model", "gpt:whatever")
    assert done.returncode == 2
    assert "error" in status(done.stdout)


def test_a_future_timer_from_a_code_cell_ends_the_run_waiting(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    deadline = round(time.time() + 3600, 3)
    script = write_script(
        tmp_path,
        [
            [add(timer_cell(deadline))],
            [add(note_cell("waiting for the Timer"))],
            [conclusion("success")],  # must not be asked: nothing new has arrived
        ],
    )
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 0, done.stdout + done.stderr
    last = status(done.stdout)
    assert last["status"] == "waiting"
    assert last["next_wake"] == deadline
    evs = events(db)
    (timer,) = kinds(evs, "timer_set")
    assert timer["deadline"] == deadline and timer["cell_id"] == 1
    assert len(kinds(evs, "model_response")) == 2
    assert not kinds(evs, "run_ended") and not kinds(evs, "message_received")
    # Nothing new since: another run waits again without asking the model.
    again = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(again.stdout) == last
    assert len(kinds(events(db), "model_attempt")) == 2


def test_a_timer_due_before_the_deadline_is_waited_for_and_delivered(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    script = write_script(
        tmp_path,
        [
            [add(timer_cell("time.time() + 1"))],
            [add(note_cell("waiting for the Timer"))],
            [conclusion("success")],
        ],
    )
    done = run_cli("run", str(db), "--model", f"scripted:{script}", "--deadline", "30")
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    evs = events(db)
    (fired,) = kinds(evs, "timer_fired")
    assert fired["at"] >= timer_deadline(db)
    assert kinds(evs, "turn_prepared")[2]["delivered"] == ["timer:ci-check"]


def test_deadline_stops_a_long_cell_as_unknown_execution(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    script = write_script(tmp_path, [[add(cmd_cell("sleep", "30"))], [conclusion("success")]])
    started = time.monotonic()
    done = run_cli("run", str(db), "--model", f"scripted:{script}", "--deadline", "1")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert status(done.stdout)["status"] == "deadline"
    assert elapsed < 10
    evs = events(db)
    (finished,) = kinds(evs, "execution_finished")
    assert finished["result"]["type"] == "UnknownExecution"
    assert finished["result"]["reason"] == "owner_deadline"
    assert not kinds(evs, "run_ended")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_interrupts_the_run_within_5s(tmp_path: Path, signum: int) -> None:
    db = new_session(tmp_path)
    marker = tmp_path / "cell-started"
    script = write_script(
        tmp_path,
        [
            [
                add(
                    cmd_cell(
                        sys.executable,
                        "-c",
                        f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); "
                        "time.sleep(60)",
                    )
                )
            ],
            [conclusion("success")],
        ],
    )
    proc = spawn_cli("run", str(db), "--model", f"scripted:{script}")
    out, err, took = interrupt(proc, marker.exists, "the Cell to start", signum)
    assert took < 5, f"took {took:.1f}s"
    assert proc.returncode >= 0, "killed by the signal instead of handling it"
    assert status(out)["status"] == "interrupted", err
    (finished,) = kinds(events(db), "execution_finished")
    assert finished["result"]["type"] == "UnknownExecution"
    assert finished["result"]["reason"] == "owner_interrupted"
    identity = kinds(events(db), "worker_registered")[0]["identity"]
    assert not pid_alive(identity["pid"])


# --- durable attempts -----------------------------------------------------------------------


def test_every_attempt_is_committed_before_its_request_and_replies_before_admission(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.reply_patch(patch(0, 1, ECHO))
    fake.reply_patch(patch(1, 2, DONE))
    outcome = fake.run_here()
    assert outcome.status == "succeeded", outcome
    # When request n arrived, n model_attempt events were already committed.
    assert [committed for _, committed in fake.arrivals] == [1, 2]
    evs = events(session_db)
    attempts = kinds(evs, "model_attempt")
    assert len(attempts) == len(fake.requests) == 2
    assert all(a["at"] <= t for a, (t, _) in zip(attempts, fake.arrivals, strict=True))
    for accepted in kinds(evs, "patch_accepted"):
        (response,) = [
            e for e in kinds(evs, "model_response") if e["turn_id"] == accepted["turn_id"]
        ]
        assert response["seq"] < accepted["seq"]
        assert response["patch"] == accepted["patch"]
    assert KEY not in json.dumps(evs)


def test_reply_lost_before_its_commit_is_asked_again_and_counted_unknown(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.reply_patch(patch(0, 1, ECHO), input_tokens=1000, output_tokens=100)  # lost
    fake.reply_patch(patch(0, 1, ECHO), input_tokens=1000, output_tokens=100)
    fake.reply_patch(patch(1, 2, DONE), input_tokens=1000, output_tokens=100)
    first = fake.run(crash_at="model_reply_before_commit")
    assert first.returncode == -signal.SIGKILL
    evs = events(session_db)
    assert len(kinds(evs, "model_attempt")) == 1 and not kinds(evs, "model_response")
    second = fake.run()
    assert status(second.stdout)["status"] == "succeeded", second.stdout + second.stderr
    assert len(fake.requests) == 3  # the provider was asked again for the lost reply
    assert fake.requests[0].state() == fake.requests[1].state()  # the same Turn, unchanged
    evs = events(session_db)
    turn1 = kinds(evs, "turn_prepared")[0]["turn_id"]
    assert [a["attempt"] for a in kinds(evs, "model_attempt") if a["turn_id"] == turn1] == [1, 2]
    assert len(kinds(evs, "patch_accepted")) == 2
    used = usage(session_db)
    assert used["attempts"] == 3
    assert used["unknown_cost_attempts"] == 1  # the lost attempt: unknown, never free
    assert used["input_tokens"] == 2000  # only committed replies are counted
    assert used["cost_usd"] == pytest.approx(2 * cost(1000, 100))


def test_reply_committed_but_not_admitted_is_admitted_without_asking_again(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.reply_patch(patch(0, 1, ECHO))
    fake.reply_patch(patch(1, 2, DONE))
    first = fake.run(crash_at="reply_before_admit")
    assert first.returncode == -signal.SIGKILL
    assert len(fake.requests) == 1
    evs = events(session_db)
    assert len(kinds(evs, "model_response")) == 1 and not kinds(evs, "patch_accepted")
    second = fake.run()
    assert status(second.stdout)["status"] == "succeeded", second.stdout + second.stderr
    assert len(fake.requests) == 2  # only round 2 was asked; the saved reply was admitted
    evs = events(session_db)
    assert len(kinds(evs, "model_attempt")) == 2
    first_accept = kinds(evs, "patch_accepted")[0]
    assert first_accept["patch"] == kinds(evs, "model_response")[0]["patch"]


# --- retries ------------------------------------------------------------------------------


def test_overloaded_then_good_reply_waits_out_retry_after(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.overloaded(retry_after=1.5)
    fake.reply_patch(patch(0, 1, DONE))
    outcome = fake.run_here()
    assert outcome.status == "succeeded", outcome
    assert len(fake.requests) == 2
    assert fake.gaps()[0] >= 1.5  # longer than the round loop's own first backoff (≤ 1 s)
    evs = events(session_db)
    assert [a["attempt"] for a in kinds(evs, "model_attempt")] == [1, 2]
    failed, good = kinds(evs, "model_response")
    assert not failed["ok"] and "529" in failed["error"] and failed["transient"]
    assert failed["not_before"] - failed["retry_since"] >= 1.5  # persisted, not in memory
    assert good["ok"]


def test_backoff_is_persisted_across_a_restart(fake: WatchedFake, session_db: Path) -> None:
    fake.overloaded(retry_after=2)
    fake.reply_patch(patch(0, 1, DONE))
    proc = spawn_cli("run", str(session_db), "--model", f"anthropic:{MODEL}", env=fake.env())
    # interrupted while waiting out the backoff
    out, _, _ = interrupt(
        proc,
        lambda: len(kinds(events(session_db), "model_response")) == 1,
        "the first model response",
    )
    assert status(out)["status"] == "interrupted"
    assert len(fake.requests) == 1
    second = fake.run()
    assert status(second.stdout)["status"] == "succeeded"
    assert fake.gaps()[0] >= 2.0  # the restarted run honoured the committed not_before


def test_malformed_reply_is_never_applied_then_a_good_one_is(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.malformed("string")
    fake.reply_patch(patch(0, 1, DONE))
    outcome = fake.run_here()
    assert outcome.status == "succeeded", outcome
    evs = events(session_db)
    bad, good = kinds(evs, "model_response")
    assert not bad["ok"] and "malformed" in bad["invalid"] and bad["patch"] is None
    (accepted,) = kinds(evs, "patch_accepted")
    assert accepted["patch"] == good["patch"] == patch(0, 1, DONE)
    assert not kinds(evs, "patch_rejected")
    assert "malformed" in turn_text(fake.requests[1])


def test_model_attempts_bound_the_invalid_replies(tmp_path: Path) -> None:
    db = new_session(tmp_path, "model_attempts=3")
    with WatchedFake(db) as fake:
        for _ in range(4):
            fake.reply_raw([{"type": "text", "text": "I think the fix is obvious."}])
        done = fake.run()
        assert len(fake.requests) == 3
    assert done.returncode == 1
    assert status(done.stdout)["status"] == "failed"
    (ended,) = kinds(events(db), "run_ended")
    assert "model_attempts exhausted" in ended["reason"] and "no step call" in ended["reason"]


def test_non_retryable_error_fails_at_once_with_the_providers_message(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.error(400, "invalid_request_error", "messages.0.content: the prompt is too long")
    done = fake.run()
    assert done.returncode == 1
    assert status(done.stdout)["status"] == "failed"
    assert len(fake.requests) == 1
    reason = kinds(events(session_db), "run_ended")[0]["reason"]
    assert "400" in reason and "the prompt is too long" in reason


def test_rejected_patch_reason_is_shown_on_the_next_attempt(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.reply_patch(patch(99, 1, ECHO))  # tests a revision the model was never shown
    fake.reply_patch(patch(0, 1, DONE))
    outcome = fake.run_here()
    assert outcome.status == "succeeded", outcome
    evs = events(session_db)
    (rejected,) = kinds(evs, "patch_rejected")
    assert rejected["reason"]
    first, second = fake.requests
    assert "rejected" not in turn_text(first)  # (the test's own directory name says it)
    assert f"rejected: {rejected['reason']}" in turn_text(second)
    (accepted,) = kinds(evs, "patch_accepted")
    assert accepted["turn_id"] == rejected["turn_id"]  # the rejection did not use up the Turn


# --- budgets --------------------------------------------------------------------------------


def test_rounds_budget_ends_the_run(tmp_path: Path) -> None:
    db = new_session(tmp_path, "rounds=2")
    script = write_script(
        tmp_path,
        [[add(cmd_cell("echo", f"r{k}"))] for k in range(1, 5)] + [[conclusion("success")]],
    )
    # The first run dies after round 1; the restarted one may use only the one round left.
    first = run_cli(
        "run",
        str(db),
        "--model",
        f"scripted:{script}",
        env=cli_env(RIO_CRASH_AT="accept_after_commit:1"),
    )
    assert first.returncode == -signal.SIGKILL
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 1
    assert status(done.stdout)["status"] == "failed"
    evs = events(db)
    assert len(kinds(evs, "patch_accepted")) == 2
    assert len(kinds(evs, "model_attempt")) == 2
    assert "rounds budget" in kinds(evs, "run_ended")[0]["reason"]
    # A restart of the ended run resets nothing.
    again = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(again.stdout)["status"] == "failed"
    assert len(events(db)) == len(evs)


def test_tokens_budget_counts_provider_usage(tmp_path: Path) -> None:
    db = new_session(tmp_path, "tokens=200")
    with WatchedFake(db) as fake:
        fake.reply_patch(
            patch(0, 1, ECHO), input_tokens=60, output_tokens=20, cache_read_input_tokens=20
        )
        fake.reply_patch(
            patch(1, 2, ECHO), input_tokens=60, output_tokens=20, cache_read_input_tokens=20
        )
        fake.reply_patch(patch(2, 3, DONE))
        done = fake.run()
        assert len(fake.requests) == 2
    assert status(done.stdout)["status"] == "failed"
    assert "token budget" in kinds(events(db), "run_ended")[0]["reason"]
    used = usage(db)
    assert (used["input_tokens"], used["output_tokens"]) == (160, 40)  # cache reads are input


def test_cost_budget_counts_known_cost(tmp_path: Path) -> None:
    per_round = cost(1000, 200)
    db = new_session(tmp_path, f"cost_usd={per_round * 2.5}")
    with WatchedFake(db) as fake:
        for revision in range(4):
            fake.reply_patch(
                patch(revision, revision + 1, ECHO), input_tokens=1000, output_tokens=200
            )
        done = fake.run()
        assert len(fake.requests) == 3  # asked while under budget; the third goes over
    used = usage(db)
    assert used["cost_usd"] == pytest.approx(3 * per_round)
    assert used["unknown_cost_attempts"] == 0
    assert status(done.stdout)["status"] == "failed"
    assert "cost budget" in kinds(events(db), "run_ended")[0]["reason"]


def test_storage_budget_ends_the_run_before_another_round(tmp_path: Path) -> None:
    """docs/sessions.md ``storage_bytes``: the round loop checks the Session's size before each
    model round; past it the run ends in failure and no further round is asked."""
    probe = tmp_path / "probe"
    probe.mkdir()
    fresh = new_session(probe)  # what a new Session weighs, and its page size
    with contextlib.closing(sqlite3.connect(f"file:{fresh}?mode=ro", uri=True)) as db_file:
        page = int(db_file.execute("PRAGMA page_size").fetchone()[0])
        start = int(db_file.execute("PRAGMA page_count").fetchone()[0]) * page
    # Room for less than one round's output: round 1 runs, and the check trips after it.
    db = new_session(tmp_path, f"storage_bytes={start + page}")
    script = write_script(
        tmp_path,
        [[add(cmd_cell(sys.executable, "-c", f"print('x' * {2 * page})"))] for _ in range(3)]
        + [[conclusion("success")]],
    )
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert status(done.stdout)["status"] == "failed"
    evs = events(db)
    reason = kinds(evs, "run_ended")[0]["reason"]
    assert reason.startswith("storage budget exhausted"), reason
    assert len(kinds(evs, "model_attempt")) == 1  # nothing asked after the check tripped
    assert [e["cell_id"] for e in kinds(evs, "execution_finished")] == [1]
    assert kinds(evs, "execution_finished")[0]["result"]["type"] == "success"
    # The ending is final: a restart asks nothing and commits nothing.
    again = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(again.stdout)["status"] == "failed"
    assert len(events(db)) == len(evs)


def test_a_deadline_cuts_validators_off_and_a_run_that_ends_says_so(tmp_path: Path) -> None:
    """docs/cli.md: ``run`` works until the run ends, waits, or the deadline passes, and its
    last line says which. A validator running at the deadline is cut off (the Control waits
    for the next run): it used to run to its end, the run then succeeded, and ``run`` said
    ``deadline``."""
    db = tmp_path / "s.db"
    done = run_cli(
        "new",
        str(db),
        "--goal",
        "slow validator",
        "--cwd",
        str(tmp_path),
        "--validator",
        f"{sys.executable} -c 'import time; time.sleep(20)'",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    script = write_script(tmp_path, [[conclusion("success")]])
    started = time.monotonic()
    cut = run_cli("run", str(db), "--model", f"scripted:{script}", "--deadline", "2")
    assert time.monotonic() - started < 12, "the validator ran past the deadline"
    assert status(cut.stdout)["status"] == "deadline", cut.stdout + cut.stderr
    assert not kinds(events(db), "run_ended")  # the Control is still pending


def test_usage_survives_a_restart_and_a_waiting_run_asks_nothing_more(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.reply_patch(
        patch(0, 1, timer_cell("time.time() + 1.5")), input_tokens=100, output_tokens=10
    )
    fake.reply_patch(patch(1, 2, note_cell("wait for CI")), input_tokens=200, output_tokens=20)
    fake.reply_patch(patch(2, 3, DONE), input_tokens=300, output_tokens=30)
    first = fake.run()
    wake = timer_deadline(session_db)
    assert status(first.stdout) == {"status": "waiting", "next_wake": wake, "reason": None}
    assert len(fake.requests) == 2  # nothing new arrived after round 2: no third request
    after_first = usage(session_db)
    assert (after_first["input_tokens"], after_first["output_tokens"]) == (300, 30)
    time.sleep(max(0.0, wake - time.time()) + 0.05)
    second = fake.run()
    assert status(second.stdout)["status"] == "succeeded", second.stdout + second.stderr
    assert len(fake.requests) == 3
    assert [m["id"] for m in fake.requests[2].state()["runtime"]["inbox"]] == ["timer:ci-check"]
    total = json.loads(run_cli("state", str(session_db)).stdout)["runtime"]["usage"]
    assert (total["input_tokens"], total["output_tokens"]) == (600, 60)
    assert total["rounds"] == 3 and total["attempts"] == 3
    assert total["cost_usd"] == pytest.approx(cost(600, 60))


# --- invalid idle and new input -------------------------------------------------------------


def test_invalid_idle_is_bounded_and_resets_when_work_is_added(tmp_path: Path) -> None:
    db = new_session(tmp_path)  # model_attempts defaults to 3
    script = write_script(
        tmp_path,
        [
            [add(note_cell("thinking 1"))],
            [add(note_cell("thinking 2"))],
            [add(cmd_cell("echo", "work"))],  # work resets the count
            [add(note_cell("thinking 3"))],
            [add(note_cell("thinking 4"))],
            [add(note_cell("thinking 5"))],
            [add(note_cell("never reached"))],
        ],
    )
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 1
    assert status(done.stdout)["status"] == "failed"
    evs = events(db)
    idle = [
        e["message"]
        for e in kinds(evs, "message_received")
        if e["message"]["kind"] == "invalid_idle"
    ]
    assert [m["payload"]["count"] for m in idle] == [1, 2, 1, 2, 3]
    assert all(m["id"].startswith("idle:") for m in idle)
    # docs/sessions.md: model_attempts (3) invalid idle decisions in a row end the run: the third.
    assert "invalid idle 3 times in a row" in kinds(evs, "run_ended")[0]["reason"]
    # Every Turn after the first was delivered something new: the model never asked blind.
    turns = kinds(evs, "turn_prepared")
    assert len(turns) == 6
    assert all(t["delivered"] for t in turns[1:])
    assert len(kinds(evs, "model_attempt")) == 6


def test_observation_during_generation_waits_for_the_next_turn(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.delay(2)
    fake.reply_patch(patch(0, 1, note_cell("reading the code")))
    fake.reply_patch(patch(1, 2, DONE))
    proc = spawn_cli("run", str(session_db), "--model", f"anthropic:{MODEL}", env=fake.env())
    try:
        until(lambda: len(fake.requests) == 1, 30)
        got = run_cli("receive", str(session_db), "c-1", "comment", '{"body": "also fix docs"}')
        assert got.returncode == 0, got.stdout + got.stderr
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert status(out)["status"] == "succeeded", out + err
    first, second = fake.requests
    assert first.state()["runtime"]["inbox"] == []
    assert [m["id"] for m in second.state()["runtime"]["inbox"]] == ["c-1"]
    turns = kinds(events(session_db), "turn_prepared")
    assert turns[0]["delivered"] == [] and turns[1]["delivered"] == ["c-1"]


def test_a_saved_reply_is_admitted_even_when_it_used_the_last_round(tmp_path: Path) -> None:
    """A committed reply is already paid for: a restart admits it, exactly as the run that
    was cut off would have, before any budget can end the run."""
    db = new_session(tmp_path, "rounds=2")
    script = write_script(
        tmp_path,
        [[add(cmd_cell("echo", "r1"))], [add(cmd_cell("echo", "r2"))], [conclusion("success")]],
    )
    first = run_cli(
        "run",
        str(db),
        "--model",
        f"scripted:{script}",
        env=cli_env(RIO_CRASH_AT="reply_before_admit:2"),
    )
    assert first.returncode == -signal.SIGKILL
    second = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(second.stdout)["status"] == "failed"
    evs = events(db)
    assert [c["argv"][1] for e in kinds(evs, "patch_accepted") for c in e["cells"]] == ["r1", "r2"]
    assert len(kinds(evs, "model_attempt")) == 2
    assert "rounds budget" in kinds(evs, "run_ended")[0]["reason"]


def test_the_owner_fires_timers_while_a_request_is_in_flight(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.reply_patch(patch(0, 1, timer_cell("time.time() + 1")))
    fake.delay(2.5)  # round 2 thinks past the Timer's deadline
    fake.reply_patch(patch(1, 2, note_cell("still reading")))
    fake.reply_patch(patch(2, 3, DONE))
    outcome = fake.run_here()
    assert outcome.status == "succeeded", outcome
    evs = events(session_db)
    second_attempt = kinds(evs, "model_attempt")[1]
    second_response = kinds(evs, "model_response")[1]
    (fired,) = kinds(evs, "timer_fired")
    assert second_attempt["seq"] < fired["seq"] < second_response["seq"]
    # The Timer's message waited for the next Turn: round 2's snapshot stayed fixed.
    assert [m["id"] for m in fake.requests[1].state()["runtime"]["inbox"]] == ["execution:1"]
    assert [m["id"] for m in fake.requests[2].state()["runtime"]["inbox"]] == ["timer:ci-check"]


def test_a_turn_taken_by_another_process_during_generation_is_not_fatal(
    fake: WatchedFake, session_db: Path, tmp_path: Path
) -> None:
    """Any process may ``step`` while the Owner runs (docs/cli.md). If one accepts a patch for
    the Turn the model is working on, the model's reply is moot: the run goes on from what
    was committed instead of stopping on the conflict."""
    fake.delay(2)
    fake.reply_patch(patch(0, 1, note_cell("the model's view")))
    fake.reply_patch(patch(1, 2, DONE))
    proc = spawn_cli("run", str(session_db), "--model", f"anthropic:{MODEL}", env=fake.env())
    try:
        until(lambda: len(fake.requests) == 1, 30)
        turn = json.loads(run_cli("turn", str(session_db)).stdout)
        assert turn["turn_id"] == kinds(events(session_db), "turn_prepared")[0]["turn_id"]
        human = tmp_path / "human.json"
        human.write_text(json.dumps(patch(0, 1, note_cell("a human's step"))))
        stepped = run_cli("step", str(session_db), turn["turn_id"], str(human))
        assert stepped.returncode == 0, stepped.stdout + stepped.stderr
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert status(out)["status"] == "succeeded"
    accepted = kinds(events(session_db), "patch_accepted")
    assert [c["text"] for e in accepted for c in e["cells"]] == ["a human's step", "done"]
    assert len(fake.requests) == 2


def test_a_signal_during_a_model_request_stops_within_5s(
    fake: WatchedFake, session_db: Path
) -> None:
    fake.delay(30)
    fake.reply_patch(patch(0, 1, DONE))  # never arrives in time
    fake.reply_patch(patch(0, 1, DONE))
    proc = spawn_cli("run", str(session_db), "--model", f"anthropic:{MODEL}", env=fake.env())
    out, _, took = interrupt(proc, lambda: len(fake.requests) == 1, "the model request")
    assert took < 5
    assert status(out)["status"] == "interrupted"
    evs = events(session_db)
    assert len(kinds(evs, "model_attempt")) == 1 and not kinds(evs, "model_response")
    again = fake.run()
    assert status(again.stdout)["status"] == "succeeded"
    assert [a["attempt"] for a in kinds(events(session_db), "model_attempt")] == [1, 2]
    assert usage(session_db)["unknown_cost_attempts"] == 1
