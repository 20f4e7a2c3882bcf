"""Reviews and "has anything changed?" on GitHub, through PyGithub (used by ``GitHubForge``).

- ``submitted_reviews``: a pull request's submitted reviews with their inline comments. The
  comments come from the pull request's review-comment listing, grouped by
  ``pull_request_review_id``: one request for all reviews, and that listing carries ``line``
  and ``side``, which the per-review endpoint leaves out (docs/github.md "Reviews").
- ``News``: conditional GETs (``If-None-Match`` with the last ETag) of what a new comment or
  review changes. GitHub answers 304 for an unchanged resource and does not count it
  against the rate limit (docs/github.md "Steering a running job").

PyGithub and network failures propagate; ``GitHubForge`` turns them into ``ForgeError``.
"""

from __future__ import annotations

from github.PullRequest import PullRequest
from github.PullRequestComment import PullRequestComment
from github.Requester import Requester

from rio_ci.core.errors import ForgeError
from rio_ci.forge.base import Review, ReviewComment


def submitted_reviews(pull: PullRequest) -> list[Review]:
    """Submitted reviews, oldest first (GitHub lists them so), each with its comments."""
    grouped: dict[int, list[ReviewComment]] = {}
    for comment in pull.get_review_comments():
        item = review_comment(comment)
        grouped.setdefault(item.review_id or 0, []).append(item)
    return [
        Review(
            id=review.id,
            author=review.user.login if review.user else "",
            association=review.author_association or "NONE",
            state=review.state or "",
            body=review.body or "",
            url=review.html_url or "",
            comments=tuple(sorted(grouped.get(review.id, []), key=lambda c: c.id)),
        )
        for review in pull.get_reviews()
        if (review.state or "PENDING") != "PENDING"  # its author's alone
    ]


def review_comment(comment: PullRequestComment) -> ReviewComment:
    return ReviewComment(
        id=comment.id,
        review_id=comment.pull_request_review_id,
        author=comment.user.login if comment.user else "",
        association=comment.author_association or "NONE",
        path=comment.path or "",
        line=comment.line,
        side=comment.side or "RIGHT",
        diff_hunk=comment.diff_hunk or "",
        body=comment.body or "",
        url=comment.html_url or "",
    )


class News:
    """Remembers each URL's last ETag; ``changed`` asks again with it."""

    def __init__(self, requester: Requester, repo_url: str) -> None:
        self.requester, self.repo_url = requester, repo_url
        self.etags: dict[str, str] = {}

    def changed(self, number: int, *, pull: bool = False) -> bool:
        """The issue (its comment count changes with each comment) or the pull request (its
        comment and inline-comment counts) and its reviews; True if any answer was new."""
        urls = (
            [
                f"{self.repo_url}/pulls/{number}",
                f"{self.repo_url}/pulls/{number}/reviews?per_page=100",
            ]
            if pull
            else [f"{self.repo_url}/issues/{number}"]
        )
        changed = False
        for url in urls:  # every one, so each keeps its ETag fresh
            changed = self._look(url) or changed
        return changed

    def _look(self, url: str) -> bool:
        known = self.etags.get(url)
        # requestJson answers with the status instead of raising: a 304 is not an error.
        status, headers, _ = self.requester.requestJson(
            "GET", url, headers={"If-None-Match": known} if known else None
        )
        if status == 304:
            return False
        if status >= 400:
            raise ForgeError(f"GitHub: looking at {url} failed: HTTP {status}", status=status)
        if headers.get("etag"):
            self.etags[url] = headers["etag"]
        return True
