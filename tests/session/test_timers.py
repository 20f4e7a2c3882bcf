"""Timers and the in-Cell API (docs/sessions.md): `from rio_ci.api import timer, records` inside
a real code Cell (`uv run --script`, `dependencies = []`), and exactly one message per due Timer
across Owner crashes.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests import session_cli
from tests.kit import cli_env, code_cell
from tests.session_cli import New

new = session_cli.new  # the shared fixture

API_CELL = """
    import json, time
    from rio_ci.api import records, timer

    def attempt(*args):
        try:
            return timer(*args)
        except RuntimeError as exc:
            return {"error": str(exc)}

    past = time.time() - 10
    report = {
        "past": timer("past", past, {"n": 1}),
        "future": timer("future", time.time() + 3600, {"n": 2}),
        "again": timer("past", past, {"n": 1}),
        "conflict": attempt("past", past + 5, {"n": 1}),
        "other_payload": attempt("future", past, {"n": 3}),
        "too_big": attempt("big", past, "x" * 20000),
        "never": attempt("never", float("inf"), None),
        "nan": attempt("nan", float("nan"), None),
        "nan_payload": attempt("nan-payload", past, float("nan")),
    }
    everything = records()
    report["kinds"] = [r["kind"] for r in everything]
    report["seqs"] = [r["seq"] for r in everything]
    report["tail"] = [r["seq"] for r in records(after=3)]
    try:
        import rio_ci.session.session  # noqa: F401  only the API is importable inside a Cell
        report["harness_importable"] = True
    except ImportError:
        report["harness_importable"] = False
    print(json.dumps(report))
    """


def test_a_cell_registers_timers_and_reads_committed_records(new: New) -> None:
    sess = new()
    sess.propose(code_cell(API_CELL))
    out = sess.work()
    assert out["ran"] == [1] and out["paused_by"] is None, sess.runtime(1)
    report = json.loads(sess.runtime(1)["stdout"])

    assert report["past"]["duplicate"] is False and report["future"]["duplicate"] is False
    assert report["again"] == {"id": "past", "seq": report["past"]["seq"], "duplicate": True}
    assert "different" in report["conflict"]["error"]
    assert "different" in report["other_payload"]["error"]
    assert "output_bytes" in report["too_big"]["error"]
    assert "finite" in report["never"]["error"] and "finite" in report["nan"]["error"]
    assert "NaN" in report["nan_payload"]["error"]
    assert report["harness_importable"] is False

    # records() saw the committed Journal, including the Timers this Cell just set.
    assert report["kinds"][:3] == ["session_created", "turn_prepared", "patch_accepted"]
    assert report["kinds"][3:5] == ["execution_started", "worker_registered"]
    assert report["kinds"].count("timer_set") == 2
    assert report["seqs"] == list(range(1, len(report["seqs"]) + 1))
    assert report["tail"] == report["seqs"][3:]
    committed = {e["seq"]: e["kind"] for e in sess.events()}
    assert all(committed[s] == k for s, k in zip(report["seqs"], report["kinds"], strict=True))

    sets = sess.events("timer_set")
    assert [(t["id"], t["payload"], t["cell_id"]) for t in sets] == [
        ("past", {"n": 1}, 1),
        ("future", {"n": 2}, 1),
    ]
    # The past Timer fired once, with its payload; the future one waits.
    fired = sess.events("timer_fired")
    assert [f["id"] for f in fired] == ["past"]
    inbox = [m for m in sess.state()["runtime"]["inbox"] if m["kind"] == "timer"]
    assert inbox == [
        {"id": "timer:past", "kind": "timer", "payload": {"n": 1}, "seq": fired[0]["seq"]}
    ]
    count = len(sess.events())
    sess.work()
    assert len(sess.events()) == count


SOON_CELL = """
    import time
    from rio_ci.api import timer
    timer("soon", time.time() + 2.0, {"wake": "up"})
    """


@pytest.mark.parametrize(
    ("point", "fired_before_restart"),
    [
        ("timer_due_before_commit", 0),
        ("timer_after_commit", 1),
    ],
)
def test_a_due_timer_fires_exactly_once_across_a_crash(
    new: New, point: str, fired_before_restart: int
) -> None:
    sess = new()
    sess.propose(code_cell(SOON_CELL))
    assert sess.work()["ran"] == [1]
    assert sess.events("timer_fired") == []  # not yet due: work does not wait for it
    (timer,) = sess.events("timer_set")
    time.sleep(max(0.0, timer["deadline"] - time.time() + 0.05))

    sess.run("work", str(sess.db), code=-signal.SIGKILL, env=cli_env(RIO_CRASH_AT=point))
    assert len(sess.events("timer_fired")) == fired_before_restart

    for _ in range(2):
        sess.work()
        fired = sess.events("timer_fired")
        assert [f["id"] for f in fired] == ["soon"]
        inbox = [m for m in sess.state()["runtime"]["inbox"] if m["kind"] == "timer"]
        assert inbox == [
            {"id": "timer:soon", "kind": "timer", "payload": {"wake": "up"}, "seq": fired[0]["seq"]}
        ]


def test_the_cell_api_ignores_a_rio_ci_package_in_the_working_directory(new: New) -> None:
    sess = new()
    shadow = sess.cwd / "rio_ci"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('a project that has its own rio_ci')")
    sess.propose(
        code_cell("""
        import os, time
        from rio_ci.api import timer
        assert os.path.isdir("rio_ci")
        print(timer("t", time.time() + 3600, None)["duplicate"])
        """)
    )
    sess.work()
    assert sess.runtime(1)["stdout"] == "False\n", sess.runtime(1)["stderr"]
    assert [t["id"] for t in sess.events("timer_set")] == ["t"]
