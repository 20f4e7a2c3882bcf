"""Simulated power loss: a ~10-round workload runs through the real Journal,
Session and Launch code over a recording VFS; at every I/O operation several crash images are
built (see tests/faults/vfs.py for the storage model) and opened with the real recovery code
(``Session.open(verify=True)``, stdlib sqlite3). At ``synchronous=FULL`` every acknowledged
commit survives in every image; at ``synchronous=NORMAL`` the same check must find lost
commits — proof that it can fail.
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rio_ci.core.errors import StorageError
from rio_ci.run.launch import Launch
from rio_ci.session.session import Receipt, Session
from rio_ci.session.settings import Settings
from tests.faults.vfs import Op, RecordingVFS, crash_images, materialise, recorded_session
from tests.faults.workload import Plan

ROUNDS = 10


@dataclass
class Recording:
    ops: list[Op]
    base: bytes  # the Session file before the workload (created, closed, fsynced)
    acks: list[tuple[int, int, str]]  # (ops done when the call returned, last seq, what)
    final: list[dict[str, Any]]  # every event, read back after a clean close


def record_workload(directory: Path, synchronous: str) -> Recording:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "session.db"
    Session.create(db, "power loss", Settings(cwd=str(directory))).close()
    assert not Path(f"{db}-wal").exists()
    fd = os.open(db, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    base = db.read_bytes()
    vfs = RecordingVFS(db)
    session = recorded_session(db, vfs, synchronous)
    acks: list[tuple[int, int, str]] = []

    def ack(what: str) -> None:
        acks.append((len(vfs.ops), session.proj.last_seq, what))

    try:
        for r in range(ROUNDS):
            session.receive(f"m{r}", "comment", {"round": r})
            ack(f"receive m{r}")
            turn = session.prepare_turn()
            ack(f"turn {r}")
            if r == 3:
                stale = [{"op": "test", "path": "/revision", "value": -1}]
                assert not isinstance(session.step(turn["turn_id"], stale), Receipt)
                ack("rejected patch")
            plan = Plan(turn["state"])
            plan.add({"kind": "note", "text": f"round {r}"})
            plan.add({"kind": "cmd", "argv": [sys.executable, "-c", f"print('round {r}')"]})
            assert isinstance(session.step(turn["turn_id"], plan.ops), Receipt)
            ack(f"step {r}")
            if r % 3 == 1:
                session.set_timer(f"t{r}", time.time() + 3600, {"round": r})
                ack(f"timer t{r}")
            queued = next(e for e in session.proj.pending() if e["phase"] == "queued")
            capture = Launch(session).start(queued)
            while capture is not None and capture.pump(0.02) is None:
                pass
            ack(f"execution {r}")
            if r == 5:
                session.wal_checkpoint()
                ack("checkpoint")
    finally:
        session.close()
        vfs.unregister()
    final = Session.open(db)
    try:
        events = list(final.events())
    finally:
        final.close()
    return Recording(vfs.ops, base, acks, events)


@dataclass
class Verdicts:
    images: int = 0
    opened: int = 0  # distinct images actually opened (identical ones are checked once)
    lost: int = 0
    broken: int = 0
    examples: list[str] | None = None


def inspect(db: Path, final: list[dict[str, Any]]) -> tuple[int, str | None]:
    """Open a crash image with the real recovery code: its last seq, or what is wrong."""
    try:
        session = Session.open(db, verify=True)
    except StorageError as exc:
        return 0, f"does not open: {exc}"
    try:
        if session.journal.replay().to_dict() != session.proj.to_dict():
            return 0, "derived projection differs from a full replay"
        events = list(session.events())
    finally:
        session.close()
    if events != final[: len(events)]:
        return 0, "holds events that were never committed in this order"
    return len(events), None


def check_images(recording: Recording, workdir: Path, per_point: int, seed: int) -> Verdicts:
    verdicts = Verdicts(examples=[])
    assert verdicts.examples is not None
    seen: dict[str, tuple[int, str | None]] = {}
    rng = random.Random(seed)
    for image in crash_images(recording.ops, recording.base, per_point, rng):
        verdicts.images += 1
        key = image.digest()
        if key not in seen:
            verdicts.opened += 1
            seen[key] = inspect(materialise(image, workdir, "session.db"), recording.final)
        last, problem = seen[key]
        required = max((seq for done, seq, _ in recording.acks if done <= image.at), default=1)
        if problem is not None:
            verdicts.broken += 1
            verdicts.examples.append(f"op {image.at} ({image.how}): {problem}")
        elif last < required:
            verdicts.lost += 1
            what = [w for done, seq, w in recording.acks if done <= image.at and seq > last]
            verdicts.examples.append(
                f"op {image.at} ({image.how}): has {last} events, "
                f"acknowledged {required}; lost {what[:3]}"
            )
    return verdicts


def images_per_point(long: bool) -> int:
    return 10 if long else 4


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_power_loss_at_every_io_operation(
    disk_path: Path, long_run: bool, synchronous: str, fault_report: dict[str, Any]
) -> None:
    recording = record_workload(disk_path / "run", synchronous)
    syncs = sum(op.kind == "sync" for op in recording.ops)
    seed = int(os.environ.get("RIO_FAULT_SEED", time.time_ns() % 1_000_000))
    verdicts = check_images(recording, disk_path / "image", images_per_point(long_run), seed)
    fault_report[f"power loss ({synchronous})"] = {
        "seed": seed,
        "io_operations": len(recording.ops),
        "syncs": syncs,
        "acknowledged": len(recording.acks),
        "images": verdicts.images,
        "distinct_images_opened": verdicts.opened,
        "lost_commit_images": verdicts.lost,
        "inconsistent_images": verdicts.broken,
    }
    examples = "\n".join((verdicts.examples or [])[:10])
    assert verdicts.broken == 0, f"seed {seed}: inconsistent images:\n{examples}"
    if synchronous == "FULL":
        assert verdicts.lost == 0, f"seed {seed}: acknowledged commits lost:\n{examples}"
    else:
        # WAL commits are not synced at NORMAL: the harness must see the loss.
        assert verdicts.lost >= 1, "the power-loss check found no loss at synchronous=NORMAL"
