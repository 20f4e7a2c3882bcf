"""The bench's realistic model round, driven through the Session API alone: an outside
message, a Turn, a step replacing the head ``code`` Cell with a new version of about 1 KB,
and that Execution's events (launch authorised, Worker registered, 2 KB of output with the
result) — what the Owner commits, without running a process.

Besides the bench's own use, the file runs as a script against any rio_ci tree put first on
``PYTHONPATH`` (another commit's, with the same Session API and event constructors) and
prints the Session's size as it grows, as JSON: that is how ``rio-ci bench --chart``
measures the "before" of a storage change. It therefore imports nothing of rio_ci but the
Session and the event constructors.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from rio_ci.core import events as ev
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings

NOTE = "A note of ordinary length, standing in for what a model writes between rounds. " * 4
# A trivial PEP 723 script of about 1 KB and the 2 KB a short test run prints.
SOURCE = "# /// script\n# dependencies = []\n# ///\n" + "".join(
    f"print('step {i}: ' + 'checking the module under test ' * 1)\n" for i in range(18)
)
OUTPUT = "".join(
    f"tests/test_module.py::test_case_{i:03d} PASSED{' ' * 12}[{i:3d}%]\n" for i in range(36)
)


def compact(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def new_session(path: Path, *, synchronous: str = "FULL") -> Session:
    """A Session with a few notes of context, as a model keeps them."""
    session = Session.create(
        path, "bench: a realistic Session", Settings(cwd=str(path.parent)), synchronous=synchronous
    )
    accept(session, [{"kind": "note", "text": f"{NOTE} ({n})"} for n in range(6)])
    return session


def play_round(session: Session, n: int, head: int | None) -> tuple[int, int]:
    """One round; returns the new head Cell's id and the round's new content in bytes
    (the patch, the retained output and the Inbox payload, each as compact JSON/text)."""
    payload = {"body": f"comment {n}: {NOTE}"}
    session.receive(f"comment-{n}", "comment", payload)
    cell = {"kind": "code", "runtime": "python", "source": f"{SOURCE}# round {n}\n"}
    turn = session.prepare_turn()
    ops = patch_for(turn["state"], [cell], replace=head is not None)
    receipt = session.step(turn["turn_id"], ops)
    cell_ids = getattr(receipt, "cell_ids", None)
    if not cell_ids:
        raise RuntimeError(f"bench: patch rejected: {getattr(receipt, 'reason', receipt)}")
    execute(session, cell_ids[0], OUTPUT)
    return cell_ids[0], compact(ops) + len(OUTPUT.encode()) + compact(payload)


def execute(session: Session, cell_id: int, output: str, token: str | None = None) -> None:
    """What the Owner commits for one Execution that printed ``output`` and exited 0: its
    launch authorised with ``token`` (by default one like the Owner's), its Worker
    registered, its result."""
    if token is None:
        token = f"rio-{session.proj.session['id']}-{cell_id}-{uuid.uuid4().hex[:12]}"
    identity: ev.WorkerRecord = {
        "pid": 4242,
        "pgid": 4242,
        "create_time": 1.7e9,
        "boot_time": 1.7e9,
        "token": token,
    }
    session.authorize_launch(cell_id, token)
    session.register_worker(cell_id, identity)
    session.record_result(cell_id, ev.exited(cell_id, 0), output=[ev.OutputPiece("stdout", output)])


def accept(session: Session, cells: list[dict[str, Any]], *, replace: bool = False) -> list[int]:
    """Prepare a Turn and get ``cells`` accepted (the first replacing the first head if
    ``replace``); returns their ids."""
    turn = session.prepare_turn()
    receipt = session.step(turn["turn_id"], patch_for(turn["state"], cells, replace=replace))
    cell_ids = getattr(receipt, "cell_ids", None)
    if cell_ids is None:
        raise RuntimeError(f"bench: patch rejected: {getattr(receipt, 'reason', receipt)}")
    return list(cell_ids)


def patch_for(
    state: dict[str, Any], cells: list[dict[str, Any]], *, replace: bool
) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/revision", "value": state["revision"]}]
    next_id = state["runtime"]["next_cell_id"]
    for n, cell in enumerate(cells):
        if replace and n == 0:
            value = {**cell, "id": next_id, "previous_id": state["cells"][0]["id"]}
            ops.append({"op": "replace", "path": "/cells/0", "value": value})
        else:
            ops.append(
                {
                    "op": "add",
                    "path": "/cells/-",
                    "value": {**cell, "id": next_id + n, "previous_id": None},
                }
            )
    return ops


def on_disk(path: Path) -> int:
    """The Session's bytes on disk: the file and its WAL."""
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def growth(path: Path, rounds: int, every: int) -> list[tuple[int, int, int]]:
    """(rounds played, bytes on disk after a checkpoint, new content so far) every
    ``every`` rounds."""
    session = new_session(path)
    head, content = None, 0
    points = [(0, _settled(session, path), 0)]
    for n in range(1, rounds + 1):
        head, new = play_round(session, n, head)
        content += new
        if n % every == 0:
            points.append((n, _settled(session, path), content))
    session.close()
    return points


def _settled(session: Session, path: Path) -> int:
    session.wal_checkpoint()  # a WAL checkpoint: the WAL copied into the file and truncated
    return on_disk(path)


if __name__ == "__main__":  # python drive.py ROUNDS EVERY: the growth series as JSON
    rounds, every = int(sys.argv[1]), int(sys.argv[2])
    with tempfile.TemporaryDirectory(
        prefix="rio-drive-", dir=os.environ.get("RIO_DRIVE_DIR")
    ) as where:
        print(json.dumps(growth(Path(where) / "drive.sqlite3", rounds, every)))
