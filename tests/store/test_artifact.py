"""The Session artifact: pack → zip → unpack, every refusal, and falling back a generation."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import stat
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.github_api import FakeGitHub

from rio_ci.core.errors import ArtifactError, ForgeError, StorageError
from rio_ci.forge.github import GitHubForge
from rio_ci.github.newest import EXPIRED, restore_newest
from rio_ci.github.provenance import Provenance
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.store.artifact import (
    MANIFEST,
    SCHEMA,
    SNAPSHOT,
    Manifest,
    archive,
    pack,
    unpack,
)
from rio_ci.store.sessionfile import SCHEMA_OBJECTS

EVENTS = 200


@pytest.fixture
def live_db(tmp_path: Path) -> Iterator[Path]:
    """A WAL Session whose newest events live only in the WAL, held open like a live Owner."""
    path = tmp_path / "live" / "session.db"
    path.parent.mkdir()
    session = Session.create(path, "keep every event")
    for n in range(EVENTS - 1):
        session.receive(f"m{n}", "note", {"n": n})
    assert (path.parent / "session.db-wal").stat().st_size > 0
    yield path
    session.close()


def packed(db: Path, out: Path, generation: int = 1) -> Path:
    return pack(
        db,
        out,
        generation=generation,
        parent_generation=generation - 1 or None,
        run_id=1234,
        next_wake=1_700_000_000.5,
    )


def zip_bytes(entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate-name case
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            for name, data in entries:
                bundle.writestr(name, data)
    return buffer.getvalue()


def with_sha(manifest: bytes, snapshot: bytes) -> bytes:
    data = json.loads(manifest)
    data["sha256"] = hashlib.sha256(snapshot).hexdigest()
    return json.dumps(data).encode()


@pytest.fixture
def parts(live_db: Path, tmp_path: Path) -> tuple[bytes, bytes]:
    """(snapshot, manifest) bytes of one valid generation."""
    out = packed(live_db, tmp_path / "out")
    return (out / SNAPSHOT).read_bytes(), (out / MANIFEST).read_bytes()


def test_round_trip_keeps_every_committed_event(live_db: Path, tmp_path: Path) -> None:
    out = packed(live_db, tmp_path / "out", generation=3)

    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, SNAPSHOT]
    header = (out / SNAPSHOT).read_bytes()[:100]
    assert (header[18], header[19]) == (1, 1)  # rollback journal: one self-contained file
    written = json.loads((out / MANIFEST).read_text())
    assert written["schema"] == SCHEMA
    assert (written["generation"], written["parent_generation"]) == (3, 2)

    manifest = unpack(archive(out, tmp_path / "a.zip"), tmp_path / "restored")

    assert manifest == Manifest.from_dict(written)
    assert manifest.to_dict() == written
    restored = sqlite3.connect(tmp_path / "restored" / SNAPSHOT)
    assert restored.execute("SELECT count(*) FROM events").fetchone() == (EVENTS,)
    restored.close()


def test_pack_refuses_a_directory_with_other_files(live_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "stray.txt").write_text("x")
    with pytest.raises(StorageError, match=r"stray\.txt"):
        packed(live_db, out)


def test_pack_refuses_a_missing_session_and_bad_manifest_values(
    live_db: Path, tmp_path: Path
) -> None:
    with pytest.raises(StorageError, match="no Session file"):
        packed(tmp_path / "nope.db", tmp_path / "out")
    assert not (tmp_path / "nope.db").exists()
    with pytest.raises(ValueError, match="parent_generation"):
        pack(
            live_db,
            tmp_path / "out2",
            generation=2,
            parent_generation=2,
            run_id=None,
            next_wake=None,
        )
    assert not (tmp_path / "out2").exists()


def corrupt_pages(snapshot: bytes) -> bytes:
    # Page 1 is the schema; overwrite the start of the pages after it with garbage.
    damaged = bytearray(snapshot)
    for offset in range(4096, min(len(damaged), 4096 * 3), 7):
        damaged[offset] ^= 0xA5
    return bytes(damaged)


def not_a_session() -> bytes:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE notes (x)")
    data = db.serialize()
    db.close()
    return data


def symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


CASES = {
    "path traversal": (lambda s, m: [("../session.sqlite3", s), (MANIFEST, m)], "traversal"),
    "absolute path": (lambda s, m: [("/session.sqlite3", s), (MANIFEST, m)], "absolute"),
    "symlink": (lambda s, m: [(symlink(SNAPSHOT), b"/etc/passwd"), (MANIFEST, m)], "symlink"),
    "directory": (lambda s, m: [("sub/", b""), (SNAPSHOT, s), (MANIFEST, m)], "directory"),
    "extra entry": (lambda s, m: [(SNAPSHOT, s), (MANIFEST, m), ("run.sh", b"x")], "unexpected"),
    "duplicate": (lambda s, m: [(SNAPSHOT, s), (MANIFEST, m), (MANIFEST, m)], "duplicate"),
    "missing": (lambda s, m: [(MANIFEST, m)], "missing zip entry session.sqlite3"),
    "oversized manifest": (lambda s, m: [(SNAPSHOT, s), (MANIFEST, b" " * 70_000)], "limit"),
    "zip bomb": (lambda s, m: [(SNAPSHOT, bytes(8 << 20)), (MANIFEST, m)], "ratio"),
    "tampered snapshot": (lambda s, m: [(SNAPSHOT, s + b"evil"), (MANIFEST, m)], "sha256"),
    "corrupted pages": (
        lambda s, m: [(SNAPSHOT, corrupt_pages(s)), (MANIFEST, with_sha(m, corrupt_pages(s)))],
        "integrity_check|not a valid SQLite",
    ),
    "not sqlite": (
        lambda s, m: [(SNAPSHOT, b"x" * 200), (MANIFEST, with_sha(m, b"x" * 200))],
        "not an SQLite database",
    ),
    "not a session": (
        lambda s, m: [(SNAPSHOT, not_a_session()), (MANIFEST, with_sha(m, not_a_session()))],
        "not a rio Session",
    ),
    "wrong schema": (
        lambda s, m: [(SNAPSHOT, s), (MANIFEST, m.replace(SCHEMA.encode(), b"other.thing/1"))],
        "schema",
    ),
    "newer manifest schema": (  # one line naming both versions (docs/design.md)
        lambda s, m: [(SNAPSHOT, s), (MANIFEST, m.replace(SCHEMA.encode(), b"rio.artifact/2"))],
        r"written by a newer rio-ci \(manifest rio\.artifact/2; this rio-ci .*\): upgrade",
    ),
    "manifest not json": (lambda s, m: [(SNAPSHOT, s), (MANIFEST, b"{nope")], "manifest refused"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unpack_refuses_a_bad_artifact_and_leaves_nothing(
    case: str, parts: tuple[bytes, bytes], tmp_path: Path
) -> None:
    build, reason = CASES[case]
    bundle = tmp_path / "bad.zip"
    bundle.write_bytes(zip_bytes(build(*parts)))
    dest = tmp_path / "dest"

    with pytest.raises(ArtifactError, match=reason) as caught:
        unpack(bundle, dest)

    assert "\n" not in str(caught.value)
    assert not dest.exists() or list(dest.iterdir()) == []
    assert not (tmp_path / "session.sqlite3").exists()  # nothing escaped the destination


def test_entry_checks_run_before_anything_is_written(
    parts: tuple[bytes, bytes], tmp_path: Path
) -> None:
    snapshot, manifest = parts
    bundle = tmp_path / "bad.zip"
    bundle.write_bytes(zip_bytes([(SNAPSHOT, snapshot), (MANIFEST, manifest), ("../x", b"x")]))
    with pytest.raises(ArtifactError):
        unpack(bundle, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_unpack_enforces_the_snapshot_size_limit(
    parts: tuple[bytes, bytes], tmp_path: Path
) -> None:
    bundle = tmp_path / "a.zip"
    bundle.write_bytes(zip_bytes([(SNAPSHOT, parts[0]), (MANIFEST, parts[1])]))
    with pytest.raises(ArtifactError, match="over the 4096-byte limit"):
        unpack(bundle, tmp_path / "dest", max_bytes=4096)
    assert unpack(bundle, tmp_path / "dest").generation == 1


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "a.zip"
    bundle.write_bytes(b"PK but not really")
    with pytest.raises(ArtifactError, match="not a valid zip archive"):
        unpack(bundle, tmp_path / "dest")


@pytest.mark.parametrize(
    "field, value",
    [
        ("generation", 0),
        ("generation", True),
        ("parent_generation", 5),
        ("run_id", "123"),
        ("sha256", "ABC"),
        ("next_wake", "soon"),
        ("extra", 1),
    ],
)
def test_manifest_fields_are_checked(field: str, value: object) -> None:
    data: dict[str, object] = {
        "schema": SCHEMA,
        "generation": 2,
        "parent_generation": 1,
        "run_id": None,
        "sha256": "0" * 64,
        "next_wake": None,
    }
    assert Manifest.from_dict(data).generation == 2
    data[field] = value
    with pytest.raises(ValueError):
        Manifest.from_dict(data)


# -- restore_newest: real PyGithub, fake GitHub ------------------------------------------------


def upload(
    gh: FakeGitHub,
    live_db: Path,
    tmp_path: Path,
    generation: int,
    created_at: str,
    *,
    tamper: bool = False,
) -> int:
    out = packed(live_db, tmp_path / f"gen{generation}", generation)
    snapshot = (out / SNAPSHOT).read_bytes() + (b"tamper" if tamper else b"")
    data = zip_bytes([(SNAPSHOT, snapshot), (MANIFEST, (out / MANIFEST).read_bytes())])
    return gh.add_artifact("rio-session-7", data, created_at)


def test_restore_falls_back_past_a_corrupted_newest_generation(
    gh: FakeGitHub, live_db: Path, tmp_path: Path
) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    first = upload(gh, live_db, tmp_path, 1, "2024-05-01T00:00:00Z")
    second = upload(gh, live_db, tmp_path, 2, "2024-05-02T00:00:00Z", tamper=True)
    gh.add_artifact("rio-session-7", b"", "2024-05-03T00:00:00Z", expired=True)

    result = restore_newest(forge, "rio-session-7", tmp_path / "work")

    assert result.restored is not None
    assert result.restored.artifact.id == first
    assert result.restored.manifest.generation == 1
    assert result.restored.snapshot.read_bytes()[:16] == b"SQLite format 3\x00"
    assert result.rejected[0].reason == "expired"
    tampered = result.rejected[1]
    assert (tampered.artifact_id, tampered.generation) == (second, 2)
    assert "sha256" in tampered.reason
    assert str(tampered).startswith(
        f"generation 2 (artifact {second}, 2024-05-02T00:00:00Z) rejected: "
    )
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [str(first)]


def test_restore_with_no_artifacts_is_a_fresh_session(gh: FakeGitHub, tmp_path: Path) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    result = restore_newest(forge, "rio-session-7", tmp_path / "work")
    assert (result.restored, result.rejected) == (None, ())


def test_restore_does_not_fall_back_when_the_newest_cannot_be_fetched(
    gh: FakeGitHub, live_db: Path, tmp_path: Path
) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    upload(gh, live_db, tmp_path, 1, "2024-05-01T00:00:00Z")
    newest = upload(gh, live_db, tmp_path, 2, "2024-05-02T00:00:00Z")
    gh.fail_next("GET", rf"/repos/{gh.repo}/actions/artifacts/{newest}/zip", 500)
    with pytest.raises(ForgeError, match=f"downloading artifact {newest}"):
        restore_newest(forge, "rio-session-7", tmp_path / "work")


def test_a_real_session_survives_the_trip(tmp_path: Path) -> None:
    live = Session.create(tmp_path / "s.db", "Fix the route", Settings(cwd=str(tmp_path)))
    live.receive("comment:1", "comment", {"author": "alice", "body": "please"})
    out = packed(tmp_path / "s.db", tmp_path / "out")  # while the Session is still open
    unpack(archive(out, tmp_path / "a.zip"), tmp_path / "restored")

    restored = Session.open(tmp_path / "restored" / SNAPSHOT, verify=True)
    assert restored.state() == live.state()
    restored.close()
    live.close()


# -- hostile contents: a refused generation with a reason, never an internal error ------------


def hostile_snapshot(db: Path, tmp_path: Path, sql: str) -> Path:
    """A packed generation of ``db`` whose snapshot then had ``sql`` run on it, with the
    manifest's checksum made to match again (what a forger would do)."""
    out = packed(db, tmp_path / "hostile")
    conn = sqlite3.connect(out / SNAPSHOT)
    conn.executescript(sql)
    conn.close()
    manifest = with_sha((out / MANIFEST).read_bytes(), (out / SNAPSHOT).read_bytes())
    (out / MANIFEST).write_bytes(manifest)
    return archive(out, tmp_path / "hostile.zip")


