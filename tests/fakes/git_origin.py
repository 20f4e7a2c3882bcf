"""A bare git ``origin`` that refuses pushes the way GitHub does, and its smart-HTTP door.

``install_push_rules(bare)`` puts a pre-receive hook into a bare repository. It refuses a push
whose new commits

- change anything under ``.github/workflows/`` while the pusher lacks the ``workflows``
  permission (GitHub's wording: "refusing to allow a GitHub App to create or update workflow
  `PATH` without `workflows` permission"; a personal access token is told it lacks the
  `workflow` scope), or
- add a file larger than ``max_file_bytes`` (GitHub: 100 MiB; "GH001: Large files detected"
  and "File PATH is N MB; this exceeds GitHub's file size limit of 100.00 MB").

git prints the hook's lines as ``remote: error: ...`` and the ref as ``! [remote rejected]
... (pre-receive hook declined)``. (GitHub puts the workflow refusal into that parenthesis
instead, so read the whole of git's stderr, not only the ref line.)

Who pushes: over HTTP (``FakeGitHub.serve_git``) the token decides, as on GitHub: basic auth
with the token as password, ``contents: write`` to push, its ``workflows`` flag for workflow
files. A push through the file system has no token: ``local_workflows`` (default False, like
the job token) stands in for it. The rules live in ``fake-github.json`` in the bare
repository and can be changed between pushes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakes.github_api import Recorded, Token

GITHUB_LIMIT = 100 * 1024 * 1024
RULES = "fake-github.json"

HOOK = r"""
import json, os, subprocess, sys

ZERO = "0" * 40
rules = json.load(open("fake-github.json"))
limit = rules["max_file_bytes"]
allowed = os.environ.get("FAKE_GITHUB_WORKFLOWS", "1" if rules["local_workflows"] else "0")
kind = os.environ.get("FAKE_GITHUB_TOKEN_KIND", "app")


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


large, workflows = {}, []
for line in sys.stdin.read().splitlines():
    old, new, ref = line.split()
    if new == ZERO:
        continue  # a deletion adds no file
    for commit in git("rev-list", new, "--not", "--all").split():
        diff = git("diff-tree", "-r", "-m", "--root", "--no-commit-id", "--no-renames", commit)
        for entry in diff.splitlines():
            meta, path = entry.split("\t", 1)
            blob = meta.split()[3]
            if path.startswith(".github/workflows/") and path not in workflows:
                workflows.append(path)
            if blob != ZERO and int(git("cat-file", "-s", blob)) > limit:
                large[path] = int(git("cat-file", "-s", blob))
errors = []
if large:
    errors += ["Trace: 5f1e0d5a2b7c4e9f8a6b3c2d1e0f9a8b",
               "See https://gh.io/lfs for more information."]
    errors += [f"File {path} is {size / 2**20:.2f} MB; this exceeds GitHub's file size limit "
               f"of {limit / 2**20:.2f} MB" for path, size in large.items()]
    errors.append("GH001: Large files detected. You may want to try Git Large File Storage - "
                  "https://git-lfs.github.com.")
if workflows and allowed != "1":
    who, grant = (("a Personal Access Token", "`workflow` scope") if kind == "pat"
                  else ("a GitHub App", "`workflows` permission"))
    errors += [f"refusing to allow {who} to create or update workflow `{path}` without {grant}"
               for path in workflows]
for error in errors:
    print(f"error: {error}", file=sys.stderr)
sys.exit(1 if errors else 0)
"""


def install_push_rules(
    bare: Path, *, max_file_bytes: int = GITHUB_LIMIT, local_workflows: bool = False
) -> None:
    """Give the bare repository ``bare`` GitHub's push refusals (idempotent: call again to
    change the rules)."""
    (bare / RULES).write_text(
        json.dumps({"max_file_bytes": max_file_bytes, "local_workflows": local_workflows})
    )
    hook = bare / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!{sys.executable}\n{HOOK}")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(bare), "config", "http.receivepack", "true"], check=True)


def make_origin(
    path: Path, *, max_file_bytes: int = GITHUB_LIMIT, local_workflows: bool = False
) -> Path:
    """A new empty bare repository at ``path`` (branch ``main``) with the push rules."""
    subprocess.run(
        ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)], check=True
    )
    install_push_rules(path, max_file_bytes=max_file_bytes, local_workflows=local_workflows)
    return path


def serve(
    bare: Path, req: Recorded, token: Token | None, prefix: str
) -> tuple[int, bytes, dict[str, str]]:
    """Answer one smart-HTTP request for ``prefix``/... with ``git http-backend``."""
    if token is None:
        return (
            401,
            b"Invalid username or token.\n",
            {"WWW-Authenticate": 'Basic realm="GitHub"', "Content-Type": "text/plain"},
        )
    pushing = (
        req.path.endswith("/git-receive-pack") or req.query.get("service") == "git-receive-pack"
    )
    contents = "write" if token.permissions is None else token.permissions.get("contents")
    if (pushing and contents != "write") or contents in (None, "none"):
        return (
            403,
            f"Permission to {prefix.strip('/')} denied.\n".encode(),
            {"Content-Type": "text/plain"},
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "FAKE_GITHUB_"))}
    env.update(
        GIT_PROJECT_ROOT=str(bare.parent),
        GIT_HTTP_EXPORT_ALL="1",
        REMOTE_USER="x-access-token",
        PATH_INFO="/" + bare.name + req.path[len(prefix) :],
        REQUEST_METHOD=req.method,
        QUERY_STRING="&".join(f"{k}={v}" for k, v in req.query.items()),
        CONTENT_TYPE=req.headers.get("content-type", ""),
        CONTENT_LENGTH=str(len(req.body)),
        FAKE_GITHUB_WORKFLOWS="1" if token.workflows else "0",
        FAKE_GITHUB_TOKEN_KIND=token.kind,
    )
    for header in ("content-encoding", "git-protocol"):
        if header in req.headers:
            env["HTTP_" + header.upper().replace("-", "_")] = req.headers[header]
    if "git-protocol" in req.headers:
        env["GIT_PROTOCOL"] = req.headers["git-protocol"]
    done = subprocess.run(
        ["git", "http-backend"],
        input=req.body,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    return _cgi(done.stdout)


def _cgi(output: bytes) -> tuple[int, bytes, dict[str, str]]:
    head, _, body = output.partition(b"\r\n\r\n")
    if not _:
        head, _, body = output.partition(b"\n\n")
    status, headers = 200, {}
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            headers[name.strip()] = value.strip()
    return status, body, headers


def push(
    clone: Path, *args: str, token: str | None = None, env: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """``git push ARGS`` from ``clone`` as rio-ci does it: the token in an extraheader."""
    import base64

    settings = []
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        settings = ["-c", f"http.extraheader=AUTHORIZATION: basic {basic}"]
    return subprocess.run(
        ["git", *settings, "push", *args],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})},
    )
