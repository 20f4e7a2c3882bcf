"""A Session written by an earlier release → restored, migrated and continued; a Session from
a newer release → refused with one line naming both versions, the file unchanged.

Every release's golden files (tests/golden/README.md) are continued here by this rio-ci: the
artifact through a real ``rio-ci action`` job against FakeGitHub, the local Session through
``rio-ci run``, each with a scripted model that resolves the UnknownExecution the cut-off left
and concludes with the validators passing. The files are copied first; the golden ones are
never written."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from action_job import WAIT, Job, Repository, commented, conclude, resolve_unknown, script
from fakes.github_api import FakeGitHub

import rio_ci
from rio_ci.reports import progress
from rio_ci.store.at_rest import SCHEMA_VERSION
from tests.kit import add, cli_env, cmd_cell, run_cli
from tests.run_cli import write_script

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
VERSIONS = sorted(
    (p.name for p in GOLDEN.iterdir() if re.fullmatch(r"\d+\.\d+\.\d+", p.name)),
    key=lambda v: tuple(map(int, v.split("."))),
)
FIX = add(cmd_cell("python3", "-c", "open('fixed.txt', 'w').write('ok\\n')"))


def rows(path: Path) -> list[tuple[Any, ...]]:
    """The stored events, read without rio_ci and without changing the file."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    try:
        return conn.execute("SELECT seq, kind, at, ref, data FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


def format_of(path: Path) -> int:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    try:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    return int(value)


def first_event(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(rows(path)[0][4])
    return data


def zipped(files: dict[str, bytes]) -> bytes:
    """An artifact as actions/upload-artifact stores a directory: its files, zipped."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in files.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def golden_zip(version: str) -> bytes:
    folder = GOLDEN / version / "artifact"
    return zipped({n: (folder / n).read_bytes() for n in ("session.sqlite3", "manifest.json")})


def newer_zip(version: str, tmp: Path, run_id: int) -> bytes:
    """Generation 2 of the golden artifact as a newer rio-ci would have written it: the same
    Session with its format one past this rio-ci's, and a manifest that matches it."""
    snapshot = tmp / "newer.sqlite3"
    shutil.copyfile(GOLDEN / version / "artifact" / "session.sqlite3", snapshot)
    conn = sqlite3.connect(snapshot)
    with conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    conn.close()
    data = snapshot.read_bytes()
    assert data[18:20] == b"\x01\x01"  # still a single-file snapshot
    manifest = {
        "schema": "rio.artifact/1",
        "generation": 2,
        "parent_generation": 1,
        "run_id": run_id,
        "sha256": hashlib.sha256(data).hexdigest(),
        "next_wake": None,
    }
    return zipped({"session.sqlite3": data, "manifest.json": json.dumps(manifest).encode()})


@contextlib.contextmanager
def recorded_directory(path: Path, link_to: Path | None = None) -> Iterator[None]:
    """The golden Session's working directory, fixed when its release created it, is a path
    outside this test's folder: a job links it to its checkout (docs/github.md, a runner
    whose work folder moved); for ``rio-ci run`` it is linked here to ``link_to``. Other runs
    of this test on the machine wait on a lock for it, and what was made there is removed
    afterwards."""
    key = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    lock = Path(tempfile.gettempdir()) / f"rio-golden-{key}.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if path.exists() and not path.is_symlink():
            pytest.skip(f"{path} is a directory on this machine: the golden Session needs it free")
        made = [p for p in [path, *path.parents] if not p.exists() and not p.is_symlink()]
        try:
            if link_to is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.symlink_to(link_to, target_is_directory=True)
            yield
        finally:
            if path.is_symlink():
                path.unlink()
            for directory in made[1:]:
                with contextlib.suppress(OSError):
                    directory.rmdir()


def restored_line(version: str) -> str:
    older = format_of(GOLDEN / version / "artifact" / "session.sqlite3")
    migrated = f" (Session format {older}, migrated to {SCHEMA_VERSION})"
    return f"restored generation 1 of rio-session-1{migrated if older < SCHEMA_VERSION else ''}"


def comment_job(repo: Repository, gh: FakeGitHub, issue: int, cwd: Path) -> Job:
    steer = gh.add_comment(issue, "carry on: the script wrote its side effect once", user="alice")
    with recorded_directory(cwd):
        return repo.job("issue_comment", commented(gh, steer))


# --- the artifact: restored from GitHub, continued by a job ------------------------------------


def start_from_golden(tmp_path: Path, gh: FakeGitHub, version: str) -> tuple[Repository, int]:
    """A repository whose issue 1 has the golden artifact as its only generation, uploaded
    by the run the golden files name; its jobs are later runs."""
    meta = json.loads((GOLDEN / version / "artifact-meta.json").read_text())
    repo = Repository(tmp_path, gh, first_job=meta["run_id"] - 1000 + 1)
    issue = gh.add_issue(meta["issue_title"], meta["issue_body"], labels=("rio",))
    assert issue == meta["issue"]
    gh.add_rio_run(meta["run_id"], event="issues")
    gh.add_artifact(f"rio-session-{issue}", golden_zip(version), run_id=meta["run_id"])
    # Two rounds were taken before the cut-off: the third resolves the UnknownExecution the
    # finish step recorded (citing the comment) and fixes; the fourth concludes.
    repo.set_script(
        script(WAIT, WAIT, [resolve_unknown("the log shows one run"), FIX], [conclude()])
    )
    return repo, issue


@pytest.mark.slow
@pytest.mark.people(alice="write")
@pytest.mark.parametrize("version", VERSIONS)
def test_an_artifact_of_an_earlier_release_is_restored_migrated_and_continued(
    tmp_path: Path, gh: FakeGitHub, version: str
) -> None:
    golden = GOLDEN / version / "artifact" / "session.sqlite3"
    meta = json.loads((GOLDEN / version / "artifact-meta.json").read_text())
    before = golden.read_bytes()
    repo, issue = start_from_golden(tmp_path, gh, version)

    job = comment_job(repo, gh, issue, Path(first_event(golden)["cwd"]))

    assert job.run.code == 0, job.logs
    assert job.finish.result["status"] == "succeeded", job.logs
    assert restored_line(version) in job.logs
    saved = repo.session_file(job)
    history = rows(golden)
    assert rows(saved)[: len(history)] == history  # the same history, not one event rewritten
    assert format_of(saved) == SCHEMA_VERSION
    events = repo.events(job)
    assert {e["kind"] for e in events[: len(history)]} == set(meta["kinds"])
    unknown = [
        e
        for e in events
        if e["kind"] == "execution_finished" and e["result"]["type"] == "UnknownExecution"
    ]
    (cut,) = {e["cell_id"] for e in unknown}
    started = [e for e in events if e["kind"] == "execution_started" and e["cell_id"] == cut]
    assert len(started) == 1  # never run again
    assert any(
        c.get("role") == "resolution" and c.get("target_cell_id") == cut
        for e in events
        if e["kind"] == "patch_accepted"
        for c in e.get("cells", [])
    )
    (pull,) = gh.pulls.values()  # the validators passed: the pull-request gate opened it
    assert pull["head"]["ref"] == f"rio/issue-{issue}"
    assert repo.branch_file(f"rio/issue-{issue}", "fixed.txt") == "ok"
    assert golden.read_bytes() == before


@pytest.mark.slow
@pytest.mark.people(alice="write")
def test_a_generation_from_a_newer_release_is_refused_and_the_previous_one_continued(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    version = VERSIONS[-1]
    golden = GOLDEN / version / "artifact" / "session.sqlite3"
    repo, issue = start_from_golden(tmp_path, gh, version)
    gh.add_rio_run(999, event="issue_comment")
    newer = newer_zip(version, tmp_path, 999)
    refused = gh.add_artifact(f"rio-session-{issue}", newer, "2024-02-01T00:00:00Z", run_id=999)

    job = comment_job(repo, gh, issue, Path(first_event(golden)["cwd"]))

    reason = (
        f"session.sqlite3 was written by a newer rio-ci (Session format {SCHEMA_VERSION + 1}; "
        f"this rio-ci {rio_ci.__version__} reads up to {SCHEMA_VERSION}): upgrade rio-ci"
    )
    assert job.finish.result["status"] == "succeeded", job.logs
    assert (
        f"generation 2 (artifact {refused}, 2024-02-01T00:00:00Z) rejected: snapshot refused: "
        in job.logs
    )
    assert reason in job.logs
    assert restored_line(version) in job.logs
    (comment,) = repo.progress_comments(issue)
    assert "Refused 1 saved generation(s) and continued from generation 1" in comment["body"]
    assert gh.blobs[refused] == newer  # nothing is written back
    assert not any((job.runner_temp / "rio" / "restore" / str(refused)).glob("*"))


@pytest.mark.slow
@pytest.mark.people(alice="write")
def test_a_session_only_a_newer_release_wrote_stops_the_job_with_both_versions_named(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    version = VERSIONS[-1]
    meta = json.loads((GOLDEN / version / "artifact-meta.json").read_text())
    repo = Repository(tmp_path, gh, first_job=meta["run_id"] - 1000 + 1)
    issue = gh.add_issue(meta["issue_title"], meta["issue_body"], labels=("rio",))
    gh.add_rio_run(meta["run_id"], event="issues")
    newer = newer_zip(version, tmp_path, meta["run_id"])
    gh.add_artifact(f"rio-session-{issue}", newer, run_id=meta["run_id"])
    repo.set_script(script(WAIT))
    steer = gh.add_comment(issue, "carry on", user="alice")

    job = repo.job("issue_comment", commented(gh, steer))

    assert job.run.result["status"] == "error"
    assert "every saved generation of rio-session-1 was refused" in job.run.result["reason"]
    assert (
        f"newer rio-ci (Session format {SCHEMA_VERSION + 1}; this rio-ci"
        in job.run.result["reason"]
    )
    (comment,) = repo.progress_comments(issue)
    assert "upgrade rio-ci" in comment["body"]
    assert job.artifact_id is None and list(gh.artifacts) == [min(gh.artifacts)]  # none published


# --- the local Session: continued by rio-ci run ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_a_local_session_of_an_earlier_release_is_migrated_and_continued(
    tmp_path: Path, version: str
) -> None:
    golden = GOLDEN / version / "local" / "session.sqlite3"
    before = golden.read_bytes()
    db = tmp_path / "s.db"
    shutil.copyfile(golden, db)
    history = rows(golden)
    accepted = sum(1 for r in history if r[1] == "patch_accepted")
    resolve = add(
        {
            "kind": "note",
            "text": "the comment says it ran once",
            "role": "resolution",
            "target_cell_id": "$unresolved",
            "evidence_refs": ["$delivered"],
        }
    )
    model = write_script(tmp_path, [*[[]] * accepted, [resolve, conclude()]])
    comment = json.dumps({"author": "alice", "body": "ran.log has one line: it ran once"})

    work = tmp_path / "work"
    work.mkdir()
    assert run_cli("receive", str(db), "comment:after", "comment", comment).returncode == 0
    with recorded_directory(Path(first_event(golden)["cwd"]), link_to=work):
        done = run_cli("run", str(db), "--model", f"scripted:{model}", timeout=120)

    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "succeeded"
    assert rows(db)[: len(history)] == history
    assert format_of(db) == SCHEMA_VERSION
    events = [json.loads(line) for line in run_cli("events", str(db)).stdout.splitlines()]
    unknown = [
        e
        for e in events
        if e["kind"] == "execution_finished" and e["result"]["type"] == "UnknownExecution"
    ]
    (cut,) = {e["cell_id"] for e in unknown}
    assert [e["cell_id"] for e in events if e["kind"] == "execution_started"].count(cut) == 1
    assert [e["result"] for e in events if e["kind"] == "run_ended"] == ["success"]
    assert golden.read_bytes() == before


# --- the sweep reads an earlier release's progress comment --------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sweep_reads_the_metadata_of_an_earlier_releases_progress_comment(version: str) -> None:
    """The sweep opens no Session (nothing there to migrate): it reads the progress comment's
    hidden line, whose keys it relies on are kept across releases."""
    body = (GOLDEN / version / "progress-comment.md").read_text()
    assert body.startswith(progress.MARKER)
    meta = progress.read_meta(body)
    assert meta is not None
    assert meta["ended"] is False and meta["next_wake"] is None and meta["generation"] == 1


# --- the next release's golden files ------------------------------------------------------------


@pytest.mark.slow
def test_the_generator_writes_both_stories_in_this_releases_format(tmp_path: Path) -> None:
    """tests/golden/make.py, as the release procedure runs it (docs/releasing.md)."""
    out = tmp_path / "golden" / rio_ci.__version__
    done = subprocess.run(
        [sys.executable, "-m", "tests.golden.make", str(out)],
        cwd=GOLDEN.parents[1],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for story in ("artifact", "local"):
        assert format_of(out / story / "session.sqlite3") == SCHEMA_VERSION
    meta = json.loads((out / "artifact-meta.json").read_text())
    assert {"image_stored", "execution_finished"} <= set(meta["kinds"])
    assert meta["rio_ci"] == rio_ci.__version__ and meta["session_format"] == SCHEMA_VERSION
    manifest = json.loads((out / "artifact" / "manifest.json").read_text())
    snapshot = (out / "artifact" / "session.sqlite3").read_bytes()
    assert manifest["sha256"] == hashlib.sha256(snapshot).hexdigest()  # as uploaded
    unknown = [r for r in rows(out / "artifact" / "session.sqlite3") if "UnknownExecution" in r[4]]
    assert unknown
    assert progress.read_meta((out / "progress-comment.md").read_text()) is not None
    again = subprocess.run(
        [sys.executable, "-m", "tests.golden.make", str(out)],
        cwd=GOLDEN.parents[1],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert again.returncode == 2 and "never rewritten" in again.stderr