HOSTILE_SQL = {
    "trigger": (
        "CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM snapshot; END;",
        "trigger 't'",
    ),
    "view": ("CREATE VIEW v AS SELECT * FROM events;", "view 'v'"),
    "table": ("CREATE TABLE extra (x);", "table 'extra'"),
    "index": ("CREATE INDEX extra_index ON events (at);", "index 'extra_index'"),
    "version": ("UPDATE meta SET value = '²' WHERE key = 'schema_version';", "schema_version"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SQL))
def test_a_snapshot_holding_anything_but_the_session_schema_is_refused(
    case: str, tmp_path: Path
) -> None:
    session = Session.create(tmp_path / "s.db", "stay plain", Settings(cwd=str(tmp_path)))
    session.close()
    sql, reason = HOSTILE_SQL[case]
    bundle = hostile_snapshot(tmp_path / "s.db", tmp_path, sql)

    with pytest.raises(ArtifactError, match=reason) as caught:
        unpack(bundle, tmp_path / "dest")

    assert "\n" not in str(caught.value)
    assert not (tmp_path / "dest" / SNAPSHOT).exists()


def test_the_schema_objects_a_session_may_hold_are_what_the_journal_creates(
    tmp_path: Path,
) -> None:
    Session.create(tmp_path / "s.db", "plain", Settings(cwd=str(tmp_path))).close()
    conn = sqlite3.connect(tmp_path / "s.db")
    found = set(conn.execute("SELECT type, name, tbl_name FROM sqlite_master"))
    conn.close()
    assert found == SCHEMA_OBJECTS


