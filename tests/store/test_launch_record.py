"""The launch record (rio_ci.github.record) and its merge at restore: pushed with a lease
through git, read back, validated, folded by the normal reducer — or left out, failing
closed when leaving it out could run a launched Cell again."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import accept, journal_rows, start_execution

from rio_ci.commands.bench.launches import push_samples
from rio_ci.core import events as ev
from rio_ci.github.generations import Merge, merge
from rio_ci.github.record import Fenced, LaunchRecord
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.store.launch_record import Record, parse
from tests.kit import cmd_cell

MakeSession = Callable[..., Session]


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True)
    return path


def launches(tmp_path: Path, remote: Path, name: str = "job") -> LaunchRecord:
    return LaunchRecord(tmp_path / f"{name}.git", str(remote), None, 7, run_id="42")


def copy(session: Session, to: Path) -> Path:
    """A snapshot as an artifact carries it (the Session at this moment)."""
    session.wal_checkpoint()
    shutil.copyfile(session.path, to)
    return to


def test_every_event_imported_keeps_the_ref_its_constructor_gave_it() -> None:
    made = [
        ev.session_created(
            {
                "session_id": "s",
                "goal": "g",
                "cwd": "/",
                "validators": [],
                "limits": {},
                "pass_env": [],
            }
        ),
        ev.message_received("m", "comment", {}),
        ev.turn_prepared("t", 1, []),
        ev.patch_rejected("t", "r", "d", 1),
        ev.price_set("m", {}),
        ev.model_attempt("t", 1, "f", "m"),
        ev.model_response({"turn_id": "t", "attempt": 1, "ok": True, "usage": None}),
        ev.execution_started(3, "x"),
        ev.worker_registered(3, {}),
        ev.output(3, "stdout", text="x"),
        ev.execution_finished(3, ev.exited(3, 0)),
        ev.control_applied(4, "cancel", target_cell_id=3),
        ev.control_rejected(4, "r"),
        ev.validator_result(
            {
                "note_id": 4,
                "index": 0,
                "argv": [],
                "result": {},
                "stdout": "",
                "stderr": "",
                "truncated": False,
            }
        ),
        ev.timer_set("tm", 1.0, None, 3),
        ev.timer_fired("tm"),
        ev.timer_cancelled("tm"),
        ev.run_ended("success", "r", note_id=4, unresolved=[]),
        ev.watermark("w", 1),
        ev.image_stored("d" * 64, "image/png", 1, "AA=="),
        ev.cell_user(
            {
                "mode": "shared",
                "user": "rio-cell",
                "uid": None,
                "gid": None,
                "reason": "not root",
                "tree": None,
                "opened": [],
            }
        ),
        *(
            ev.egress(
                {
                    "cell_id": cell_id,
                    "host": "h.test",
                    "port": 443,
                    "allowed": False,
                    "reason": "not_listed",
                    "bytes_up": 0,
                    "bytes_down": 0,
                    "count": 1,
                }
            )
            for cell_id in (3, None)  # a Cell's, a validator's
        ),
    ]
    assert {e.kind for e in made} == set(ev.KINDS) - {"patch_accepted"}
    for event in made:
        assert ev.imported(event.kind, event.data).ref == event.ref, event.kind
    with pytest.raises(ValueError, match="unknown event kind"):
        ev.imported("nonsense", {})


def test_a_record_is_pushed_with_a_lease_and_read_back_whole(
    tmp_path: Path, make_session: MakeSession
) -> None:
    remote = bare(tmp_path / "remote.git")
    session = make_session()
    accept(session, lambda p: p.add(cmd_cell("true")))
    start_execution(session, 1)
    job = launches(tmp_path, remote)
    assert job.fetch() is None

    first = job.push(session, 1)
    session.receive("later", "comment", {"body": "x"})
    second = job.push(session, 1)

    reader = launches(tmp_path, remote, "reader")
    found = reader.fetch()
    assert isinstance(found, Record) and reader.lease == second != first
    assert (found.session_id, found.generation, found.after_seq) == (
        session.proj.session["id"],
        0,
        0,
    )
    assert [e["seq"] for e in found.events] == list(range(1, session.proj.last_seq + 1))
    assert [e["kind"] for e in found.events] == [r["kind"] for r in journal_rows(session.path)]
    parent = subprocess.run(
        ["git", "-C", str(remote), "rev-parse", f"{second}^"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert parent == first  # a job's records chain, so git sends deltas
    fsck = subprocess.run(
        ["git", "-C", str(remote), "fsck", "--strict"], capture_output=True, text=True, check=False
    )
    assert fsck.returncode == 0, fsck.stderr
    # The reader now holds the lease; the first job's view is stale: it is fenced.
    reader.push(session, 1)
    with pytest.raises(Fenced, match="moved since this job read it"):
        job.push(session, 1)


def test_only_well_formed_records_parse() -> None:
    header = {
        "schema": "rio.launch/1",
        "session_id": "s",
        "issue": 1,
        "generation": 2,
        "after_seq": 10,
        "last_seq": 12,
        "cell_id": 3,
        "run_id": "1",
    }
    events = [
        {"seq": 11, "kind": "watermark", "at": 0, "data": {"name": "a", "value": 1}},
        {"seq": 12, "kind": "execution_started", "at": 0, "data": {"cell_id": 3, "token": "t"}},
    ]
    assert parse(header, events) is not None
    assert parse({**header, "schema": "rio.launch/2"}, events) is None
    assert parse({**header, "last_seq": 13}, events) is None
    assert parse(header, [events[1], events[0]]) is None  # out of order
    assert parse(header, [events[0], {**events[1], "seq": 13}]) is None  # a gap
    assert parse(header, [events[0], {**events[1], "kind": "drop_table"}]) is None
    assert parse({**header, "after_seq": -1}, events) is None


def record_of(session: Session, after: int, generation: int = 1) -> Record:
    tail = [
        {
            "seq": e["seq"],
            "kind": e["kind"],
            "at": e["at"],
            "data": {k: v for k, v in e.items() if k not in ("seq", "kind", "at")},
        }
        for e in session.events(after=after)
    ]
    return Record(session.proj.session["id"], generation, after, tail)


def test_restore_folds_the_tail_and_the_next_owner_records_an_unknown_execution(
    tmp_path: Path, make_session: MakeSession
) -> None:
    live = make_session()
    accept(live, lambda p: p.add(cmd_cell("true")))
    artifact = copy(live, tmp_path / "artifact.sqlite3")
    after = live.proj.last_seq
    accept(live, lambda p: p.add(cmd_cell("touch", "effect")))  # an accepted round ...
    start_execution(live, 2)  # ... and the launch the runner died in

    merged = merge(artifact, record_of(live, after), 1)

    assert (merged.imported, merged.problem, merged.note) == (
        live.proj.last_seq - after,
        None,
        None,
    )
    owner = Owner(str(artifact))
    try:
        owner.recover()
        executions = owner.session.proj.executions
        assert executions["2"]["phase"] == "finished"
        assert executions["2"]["result"]["type"] == "UnknownExecution"
        assert executions["1"]["phase"] == "queued"  # never launched: still runs later
    finally:
        owner.close()
    assert [r["ref"] for r in journal_rows(artifact)][: live.proj.last_seq] == [
        r["ref"] for r in journal_rows(live.path)
    ]


def test_records_that_do_not_continue_the_restored_history_are_left_out(
    tmp_path: Path, make_session: MakeSession
) -> None:
    live = make_session()
    accept(live, lambda p: p.add(cmd_cell("true")))  # cell 1, queued
    older = copy(live, tmp_path / "older.sqlite3")
    live.receive("m1", "comment", {"body": "later"})
    base = live.proj.last_seq
    live.receive("m2", "comment", {"body": "later still"})
    newest = copy(live, tmp_path / "newest.sqlite3")

    # A record the artifact already covers: nothing to take, nothing to say.
    assert merge(newest, record_of(live, base), 1) == Merge()
    # Another Session's record (the one before a follow-up) is history, not a tail.
    other = make_session("other.db")
    assert merge(newest, record_of(other, 1), 1) == Merge()
    # A gap (the newest generation refused, an older one restored): left out, with a note.
    gap = merge(older, record_of(live, base), 1)
    assert gap.imported == 0 and gap.problem is None and "starts after seq" in str(gap.note)
    # A history that forked from the record: left out too.
    forked = Session.open(newest)
    forked.receive("m3", "comment", {"body": "only in the artifact"})
    forked.close()
    live.receive("m3b", "comment", {"body": "only in the record"})
    assert "differ" in str(merge(newest, record_of(live, base), 1).note)
    # ... but if the record shows a launch the restored Session has queued, nothing runs.
    start_execution(live, 1)
    unsafe = merge(older, record_of(live, base), 1)
    assert unsafe.problem is not None and "[1]" in unsafe.problem


def test_a_session_newer_than_every_artifact_is_rebuilt_from_its_record(
    tmp_path: Path, make_session: MakeSession
) -> None:
    live = make_session(validators=[["true"]])
    accept(live, lambda p: p.add(cmd_cell("true")))
    start_execution(live, 1)
    target = tmp_path / "restored.sqlite3"

    merged = merge(target, record_of(live, 0, generation=0), 0)

    assert merged.adopted and merged.imported == live.proj.last_seq
    assert [(r["kind"], r["data"]) for r in journal_rows(target)] == [
        (r["kind"], r["data"]) for r in journal_rows(live.path)
    ]
    # Not for a record based on another generation than the one restored.
    target.unlink()
    assert not merge(target, record_of(live, 0, generation=3), 0).adopted


def test_push_samples_measure_each_launch(tmp_path: Path) -> None:
    samples = push_samples(tmp_path, 3)
    assert len(samples) == 3 and all(s > 0 for s in samples)
    found = LaunchRecord(
        tmp_path / "check.git", str(tmp_path / "launch-remote.git"), None, 1
    ).fetch()
    assert isinstance(found, Record) and found.events[-1]["seq"] == 4


@pytest.mark.parametrize(
    "header, tail",
    [
        ("[" * 30_000 + "]" * 30_000, ""),
        ('{"schema": "rio.launch/1"}', "[" * 30_000 + "]" * 30_000 + "\n"),
        ('{"schema": NaN}', ""),
        ('{"pad": "' + "x" * 70_000 + '"}', ""),
    ],
    ids=["deep-header", "deep-tail", "nan", "huge-header"],
)
def test_a_hostile_record_is_a_reason_never_an_internal_error(
    tmp_path: Path, header: str, tail: str
) -> None:
    """Anyone who can push can write the launch ref: its contents are data to check."""
    remote = bare(tmp_path / "remote.git")
    work = tmp_path / "forger"
    subprocess.run(["git", "init", "--quiet", str(work)], check=True)
    (work / "record.json").write_text(header)
    (work / "tail.jsonl").write_text(tail)
    git = ["git", "-C", str(work), "-c", "user.name=m", "-c", "user.email=m@example.com"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "forged"], check=True)
    reader = launches(tmp_path, remote, "reader")
    subprocess.run([*git, "push", "--quiet", str(remote), f"HEAD:{reader.ref}"], check=True)

    found = reader.fetch()

    assert isinstance(found, str) and found.startswith(reader.ref), found
    assert "\n" not in found


def test_a_superseded_record_keeps_its_tail_and_chains_on_the_record_it_marks(
    tmp_path: Path, make_session: MakeSession
) -> None:
    remote = bare(tmp_path / "remote.git")
    session = make_session()
    accept(session, lambda p: p.add(cmd_cell("true")))
    start_execution(session, 1)
    job = launches(tmp_path, remote)
    assert job.supersede(1) is False  # no record: nothing to mark
    launched = job.push(session, 1)

    finish = launches(tmp_path, remote, "finish")
    assert finish.supersede(1) is True
    assert finish.supersede(1) is False  # once is enough

    found = launches(tmp_path, remote, "reader").fetch()
    assert isinstance(found, Record) and found.superseded_by == 1
    assert [e["seq"] for e in found.events] == list(range(1, session.proj.last_seq + 1))
    parent = subprocess.run(
        ["git", "-C", str(remote), "rev-parse", f"{finish.lease}^"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert parent == launched
    with pytest.raises(Fenced):  # the job that launched no longer holds the lease
        job.push(session, 1)


def test_a_superseded_record_never_rebuilds_or_extends_a_session(
    tmp_path: Path, make_session: MakeSession
) -> None:
    live = make_session()
    accept(live, lambda p: p.add(cmd_cell("true")))  # cell 1, queued
    older = copy(live, tmp_path / "older.sqlite3")
    base = live.proj.last_seq
    start_execution(live, 1)
    newest = copy(live, tmp_path / "newest.sqlite3")
    created = record_of(live, 0, generation=0)
    superseded = Record(created.session_id, 0, 0, created.events, superseded_by=2)
    target = tmp_path / "restored.sqlite3"

    # Every generation gone: the Session is gone, not rebuilt from the record.
    gone = merge(target, superseded, 0)
    assert not gone.adopted and gone.imported == 0 and "gone" in str(gone.note)
    assert not target.exists()
    # The generation that superseded it restored: the record is history.
    assert (
        merge(newest, Record(created.session_id, 1, base, record_of(live, base).events, 2), 2)
        == Merge()
    )
    # An older generation restored: left out, and failing closed on a launch it would rerun.
    unsafe = merge(older, Record(created.session_id, 1, base, record_of(live, base).events, 2), 1)
    assert unsafe.imported == 0 and unsafe.problem is not None and "superseded" in unsafe.problem


def test_a_malformed_superseded_by_does_not_parse() -> None:
    header = {
        "schema": "rio.launch/1",
        "session_id": "s",
        "issue": 1,
        "generation": 0,
        "after_seq": 0,
        "last_seq": 0,
        "cell_id": 0,
        "run_id": "1",
    }
    assert parse({**header, "superseded_by": 3}, []) is not None
    for bad in (0, -1, "3", True, 1.5):
        assert parse({**header, "superseded_by": bad}, []) is None, bad
