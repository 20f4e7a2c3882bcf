"""The GitHub job's state (``job.json``, rio_ci/github/job_state.py): written whole and read
back as it was; a file that is not what the run step writes is refused in one line naming
what is wrong, and nothing is changed; the run step's early results keep their shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rio_ci.core.errors import RioError
from rio_ci.github.contract import JOB_FILE
from rio_ci.github.job_state import Exit, JobState, read_job, write_job

JOB: JobState = {
    "generation": 3,
    "artifact_id": 41,
    "seen": [40, 41],
    "saved_at": "2026-01-02T03:04:05Z",
    "rejected": [],
    "record_after": 17,
    "notes": [],
    "record_imported": 0,
    "issue": 7,
    "db": "/tmp/rio/session.sqlite3",
    "started": 1.7e9,
    "artifact_name": "rio-session-7",
    "retention_days": 90,
    "ci_workflow": None,
    "keep_generations": 5,
    "fresh": False,
    "start": "0123abcd",
    "branch_head": "",
}


def test_the_state_reads_back_as_written(tmp_path: Path) -> None:
    write_job(tmp_path, JOB)
    assert read_job(tmp_path) == JOB
    assert not (tmp_path / JOB_FILE).with_suffix(".partial").exists()
    fenced: JobState = {**JOB, "fenced": True, "outcome": None, "record_imported": True}
    write_job(tmp_path, fenced)
    assert read_job(tmp_path) == fenced


def test_a_key_the_state_does_not_declare_is_kept(tmp_path: Path) -> None:
    (tmp_path / JOB_FILE).write_text(json.dumps({**JOB, "remote": "elsewhere"}))
    assert dict(read_job(tmp_path))["remote"] == "elsewhere"


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in JOB.items() if k != key}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([JOB], "the file is not a JSON object"),
        (without("issue"), "issue is missing"),
        ({**JOB, "issue": "7"}, "issue is not int"),
        ({**JOB, "issue": True}, "issue is not int"),
        ({**JOB, "generation": None}, "generation is not int"),
        ({**JOB, "seen": [40, "41"]}, "seen is not int"),
        ({**JOB, "seen": 41}, "seen is not a list"),
        ({**JOB, "ci_workflow": 1}, "ci_workflow is not str"),
        ({**JOB, "started": "now"}, "started is not float"),
        ({**JOB, "fenced": "yes"}, "fenced is not bool"),
    ],
)
def test_a_malformed_state_is_refused_in_one_line(tmp_path: Path, data: Any, expected: str) -> None:
    path = tmp_path / JOB_FILE
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    with pytest.raises(RioError) as caught:
        read_job(tmp_path)
    message = str(caught.value)
    assert message.endswith(expected) and "\n" not in message
    assert str(path) in message
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"", b"{", b'{"issue": "\xff"}'])
def test_a_state_that_is_not_json_is_refused_in_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / JOB_FILE).write_bytes(content)
    with pytest.raises(RioError, match="cannot be read as the job's state") as caught:
        read_job(tmp_path)
    assert "\n" not in str(caught.value)


def test_no_state_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RioError, match="cannot be read as the job's state"):
        read_job(tmp_path)


def test_an_early_exit_keeps_the_step_results_shapes() -> None:
    assert Exit("ignored", "label by a user without write access").to_dict() == {
        "status": "ignored",
        "reason": "label by a user without write access",
    }
    ended = Exit("ignored", "the run has ended (success); nothing new", issue=7, session="s1")
    assert list(ended.to_dict().items()) == [
        ("status", "ignored"),
        ("session", "s1"),
        ("issue", 7),
        ("reason", "the run has ended (success); nothing new"),
    ]
