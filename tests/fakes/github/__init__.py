"""A small stateful fake of the GitHub REST API, served over real HTTP on 127.0.0.1.

It answers the endpoints rio_ci's GitHubForge reaches through PyGithub, in the JSON shapes
PyGithub parses (every object carries its ``url`` so PyGithub never has to "complete" it with a
second request). State lives in plain dicts that tests fill through ``add_*`` helpers and read
back directly. Every request is recorded in ``requests`` (method, path, query, lower-cased
headers, body) so a test can check where the token went.

API paths require ``Authorization: token <token>``, ``Bearer <token>`` or HTTP basic with the
token as password (401 ``Bad credentials`` otherwise, or once the token is expired);
``/download/<id>`` stands for GitHub's pre-signed blob URL and requires nothing. A token made
with ``add_token(permissions=...)`` is held to them as a job token is (403 ``Resource not
accessible by integration``). Lists come back as one page without a Link header unless the
request names ``per_page`` or ``page``; then they are paged with GitHub's Link header.

What real GitHub does that tests can switch on (see tests/forge/test_fake_github.py):
- ``fail(pattern, status, method=, times=, after=)``: answer matching requests with an error
  (a 403 for check runs, a 5xx outage, a 401 from some moment on); ``expire_token()``;
- ``add_user(login, role, member=)``: the collaborator-permission table, where the legacy
  ``permission`` maps ``maintain`` to ``write`` and ``triage`` to ``read`` and ``role_name``
  keeps the role, and comments carry the ``author_association`` GitHub would give;
- workflows with a state: ``PUT .../enable|disable``, and a dispatch to a disabled workflow is
  refused (422); ``POST /repos/{o}/{r}/dispatches`` records a ``repository_dispatch``;
- artifacts with ``retention_days`` and ``expires_at`` (``upload_artifact`` zips a directory
  as actions/upload-artifact does); a download of an expired one answers 410 Gone
  (``expire_artifact(id, listed=False)``: the listing has not caught up yet);
  ``DELETE .../actions/artifacts/{id}`` needs ``actions: write`` (``deleted`` lists them);
- workflow runs with ``path``, ``event``, ``repository`` and ``head_repository``
  (``GET .../actions/runs/{id}``), and every artifact's ``workflow_run`` names its run's
  repository ids: ``add_rio_run(id)`` is one of rio's own jobs (an upload naming an unknown
  run makes one), ``add_foreign_run("fork" | "target" | "workflow")`` a run whose artifacts
  rio must never restore;
- ``serve_git(origin)``: the bare repository over smart HTTP at ``git_url``, with GitHub's
  push refusals (tests/fakes/git_origin.py);
- pictures in issues and comments: ``attachments[id] = (bytes, content_type)`` served at
  ``/user-attachments/assets/<id>`` to a valid token only (a private repository's), and
  ``attachment_redirects[id] = location`` (GitHub's redirect to a signed store URL);
- reviews: ``add_review(pull, user, state, body, comments)`` and ``add_review_comment`` (a
  lone inline comment, which GitHub wraps in a COMMENTED review of its own), listed by
  ``GET .../pulls/{n}/reviews``, ``.../pulls/{n}/comments`` and
  ``.../pulls/{n}/reviews/{id}/comments`` (the last in GitHub's older shape, without
  ``line`` and ``side``);
- conditional requests: every 200 to a GET carries an ``ETag``, and a GET whose
  ``If-None-Match`` names the current one is answered 304 (recorded in ``not_modified``);
  issues and pull requests carry their comment counts, so a new comment changes the ETag;
- the rate limit, counted as GitHub counts it (``rio_ci/commands/bench/rate_limit.py``,
  shared with the bench's loopback GitHub): ``counted`` lists every API request but a 304
  and the blob downloads; every answer carries the ``x-ratelimit-*`` headers; a spent budget
  (``rate.limit``) is refused 403; ``limit_rate(pattern, times=, status=, retry_after=,
  reset_in=)`` answers as a secondary (``retry-after``) or primary
  (``x-ratelimit-remaining: 0``, ``x-ratelimit-reset``) limit does;
- ``set_retention(days)``: the repository's artifact retention setting;
- each issue's timeline, ``GET .../issues/{n}/timeline`` in GitHub's shape
  (``labeled``/``unlabeled`` with ``label``, ``assigned``/``unassigned`` with ``assignee``,
  ``actor`` who did it; and ``commented``, one per comment): ``add_issue(labels=)`` records
  its author, ``add_label(n, name, by=)`` (default: the bot, as a ``POST .../labels`` does),
  ``remove_label``, ``assign(n, login, by=)``;
- ``POST .../issues/{n}/labels``; ``merge_pull(n)``; ``observers``: callables that see
  every request before it is answered (what was on disk at a client's first call).
"""

from __future__ import annotations

from fakes.github.base import Failure, Recorded, Token
from fakes.github.server import FakeGitHub

__all__ = ["Failure", "FakeGitHub", "Recorded", "Token"]
