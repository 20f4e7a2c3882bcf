"""Ownership is keyed on the file, not its name (docs/sessions.md): a rename or an alias still
gives one Owner; an Owner whose file is renamed or replaced under it notices, commits nothing
more there and stops, and nothing it acknowledged is lost under the new name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rio_ci.core.errors import OwnershipError
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests import session_cli
from tests.hostile.support import one_error, rio
from tests.kit import until
from tests.session_cli import New, logged

new = session_cli.new  # the shared fixture
pytestmark = pytest.mark.slow


def test_a_renamed_session_still_has_one_owner(tmp_path: Path) -> None:
    Session.create(tmp_path / "s.db", "own me", Settings(cwd=str(tmp_path))).close()
    first = Owner(str(tmp_path / "s.db"))
    try:
        os.rename(tmp_path / "s.db", tmp_path / "moved.db")
        second = rio("work", str(tmp_path / "moved.db"), cwd=tmp_path)
        assert "already has an Owner" in one_error(second, 4)
        assert not [n for n in os.listdir(tmp_path) if n.endswith(".lock")]  # no lock file
        with pytest.raises(OwnershipError):
            Owner(str(tmp_path / "moved.db"))  # nor a second Owner in this process
    finally:
        first.close()
    Owner(str(tmp_path / "moved.db")).close()  # free again once the first let go


def test_an_owner_whose_file_is_renamed_stops_and_loses_no_acknowledged_commit(new: New) -> None:
    sess = new()
    sess.propose(
        logged(sess.log, 'log("first")\n'),
        logged(
            sess.log,
            'log("second")\nprint("second is running", flush=True)\nimport time\ntime.sleep(120)\n',
        ),
    )
    owner = sess.start_work()
    until(lambda: "second is running" in sess.runtime(2).get("stdout", ""), 60)
    # Acknowledged while the Owner runs: a message from another process, and the output
    # above. Both sit in the WAL of the name "s.db" until a checkpoint.
    sess.receive("m-before-the-move", "comment", {"text": "keep me"})
    moved = sess.root / "moved.db"
    os.rename(sess.db, moved)

    out, err = owner.communicate(timeout=30)
    assert owner.returncode == 4, out + err
    assert "renamed or removed while open" in json.loads(out.splitlines()[-1])["error"]
    assert "Traceback" not in err
    until(lambda: not sess.token_holders(), 10)  # its Worker stopped with it

    state = sess.json("state", str(moved))
    assert [m["id"] for m in state["runtime"]["inbox"]][-1] == "m-before-the-move"
    assert state["runtime"]["cells"]["1"]["result"]["type"] == "success"
    assert "second is running" in state["runtime"]["cells"]["2"]["stdout"]

    after = sess.json("work", str(moved))
    assert after["ran"] == []  # Cell 1 is done and Cell 2 is uncertain: nothing reruns
    resumed = sess.json("state", str(moved))["runtime"]["cells"]
    assert resumed["1"]["result"]["type"] == "success"
    assert resumed["2"]["result"]["type"] == "UnknownExecution"
    assert [words[2:] for words in sess.lines()] == [["first"], ["second"]]


def test_an_owner_whose_file_is_replaced_stops_and_leaves_the_new_file_alone(new: New) -> None:
    sess = new()
    other = new()
    sess.propose(
        logged(sess.log, 'log("slow")\nprint("slow", flush=True)\nimport time\ntime.sleep(120)\n')
    )
    owner = sess.start_work()
    until(lambda: "slow" in sess.runtime(1).get("stdout", ""), 60)
    os.replace(other.db, sess.db)  # another Session now has the name

    out, _ = owner.communicate(timeout=30)
    assert owner.returncode == 4
    assert "replaced by another file" in json.loads(out.splitlines()[-1])["error"]
    # The name now opens the other Session, whole, without a frame of the first one's WAL.
    assert sess.json("state", str(sess.db))["id"] == other.session_id
    assert sess.json("work", str(sess.db))["ran"] == []
    assert [words[2:] for words in sess.lines()] == [["slow"]]


def test_a_symlink_to_a_session_is_the_same_session(tmp_path: Path) -> None:
    Session.create(tmp_path / "s.db", "aliased", Settings(cwd=str(tmp_path))).close()
    (tmp_path / "alias.db").symlink_to(tmp_path / "s.db")
    first = Owner(str(tmp_path / "alias.db"))
    try:
        assert "already has an Owner" in one_error(
            rio("work", str(tmp_path / "s.db"), cwd=tmp_path), 4
        )
    finally:
        first.close()
