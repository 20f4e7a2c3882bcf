"""Pictures fit the provider's limits (docs/models.md "Pictures"): one picture's base64 form,
the number of pictures in a request and the request's whole size stay under what the
provider documents; a picture over a limit is left out with a note the model reads, and the
Turn succeeds. The RoundLoop runs in-process with the real SDK against ``FakeAnthropic``, which
answers as the API does: 400 for a picture over 5 MB once encoded or for more than 100
pictures, 413 for a body over 32 MB. Every picture here is stored straight into the Session,
as a release from before these checks could have stored it."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rio_ci.model.base import Picture
from rio_ci.model.claude import table
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.model.pictures import encoded_size, fit, megabytes, too_large
from rio_ci.reports.live import LiveLog
from rio_ci.rounds.loop import RoundLoop
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.fakes.anthropic_api import FakeAnthropic, ReceivedRequest
from tests.round_loop_kit import DONE, KEY, MODEL, patch

LIMITS = table.request_limits()
PNG = b"\x89PNG\r\n\x1a\n"


def blob(raw_bytes: int, seed: int = 0) -> bytes:
    """A "picture" of ``raw_bytes`` bytes: PNG's signature, then bytes that do not compress."""
    return PNG + hashlib.sha256(str(seed).encode()).digest() + os.urandom(raw_bytes - 40)


def keep(session: Session, data: bytes, alt: str) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    session.store_image(digest, "image/png", data)
    return {"digest": digest, "media_type": "image/png", "alt": alt}


def one_turn(
    tmp_path: Path, goal: Sequence[bytes], message: Sequence[bytes] = ()
) -> tuple[Any, ReceivedRequest]:
    """A Session whose goal (and one comment) carry these pictures; one Turn, answered with
    a success conclusion. Returns the outcome and the request the fake received."""
    db = tmp_path / "s.db"
    session = Session.create(db, "fix the colour", Settings(cwd=str(tmp_path)))
    try:
        refs = [keep(session, data, f"goal {n}") for n, data in enumerate(goal, start=1)]
        session.set_watermark("goal_images", refs)
        if message:
            shots = [keep(session, data, f"shot {n}") for n, data in enumerate(message, start=1)]
            payload = {"author": "alice", "body": "see", "untrusted": True, "images": shots}
            session.receive("comment:1", "comment", payload)
    finally:
        session.close()
    with FakeAnthropic() as fake:
        fake.reply_patch(patch(0, 1, DONE))
        owner = Owner(str(db))
        try:
            model = AnthropicModel(MODEL, api_key=KEY, base_url=fake.base_url)
            outcome = RoundLoop(owner, model, live=LiveLog(owner.session, io.StringIO())).run(
                time.monotonic() + 120
            )
        finally:
            owner.close()
        (request,) = fake.requests
    return outcome, request


# --- the rule, on its own ------------------------------------------------------------------------


def picture(owner: str, encoded: int, number: int) -> Picture:
    return Picture(owner, f"Picture {number}:", "image/png", "A" * encoded)


def test_a_picture_over_the_limit_once_encoded_is_left_out_whatever_the_room() -> None:
    raw = 4 * 2**20  # under 5 MB as bytes, over it in base64
    assert raw < LIMITS.picture_base64_bytes < encoded_size(raw)
    assert too_large(encoded_size(raw), LIMITS) == (
        "5.3 MB once encoded, over the provider's 5 MB limit for one picture"
    )
    assert too_large(LIMITS.picture_base64_bytes, LIMITS) is None
    (left,) = fit((picture("goal", encoded_size(raw), 1),), 10**9, LIMITS)
    assert left.data == "" and left.left_out.startswith("5.3 MB once encoded")
    assert megabytes(6_400_000) == "6.1 MB"


def test_the_goal_goes_first_then_the_newest_message_and_a_smaller_one_may_still_fit() -> None:
    mb = 2**20
    pictures = (
        picture("goal", 2 * mb, 1),
        picture("comment:1", 2 * mb, 2),  # the older message
        picture("comment:2", 3 * mb, 3),  # the newest message: before comment:1
        picture("comment:2", 1 * mb, 4),
    )
    room = 6 * mb + 3 * (2000)  # the goal's, the newest message's 3 MB, and 1 MB
    kept = fit(pictures, room, LIMITS)
    assert [bool(p.left_out) for p in kept] == [False, True, False, False]
    assert "still free in this request (the provider takes 32 MB at most)" in kept[1].left_out


def test_at_most_the_full_size_count_of_pictures_goes_in_one_request() -> None:
    pictures = tuple(picture(f"comment:{n}", 100, n) for n in range(1, 26))
    kept = fit(pictures, 10**9, LIMITS)
    assert LIMITS.pictures_at_full_size < LIMITS.pictures_per_request
    sent = [p for p in kept if not p.left_out]
    assert len(sent) == LIMITS.pictures_at_full_size
    # the newest messages' pictures went; the oldest were left out, each with the reason
    assert [p.owner for p in kept if p.left_out] == [f"comment:{n}" for n in range(1, 6)]
    assert kept[0].left_out == (
        f"the request already carries {LIMITS.pictures_at_full_size} pictures, the most it sends"
    )


# --- a Turn with the real SDK against the fake API ---------------------------------------------


def test_a_picture_of_4_mib_is_left_out_with_a_note_and_the_turn_succeeds(tmp_path: Path) -> None:
    small = blob(4000, seed=1)
    outcome, request = one_turn(tmp_path, [blob(4 * 2**20), small])

    assert outcome.status == "succeeded", outcome
    (sent,) = request.images  # the small one only
    assert sent["source"]["data"] == base64.b64encode(small).decode()
    assert (
        "Picture 1, from the goal (goal 1): [picture left out: 5.3 MB once encoded, over the "
        "provider's 5 MB limit for one picture]"
    ) in request.user_text
    assert "Picture 2, from the goal (goal 2):" in request.user_text


def test_more_pictures_than_the_provider_takes_are_left_out_beyond_the_count(
    tmp_path: Path,
) -> None:
    """101 pictures in one comment: the API refuses more than 100 in a request."""
    shots = [blob(100, seed=n) for n in range(LIMITS.pictures_per_request + 1)]
    outcome, request = one_turn(tmp_path, [], shots)

    assert outcome.status == "succeeded", outcome
    assert len(request.images) == LIMITS.pictures_at_full_size
    left = request.user_text.count("[picture left out: the request already carries")
    assert left == len(shots) - LIMITS.pictures_at_full_size


@pytest.mark.slow
def test_pictures_beyond_the_requests_size_are_left_out_and_the_turn_succeeds(
    tmp_path: Path,
) -> None:
    """Seven pictures each just under 5 MB once encoded: about 34 MB together, over the
    provider's 32 MB for a request. The goal's go first, then the comment's; what does not
    fit is left out with a note."""
    raw = LIMITS.picture_base64_bytes * 3 // 4 - 1000
    goal = [blob(raw, seed=n) for n in range(4)]
    comment = [blob(raw, seed=10 + n) for n in range(3)]
    assert 7 * encoded_size(raw) > LIMITS.request_bytes

    outcome, request = one_turn(tmp_path, goal, comment)

    assert outcome.status == "succeeded", outcome
    assert len(request.images) == 6
    assert request.user_text.count("[picture left out:") == 1
    assert "Picture 7, from message comment:1 (shot 3): [picture left out:" in request.user_text
    assert "still free in this request (the provider takes 32 MB at most)" in request.user_text
