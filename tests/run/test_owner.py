"""The Owner through `rio-ci work` (docs/sessions.md): serial dispatch in acceptance order, the
launch protocol, output capture and its limits, timeouts, secrets, signals and hostile scripts.

Everything is real: the CLI in subprocesses, SQLite files in tmp_path, code Cells under
`uv run --script`, processes inspected with psutil.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from rio_ci.core.output import elided_marker
from tests import session_cli
from tests.kit import cli_env, cmd_cell, note_cell, until
from tests.session_cli import CliSession, New, gone, log_prelude, logged

new = session_cli.new  # the shared fixture


def spans(sess: CliSession) -> dict[str, tuple[float, float, int]]:
    """label -> (start time, end time, pid) from `log(label, "start"|"end")` lines."""
    seen: dict[str, dict[str, Any]] = {}
    for when, pid, label, what, *_ in sess.lines():
        seen.setdefault(label, {})[what] = float(when)
        seen[label]["pid"] = int(pid)
    return {k: (v["start"], v["end"], v["pid"]) for k, v in seen.items()}


def work_span(label: str, seconds: float = 0.3) -> str:
    return f"""
        import os, time
        log({label!r}, "start", os.getcwd())
        time.sleep({seconds})
        log({label!r}, "end")
        """


# --- dispatch ---------------------------------------------------------------------------


def test_cells_run_one_at_a_time_in_acceptance_order_in_the_session_cwd(new: New) -> None:
    sess = new()
    # A cmd Cell runs its argv directly: a Python one-liner that logs like the code Cells.
    c_argv = [sys.executable, "-c", log_prelude(sess.log) + textwrap.dedent(work_span("C"))]
    sess.propose(
        note_cell("placeholder, replaced below"),  # 1
        logged(sess.log, work_span("A")),  # 2
        cmd_cell("echo", "$HOME", "*", "a;b"),  # 3: no shell, so all literal
        cmd_cell(*c_argv),
    )  # 4
    # Cell 5 replaces the note at array position 0: first in the array, last accepted.
    turn = sess.turn()
    state = turn["state"]
    ops = [
        {"op": "test", "path": "/revision", "value": state["revision"]},
        {
            "op": "replace",
            "path": "/cells/0",
            "value": {"id": 5, "previous_id": 1, **logged(sess.log, work_span("B"))},
        },
    ]
    sess.step(turn["turn_id"], ops)
    assert [c["id"] for c in sess.state()["cells"]] == [5, 2, 3, 4]

    out = sess.work()

    assert out == {"ended": None, "ran": [2, 3, 4, 5], "pending": [], "paused_by": None}
    runs = spans(sess)
    order = sorted(runs, key=lambda label: runs[label][0])
    assert order == ["A", "C", "B"]
    for before, after in itertools.pairwise(order):
        assert runs[before][1] <= runs[after][0], f"{before} and {after} overlapped: {runs}"
    starts = [line for line in sess.lines() if line[3] == "start"]
    assert {line[4] for line in starts} == {str(sess.cwd)}
    assert len({runs[label][2] for label in runs}) == 3
    assert sess.runtime(3)["stdout"] == "$HOME * a;b\n"
    # The Journal agrees: each Execution finishes before the next one starts.
    marks = [
        (e["kind"], e["cell_id"])
        for e in sess.events()
        if e["kind"] in ("execution_started", "execution_finished")
    ]
    assert marks == [
        (kind, cell)
        for cell in (2, 3, 4, 5)
        for kind in ("execution_started", "execution_finished")
    ]
    assert all(sess.result(cell)["type"] == "success" for cell in (2, 3, 4, 5))


def test_launch_commits_started_then_worker_identity_then_output(new: New) -> None:
    sess = new()
    sess.propose(
        cmd_cell(sys.executable, "-c", "import os; print(os.getpid())"),
        logged(sess.log, "print('hello from code')"),
    )
    sess.work()
    events = sess.events()
    for cell in (1, 2):
        mine = [e for e in events if e.get("cell_id") == cell and e["kind"] != "patch_accepted"]
        kinds = [e["kind"] for e in mine]
        assert kinds[:2] == ["execution_started", "worker_registered"], kinds
        assert kinds[-1] == "execution_finished"
        assert set(kinds[2:-1]) == {"output"}, kinds
        started, registered = mine[0], mine[1]
        assert registered["identity"]["token"] == started["token"]
        assert registered["identity"]["pgid"] == registered["identity"]["pid"]
    # The gate execs the argv: the process that ran is the one whose identity was committed.
    identity = next(e for e in events if e["kind"] == "worker_registered")["identity"]
    assert sess.runtime(1)["stdout"] == f"{identity['pid']}\n"
    assert sess.runtime(2)["stdout"] == "hello from code\n"


def test_program_not_found_is_an_error_that_pauses(new: New) -> None:
    sess = new()
    sess.propose(cmd_cell("rio-no-such-program-anywhere"), cmd_cell("echo", "later"))
    out = sess.work()
    assert out["ran"] == [1] and out["pending"] == [2] and out["paused_by"] == "execution:1"
    result = sess.result(1)
    assert result["type"] == "error"
    assert result["reason"] == "launch_failed: program not found: rio-no-such-program-anywhere"


def test_a_program_that_is_not_executable_says_so(new: New) -> None:
    sess = new()
    (sess.cwd / "tool.sh").write_text("echo hi\n")  # no exec bit
    sess.propose(cmd_cell("./tool.sh"))
    sess.work()
    assert sess.result(1)["reason"] == "launch_failed: program not executable: ./tool.sh"


# --- output -----------------------------------------------------------------------------


def test_output_is_committed_while_the_script_runs(new: New) -> None:
    """Each line is printed, then the script waits for the test to let it go on: a line the
    test sees while the script is blocked was committed while the script ran. Nothing here
    depends on how fast the machine is (the flush interval's latency is a bench figure)."""
    sess = new()
    gate = sess.cwd / "gate"
    sess.propose(
        logged(
            sess.log,
            f"""
        import os, time
        for n in range(4):
            print(f"line {{n}}", flush=True)
            while not os.path.exists({str(gate)!r} + str(n)):
                time.sleep(0.01)
        """,
        )
    )
    owner = sess.start_work()
    for n in range(4):
        shown = until(
            lambda n=n: sess.runtime(1).get("stdout", "").count("\n") > n and sess.runtime(1),
            timeout=60,
            what=f"line {n} committed",
        )
        assert shown["phase"] == "started" and shown["stdout"].endswith(f"line {n}\n")
        (sess.cwd / f"gate{n}").touch()
    owner.communicate(timeout=60)
    assert owner.returncode == 0
    assert sess.runtime(1)["stdout"] == "".join(f"line {n}\n" for n in range(4))
    assert len(sess.events("output")) >= 4


def test_output_beyond_the_limit_keeps_its_first_and_last_halves_and_is_flagged(new: New) -> None:
    sess = new(limits=["output_bytes=100"])
    digits = "".join(str(n % 10) for n in range(1000))
    sess.propose(
        logged(
            sess.log,
            f"""
            import sys
            sys.stdout.write({digits!r}); sys.stdout.flush()
            sys.stderr.write("short")
            """,
        ),
        logged(sess.log, f"import sys; sys.stdout.write({digits[:100]!r})"),
    )
    sess.work()
    over, exact = sess.runtime(1), sess.runtime(2)
    # The first and the last half of output_bytes, and a marker of what was elided between:
    # a test run's summary is at its end.
    assert over["stdout"] == digits[:50] + elided_marker(900) + digits[-50:]
    assert over["stderr"] == "short"
    assert over["truncated"] is True
    assert exact["stdout"] == digits[:100]
    assert exact["truncated"] is False


def test_the_limit_counts_utf8_bytes_of_the_kept_text(new: New) -> None:
    sess = new(limits=["output_bytes=5"])  # a head of 2 bytes and a tail of 3
    sess.propose(
        # a 2-byte character cut by the limit is dropped, not turned into U+FFFD
        logged(sess.log, "import sys; sys.stdout.write('\\u00e9\\u00e9\\u00e9')"),
        # bytes that are not UTF-8 count as the 3-byte replacement characters they become
        logged(sess.log, "import sys; sys.stdout.buffer.write(bytes(range(128, 256)))"),
    )
    sess.work()
    assert sess.runtime(1)["stdout"] == "\u00e9" + elided_marker(2) + "\u00e9"
    assert sess.runtime(1)["truncated"]
    binary = sess.runtime(2)
    assert binary["stdout"] == elided_marker(128 * 3 - 3) + "\ufffd"
    assert binary["truncated"] is True


def test_a_flood_of_output_leaves_the_owner_healthy_and_the_journal_small(new: New) -> None:
    sess = new()
    sess.propose(
        logged(
            sess.log,
            """
            import sys
            block = b"x" * (1 << 20)
            for _ in range(50):
                sys.stdout.buffer.write(block)
            sys.stdout.flush()
            """,
        ),
        cmd_cell("echo", "still fine"),
    )
    started = time.monotonic()
    out = sess.work()
    elapsed = time.monotonic() - started
    assert out["ran"] == [1, 2] and out["paused_by"] is None
    assert sess.result(1)["type"] == "success"
    flood = sess.runtime(1)
    assert flood["stdout"] == "x" * 8000 + elided_marker(50 * (1 << 20) - 16_000) + "x" * 8000
    assert flood["truncated"] is True
    assert sess.runtime(2)["stdout"] == "still fine\n"
    assert len(sess.events("output")) < 30
    size = sum(p.stat().st_size for p in sess.root.glob("s.db*") if p.is_file())
    assert size < 2_000_000, f"Session files take {size} bytes"
    assert elapsed < 30


# --- timeouts and hostile scripts -------------------------------------------------------

SPAWN_CHILD = """
    import signal, subprocess, time
    child = subprocess.Popen(["sleep", "300"])
    log("pids", child.pid)
    time.sleep(300)
    """


def test_timeout_records_unknown_execution_and_stops_the_group(new: New) -> None:
    sess = new(limits=["execution_seconds=1"])
    sess.propose(logged(sess.log, SPAWN_CHILD))
    started = time.monotonic()
    out = sess.work()
    assert time.monotonic() - started < 10
    assert out["ran"] == [1] and out["paused_by"] == "execution:1"
    result = sess.result(1)
    assert result["type"] == "UnknownExecution"
    assert result["reason"] == "timeout" and result["worker_stopped"] is True
    ((_, script_pid, _, child_pid),) = sess.lines()
    identity = sess.events("worker_registered")[0]["identity"]
    for pid in (int(script_pid), int(child_pid), identity["pid"]):
        assert gone(pid), f"pid {pid} survived the timeout"
    assert sess.token_holders() == []


def test_work_timeout_stops_the_running_cell_as_unknown(new: New) -> None:
    sess = new()
    sess.propose(logged(sess.log, SPAWN_CHILD))
    started = time.monotonic()
    out = sess.work(args=["--timeout", "1.5"])
    assert time.monotonic() - started < 8
    assert out["ran"] == [1] and out["paused_by"] == "execution:1"
    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["reason"] == "owner_deadline"
    assert sess.token_holders() == []


def test_hostile_scripts_are_cleaned_up_and_a_normal_cell_runs_afterwards(new: New) -> None:
    sess = new(limits=["execution_seconds=3"])
    sess.propose(
        # forks a tree (one branch even leaves the group) and exits at once
        logged(
            sess.log,
            """
            import subprocess, sys
            tree = ("import subprocess, time; subprocess.Popen(['sleep', '300']); "
                    "time.sleep(300)")
            kids = [subprocess.Popen([sys.executable, "-c", tree], stdout=subprocess.DEVNULL),
                    subprocess.Popen([sys.executable, "-c", tree], start_new_session=True)]
            log("tree", *[k.pid for k in kids])
            """,
        ),
        # ignores SIGTERM and never ends
        logged(
            sess.log,
            """
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            log("stubborn")
            while True:
                time.sleep(1)
            """,
        ),
    )
    out = sess.work()
    assert out["ran"] == [1, 2] and out["paused_by"] == "execution:2"
    assert sess.result(1)["type"] == "success"
    stubborn = sess.result(2)
    assert stubborn["type"] == "UnknownExecution" and stubborn["reason"] == "timeout"
    assert stubborn["worker_stopped"] is True
    assert sess.token_holders() == []
    for line in sess.lines():
        for pid in line[1:2] + line[3:]:
            assert gone(int(pid)), f"pid {pid} of {line} survived"

    turn = sess.turn()
    assert "execution:2" in turn["delivered"]
    sess.propose(cmd_cell("echo", "normal"), turn=turn)
    out = sess.work()
    assert out["ran"] == [3] and out["paused_by"] is None
    assert sess.result(3)["type"] == "success"
    assert sess.runtime(3)["stdout"] == "normal\n"


# --- signals ----------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_worker_group_and_exits_quickly(new: New, sig: int) -> None:
    sess = new()
    sess.propose(
        logged(
            sess.log,
            """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the child inherits this
        child = subprocess.Popen(["sleep", "300"])
        log("pids", child.pid)
        time.sleep(300)
        """,
        ),
        cmd_cell("echo", "must not run"),
    )
    owner = sess.start_work()
    until(sess.lines, 30, "the script to start")
    ((_, script_pid, _, child_pid),) = sess.lines()
    sent = time.monotonic()
    owner.send_signal(sig)
    stdout, _ = owner.communicate(timeout=10)
    assert time.monotonic() - sent < 5
    assert owner.returncode == 1
    status = json.loads(stdout.strip().splitlines()[-1])
    assert status["interrupted"] is True and status["ran"] == [1]
    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["reason"] == "owner_interrupted"
    assert gone(int(script_pid)) and gone(int(child_pid))
    assert sess.token_holders() == []
    assert sess.events("execution_started")[-1]["cell_id"] == 1  # nothing else launched


def test_a_signal_after_the_script_exited_keeps_its_known_result(new: New) -> None:
    sess = new()
    # The script exits 0 at once; a child it leaves behind holds the output pipes, so the
    # Owner is still waiting for them when the signal comes.
    sess.propose(
        logged(
            sess.log,
            """
        import subprocess
        child = subprocess.Popen(["sleep", "300"])
        log("pids", child.pid)
        """,
        )
    )
    owner = sess.start_work()
    until(sess.lines, timeout=30)
    leader = until(lambda: sess.events("worker_registered"), 10)[0]["identity"]["pid"]
    until(lambda: gone(leader), timeout=5)  # exited (an unreaped zombie)
    owner.send_signal(signal.SIGTERM)
    owner.communicate(timeout=10)
    assert sess.result(1) == {"type": "success", "cell_id": 1, "exit_code": 0}
    ((_, _, _, child),) = sess.lines()
    assert gone(int(child)) and sess.token_holders() == []


# --- secrets ----------------------------------------------------------------------------

CANARY_KEY = "sk-ant-canary-5f1e2d3c4b5a69788796"
CANARY_TOKEN = "ghp_canary0123456789abcdefghijklmnopq"


def test_harness_secrets_never_reach_a_worker_or_the_session(new: New) -> None:
    sess = new()
    sess.propose(
        cmd_cell("env"),
        logged(
            sess.log,
            """
            import os
            print(sorted(os.environ.items()))
            print(os.environ.get("ANTHROPIC_API_KEY"), os.environ.get("GITHUB_TOKEN"))
            print(open("/proc/self/environ", "rb").read())
            """,
        ),
        cmd_cell(
            sys.executable,
            "-c",
            "import os; print(os.environ.get('ANTHROPIC_API_KEY'), "
            "os.environ.get('GITHUB_TOKEN'), os.environ.get('RIO_ALIAS'), "
            "os.environ.get('RIO_REMOTE'))",
        ),
    )
    # Copies under other names, whole or inside another value, are secrets too.
    env = cli_env(
        ANTHROPIC_API_KEY=CANARY_KEY,
        GITHUB_TOKEN=CANARY_TOKEN,
        RIO_ALIAS=CANARY_TOKEN,
        RIO_REMOTE=f"https://x-access-token:{CANARY_TOKEN}@github.com/o/r.git",
    )
    out = sess.work(env=env)
    assert out["ran"] == [1, 2, 3] and out["paused_by"] is None
    state = sess.state()
    outputs = [
        sess.runtime(c, state)["stdout"] + sess.runtime(c, state)["stderr"] for c in (1, 2, 3)
    ]
    assert "PATH=" in outputs[0]  # the env really was printed
    assert outputs[2] == "None None None None\n"
    blobs = {str(p): p.read_bytes() for p in sess.root.rglob("*") if p.is_file()}
    assert any(name.endswith("s.db") for name in blobs)
    for canary in (CANARY_KEY, CANARY_TOKEN):
        for text in outputs:
            assert canary not in text
        for name, data in blobs.items():
            assert canary.encode() not in data, f"{canary} found in {name}"


def test_a_second_owner_is_refused_while_one_works(new: New) -> None:
    sess = new()
    sess.propose(logged(sess.log, "import time; log('up'); time.sleep(30)"))
    owner = sess.start_work()
    until(sess.lines, timeout=30)
    second = sess.run("work", str(sess.db), code=4)
    assert "Owner" in second.stdout
    alias = sess.root / "alias.db"
    alias.symlink_to(sess.db)
    assert "Owner" in sess.run("work", str(alias), code=4).stdout
    assert sess.events("execution_started")[-1]["cell_id"] == 1 and len(sess.lines()) == 1
    owner.send_signal(signal.SIGTERM)
    owner.communicate(timeout=10)
    assert os.path.exists(sess.db)


def test_an_owner_without_a_cell_network_never_imports_the_proxys_event_loop() -> None:
    """The egress proxy (asyncio) is loaded only where Cells get a namespace of their own
    (docs/network.md): an Owner on the host's network keeps its idle memory."""
    probe = "import sys, rio_ci.cli, rio_ci.run.owner; print('asyncio' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "False"
