"""A pull request's submitted reviews with their inline comments, read from GitHub's JSON
(used by ``GitHubForge``).

The comments come from the pull request's review-comment listing
(``GET .../pulls/{n}/comments``), grouped by ``pull_request_review_id``: one listing for
all reviews, and it carries ``line`` and ``side``, which the per-review endpoint leaves out
(docs/github.md "Reviews"). A field that is missing or of the wrong type reads as empty.
"""

from __future__ import annotations

from typing import Any

from rio_ci.forge.base import Review, ReviewComment
from rio_ci.forge.github_runs import int_or_none


def _text(raw: dict[str, Any], key: str, default: str = "") -> str:
    value = raw.get(key)
    return value if isinstance(value, str) else default


def _login(raw: dict[str, Any]) -> str:
    user = raw.get("user")
    return _text(user, "login") if isinstance(user, dict) else ""


def submitted_reviews(reviews: list[Any], inline: list[Any]) -> list[Review]:
    """The submitted ``reviews`` (GitHub lists them oldest first), each with its comments
    from ``inline``; a pending review is its author's alone and left out."""
    grouped: dict[int, list[ReviewComment]] = {}
    for raw in inline:
        if isinstance(raw, dict) and int_or_none(raw.get("id")) is not None:
            item = review_comment(raw)
            grouped.setdefault(item.review_id or 0, []).append(item)
    return [
        Review(
            id=int(raw["id"]),
            author=_login(raw),
            association=_text(raw, "author_association", "NONE"),
            state=_text(raw, "state"),
            body=_text(raw, "body"),
            url=_text(raw, "html_url"),
            comments=tuple(sorted(grouped.get(int(raw["id"]), []), key=lambda c: c.id)),
        )
        for raw in reviews
        if isinstance(raw, dict)
        and int_or_none(raw.get("id")) is not None
        and (_text(raw, "state") or "PENDING") != "PENDING"
    ]


def review_comment(raw: dict[str, Any]) -> ReviewComment:
    return ReviewComment(
        id=int(raw["id"]),
        review_id=int_or_none(raw.get("pull_request_review_id")),
        author=_login(raw),
        association=_text(raw, "author_association", "NONE"),
        path=_text(raw, "path"),
        line=int_or_none(raw.get("line")),
        side=_text(raw, "side", "RIGHT"),
        diff_hunk=_text(raw, "diff_hunk"),
        body=_text(raw, "body"),
        url=_text(raw, "html_url"),
    )
