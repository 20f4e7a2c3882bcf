"""The local directory forge (docs/concepts.md): the Forge interface over one JSON file, as the demo
uses it — issues, labels, comments edited in place, one pull request per branch."""

from __future__ import annotations

from pathlib import Path

import pytest

from rio_ci.core.errors import ForgeError
from rio_ci.forge.local import FILE, LocalForge

MARKER = "<!-- rio-ci:progress -->"


def test_a_forge_keeps_issues_comments_and_one_pull_request_per_branch(tmp_path: Path) -> None:
    forge = LocalForge.create(tmp_path / "forge", "local/demo", people={"ann": "admin"})
    issue = forge.add_issue("Broken", "it fails", "ann", labels=("rio",))
    other = forge.add_issue("Unrelated", "", "bob")
    assert forge.issue(issue.number) == issue and issue.labels == ("rio",)
    assert [i.number for i in forge.issues_with_label("rio")] == [issue.number]
    forge.add_label(other.number, "rio")
    assert [i.number for i in forge.issues_with_label("rio")] == [issue.number, other.number]
    assert (forge.permission("ann"), forge.permission("bob")) == ("admin", "none")

    first = forge.upsert_comment(issue.number, MARKER, f"{MARKER}\nrunning")
    again = forge.upsert_comment(issue.number, MARKER, f"{MARKER}\nsucceeded")
    assert first == again  # edited in place, never a second comment
    (comment,) = forge.comments(issue.number)
    assert comment.body.endswith("succeeded") and comment.author == "rio-ci[bot]"
    assert forge.comments(issue.number, after_id=comment.id) == []
    assert forge.find_comment(issue.number, MARKER) == comment

    url = forge.open_pull_request("rio/issue-1", forge.default_branch(), "Fixes #1", "Fixes #1")
    assert forge.open_pull_request("rio/issue-1", "main", "again", "again") == url
    (pull,) = forge.pull_requests()
    assert (
        url.endswith(f"/pull/{pull['number']}.html")
        and forge.pull_head(pull["number"]) == "rio/issue-1"
    )
    # The link opens something: a page holding the pull request, its body escaped.
    page = Path(url.removeprefix("file://")).read_text()
    assert "<title>#" in page and "Fixes #1" in page
    assert forge.pull_head(issue.number) is None  # an issue is not a pull request
    # What a local host cannot have: no checks, no artifacts, no workflows.
    assert forge.checks("rio/issue-1") == [] and forge.artifacts("rio-session-1") == []
    assert forge.workflow_state("rio.yml") is None
    # Everything is in the file: a new handle on the directory sees it all.
    reopened = LocalForge(tmp_path / "forge")
    assert reopened.comments(issue.number) == [comment]
    assert reopened.pull_requests() == [pull]


def test_a_missing_or_broken_forge_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ForgeError, match="is not a local forge"):
        LocalForge(tmp_path)
    forge = LocalForge.create(tmp_path / "f", "local/x")
    with pytest.raises(ForgeError, match="already holds a forge"):
        LocalForge.create(tmp_path / "f", "local/x")
    with pytest.raises(ForgeError, match="does not exist") as missing:
        forge.issue(7)
    assert missing.value.status == 404
    (tmp_path / "f" / FILE).write_text("{not json")
    with pytest.raises(ForgeError, match="cannot read the local forge"):
        forge.issue(1)
