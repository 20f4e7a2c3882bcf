"""The live log of ``rio-ci run`` (stderr) and the round's rationale wherever a run is shown:
``rio-ci show``, the live log, the progress comment (docs/cli.md "run", docs/models.md).

The run is a real subprocess against the strict ``FakeAnthropic``; its stderr is read while it
runs, so "as it happens" is observed, not assumed.
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from rio_ci.commands.show import render_text
from rio_ci.reports import progress
from rio_ci.reports.live import LiveLog
from rio_ci.session.session import Session
from tests.faults import checks, runner
from tests.kit import cli_env, cmd_cell, events, run_cli, spawn_cli, until
from tests.round_loop_kit import DONE, ECHO, MODEL, WatchedFake, cost, kinds, patch
from tests.run_cli import new_session, status, write_script

# Every test runs real rio-ci runs (Owners, Workers, the SDK): slow as a module, as
# tests/conftest.py marks test_round_loop.py.
pytestmark = pytest.mark.slow

PY = sys.executable
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
STAMP = r"[0-9]{2}:[0-9]{2}:[0-9]{2} "  # the time each live log line carries


class Lines:
    """Reads a pipe line by line in a thread, so a test can look while the process runs."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: io.TextIOBase) -> None:
        for line in stream:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def join(self) -> str:
        self._thread.join(10)
        return self.text


def run_live(fake: WatchedFake, db: Path) -> tuple[subprocess.Popen[str], Lines]:
    proc = spawn_cli("run", str(db), "--model", f"anthropic:{MODEL}", env=fake.env())
    assert proc.stderr is not None
    return proc, Lines(proc.stderr)  # type: ignore[arg-type]


