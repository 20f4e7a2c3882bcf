"""Storage figures: what a realistic round adds to the Session (``drive``), opening long
Sessions, and packing / restoring a 300-round Session as an artifact."""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci.commands import show
from rio_ci.commands.bench.common import NOTE, accept, ms
from rio_ci.commands.bench.drive import execute, new_session, on_disk, play_round
from rio_ci.core.json_value import encoded_size
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.store import artifact
from rio_ci.untrusted import jsonio

OPEN_SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}


def measure_storage(root: Path, quick: bool) -> dict[str, Any]:
    """Bytes a round adds at steady state (after the first ``warm`` rounds, across several
    rewrites of the saved projection) ÷ the round's new content. Each round ends with a WAL
    checkpoint that copies the WAL into the file and truncates it: the file's growth is what
    the round left, and the WAL's size just before is what the round wrote."""
    path = root / "storage.sqlite3"
    session = new_session(path)
    warm, measured = (20, 60) if quick else (50, 300)
    head, content, written = None, 0, 0
    for n in range(1, warm + 1):
        head, _ = play_round(session, n, head)
    session.wal_checkpoint()
    start = on_disk(path)
    for n in range(warm + 1, warm + measured + 1):
        head, new = play_round(session, n, head)
        content += new
        written += Path(f"{path}-wal").stat().st_size
        session.wal_checkpoint()
    grown = on_disk(path) - start
    session.close()
    return {
        "session_bytes_per_round": round(grown / measured),
        "content_bytes_per_round": round(content / measured),
        "wal_bytes_per_round": round(written / measured),
        "ratio_bytes_per_round": round(grown / content, 3),
        "storage_rounds": measured,
    }


def measure_artifact(root: Path, quick: bool) -> dict[str, Any]:
    """A 300-round Session (``drive``'s rounds) packed as the finish step does
    (``artifact.pack``: a single-file copy, integrity_check, fsync, sha256) and zipped as an
    upload does, then restored (``artifact.unpack``: entries checked, extracted, sha256,
    integrity_check, schema); no network. Interleaved, medians."""
    db = root / "finish.sqlite3"
    session, head = new_session(db), None
    for n in range(1, 301):
        head, _ = play_round(session, n, head)
    session.close()
    finish, restore = [], []
    for i in range(3 if quick else 9):
        out, zipped, dest = root / f"pack-{i}", root / f"artifact-{i}.zip", root / f"back-{i}"
        started = time.perf_counter()
        artifact.pack(db, out, generation=1, parent_generation=None, run_id=None, next_wake=None)
        artifact.archive(out, zipped)
        finish.append(time.perf_counter() - started)
        started = time.perf_counter()
        artifact.unpack(zipped, dest)
        restore.append(time.perf_counter() - started)
        snapshot_bytes, zip_bytes = (out / artifact.SNAPSHOT).stat().st_size, zipped.stat().st_size
        for leftover in (out, dest):
            shutil.rmtree(leftover)
        zipped.unlink()
    return {
        "finish_seconds_300_rounds": round(statistics.median(finish), 3),
        "restore_seconds_300_rounds": round(statistics.median(restore), 3),
        "session_bytes_300_rounds": snapshot_bytes,
        "artifact_bytes_300_rounds": zip_bytes,
    }


def measure_open(root: Path, quick: bool) -> dict[str, Any]:
    """Session open at 1k/10k/100k events (copies of one long Session, closed cleanly),
    plain and as an Owner opens it; and an Owner's open of the 100k copy left with a WAL,
    as a crashed process leaves it (then ``quick_check`` reads the whole file)."""
    started = time.perf_counter()
    copies = build_long_session(root, OPEN_SIZES)
    out: dict[str, Any] = {"open_build_seconds": round(time.perf_counter() - started, 2)}
    unclean = root / "unclean-100k.sqlite3"
    shutil.copyfile(copies["100k"], unclean)
    Session.open(unclean).close()
    kinds: dict[str, Callable[[Path], None]] = {
        "open_ms": lambda p: Session.open(p).close(),
        "owner_open_ms": lambda p: Owner(str(p)).close(),
        "show_ms": lambda p: _show(p, as_json=False),
        "show_json_ms": lambda p: _show(p, as_json=True),
    }
    times: dict[str, list[float]] = {}
    for _ in range(7 if quick else 31):
        for prefix, opener in kinds.items():
            for name, path in copies.items():  # interleaved: drift hits every size alike
                started = time.perf_counter()
                opener(path)
                times.setdefault(f"{prefix}_{name}", []).append(time.perf_counter() - started)
        Path(f"{unclean}-wal").write_bytes(b"\0" * 4096)  # not a valid WAL: SQLite drops it
        started = time.perf_counter()
        Owner(str(unclean)).close()
        times.setdefault("owner_open_ms_100k_in_doubt", []).append(time.perf_counter() - started)
    out.update({key: ms(statistics.median(samples)) for key, samples in times.items()})
    out["ratio_open_100k_1k"] = round(out["open_ms_100k"] / out["open_ms_1k"], 3)
    out["ratio_owner_open_100k_1k"] = round(out["owner_open_ms_100k"] / out["owner_open_ms_1k"], 3)
    out["ratio_show_100k_1k"] = round(out["show_ms_100k"] / out["show_ms_1k"], 3)
    out["ratio_show_json_100k_1k"] = round(out["show_json_ms_100k"] / out["show_json_ms_1k"], 3)
    for name, path in copies.items():  # the context stays bounded as the Journal grows
        session = Session.open(path)
        out[f"events_{name}"] = session.proj.last_seq
        out[f"state_bytes_{name}"] = encoded_size(session.state())
        out[f"session_bytes_{name}"] = session.size_bytes()
        session.close()
    return out


def _show(path: Path, *, as_json: bool) -> None:
    """What ``rio-ci show`` (or ``show --json``) does in process: open, read, render."""
    session = Session.open(path)
    try:
        text = jsonio.dumps(show.summary(session)) if as_json else show.render_text(session)
    finally:
        session.close()
    if not text:
        raise RuntimeError("bench: show printed nothing")


def build_long_session(root: Path, sizes: dict[str, int]) -> dict[str, Path]:
    """One Session grown by small rounds (a message, a Turn, a patch replacing a cmd
    Cell, its Execution's four events) through the Session API, copied as it passes each
    size. Built with synchronous=NORMAL (building is not what is measured)."""
    path = root / "long.sqlite3"
    session = Session.create(
        path, "bench: a long Session", Settings(cwd=str(root)), synchronous="NORMAL"
    )
    accept(session, [{"kind": "note", "text": f"{NOTE} ({n})"} for n in range(6)])
    copies: dict[str, Path] = {}
    head: int | None = None
    for name, size in sorted(sizes.items(), key=lambda item: item[1]):
        while session.proj.last_seq < size:
            n = session.proj.last_seq
            session.receive(f"comment-{n}", "comment", {"body": f"comment {n}: {NOTE}"})
            head = accept(
                session, [{"kind": "cmd", "argv": ["echo", str(n)]}], replace=head is not None
            )[0]
            execute(session, head, f"{n}\n", token=f"rio-bench-{head}")
        session.wal_checkpoint()  # everything in the main file: a plain copy is whole
        copies[name] = root / f"open-{name}.sqlite3"
        shutil.copyfile(path, copies[name])
    session.close()
    return copies
