"""The REST endpoints the fake answers, in the JSON shapes PyGithub parses."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable

from fakes.github.base import Json, Recorded, Reply, not_found
from fakes.github.data import GitHubData


class Endpoints(GitHubData):
    """One handler per endpoint; ``_routes`` maps (method, path regex) to them."""

    def _repo_json(self, _: Recorded, __: re.Match[str]) -> Reply:
        return (
            200,
            {
                "id": 1,
                "name": self.name,
                "full_name": self.repo,
                "owner": self._user(self.owner),
                "private": False,
                "default_branch": self.default_branch,
                "url": self._base,
                "html_url": f"https://github.test/{self.repo}",
            },
            {},
        )

    def _issue(self, _: Recorded, m: re.Match[str]) -> Reply:
        issue = self.issues.get(int(m[1]))
        if not issue:
            return not_found()
        return 200, {**issue, "comments": len(self.comments_on(int(m[1])))}, {}

    def _list_comments(self, req: Recorded, m: re.Match[str]) -> Reply:
        if int(m[1]) not in self.issues:
            return not_found()
        return self._paged(req, sorted(self.comments_on(int(m[1])), key=lambda c: c["id"]))

    def _timeline(self, req: Recorded, m: re.Match[str]) -> Reply:
        """The issue's label and assignment entries and its comments (``commented``, with
        ``user``, ``body`` and ``updated_at``), oldest first."""
        number = int(m[1])
        if number not in self.issues:
            return not_found()
        comments = [
            {**c, "event": "commented", "actor": c["user"], "node_id": f"IC_{c['id']}"}
            for c in self.comments_on(number)
        ]
        entries = [*self.issue_events.get(number, []), *comments]
        return self._paged(req, sorted(entries, key=lambda e: (e["created_at"], e["id"])))

    def _paged(self, req: Recorded, items: list[Json], key: str | None = None) -> Reply:
        """One page of ``items`` when the request names ``per_page`` or ``page`` (with the
        Link header GitHub sends), else all of them; ``key`` wraps them as
        ``{"total_count", key: [...]}``."""
        headers: dict[str, str] = {}
        page_items = items
        if "per_page" in req.query or "page" in req.query:
            size = max(1, min(int(req.query.get("per_page", 30)), 100))
            page = max(1, int(req.query.get("page", 1)))
            page_items = items[(page - 1) * size : page * size]
            last = max(1, -(-len(items) // size))
            links = []
            for rel, number in (("next", page + 1), ("last", last)):
                if page < last:
                    query = urllib.parse.urlencode({**req.query, "page": number})
                    links.append(f'<{self.api_url}{req.path}?{query}>; rel="{rel}"')
            if links:
                headers["Link"] = ", ".join(links)
        body: Json = {"total_count": len(items), key: page_items} if key else page_items
        return 200, body, headers

    def _create_comment(self, req: Recorded, m: re.Match[str]) -> Reply:
        number = int(m[1])
        if number not in self.issues:
            return not_found()
        body = json.loads(req.body)["body"]
        return 201, self.comments[self.add_comment(number, body, self.bot, "NONE")], {}

    def _add_labels(self, req: Recorded, m: re.Match[str]) -> Reply:
        """``POST .../issues/{n}/labels``: GitHub takes ``{"labels": [...]}`` or a bare list
        (PyGithub sends the names URL-quoted) and answers with all the issue's labels."""
        number = int(m[1])
        if number not in self.issues:
            return not_found()
        data = json.loads(req.body or b"[]")
        names = data.get("labels", []) if isinstance(data, dict) else data
        for name in names:
            self.add_label(number, urllib.parse.unquote(str(name)))
        return 200, self.issues[number]["labels"], {}

    def _react(self, req: Recorded, m: re.Match[str]) -> Reply:
        """``POST .../issues/comments/{id}/reactions`` ``{"content": "eyes"}``: 201 with the
        new reaction, or 200 with the one the same user already left (GitHub's answer)."""
        comment_id = int(m[1])
        if comment_id not in self.comments:
            return not_found()
        content = json.loads(req.body or b"{}").get("content")
        if content not in ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"):
            return 422, {"message": "Validation Failed"}, {}
        user = self._user(self.bot)
        reactions = self.reactions.setdefault(comment_id, [])
        for reaction in reactions:
            if reaction["content"] == content and reaction["user"] == user:
                return 200, reaction, {}
        reaction = {"id": next(self._ids), "content": content, "user": user}
        reaction["created_at"] = "2024-01-01T00:00:00Z"
        reactions.append(reaction)
        return 201, reaction, {}

    def _edit_comment(self, req: Recorded, m: re.Match[str]) -> Reply:
        comment = self.comments.get(int(m[1]))
        if comment is None:
            return not_found()
        comment["body"] = json.loads(req.body)["body"]
        comment["updated_at"] = "2024-01-02T00:00:00Z"
        return 200, comment, {}

    def _permission(self, _: Recorded, m: re.Match[str]) -> Reply:
        user = urllib.parse.unquote(m[1])
        if user not in self.collaborators:
            return not_found()
        role = self.collaborators[user]
        # `permission` is the legacy base role (maintain → write, triage → read);
        # `role_name` the role itself, custom roles included.
        legacy = {"maintain": "write", "triage": "read"}.get(role, role)
        return 200, {"permission": legacy, "role_name": role, "user": self._user(user)}, {}

    def _list_runs(self, req: Recorded, _: re.Match[str]) -> Reply:
        runs = [
            r
            for r in self.runs.values()
            if req.query.get("branch", r["head_branch"]) == r["head_branch"]
            and req.query.get("status", r["status"]) == r["status"]
        ]
        runs.sort(key=lambda r: -r["id"])  # GitHub lists the newest run first
        return self._paged(req, runs, "workflow_runs")

    def _run(self, _: Recorded, m: re.Match[str]) -> Reply:
        run = self.runs.get(int(m[1]))
        return (200, run, {}) if run else not_found()

    def _branch(self, _: Recorded, m: re.Match[str]) -> Reply:
        branch = urllib.parse.unquote(m[1])
        sha = self.branches.get(branch)
        if sha is None:
            return not_found()
        commit = {"sha": sha, "url": f"{self._base}/commits/{sha}"}
        return 200, {"name": branch, "commit": commit, "protected": False}, {}

    def _sha(self, ref: str) -> str:
        """A ref as GitHub takes it in /commits/{ref}/...: a branch name or a SHA."""
        return self.branches.get(urllib.parse.unquote(ref), ref)

    def _check_runs(self, req: Recorded, m: re.Match[str]) -> Reply:
        runs = [
            c
            for c in self.check_runs.values()
            if c["head_sha"] == self._sha(m[1])
            and req.query.get("status", c["status"]) == c["status"]
        ]
        return self._paged(req, runs, "check_runs")

    def _check_suites(self, req: Recorded, m: re.Match[str]) -> Reply:
        suites = [s for s in self.check_suites.values() if s["head_sha"] == self._sha(m[1])]
        return self._paged(req, suites, "check_suites")

    def _list_pulls(self, req: Recorded, _: re.Match[str]) -> Reply:
        pulls = [
            p
            for p in self.pulls.values()
            if req.query.get("state", "open") in (p["state"], "all")
            and req.query.get("head", p["head"]["label"]) == p["head"]["label"]
        ]
        return self._paged(req, pulls)

    def _create_pull(self, req: Recorded, _: re.Match[str]) -> Reply:
        data = json.loads(req.body)
        label = f"{self.owner}:{data['head']}"
        if any(p["head"]["label"] == label and p["state"] == "open" for p in self.pulls.values()):
            return (
                422,
                {
                    "message": "Validation Failed",
                    "errors": [{"message": f"A pull request already exists for {label}."}],
                },
                {},
            )
        return (
            201,
            self.pulls[
                self.add_pull(
                    data["head"], data["title"], data.get("body"), base=data["base"], user=self.bot
                )
            ],
            {},
        )

    def _pull(self, _: Recorded, m: re.Match[str]) -> Reply:
        number = int(m[1])
        pull = self.pulls.get(number)
        if not pull:
            return not_found()
        counts = {
            "comments": len(self.comments_on(number)),
            "review_comments": len(self._review_comments_of(number)),
        }
        return 200, {**pull, **counts}, {}

    def _review_comments_of(self, pull: int) -> list[Json]:
        return sorted(
            (
                c
                for c in self.review_comments.values()
                if c["pull_request_number"] == pull
                and self.reviews[c["pull_request_review_id"]]["state"] != "PENDING"
            ),
            key=lambda c: c["id"],
        )

    def _list_reviews(self, req: Recorded, m: re.Match[str]) -> Reply:
        """Submitted reviews in chronological order; a pending one is its author's alone."""
        if int(m[1]) not in self.pulls:
            return not_found()
        found = [
            r
            for r in sorted(self.reviews.values(), key=lambda r: r["id"])
            if r["pull_request_number"] == int(m[1]) and r["state"] != "PENDING"
        ]
        return self._paged(req, found)

    def _list_review_comments(self, req: Recorded, m: re.Match[str]) -> Reply:
        """Every inline comment of the pull request, oldest first, with ``line``/``side``."""
        if int(m[1]) not in self.pulls:
            return not_found()
        return self._paged(req, self._review_comments_of(int(m[1])))

    def _review_comments(self, req: Recorded, m: re.Match[str]) -> Reply:
        """One review's comments, in the older shape GitHub answers there: no ``line``,
        ``side``, ``original_line`` (only ``position``)."""
        review = self.reviews.get(int(m[2]))
        if review is None or review["pull_request_number"] != int(m[1]):
            return not_found()
        legacy = {"line", "side", "original_line", "start_line", "start_side"}
        found = [
            {k: v for k, v in c.items() if k not in legacy}
            for c in self._review_comments_of(int(m[1]))
            if c["pull_request_review_id"] == review["id"]
        ]
        return self._paged(req, found)

    def _list_issues(self, req: Recorded, _: re.Match[str]) -> Reply:
        """Issues *and pull requests*, as GitHub lists them; ``labels`` is a comma-separated
        list that must all be present."""
        wanted = [n for n in req.query.get("labels", "").split(",") if n]
        state = req.query.get("state", "open")
        found = [
            i
            for i in self.issues.values()
            if state in (i["state"], "all")
            and all(n in {label["name"] for label in i["labels"]} for n in wanted)
        ]
        return self._paged(req, sorted(found, key=lambda i: -i["number"]))

    def _workflow_name(self, key: str) -> str | None:
        """A workflow by file name or by id, as the API takes either."""
        for name in self.workflows:
            if key in (name, str(self._workflow_id(name))):
                return name
        return None

    @staticmethod
    def _workflow_id(name: str) -> int:
        return sum(ord(c) * 31**i for i, c in enumerate(name)) % 10**6

    def _workflow_json(self, name: str) -> Json:
        return {
            "id": self._workflow_id(name),
            "name": self.workflow_names.get(name, name),
            "path": f".github/workflows/{name}",
            "state": self.workflows[name],
            "url": f"{self._base}/actions/workflows/{name}",
            "html_url": f"https://github.test/{self.repo}/actions/workflows/{name}",
        }

    def _workflow(self, _: Recorded, m: re.Match[str]) -> Reply:
        name = self._workflow_name(m[1])
        if name is None:
            return not_found()
        return 200, self._workflow_json(name), {}

    def _list_workflows(self, req: Recorded, _: re.Match[str]) -> Reply:
        listed = [self._workflow_json(name) for name in sorted(self.workflows)]
        return self._paged(req, listed, "workflows")

    def _label(self, _: Recorded, m: re.Match[str]) -> Reply:
        name = urllib.parse.unquote(m[1])
        if name not in self.labels:
            return not_found()
        return 200, {"name": name, "color": "ededed", "url": f"{self._base}/labels/{m[1]}"}, {}

    def _workflow_permissions(self, _: Recorded, __: re.Match[str]) -> Reply:
        body = {
            "default_workflow_permissions": "read",
            "can_approve_pull_request_reviews": self.actions_open_pulls,
        }
        return 200, body, {}

    def _switch_workflow(self, _: Recorded, m: re.Match[str]) -> Reply:
        name = self._workflow_name(m[1])
        if name is None:
            return not_found()
        self.workflows[name] = "active" if m[2] == "enable" else "disabled_manually"
        self.workflow_changes.append((name, m[2]))
        return 204, None, {}

    def _dispatch(self, req: Recorded, m: re.Match[str]) -> Reply:
        name = self._workflow_name(m[1])
        if name is None:
            return not_found()
        if self.workflows[name] != "active":
            return (
                422,
                {"message": "Cannot trigger a 'workflow_dispatch' on a disabled workflow"},
                {},
            )
        if name in self.no_dispatch:
            return 422, {"message": "Workflow does not have 'workflow_dispatch' trigger"}, {}
        data = json.loads(req.body)
        self.dispatches.append(
            {"workflow": name, "ref": data["ref"], "inputs": data.get("inputs", {})}
        )
        return 204, None, {}

    def _repository_dispatch(self, req: Recorded, _: re.Match[str]) -> Reply:
        data = json.loads(req.body or b"{}")
        if not isinstance(data.get("event_type"), str) or not data["event_type"]:
            return 422, {"message": "Invalid request.\n\nNo event_type provided."}, {}
        self.repository_dispatches.append(
            {"event_type": data["event_type"], "client_payload": data.get("client_payload", {})}
        )
        return 204, None, {}

    def _list_artifacts(self, req: Recorded, _: re.Match[str]) -> Reply:
        # Insertion order, not newest first: the client must not rely on the server's order.
        found = [
            a for a in self.artifacts.values() if req.query.get("name", a["name"]) == a["name"]
        ]
        return self._paged(req, found, "artifacts")

    def _artifact(self, _: Recorded, m: re.Match[str]) -> Reply:
        artifact = self.artifacts.get(int(m[1]))
        return (200, artifact, {}) if artifact is not None else not_found()

    def _delete_artifact(self, _: Recorded, m: re.Match[str]) -> Reply:
        """``DELETE .../actions/artifacts/{id}`` (``actions: write``): 204, or 404 when it
        is not there (any more)."""
        if self.artifacts.pop(int(m[1]), None) is None:
            return not_found()
        self.blobs.pop(int(m[1]), None)
        self.deleted.append(int(m[1]))
        return 204, None, {}

    def _artifact_zip(self, _: Recorded, m: re.Match[str]) -> Reply:
        artifact = self.artifacts.get(int(m[1]))
        if artifact is None:
            return not_found()
        if artifact["expired"] or artifact["id"] in self.gone:
            return 410, {"message": "Artifact has expired"}, {}
        return 302, None, {"Location": f"{self.api_url}/download/{m[1]}?sig=presigned"}

    def _routes(self) -> list[tuple[str, str, Callable[[Recorded, re.Match[str]], Reply]]]:
        r = "/repos/" + re.escape(self.repo)
        return [
            ("GET", rf"{r}", self._repo_json),
            ("GET", rf"{r}/issues", self._list_issues),
            ("GET", rf"{r}/issues/(\d+)", self._issue),
            ("GET", rf"{r}/issues/(\d+)/comments", self._list_comments),
            ("POST", rf"{r}/issues/(\d+)/comments", self._create_comment),
            ("POST", rf"{r}/issues/(\d+)/labels", self._add_labels),
            ("GET", rf"{r}/issues/(\d+)/timeline", self._timeline),
            ("PATCH", rf"{r}/issues/comments/(\d+)", self._edit_comment),
            ("POST", rf"{r}/issues/comments/(\d+)/reactions", self._react),
            ("GET", rf"{r}/collaborators/([^/]+)/permission", self._permission),
            ("GET", rf"{r}/actions/runs", self._list_runs),
            ("GET", rf"{r}/actions/runs/(\d+)", self._run),
            ("GET", rf"{r}/branches/(.+)", self._branch),
            ("GET", rf"{r}/commits/([^/]+)/check-runs", self._check_runs),
            ("GET", rf"{r}/commits/([^/]+)/check-suites", self._check_suites),
            ("GET", rf"{r}/pulls", self._list_pulls),
            ("POST", rf"{r}/pulls", self._create_pull),
            ("GET", rf"{r}/pulls/(\d+)", self._pull),
            ("GET", rf"{r}/pulls/(\d+)/reviews", self._list_reviews),
            ("GET", rf"{r}/pulls/(\d+)/comments", self._list_review_comments),
            ("GET", rf"{r}/pulls/(\d+)/reviews/(\d+)/comments", self._review_comments),
            ("GET", rf"{r}/actions/workflows", self._list_workflows),
            ("GET", rf"{r}/actions/workflows/([^/]+)", self._workflow),
            ("GET", rf"{r}/actions/permissions/workflow", self._workflow_permissions),
            ("GET", rf"{r}/labels/([^/]+)", self._label),
            ("POST", rf"{r}/actions/workflows/([^/]+)/dispatches", self._dispatch),
            ("PUT", rf"{r}/actions/workflows/([^/]+)/(enable|disable)", self._switch_workflow),
            ("POST", rf"{r}/dispatches", self._repository_dispatch),
            ("GET", rf"{r}/actions/artifacts", self._list_artifacts),
            ("GET", rf"{r}/actions/artifacts/(\d+)", self._artifact),
            ("DELETE", rf"{r}/actions/artifacts/(\d+)", self._delete_artifact),
            ("GET", rf"{r}/actions/artifacts/(\d+)/zip", self._artifact_zip),
        ]