def test_run_tells_each_round_on_stderr_as_it_happens(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    go = tmp_path / "go"
    script = (
        f"import pathlib, time\nprint('first-marker', flush=True)\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)\n"
        f"print('second-marker')\n"
    )
    with WatchedFake(db) as fake:
        fake.reply_patch(
            patch(0, 1, cmd_cell(PY, "-c", script)),
            input_tokens=1000,
            output_tokens=100,
            text="Reproducing the bug first.",
        )
        fake.reply_patch(
            patch(1, 2, DONE),
            input_tokens=3000,
            output_tokens=300,
            text="The fix holds; concluding.",
        )
        proc, err = run_live(fake, db)
        try:
            until(lambda: "[1] first-marker" in err.text, 30)
            # The Cell is still running, and round 1 has already been told.
            assert proc.poll() is None and "second-marker" not in err.text
            told = err.text
            assert "round 1" in told and "Reproducing the bug first." in told
            assert f"+ [1] cmd {PY} -c" in told
            assert f"${cost(1000, 100):.4f}" in told  # usage and cost so far
            go.touch()
            assert proc.stdout is not None
            out = proc.stdout.read()  # stderr belongs to the reader thread
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    log = err.join()
    assert out.count("\n") == 1 and status(out)["status"] == "succeeded"  # stdout: one line
    assert "[1] second-marker" in log and "[1] → success exit 0" in log
    assert log.index("[1] → success") < log.index("round 2") < log.index("The fix holds")
    assert f"${cost(1000, 100) + cost(3000, 300):.4f}" in log
    assert "run ended: success" in log


def test_control_characters_from_cells_and_the_model_are_escaped(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    printer = "import sys; sys.stdout.write('A\\x1b[2JB\\x07C\\x9bD\\rE\\n')"
    with WatchedFake(db) as fake:
        fake.reply_patch(
            patch(0, 1, cmd_cell(PY, "-c", printer), cmd_cell("no-such-\x1b[31m-tool")),
            text="Clearing \x1b]0;your title\x07 the screen.",
        )
        fake.reply_patch(patch(1, 3, DONE))
        done = fake.run()
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    log = done.stderr
    assert not RAW_CONTROL.search(log), repr(RAW_CONTROL.search(log))
    assert "[1] A\\x1b[2JB\\x07C\\x9bD\\x0dE" in log
    assert "no-such-\\x1b[31m-tool" in log  # the Cell line and the launch failure
    assert "Clearing \\x1b]0;your title\\x07 the screen." in log


def test_ids_chosen_outside_are_escaped_too(make_session: type) -> None:
    session: Session = make_session()  # type: ignore[operator]
    stream = io.StringIO()
    live = LiveLog(session, stream)
    session.receive("comment-\x1b[2J", "comment", {"body": "hello"})
    session.set_timer("timer-\x1b[5m", time.time() - 1, {"why": "now"})
    session.fire_timer("timer-\x1b[5m")
    session.set_timer("later-\x1b[5m", time.time() + 3600, None)
    session.prepare_turn()
    live.close()
    log = stream.getvalue()
    assert "comment-\\x1b[2J" in log and "timer-\\x1b[5m" in log
    assert not RAW_CONTROL.search(log)
    shown = render_text(session)  # rio-ci show
    assert "later-\\x1b[5m" in shown and not RAW_CONTROL.search(shown)


def test_a_long_output_is_told_once_with_its_elided_middle(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    chatty = (
        "import time\nfor i in range(2400):\n    print(f'line {i:05d} ' + 'x' * 20)\n"
        "    if i % 100 == 0: time.sleep(0.05)\n"
    )
    with WatchedFake(db) as fake:
        fake.reply_patch(patch(0, 1, cmd_cell(PY, "-c", chatty)))
        fake.reply_patch(patch(1, 2, DONE))
        done = fake.run()
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    told = re.findall(rf"^{STAMP}   \[1\] (line \d{{5}}) x+$", done.stderr, re.M)
    assert len(told) == len(set(told)) and told == sorted(told), "a line was told twice"
    assert told[0] == "line 00000" and told[-1] == "line 02399"
    assert re.search(rf"^{STAMP}   \[1\] \[… \d+ bytes elided …\]$", done.stderr, re.M)
    # Everything retained was told (and lines of tail windows that later slid past too).
    retained = run_cli("output", str(db), "1", "--human").stdout
    kept = [ln.split(" x")[0] for ln in retained.splitlines() if ln.startswith("line")]
    assert set(kept) <= set(told) and len(kept) < len(told)


@pytest.mark.parametrize("where", ["events", "show", "live log", "progress comment"])
def test_the_rationale_is_committed_and_shown(tmp_path: Path, where: str) -> None:
    db = new_session(tmp_path)
    thought = "Summary: the route reads session['user'] directly."
    said = "Tests pass now; concluding. Thanks @octocat"
    with WatchedFake(db) as fake:
        fake.reply_patch(patch(0, 1, cmd_cell("echo", "ok")), thinking=thought)
        fake.reply_patch(patch(1, 2, DONE), thinking="internal", text=said)
        done = fake.run()
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    if where == "events":  # the text, else the thinking summary, committed with the reply
        assert [r["rationale"] for r in kinds(events(db), "model_response")] == [thought, said]
    elif where == "show":
        shown = run_cli("show", str(db)).stdout
        assert "Tests pass now; concluding." in shown and "internal" not in shown
        assert json.loads(run_cli("show", str(db), "--json").stdout)["rationale"] == said
    elif where == "live log":
        assert f"model: {thought}" in done.stderr and f"model: {said}" in done.stderr
    else:
        session = Session.open(db)
        try:
            body = progress.render(
                session.proj, status="succeeded", run_url=None, generation=1, operation="op"
            )
        finally:
            session.close()
        assert "> Tests pass now; concluding." in body and "@octocat" not in body
        assert "@\u200boctocat" in body  # quoted, and no notification for anyone


def test_output_read_but_not_committed_is_shown_nowhere(tmp_path: Path) -> None:
    """docs/sessions.md: nothing is shown to the model or a user before it is committed. The run
    dies (SIGKILL) with a chunk read from the Cell but not committed: neither its live log nor
    ``show``, ``output`` or ``events`` show that chunk, before or after the next Owner turns
    the Execution into an UnknownExecution."""
    db = new_session(tmp_path)
    session = Session.open(db)
    session_id = session.proj.session["id"]
    session.close()
    left, right = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    marker = f"{left}-{right}"  # printed by the Cell; never written whole in its argv
    # The script stays alive past the output flush, so the chunk goes through record_output
    # (not the result's commit), and silent after it, so only the next Owner ends it.
    printer = cmd_cell("sh", "-c", 'printf "%s-%s\\n" "$1" "$2"; exec sleep 60', "sh", left, right)
    script = write_script(tmp_path, [[{"op": "add", "path": "/cells/-", "value": printer}]])
    try:
        run = run_cli(
            "run",
            str(db),
            "--model",
            f"scripted:{script}",
            env=cli_env(RIO_CRASH_AT="output_before_commit"),
        )
        assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
        assert "[1] started" in run.stderr  # the live log did tell the run so far
        assert marker not in run.stderr + run.stdout

        def shown() -> str:
            return "".join(
                run_cli(*args).stdout
                for args in (
                    ("show", str(db)),
                    ("show", str(db), "--json"),
                    ("output", str(db), "1"),
                    ("output", str(db), "1", "--stream", "stderr"),
                    ("events", str(db)),
                )
            )

        assert marker not in shown()
        assert checks.leftover_workers(session_id), "the Worker outlived the crashed run"
        again = run_cli("work", str(db))  # the next Owner: recovery
        assert again.returncode == 0, again.stdout + again.stderr
        assert marker not in again.stdout + again.stderr
        (finished,) = kinds(events(db), "execution_finished")
        assert finished["result"]["type"] == "UnknownExecution"
        assert not checks.leftover_workers(session_id)
        after = shown()
        assert "UnknownExecution" in after and marker not in after
    finally:
        for pid in checks.leftover_workers(session_id):
            runner.kill_tree(pid)


def test_run_says_when_it_asks_a_slow_model_before_the_answer_arrives(tmp_path: Path) -> None:
    """The live log is stamped with each event's time and never goes quiet: "asking" is
    told while the model thinks (a scripted model that answers only once a file exists),
    then the answer's duration, tokens and cost, and each validator as it starts and ends."""
    db = tmp_path / "s.db"
    marker = tmp_path / "validated"
    validator = f"{PY} -c \"import pathlib; pathlib.Path('{marker}').touch()\""
    done = run_cli("new", str(db), "--goal", "g", "--cwd", str(tmp_path), "--validator", validator)
    assert done.returncode == 0, done.stdout + done.stderr
    go = tmp_path / "go"
    script = tmp_path / "model.yaml"
    script.write_text(
        json.dumps(
            [
                {"wait_for": str(go), "patch": [{"op": "add", "path": "/cells/-", "value": ECHO}]},
                [{"op": "add", "path": "/cells/-", "value": DONE}],
            ]
        )
    )
    proc = spawn_cli("run", str(db), "--model", f"scripted:{script}")
    assert proc.stderr is not None
    err = Lines(proc.stderr)  # type: ignore[arg-type]
    try:
        asking = f"asking scripted:{script} (attempt 1)"
        until(lambda: asking in err.text, 30, "the asking line")
        # The model has not answered: it waits for the file only the test creates.
        assert proc.poll() is None and "answered" not in err.text
        assert re.search(rf"^{STAMP}   {re.escape(asking)}$", err.text, re.M), err.text
        go.touch()
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = err.join()
    assert status(out)["status"] == "succeeded", out + log
    answered = re.findall(
        rf"^{STAMP}   answered after [0-9.]+ s: 0 in / 0 out tokens, \$0\.0000$", log, re.M
    )
    assert len(answered) == 2  # one per round
    assert log.index(asking) < log.index("answered after")
    started = re.search(rf"^{STAMP}   validator .*-c .*touch\(\) started$", log, re.M)
    ended = re.search(
        rf"^{STAMP}   validator .*touch\(\) → success \(exit 0\) after [0-9.]+ s$", log, re.M
    )
    assert started and ended and started.start() < ended.start(), log
    assert marker.exists()
    # Every line but GitHub's workflow commands carries its time.
    assert all(re.match(STAMP, line) for line in log.splitlines() if line), log
