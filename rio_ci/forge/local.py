"""The local directory forge (docs/concepts.md: the code host seen through one interface; a local
directory is the default where there is no GitHub). Issues, comments, labels and pull
requests live in one JSON file, ``forge.json``, in a directory; every write replaces the file
whole (written beside it, then renamed), so a reader never sees half of one.

It has what a code host has without a network: no check runs, no workflows, no artifacts
(a local Session is its own file). ``rio-ci demo`` files its issue here, and the progress
comment and the pull request of its run land here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rio_ci.core.errors import ForgeError
from rio_ci.forge import page
from rio_ci.forge.base import (
    Artifact,
    Check,
    Comment,
    Forge,
    Issue,
    IssueEvent,
    Review,
    WorkflowRun,
)

FILE = "forge.json"
T = TypeVar("T")


class LocalForge:
    """A Forge (``rio_ci.forge.base``) kept in ``root/forge.json``."""

    def __init__(self, root: Path):
        self.root = root
        self.path = root / FILE
        if not self.path.is_file():
            raise ForgeError(f"{root} is not a local forge (no {FILE}); create one first")

    @classmethod
    def create(
        cls,
        root: Path,
        repository: str,
        *,
        people: dict[str, str] | None = None,
        default_branch: str = "main",
    ) -> LocalForge:
        """A new, empty forge in ``root`` (made if missing); ``people``: login -> permission."""
        root.mkdir(parents=True, exist_ok=True)
        if (root / FILE).exists():
            raise ForgeError(f"{root} already holds a forge")
        _write(
            root / FILE,
            {
                "repository": repository,
                "default_branch": default_branch,
                "next_id": 1,
                "people": people or {},
                "issues": {},
                "comments": [],
                "pulls": {},
                "dispatches": [],
            },
        )
        return cls(root)

    # -- what only a local forge does ----------------------------------------------------

    def add_issue(self, title: str, body: str, author: str, labels: tuple[str, ...] = ()) -> Issue:
        def change(data: dict[str, Any]) -> int:
            number = _take_id(data)
            data["issues"][str(number)] = {
                "number": number,
                "title": title,
                "body": body,
                "author": author,
                "labels": list(labels),
            }
            return number

        return self.issue(self._update(change))

    def pull_requests(self) -> list[dict[str, Any]]:
        return list(self._read()["pulls"].values())

    # -- the Forge protocol --------------------------------------------------------------

    def issue(self, number: int) -> Issue:
        found = self._read()["issues"].get(str(number))
        if found is None:
            raise ForgeError(f"issue #{number} does not exist in {self.path}", status=404)
        return Issue(
            found["number"], found["title"], found["body"], found["author"], tuple(found["labels"])
        )

    def permission(self, user: str) -> str:
        return str(self._read()["people"].get(user, "none"))

    def issue_timeline(self, number: int) -> list[IssueEvent]:
        """Only the comments: no history of labels is kept (so no one is known to have
        labelled an issue)."""
        return [
            IssueEvent(c.id, "commented", c.author, c.body, "", "") for c in self.comments(number)
        ]

    def comments(self, number: int, after_id: int = 0) -> list[Comment]:
        return [
            _comment(c)
            for c in self._read()["comments"]
            if c["issue"] == number and c["id"] > after_id
        ]

    def reviews(self, pull: int) -> list[Review]:
        return []  # the local forge has no code review

    def changed(self, number: int, *, pull: bool = False) -> bool:
        return True  # a file read costs nothing: every look is a full one

    def upsert_comment(self, number: int, marker: str, body: str) -> int:
        if marker not in body:
            raise ValueError("the comment body must carry its marker")

        def change(data: dict[str, Any]) -> int:
            for comment in data["comments"]:
                if comment["issue"] == number and marker in comment["body"]:
                    comment["body"] = body
                    return int(comment["id"])
            return _add_comment(data, number, "rio-ci[bot]", "NONE", body, self.root)

        return self._update(change)

    def checks(
        self,
        branch: str,
        after_id: int = 0,
        warn: Callable[[str], None] | None = None,
        head: str | None = None,
    ) -> list[Check]:
        return []  # nothing runs CI here

    def open_pull_request(self, branch: str, base: str, title: str, body: str) -> str:
        def change(data: dict[str, Any]) -> str:
            for pull in data["pulls"].values():
                if pull["head"] == branch and pull["state"] == "open":
                    return str(pull["url"])
            number = _take_id(data)
            url = (self.root / "pull" / f"{number}.html").as_uri()  # written by _pages
            data["pulls"][str(number)] = {
                "number": number,
                "head": branch,
                "base": base,
                "title": title,
                "body": body,
                "state": "open",
                "url": url,
            }
            return url

        return self._update(change)

    def default_branch(self) -> str:
        return str(self._read()["default_branch"])

    def artifacts(self, name: str) -> list[Artifact]:
        return []  # a local Session is its own file

    def download_artifact(self, artifact_id: int, dest: Path) -> Path:
        raise ForgeError(f"a local forge keeps no artifacts (asked for {artifact_id})", status=404)

    def delete_artifact(self, artifact_id: int) -> bool:
        return False  # none kept, so none to delete

    def repository_id(self) -> int | None:
        return None  # no artifacts, so nothing to prove the origin of

    def workflow_run(self, run_id: int) -> WorkflowRun | None:
        return None

    def issues_with_label(self, label: str) -> list[Issue]:
        return [
            self.issue(int(n))
            for n, found in self._read()["issues"].items()
            if label in found["labels"]
        ]

    def find_comment(self, number: int, marker: str) -> Comment | None:
        return next((c for c in self.comments(number) if marker in c.body), None)

    def pull_head(self, number: int) -> str | None:
        pull = self._read()["pulls"].get(str(number))
        return None if pull is None else str(pull["head"])

    def dispatch(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        self._update(
            lambda data: data["dispatches"].append(
                {"workflow": workflow, "ref": ref, "inputs": inputs}
            )
        )

    def workflow_state(self, workflow: str) -> str | None:
        return None  # no workflows here

    def repository_dispatch(self, event_type: str) -> None:
        self._update(lambda data: data["dispatches"].append({"event_type": event_type}))

    def react(self, number: int, comment_id: int, content: str) -> None:
        def change(data: dict[str, Any]) -> None:
            left = data.setdefault("reactions", {}).setdefault(str(comment_id), [])
            if content not in left:
                left.append(content)

        self._update(change)

    def add_label(self, number: int, label: str) -> None:
        self.issue(number)  # a missing issue is a ForgeError, as on a real host

        def change(data: dict[str, Any]) -> None:
            labels = data["issues"][str(number)]["labels"]
            if label not in labels:
                labels.append(label)

        self._update(change)

    # -- the file --------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise ForgeError(f"cannot read the local forge {self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise ForgeError(f"{self.path} is not a local forge")
        return data

    def _update(self, change: Callable[[dict[str, Any]], T]) -> T:
        data = self._read()
        result = change(data)
        _write(self.path, data)
        _pages(self.root, data)
        return result


def _take_id(data: dict[str, Any]) -> int:
    """Issues, pull requests and comments share one sequence of numbers, as on GitHub."""
    number = int(data["next_id"])
    data["next_id"] = number + 1
    return number


def _add_comment(
    data: dict[str, Any], number: int, author: str, association: str, body: str, root: Path
) -> int:
    comment_id = _take_id(data)
    data["comments"].append(
        {
            "id": comment_id,
            "issue": number,
            "author": author,
            "association": association,
            "body": body,
            "url": f"{root.as_uri()}/issues/{number}.html#comment-{comment_id}",
        }
    )
    return comment_id


def _comment(data: dict[str, Any]) -> Comment:
    return Comment(
        data["id"], data["issue"], data["author"], data["association"], data["body"], data["url"]
    )


def _pages(root: Path, data: dict[str, Any]) -> None:
    """Every issue and pull request as a page a browser opens, rendered as a code host shows
    it (``rio_ci.forge.page``): ``root/issues/<n>.html`` (the issue, then its comments,
    each at ``#comment-<id>``) and ``root/pull/<n>.html``."""
    for folder in ("issues", "pull"):
        (root / folder).mkdir(exist_ok=True)
    for key, issue in data["issues"].items():
        sections = [("issue", f"{issue['author']} opened", str(issue["body"]))]
        sections += [
            (f"comment-{c['id']}", f"{c['author']} commented", str(c["body"]))
            for c in data["comments"]
            if str(c["issue"]) == key
        ]
        title = f"#{key} {issue['title']}"
        (root / "issues" / f"{key}.html").write_text(page.page(title, sections))
    for key, pull in data["pulls"].items():
        caption = f"{pull['head']} → {pull['base']} (a pull request of the local forge)"
        text = page.page(f"#{key} {pull['title']}", [("description", caption, str(pull["body"]))])
        (root / "pull" / f"{key}.html").write_text(text)


def _write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(partial, path)


if TYPE_CHECKING:
    _IS_A_FORGE: type[Forge] = LocalForge  # mypy checks the protocol here
