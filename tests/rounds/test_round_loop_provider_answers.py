"""What ``rio-ci run`` does with the provider's final answers and refusals (docs/models.md): a
spend limit ends the run at once, a refusal goes to the fallback model, a retired id fails
before any request.
Real ``rio-ci run`` subprocesses, the real SDK, the strict fake Messages API."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from rio_ci.model.environment_block import ENVIRONMENT_HEADER
from tests.kit import events, run_cli
from tests.round_loop_kit import DONE, MODEL, UNPRICED, WatchedFake, kinds, patch
from tests.run_cli import new_session, status

pytestmark = pytest.mark.slow

FALLBACK = "claude-opus-5-5"


def test_a_spend_limit_429_ends_the_run_at_once_with_one_request(tmp_path: Path) -> None:
    db = new_session(tmp_path, "provider_retry_seconds=900")
    with WatchedFake(db) as fake:
        fake.spend_limited()
        fake.reply_patch(patch(0, 1, DONE))  # would be taken by a retry
        done = fake.run()
        # A retry would have taken the reply waiting in the fake: none was made.
        assert len(fake.requests) == 1 and fake.pending == 1
    assert done.returncode == 1 and status(done.stdout)["status"] == "failed"
    (failure,) = fake.responses()
    assert failure["transient"] is False and failure["not_before"] == 0.0
    reason = kinds(events(db), "run_ended")[0]["reason"]
    assert "enforced_spend_limit_reached" in reason and "regain access" in reason
    assert "final, not retried" in done.stderr
    # Within a second of the answer, by the Session's own clock: the failure and the run's
    # end are committed back to back (a retry would first wait its backoff, 1 s or more).
    (ended,) = kinds(events(db), "run_ended")
    assert ended["at"] - failure["at"] < 1.0


def test_a_refusal_sends_the_next_attempt_to_the_fallback_model(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        fake.refusal("cyber")
        fake.reply_patch(patch(0, 1, DONE), text="Done, by the fallback.")
        done = fake.run("--fallback-model", FALLBACK)
        asked = [r.model for r in fake.requests]
    assert done.returncode == 0, done.stdout + done.stderr
    assert asked == [MODEL, FALLBACK]
    attempts = kinds(events(db), "model_attempt")
    assert [a["model"] for a in attempts] == [f"anthropic:{MODEL}", f"anthropic:{FALLBACK}"]
    assert "fallback_from" not in attempts[0]
    assert attempts[1]["fallback_from"] == f"anthropic:{MODEL}"
    assert f"goes to anthropic:{FALLBACK} (fallback for anthropic:{MODEL})" in done.stderr
    shown = run_cli("show", str(db))
    assert f"went to anthropic:{FALLBACK} (fallback for anthropic:{MODEL})" in shown.stdout
    # the fallback's reply is priced at its own table price
    replies = kinds(events(db), "model_response")
    assert replies[1]["usage"]["cost_usd"] > replies[0]["usage"]["cost_usd"] > 0


def test_without_a_fallback_a_refusal_is_asked_again_of_the_same_model(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        fake.refusal("cyber")
        fake.reply_patch(patch(0, 1, DONE))
        started = time.time()
        done = fake.run()
        asked = [r.model for r in fake.requests]
        texts = [r.user_text for r in fake.requests]
    assert done.returncode == 0 and asked == [MODEL, MODEL]
    # every request says where the model is, at the time it was sent
    for text in texts:
        block = text[text.index(ENVIRONMENT_HEADER) :]
        unix = int(re.search(r"unix time: (\d+)", block).group(1))  # type: ignore[union-attr]
        assert started - 1 <= unix <= time.time()
        assert f"working directory: {tmp_path}" in block and "git status --short:" in block


def test_an_unpriced_fallback_refuses_to_start(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    before = events(db)
    with WatchedFake(db) as fake:
        done = fake.run("--fallback-model", UNPRICED)
        assert fake.requests == []
    assert done.returncode == 2
    error = status(done.stdout)["error"]
    assert error.startswith("--fallback-model:") and f"anthropic:{UNPRICED}" in error
    assert events(db) == before


def test_a_retired_model_fails_before_any_request_naming_its_replacement(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    before = events(db)
    with WatchedFake(db) as fake:
        done = fake.run(model="claude-opus-4-1")
        assert fake.requests == []
    assert done.returncode == 2
    error = status(done.stdout)["error"]
    assert "claude-opus-4-1 was retired on 2026-08-05; use claude-opus-5-5" in error
    assert "--price" not in error and events(db) == before


def test_the_switch_to_the_fallback_survives_a_crash_after_the_refusal(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        fake.refusal("cyber")
        first = fake.run("--fallback-model", FALLBACK, crash_at="reply_before_admit")
        assert first.returncode != 0  # killed right after the refusal was committed
        fake.reply_patch(patch(0, 1, DONE))
        second = fake.run("--fallback-model", FALLBACK)
        asked = [r.model for r in fake.requests]
    assert second.returncode == 0, second.stdout + second.stderr
    assert asked == [MODEL, FALLBACK]  # the restarted run knew the Turn had a refusal
    attempts = kinds(events(db), "model_attempt")
    assert attempts[-1]["fallback_from"] == f"anthropic:{MODEL}"
