"""Which pictures one request can carry (docs/models.md "Pictures").

The provider's limits (``RequestLimits``, from its row of the providers table: Claude's are
``request_limits`` in rio_ci/model/claude/models.json) apply to what is sent: one picture's
base64 data, the number of pictures in a request, and the size of the whole request body. A
picture over a limit is left out of that request, and the model reads a note in its place
("[picture left out: 6.1 MB once encoded, over the provider's 5 MB limit for one picture]"):
a Turn never fails because of a picture.

Which pictures go when not all fit: the goal's first, in order (they sit in the cached
prefix, so keeping them keeps that prefix the same from round to round), then the Inbox
messages' pictures, newest message first (the newest is what the Turn most likely answers),
each in order while the count and the room allow; a picture that does not fit is left out
and a smaller one after it may still go. At most ``pictures_at_full_size`` pictures go in a
request, below the documented most: above that many the provider takes each picture only up
to 2000x2000 px, and a screenshot is often wider.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rio_ci.model.base import Picture

__all__ = ["BLOCK_BYTES", "RequestLimits", "encoded_size", "fit", "megabytes", "too_large"]

BLOCK_BYTES = 200  # the JSON around one picture's data: its image block and label block


@dataclass(frozen=True)
class RequestLimits:
    """What one request may carry: one picture's base64 size, pictures per request (the
    documented most, and how many keep the full-size dimension limit), and the whole body's
    size, in bytes."""

    picture_base64_bytes: int
    pictures_per_request: int
    pictures_at_full_size: int
    request_bytes: int


def encoded_size(raw: int) -> int:
    """The length of ``raw`` bytes in base64."""
    return 4 * ((raw + 2) // 3)


def megabytes(size: int) -> str:
    """``size`` bytes as the provider counts MB (2**20 bytes): "5 MB", "6.1 MB"."""
    return f"{size / 2**20:.1f}".removesuffix(".0") + " MB"


def too_large(encoded: int, limits: RequestLimits) -> str | None:
    """Why a picture of ``encoded`` base64 bytes may not go in any request, or None."""
    if encoded <= limits.picture_base64_bytes:
        return None
    return (
        f"{megabytes(encoded)} once encoded, over the provider's "
        f"{megabytes(limits.picture_base64_bytes)} limit for one picture"
    )


def fit(pictures: tuple[Picture, ...], room: int, limits: RequestLimits) -> tuple[Picture, ...]:
    """``pictures`` in their order, each one that may not go marked ``left_out``, so that the
    rest keep within the count and within ``room`` bytes (the request's size less everything
    but the pictures)."""
    most = min(limits.pictures_per_request, limits.pictures_at_full_size)
    reasons: dict[int, str] = {}
    count = 0
    for index in _priority(pictures):
        size = len(pictures[index].data) + len(pictures[index].label) + BLOCK_BYTES
        reason = too_large(len(pictures[index].data), limits)
        if reason is None and count >= most:
            reason = f"the request already carries {most} pictures, the most it sends"
        elif reason is None and size > room:
            reason = (  # the provider's 32 MB is decimal: 32,000,000 bytes
                f"{megabytes(size)} once encoded, more than the {megabytes(max(room, 0))} "
                f"still free in this request (the provider takes "
                f"{limits.request_bytes / 10**6:g} MB at most)"
            )
        if reason is not None:
            reasons[index] = reason
            continue
        count, room = count + 1, room - size
    return tuple(
        replace(p, data="", left_out=reasons[i]) if i in reasons else p
        for i, p in enumerate(pictures)
    )


def _priority(pictures: tuple[Picture, ...]) -> list[int]:
    """Indexes in the order pictures claim room: the goal's, then each message's, newest
    message first (Inbox order is oldest first), each message's pictures in order."""
    goal = [i for i, p in enumerate(pictures) if p.owner == "goal"]
    owners: list[str] = []
    for picture in pictures:
        if picture.owner != "goal" and picture.owner not in owners:
            owners.append(picture.owner)
    newest_first = [
        i for owner in reversed(owners) for i, p in enumerate(pictures) if p.owner == owner
    ]
    return goal + newest_first
