"""The inner loop's pass through every layer, in-process and quick: a GitHub job (the run and
finish steps against FakeGitHub, the scripted model, a Cell through a real Worker), the round
loop, and the Owner alone. Each is one short story; the stories with every edge live in the
layers' own suites (test_action_*.py, test_round_loop*.py, test_owner*.py), which run as
subprocesses and are marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from action_job import Repository, conclude, labeled, script
from fakes.github_api import FakeGitHub

from rio_ci.forge.github import GitHubForge
from rio_ci.github.contract import ActionInputs
from rio_ci.github.finish import finish
from rio_ci.github.job import run
from rio_ci.model.scripted import ScriptedModel
from rio_ci.rounds.loop import RoundLoop
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.kit import Patch, add, cmd_cell, events

pytestmark = pytest.mark.people(alice="write")
FIX = cmd_cell("sh", "-c", "printf ok > fixed.txt")


def test_a_github_job_runs_a_cell_and_its_finish_opens_the_pull_request(
    repo: Repository, gh: FakeGitHub
) -> None:
    repo.set_script(script([add(FIX)], [conclude()]))
    issue = gh.add_issue("Fix it", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    env = ActionInputs.from_environ(job.env)
    forge = GitHubForge(env.repository, env.token, env.api_url, throttle=False, retries=0)
    try:
        ran = run(env, forge)
        finished = finish(env, lambda: forge)
    finally:
        forge.close()
    assert ran["status"] == "succeeded", ran
    assert finished["artifact_name"] == f"rio-session-{issue}", finished
    (pull,) = gh.pulls.values()
    assert pull["head"]["ref"] == f"rio/issue-{issue}"
    assert repo.branch_file(f"rio/issue-{issue}", "fixed.txt") == "ok"
    assert (job.artifact_dir / "session.sqlite3").is_file()


def test_the_round_loop_runs_a_scripted_cell_to_success(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    Session.create(db, "smoke", Settings(cwd=str(tmp_path))).close()
    model = tmp_path / "model.yaml"
    model.write_text(script([add(cmd_cell("echo", "hello"))], [conclude()]))
    owner = Owner(str(db))
    try:
        outcome = RoundLoop(owner, ScriptedModel(model)).run()
    finally:
        owner.close()
    assert outcome.status == "succeeded", outcome
    evs = events(db)
    (finished,) = [e for e in evs if e["kind"] == "execution_finished"]
    assert finished["result"]["type"] == "success"
    assert "hello" in "".join(e["text"] for e in evs if e["kind"] == "output")


def test_the_owner_runs_an_accepted_cell_and_commits_its_result(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    session = Session.create(db, "smoke", Settings(cwd=str(tmp_path)))
    try:
        turn = session.prepare_turn()
        patch = Patch(turn["state"]).add(cmd_cell("sh", "-c", "echo out; exit 3"))
        session.step(turn["turn_id"], patch.build())
    finally:
        session.close()
    owner = Owner(str(db))
    try:
        owner.recover()
        while not owner.idle():
            owner.tick()
        assert owner.ran == [1]
    finally:
        owner.close()
    evs = events(db)
    (finished,) = [e for e in evs if e["kind"] == "execution_finished"]
    assert finished["result"] == {"cell_id": 1, "type": "error", "exit_code": 3}
    assert [e["text"] for e in evs if e["kind"] == "output"] == ["out\n"]