@pytest.mark.parametrize(
    "manifest, reason",
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested"),
        (b'{"schema": NaN}', "NaN"),
        (b"\xff\xfe", "UTF-8"),
        (b'{"schema": "rio.artifact/1", "generation": "\xc2\xb2"}', "manifest fields"),
    ],
    ids=["deep", "nan", "not-utf8", "superscript"],
)
def test_a_manifest_that_cannot_be_parsed_is_a_refusal_with_a_reason(
    manifest: bytes, reason: str, parts: tuple[bytes, bytes], tmp_path: Path
) -> None:
    bundle = tmp_path / "a.zip"
    bundle.write_bytes(zip_bytes([(SNAPSHOT, parts[0]), (MANIFEST, manifest)]))
    with pytest.raises(ArtifactError, match=reason):
        unpack(bundle, tmp_path / "dest")


def test_restore_falls_back_past_a_manifest_nested_30000_deep(
    gh: FakeGitHub, live_db: Path, tmp_path: Path
) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    first = upload(gh, live_db, tmp_path, 1, "2024-05-01T00:00:00Z")
    snapshot = (packed(live_db, tmp_path / "deep") / SNAPSHOT).read_bytes()
    deep = zip_bytes([(SNAPSHOT, snapshot), (MANIFEST, b"[" * 30_000 + b"]" * 30_000)])
    gh.add_artifact("rio-session-7", deep, "2024-05-02T00:00:00Z")

    result = restore_newest(forge, "rio-session-7", tmp_path / "work")

    assert result.restored is not None and result.restored.artifact.id == first
    assert "nested" in result.rejected[0].reason


