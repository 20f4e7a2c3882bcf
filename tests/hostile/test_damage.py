"""A Cell that damages its own Session file (docs/security.md "Trust boundary"):
garbage over the file, a truncation, a rewritten WAL. The Owner notices before it commits
anything after the damage, stops with a one-line error (exit 4), never runs a Cell twice and
never prints what it cannot read as a Session."""

from __future__ import annotations

import json
import sys

import pytest

from tests import session_cli
from tests.hostile.support import one_error, strict
from tests.kit import cmd_cell, until
from tests.session_cli import New, log_prelude

new = session_cli.new  # the shared fixture
pytestmark = pytest.mark.slow

DAMAGE = {
    "garbage over the Session file": (
        "fd = os.open(db, os.O_WRONLY)\nos.pwrite(fd, os.urandom(4096), 0)\nos.close(fd)\n"
    ),
    "the Session file truncated": "os.truncate(db, os.path.getsize(db) // 2)\n",
    "garbage over the WAL": (
        "wal = db + '-wal'\n"
        "fd = os.open(wal, os.O_WRONLY)\n"
        "os.pwrite(fd, os.urandom(os.path.getsize(wal)), 0)\n"
        "os.close(fd)\n"
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_cell_that_damages_its_session_cannot_make_the_owner_rerun_or_publish_it(
    new: New, damage: str
) -> None:
    sess = new()
    script = (
        log_prelude(sess.log) + "import os\ndb = os.environ['RIO_SESSION_DB']\n"
        "log('damaging')\n" + DAMAGE[damage] + "print('damaged', flush=True)\n"
    )
    sess.propose(
        cmd_cell(sys.executable, "-c", script),
        cmd_cell(sys.executable, "-c", log_prelude(sess.log) + "log('second')\n"),
    )
    first = sess.run("work", str(sess.db), code=None)
    assert "this Owner stops and commits nothing more" in one_error(first, 4)
    until(lambda: not sess.token_holders(), 10)

    for _ in range(2):  # later Owners fail closed, or go on without running anything again
        again = sess.run("work", str(sess.db), code=None)
        if again.returncode == 0:
            status = json.loads(again.stdout)
            assert status["ran"] == [], status
        else:
            one_error(again, 4)
    for args in (["state"], ["events"], ["show", "--json"]):
        shown = sess.run(args[0], str(sess.db), *args[1:], code=None)
        if shown.returncode != 0:
            one_error(shown, 4)
            continue
        values = [strict(line) for line in shown.stdout.splitlines() if line.strip()]
        # What was printed after the damage was never committed: the Cell's outcome is
        # unknown, not a success that printed "damaged".
        assert "damaged" not in shown.stdout
        if args == ["state"]:
            assert values[0]["runtime"]["cells"]["1"]["result"]["type"] == "UnknownExecution"
    assert [words[2:] for words in sess.lines()] == [["damaging"]]


@pytest.mark.parametrize("damage", ["garbage over the WAL", "the WAL removed"])
def test_a_cell_that_destroys_the_wal_and_kills_its_owner_is_not_run_again(
    new: New, damage: str
) -> None:
    """No Owner is left to notice: the next one finds a WAL SQLite throws away. The launch
    was copied into the file itself (a WAL checkpoint) before the Cell started, so it is an
    UnknownExecution, not queued work to run again."""
    sess = new()
    destroy = (
        DAMAGE["garbage over the WAL"]
        if damage != "the WAL removed"
        else "os.unlink(db + '-wal')\n"
    )
    script = (
        log_prelude(sess.log) + "import os, signal\ndb = os.environ['RIO_SESSION_DB']\n"
        "log('destroying')\n" + destroy + "os.kill(os.getppid(), signal.SIGKILL)\n"
    )
    sess.propose(cmd_cell(sys.executable, "-c", script))
    killed = sess.run("work", str(sess.db), code=None)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    for _ in range(2):
        again = sess.run("work", str(sess.db), code=None)
        if again.returncode == 0:
            assert json.loads(again.stdout)["ran"] == []
        else:
            one_error(again, 4)
    assert [words[2:] for words in sess.lines()] == [["destroying"]]
