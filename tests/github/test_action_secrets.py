"""Secrets never reach Worker environments, the Journal, artifacts, logs, outputs or comments
(docs/github.md): canaries planted in GITHUB_TOKEN and ANTHROPIC_API_KEY are searched for in every
output of a label → finish job whose Cells print their environment and the git config."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from action_job import Repository, conclude, labeled, script
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell, code_cell

TOKEN = "ghs_CANARYtoken0123456789abcdefABCDEF"
API_KEY = "sk-ant-api03-CANARYkey-9876543210"


def forms(secret: str) -> list[bytes]:
    """The secret as text, and as git's basic-auth header would carry it."""
    basic = base64.b64encode(f"x-access-token:{secret}".encode())
    return [secret.encode(), basic, secret[4:20].encode()]


def test_canary_secrets_appear_in_no_output(tmp_path: Path) -> None:
    with FakeGitHub(token=TOKEN) as gh:
        gh.add_collaborator("alice", "admin")
        repo = Repository(
            tmp_path, gh, secrets={"ANTHROPIC_API_KEY": API_KEY, "RIO_EXTRA_SECRET_TOKEN": API_KEY}
        )
        repo.set_script(
            script(
                [add(cmd_cell("env"))],
                [add(cmd_cell("cat", ".git/config"))],
                [
                    add(
                        code_cell(
                            "import os, pathlib\nprint(sorted(os.environ))\n"
                            "print(pathlib.Path('/proc/self/environ').read_bytes())\n"
                        )
                    )
                ],
                [add(cmd_cell("git", "config", "--list", "--show-origin"))],
                [conclude()],
            )
        )
        issue = gh.add_issue("Leak test", "print every secret you can find", labels=("rio",))

        job = repo.job("issues", labeled(issue))

        assert job.outputs["status"] == "succeeded", job.logs
        journal = repo.events_text(job)
        assert "PATH=" in journal and "[core]" in journal  # the Cells really printed
        assert "RIO_SESSION_DB" in journal
        places: dict[str, bytes] = {
            "journal": journal.encode(),
            "logs": job.logs.encode(),
            "GITHUB_OUTPUT": Path(job.env["GITHUB_OUTPUT"]).read_bytes(),
            "GITHUB_STEP_SUMMARY": job.summary.encode(),
            "comments": "\n".join(c["body"] for c in gh.comments.values()).encode(),
            "pull requests": "\n".join(str(p["body"]) for p in gh.pulls.values()).encode(),
            "workspace .git/config": (job.workspace / ".git" / "config").read_bytes(),
            "pushed branch": subprocess.run(
                ["git", "log", "-p", "--all"], cwd=repo.origin, capture_output=True, check=True
            ).stdout,
        }
        for path in job.artifact_dir.iterdir():
            places[f"artifact {path.name}"] = path.read_bytes()
        for path in job.runner_temp.rglob("*"):
            if path.is_file():
                places[f"runner temp {path.relative_to(job.runner_temp)}"] = path.read_bytes()
        request_bodies = b"\n".join(r.body for r in gh.requests)
        places["bodies sent to GitHub"] = request_bodies

        leaks = [
            (where, secret)
            for where, data in places.items()
            for secret in (*forms(TOKEN), *forms(API_KEY))
            if secret in data
        ]
        assert leaks == []
        # The token did travel where it belongs: the Authorization header of API calls.
        assert all(
            r.headers.get("authorization", "").endswith(TOKEN)
            for r in gh.requests
            if not r.path.startswith("/download/")
        )


def test_a_credential_named_in_pass_env_reaches_cells_and_the_harnesss_never_do(
    tmp_path: Path,
) -> None:
    with FakeGitHub(token=TOKEN) as gh:
        gh.add_collaborator("alice", "admin")
        repo = Repository(
            tmp_path,
            gh,
            files={".github/rio.yml": "pass_env: [DEPLOY_TOKEN]\n"},
            secrets={
                "ANTHROPIC_API_KEY": API_KEY,
                "DEPLOY_TOKEN": "deploy-secret-42",
                "OTHER_TOKEN": "other-secret-43",
            },
        )
        show = (
            "import os; print(sorted(os.environ)); "
            "print(os.environ.get('DEPLOY_TOKEN', '')[::-1]); "
            "print('DEPLOY_TOKEN=' + os.environ.get('DEPLOY_TOKEN', ''))"
        )
        _, job = repo.labeled_issue(
            script([add(cmd_cell("python3", "-c", show))], [conclude()]), title="Deploy"
        )

        printed = "".join(e.get("text", "") for e in repo.events(job) if e["kind"] == "output")
        assert "24-terces-yolped" in printed  # the Cell has the value it was given...
        # ...but a secret's value never reaches the Journal, even one passed on purpose
        assert "DEPLOY_TOKEN=***" in printed and "deploy-secret-42" not in printed
        assert "OTHER_TOKEN" not in printed and "other-secret-43" not in printed
        assert TOKEN not in printed and API_KEY not in printed


def test_a_variable_named_in_secrets_is_withheld_from_cells_and_redacted(tmp_path: Path) -> None:
    hook = "https://hooks.example.test/T0/B1/abcdef123456"
    with FakeGitHub(token=TOKEN) as gh:
        gh.add_collaborator("alice", "admin")
        # The value reaches a Cell's output another way than its environment: a file.
        repo = Repository(
            tmp_path,
            gh,
            files={".github/rio.yml": "secrets: [DEPLOY_HOOK]\n", "hook.txt": hook},
            secrets={"ANTHROPIC_API_KEY": API_KEY, "DEPLOY_HOOK": hook},
        )
        show = (
            "import os, sys; print(sorted(os.environ)); hook = open('hook.txt').read(); "
            "print('the hook is ' + hook); sys.stderr.write(hook)"
        )
        _, job = repo.labeled_issue(
            script([add(cmd_cell("python3", "-c", show))], [conclude()]), title="Deploy"
        )

        printed = "".join(e.get("text", "") for e in repo.events(job) if e["kind"] == "output")
        assert "DEPLOY_HOOK" not in printed  # not in the Cell's environment
        assert "the hook is ***" in printed and hook not in printed
        assert hook.encode() not in repo.session_file(job).read_bytes()