@pytest.mark.parametrize("kind", ["trigger", "view", "table"])
def test_restore_falls_back_past_a_snapshot_with_a_trigger_a_view_or_a_table(
    gh: FakeGitHub, live_db: Path, tmp_path: Path, kind: str
) -> None:
    """The newest generation's snapshot holds SQL of its own (its checksum made to match):
    it is refused with the reason, and the previous generation is the one restored."""
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    first = upload(gh, live_db, tmp_path, 1, "2024-05-01T00:00:00Z")
    sql, reason = HOSTILE_SQL[kind]
    hostile = hostile_snapshot(live_db, tmp_path, sql).read_bytes()
    gh.add_artifact("rio-session-7", hostile, "2024-05-02T00:00:00Z")

    result = restore_newest(forge, "rio-session-7", tmp_path / "work")

    assert result.restored is not None and result.restored.artifact.id == first
    assert reason in result.rejected[0].reason


def test_a_download_answered_410_gone_is_an_expired_generation(
    gh: FakeGitHub, live_db: Path, tmp_path: Path
) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    first = upload(gh, live_db, tmp_path, 1, "2024-05-01T00:00:00Z")
    newest = upload(gh, live_db, tmp_path, 2, "2024-05-02T00:00:00Z")
    gh.expire_artifact(newest, listed=False)  # the listing has not caught up

    result = restore_newest(forge, "rio-session-7", tmp_path / "work")

    assert result.restored is not None and result.restored.artifact.id == first
    assert [(r.artifact_id, r.reason) for r in result.rejected] == [(newest, EXPIRED)]


def test_restore_skips_what_provenance_refuses_and_a_manifest_of_another_run(
    gh: FakeGitHub, live_db: Path, tmp_path: Path
) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    ours = upload(gh, live_db, tmp_path, 1, "2024-05-01T00:00:00Z")  # manifest: run 1234
    assert gh.artifacts[ours]["workflow_run"]["id"] == 42  # uploaded by run 42
    check = Provenance(forge, gh.repo, f"{gh.repo}/.github/workflows/rio.yml@refs/heads/main")

    result = restore_newest(forge, "rio-session-7", tmp_path / "work", provenance=check.problem)

    assert result.restored is None and result.rejected == ()
    (skipped,) = result.skipped
    assert skipped.artifact_id == ours and "names run 1234" in skipped.reason
    assert not (tmp_path / "work" / str(ours) / SNAPSHOT).exists()
